"""safetensors files over DISK (`fast`): `safe_load`, `safe_load_metadata`, `safe_save`.

The format: 8 bytes, a little-endian uint64 N; N bytes of UTF-8 JSON (the header); then the data
section. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
(byte offsets into the data section) and may hold "__metadata__", an object of strings.

Invariants of a header `read_header` accepts (anything else is a ValueError saying why, raised
before a byte of tensor data is read and without reading more than 8 + N bytes, N <= HEADER_LIMIT):
- N <= HEADER_LIMIT and 8 + N <= the file's size; the header is UTF-8 JSON (no NaN/Infinity), an
  object, with no duplicate key at any level;
- every tensor has the fields dtype (a string), shape (at most MAX_DIMS integers >= 0, not bools) and
  data_offsets (two integers 0 <= begin <= end); other fields are ignored, as the safetensors
  package ignores them;
- sorted by offsets, the tensors tile the data section exactly: the first begins at 0, each begins
  where the previous ended (no gap, no overlap), the last ends at the end of the file;
- end - begin is the shape's element count times the dtype's size (when the dtype's width is
  known: every dtype the project has, and the other safetensors dtypes in FOREIGN_BITS).

A tensor whose dtype the project lacks is not in the returned dict: looking it up raises ValueError
naming the tensor and the dtype (`SafeTensors.__missing__`); every other tensor loads.
"""
from __future__ import annotations

import errno
import json
import math
import os
import reprlib
import secrets
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from fast.dtype import DType, dtypes
from fast.engine import realize, to_numpy
from fast.engine.readback import concrete_shape
from fast.graph.multi import MultiLazyBuffer
from fast.graph.node import LazyBuffer
from fast.graph.operations import buffer_view
from fast.ops import LoadOps
from fast.runtime.disk import fsync_directory, read_only

HEADER_LIMIT = 100_000_000  # bytes of JSON header accepted (the safetensors package's own limit)
MAX_DIMS = 32  # dimensions per tensor (numpy 1.x's limit)
DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
    "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64,
    "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}
CODES: dict[DType, str] = {dtype: code for code, dtype in DTYPES.items()}
FOREIGN_BITS = {"F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "C64": 64}
FIELDS = ("data_offsets", "dtype", "shape")
_REPR = reprlib.Repr()  # error messages quote header values cut short: a hostile value may be huge or deep
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 3, 60, 60, 8, 4


def _brief(value: Any) -> str:
    """repr of a header value, at most a few levels deep and about a hundred characters long."""
    return _REPR.repr(value)


@dataclass(frozen=True)
class Entry:
    """One tensor of a header: its safetensors dtype `code`, shape and [begin, end) in the data section."""

    name: str
    code: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Header:
    """A validated header: the tensors (in name order), the metadata, and where the data section starts."""

    entries: tuple[Entry, ...]
    metadata: dict[str, str]
    data_start: int


class SafeTensors(dict[str, LazyBuffer]):
    """What `safe_load` returns: name -> lazy DISK view, for every tensor of a dtype the project has.

    `unsupported` maps each other tensor's name to its safetensors dtype; `d[name]` for one of them
    raises ValueError naming the tensor and the dtype (`get`, `in` and iteration see the rest only).
    """

    def __init__(self, tensors: dict[str, LazyBuffer], unsupported: dict[str, str]) -> None:
        super().__init__(tensors)
        self.unsupported = dict(unsupported)

    def __missing__(self, key: str) -> LazyBuffer:
        if key in self.unsupported:
            raise ValueError(f"safe_load: tensor {_brief(key)} has dtype {_brief(self.unsupported[key])}, which has no "
                             f"dtype in this project (supported: {', '.join(DTYPES)})")
        raise KeyError(key)


class _RefusedError(Exception):
    """A JSON construct the header may not contain (raised inside json.loads, reported as ValueError)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RefusedError(f"duplicate key {_brief(key)}")
        out[key] = value
    return out


def _no_constant(name: str) -> None:
    raise _RefusedError(f"{name} is not a JSON value")


def decode_json(raw: bytes) -> Any:
    """The header's JSON value; ValueError for bad UTF-8, bad JSON, duplicate keys, NaN/Infinity."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"safe_load: the header is not valid UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except _RefusedError as error:
        raise ValueError(f"safe_load: the header has a {error}") from None
    except RecursionError:
        raise ValueError("safe_load: the header is not valid JSON (nested too deeply)") from None
    except ValueError as error:  # JSONDecodeError, or an integer literal too long to convert
        raise ValueError(f"safe_load: the header is not valid JSON ({error})") from None


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry(name: str, info: Any, data_size: int) -> Entry:
    """One tensor's fields, each checked on its own (the layout is checked across tensors after)."""
    who = f"safe_load: tensor {_brief(name)}"
    if not isinstance(info, dict) or any(field not in info for field in FIELDS):
        raise ValueError(f"{who} must be an object with the fields {FIELDS}, got {_brief(info)}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str):
        raise ValueError(f"{who} has dtype {_brief(code)}, not a string")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(_int(s) and s >= 0 for s in shape):
        raise ValueError(f"{who} has shape {_brief(shape)}: must be at most {MAX_DIMS} non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_int(o) for o in offsets):
        raise ValueError(f"{who} has data_offsets {_brief(offsets)}: must be two integers")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise ValueError(f"{who} has data_offsets {_brief(offsets)} out of order (need 0 <= begin <= end)")
    if end > data_size:
        raise ValueError(f"{who} has data_offsets {_brief(offsets)} outside the data section of {data_size} bytes")
    bits = DTYPES[code].itemsize * 8 if code in DTYPES else FOREIGN_BITS.get(code)
    if bits is not None and math.prod(shape) * bits != (end - begin) * 8:
        raise ValueError(f"{who}: shape {shape} of dtype {code} takes {math.prod(shape) * bits / 8:g} bytes, which "
                         f"does not match its data_offsets {offsets} ({end - begin} bytes)")
    return Entry(name, code, tuple(shape), begin, end)


def _check_layout(entries: list[Entry], data_size: int) -> None:
    """The tensors, in offset order, must tile [0, data_size) exactly."""
    position, previous = 0, None
    for entry in sorted(entries, key=lambda e: (e.begin, e.end)):
        if entry.begin < position:
            raise ValueError(f"safe_load: tensor {_brief(entry.name)} (bytes [{entry.begin}, {entry.end})) overlaps "
                             f"tensor {_brief(previous)}, which ends at {position}")
        if entry.begin > position:
            raise ValueError(f"safe_load: a gap of unused bytes [{position}, {entry.begin}) before tensor "
                             f"{_brief(entry.name)}: offsets must tile the data section")
        position, previous = entry.end, entry.name
    if position != data_size:
        raise ValueError(f"safe_load: the tensors end at byte {position} of a {data_size}-byte data section: "
                         "offsets must tile the data section")


def parse_header(raw: bytes, data_start: int, data_size: int) -> Header:
    """Validate the header bytes (the module docstring's invariants) for a data section of `data_size`."""
    document = decode_json(raw)
    if not isinstance(document, dict):
        raise ValueError(f"safe_load: the header is a JSON {type(document).__name__}, not an object")
    metadata = document.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"safe_load: __metadata__ must be an object of strings, got {_brief(metadata)}")
    entries = [_entry(name, info, data_size) for name, info in sorted(document.items())]
    _check_layout(entries, data_size)
    return Header(tuple(entries), metadata, data_start)


def read_header(size: int, read: Callable[[int, int], bytes]) -> Header:
    """The validated header of a file of `size` bytes; `read(start, stop)` returns those bytes."""
    if size < 8:
        raise ValueError(f"safe_load: the file has {size} bytes, fewer than the 8 of the header length")
    (length,) = struct.unpack("<Q", read(0, 8))
    if length > HEADER_LIMIT:
        raise ValueError(f"safe_load: header length {length} exceeds the limit of {HEADER_LIMIT} bytes")
    if 8 + length > size:
        raise ValueError(f"safe_load: header length {length} runs past the end of the {size}-byte file")
    raw = read(8, 8 + length)
    if len(raw) != length:
        raise ValueError(f"safe_load: read {len(raw)} header bytes of {length} (the file changed size)")
    return parse_header(raw, 8 + length, size - 8 - length)


def _read_file(handle: BinaryIO) -> Callable[[int, int], bytes]:
    def read(start: int, stop: int) -> bytes:
        handle.seek(start)
        return handle.read(stop - start)
    return read


def _open(source: Any) -> tuple[LazyBuffer, Header]:
    """(the file's DISK buffer, its header) for a path or a 1-D uint8 DISK LazyBuffer."""
    if isinstance(source, LazyBuffer):
        if not source.device.startswith("DISK:") or len(source.shape) != 1 or not isinstance(source.shape[0], int):
            raise ValueError(f"safe_load: {source!r} must be a 1-D buffer on a DISK device")
        if source.dtype != dtypes.uint8:
            raise TypeError(f"safe_load: {source!r} has dtype {source.dtype.name}, must be uint8 (the file's bytes)")
        def read(start: int, stop: int) -> bytes:
            return to_numpy(source.shrink(((start, stop),))).tobytes()
        return source, read_header(source.shape[0], read)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"safe_load: {source!r} is not a path or a DISK LazyBuffer")
    path = os.path.abspath(os.fspath(source))
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        header = read_header(size, _read_file(handle))
    file = LazyBuffer.loadop(LoadOps.EMPTY, (size,), dtypes.uint8, f"DISK:{path}")
    realize(file)  # map it now (reading nothing): the tensors read this file even if the path is replaced later
    return file, header


def _tensor(file: LazyBuffer, start: int, entry: Entry) -> LazyBuffer:
    """A lazy view of one tensor's bytes of `file` (starting at `start`) with its dtype and shape."""
    dtype = DTYPES[entry.code]
    if entry.begin == entry.end:  # no bytes to view: an empty buffer of the right shape on the device
        return LazyBuffer.loadop(LoadOps.EMPTY, entry.shape, dtype, file.device)
    window = file.shrink(((start + entry.begin, start + entry.end),))
    if dtype == dtypes.bool:  # the public bitcast refuses bool: view the same bytes as bool directly
        flat = buffer_view(window, dtype, ((entry.end - entry.begin),))
    else:
        flat = window.cast(dtype, bitcast=True)
    return flat.reshape(entry.shape)


def safe_load(source: str | os.PathLike[str] | LazyBuffer) -> SafeTensors:
    """name -> lazy view of the file's DISK buffer, for a safetensors file given by path or as a 1-D
    uint8 DISK buffer. Only the header is read; a tensor's bytes are read when it is copied to a
    compute device (to_numpy). A path is mapped at once as the device `DISK:<absolute path>` (mapping
    reads nothing), so the tensors keep reading the file whose header was parsed, even after the path
    is replaced (e.g. by safe_save)."""
    file, header = _open(source)
    tensors, unsupported = {}, {}
    for entry in header.entries:
        if entry.code in DTYPES:
            tensors[entry.name] = _tensor(file, header.data_start, entry)
        else:
            unsupported[entry.name] = entry.code
    return SafeTensors(tensors, unsupported)


def safe_load_metadata(source: str | os.PathLike[str] | LazyBuffer) -> dict[str, str]:
    """The header's `__metadata__` (empty when absent), after validating the whole header as safe_load does."""
    return dict(_open(source)[1].metadata)


# ---------------------------------------------------------------- saving


def _save_entries(tensors: Any) -> list[tuple[str, LazyBuffer | MultiLazyBuffer, tuple[int, ...]]]:
    """(name, tensor, shape), ordered by itemsize (largest first) then name, so each is aligned."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"safe_save: tensors must be a dict of name -> LazyBuffer, got {type(tensors).__name__}")
    out = []
    for name, tensor in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"safe_save: tensor name {name!r} is not a string")
        if name == "__metadata__":
            raise ValueError("safe_save: '__metadata__' is reserved for the metadata, not a tensor name")
        _utf8("tensor name", name)
        if not isinstance(tensor, (LazyBuffer, MultiLazyBuffer)):
            raise TypeError(f"safe_save: tensor {name!r} is {tensor!r}, not a LazyBuffer or MultiLazyBuffer")
        out.append((name, tensor, concrete_shape(tuple(tensor.shape))))
    return sorted(out, key=lambda item: (-item[1].dtype.itemsize, item[0]))


def _utf8(what: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"safe_save: {what} {text!r} cannot be encoded as UTF-8") from None


def _header_bytes(entries: list[tuple[str, LazyBuffer | MultiLazyBuffer, tuple[int, ...]]],
                  metadata: Any) -> bytes:
    """8-byte length + JSON header, padded with spaces so the data section starts 8-byte aligned."""
    document: dict[str, Any] = {}
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise TypeError(f"safe_save: metadata must be a dict of strings, got {type(metadata).__name__}")
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"safe_save: metadata entry {key!r}: {value!r} is not a pair of strings")
            _utf8("metadata entry", key + value)
        document["__metadata__"] = dict(metadata)
    position = 0
    for name, tensor, shape in entries:
        nbytes = math.prod(shape) * tensor.dtype.itemsize
        document[name] = {"dtype": CODES[tensor.dtype], "shape": list(shape), "data_offsets": [position,
                                                                                             position + nbytes]}
        position += nbytes
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _storage_bytes(tensor: LazyBuffer | MultiLazyBuffer, shape: tuple[int, ...]) -> np.ndarray:
    """The tensor's values (realized; shards gathered) as little-endian storage bytes."""
    values = to_numpy(tensor)
    if values.shape != shape:
        raise RuntimeError(f"safe_save: {tensor!r} realized to shape {values.shape}, expected {shape}")
    if tensor.dtype == dtypes.bfloat16:  # float32 holding bfloat16 values exactly: the top 16 bits
        values = (values.view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).reshape(-1).view(np.uint8)


def _check_target(target: str) -> int:
    """The permission bits the new file gets; PermissionError for a read-only target, IsADirectoryError
    for a directory (checked before anything is written)."""
    if os.path.isdir(target):
        raise IsADirectoryError(errno.EISDIR, "safe_save: the target is a directory", target)
    if not os.path.exists(target):
        return 0o666
    if read_only(target):
        raise PermissionError(errno.EACCES, "safe_save: the target file is read-only (no write permission)", target)
    return os.stat(target).st_mode & 0o777


def safe_save(path: str | os.PathLike[str], tensors: Mapping[str, LazyBuffer | MultiLazyBuffer],
              metadata: Mapping[str, str] | None = None) -> None:
    """Write `tensors` (realized from any device; sharded buffers gathered) and `metadata` to `path` as
    safetensors, atomically: a temporary file beside the target is written, flushed and fsynced, then
    renamed over the target and the directory fsynced. On any error the target is untouched and the
    temporary file removed."""
    entries = _save_entries(tensors)
    header = _header_bytes(entries, metadata)
    target = os.path.abspath(os.fspath(path))
    mode = _check_target(target)
    temp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{secrets.token_hex(8)}.tmp")
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(header)
            for _, tensor, shape in entries:
                handle.write(_storage_bytes(tensor, shape).data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    fsync_directory(target)
