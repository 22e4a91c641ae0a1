"""safetensors files (reference): ``safe_load``, ``safe_load_metadata``, ``safe_save``.

A file is: ``N`` (8 bytes, little-endian unsigned), ``N`` bytes of UTF-8 JSON (the header), then the
data section. The header is an object: ``"__metadata__"`` (optional, an object of strings) and, per
tensor, ``{"dtype": str, "shape": [int, ...], "data_offsets": [begin, end]}`` (bytes of the data
section). Every rule below is checked before any tensor byte is read; a broken one is a ValueError
that says which rule and which values:

1. the file has at least 8 bytes; ``N <= HEADER_LIMIT``; ``8 + N <= file size``;
2. the header is UTF-8, then JSON (NaN and Infinity refused), an object, no key twice in any object;
3. a tensor's value has the keys dtype, shape, data_offsets (others are ignored, as the safetensors
   package ignores them); dtype is a string; shape a list
   of at most ``MAX_DIMS`` ints >= 0 (bools are not ints here); data_offsets two ints, 0 <= begin <= end
   <= data section size;
4. ``end - begin == prod(shape) * bits(dtype) / 8`` when the width of the dtype is known;
5. the tensors, sorted by (begin, end), cover the data section exactly: no gap, no overlap, nothing left.

In ``reference`` a DISK device is a label (values live in memory, never written to the file): loading
a path gives a realized uint8 buffer on ``DISK:<absolute path>`` whose bytes are the file mapped
read-only at load (the file whose header was checked, even if the path is replaced since; like
``fast``'s DISK mapping, the file must not be truncated while it is used), and every tensor is a view of
it (shrink, bitcast, reshape: zero-copy views). Loading reads the header only; realizing a tensor
reads that tensor's bytes only.
"""
from __future__ import annotations

import errno
import json
import mmap
import os
import reprlib
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from reference.dtype import Array, DType, dtypes
from reference.lazy import LazyBuffer, _node, mapped
from reference.multi import MultiLazyBuffer
from reference.ops import LoadOps, UnaryOps
from reference.realize import to_numpy

HEADER_LIMIT = 100_000_000
MAX_DIMS = 32
KNOWN = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16", "U32": "uint32",
         "I32": "int32", "U64": "uint64", "I64": "int64", "F16": "float16", "BF16": "bfloat16",
         "F32": "float32", "F64": "float64"}
OTHER_BITS = {"F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "C64": 64}


SHORT = reprlib.Repr()
SHORT.maxlevel, SHORT.maxstring, SHORT.maxother, SHORT.maxlist, SHORT.maxdict = 2, 50, 50, 6, 3


def brief(value: Any) -> str:
    """A short repr for error messages (header values can be huge or deeply nested)."""
    return SHORT.repr(value)


def project_dtype(code: str) -> DType:
    """The project's dtype for a safetensors dtype code in KNOWN."""
    return getattr(dtypes, KNOWN[code])


class SafeTensors(dict):  # type: ignore[type-arg]
    """name -> LazyBuffer for the tensors of supported dtypes; ``unsupported`` holds name -> dtype code of
    the others, and ``self[name]`` of one of those raises ValueError (the rest of the file still loads)."""

    def __init__(self, tensors: dict[str, LazyBuffer], unsupported: dict[str, str]) -> None:
        super().__init__(tensors)
        self.unsupported = unsupported

    def __missing__(self, name: str) -> Any:
        if name not in self.unsupported:
            raise KeyError(name)
        raise ValueError(f"safe_load: tensor {brief(name)} has dtype {brief(self.unsupported[name])}, which has no "
                         "dtype in this project")


class _BadJsonError(Exception):
    """Raised from inside json.loads; turned into a ValueError."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen:
            raise _BadJsonError(f"duplicate key {brief(k)}")
        seen.add(k)
    return dict(pairs)


def _constant(word: str) -> None:
    raise _BadJsonError(f"{word} is not JSON")


def parse_json(raw: bytes) -> Any:
    """Rule 2, up to "an object"."""
    try:
        text = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise ValueError(f"safe_load: header is not valid UTF-8: {e}") from None
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except _BadJsonError as e:
        raise ValueError(f"safe_load: header has a {e}") from None
    except RecursionError:
        raise ValueError("safe_load: header is not valid JSON: nested too deeply") from None
    except ValueError as e:
        raise ValueError(f"safe_load: header is not valid JSON: {e}") from None


def is_int(x: Any) -> bool:
    return type(x) is int


def check_tensor(name: str, info: Any, data_size: int) -> tuple[str, tuple[int, ...], int, int]:
    """Rules 3 and 4 for one tensor; returns (dtype code, shape, begin, end)."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise ValueError(f"safe_load: tensor {brief(name)}: expected an object with the fields dtype, shape, "
                         f"data_offsets, got {brief(info)}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str):
        raise ValueError(f"safe_load: tensor {brief(name)}: dtype {brief(code)} is not a string")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(is_int(n) and n >= 0 for n in shape):
        raise ValueError(f"safe_load: tensor {brief(name)}: shape {brief(shape)} is not a list of at most {MAX_DIMS} "
                         "non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_int(n) for n in offsets):
        raise ValueError(f"safe_load: tensor {brief(name)}: data_offsets {brief(offsets)} is not two integers")
    begin, end = offsets
    if begin < 0 or end < begin:
        raise ValueError(f"safe_load: tensor {brief(name)}: data_offsets {brief(offsets)} out of order")
    if end > data_size:
        raise ValueError(f"safe_load: tensor {brief(name)}: data_offsets {brief(offsets)} outside the data section "
                         f"({data_size} bytes)")
    bits = 8 * project_dtype(code).itemsize if code in KNOWN else OTHER_BITS.get(code)
    count = 1
    for n in shape:
        count *= n
    if bits is not None and count * bits != 8 * (end - begin):
        raise ValueError(f"safe_load: tensor {brief(name)}: shape {shape} of {code} does not match the size of "
                         f"data_offsets {offsets} ({end - begin} bytes)")
    return code, tuple(shape), begin, end


def check_cover(spans: list[tuple[int, int, str]], data_size: int) -> None:
    """Rule 5."""
    at, last = 0, ""
    for begin, end, name in sorted(spans):
        if begin < at:
            raise ValueError(f"safe_load: tensor {brief(name)} at [{begin}, {end}) overlaps tensor {brief(last)} "
                             f"(ends at {at})")
        if begin > at:
            raise ValueError(f"safe_load: unused bytes [{at}, {begin}) before tensor {brief(name)}: a gap; "
                             "offsets must tile the data section")
        at, last = end, name
    if at != data_size:
        raise ValueError(f"safe_load: tensors end at {at}, the data section has {data_size} bytes: offsets must "
                         "tile the data section")


def read_header(size: int, read: Callable[[int, int], bytes]) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Rules 1-5 for a file of ``size`` bytes read with ``read(start, stop)``; returns (data start,
    name -> (code, shape, begin, end), metadata)."""
    if size < 8:
        raise ValueError(f"safe_load: file of {size} bytes is too short for the 8-byte header length")
    n = int.from_bytes(read(0, 8), "little")
    if n > HEADER_LIMIT:
        raise ValueError(f"safe_load: header length {n} exceeds the limit of {HEADER_LIMIT} bytes")
    if 8 + n > size:
        raise ValueError(f"safe_load: header length {n} runs past the end of the file ({size} bytes)")
    raw = read(8, 8 + n)
    if len(raw) != n:
        raise ValueError(f"safe_load: got {len(raw)} of the {n} header bytes: the file changed size")
    header = parse_json(raw)
    if not isinstance(header, dict):
        raise ValueError(f"safe_load: header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or any(not isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"safe_load: __metadata__ {brief(metadata)} is not an object of strings")
    data_size = size - 8 - n
    tensors = {name: check_tensor(name, header[name], data_size) for name in sorted(header)}
    check_cover([(b, e, name) for name, (_, _, b, e) in tensors.items()], data_size)
    return 8 + n, tensors, metadata


def file_bytes(f: Any, size: int) -> Array:
    """The first ``size`` bytes of the open file ``f``, mapped read-only (nothing is read yet; the mapping
    stays valid after ``f`` is closed)."""
    if size == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ), dtype=np.uint8)


def open_source(source: Any) -> tuple[LazyBuffer, tuple[int, dict[str, Any], dict[str, str]]]:
    """(a uint8 buffer of the file's bytes, its checked header) for a path or a 1-D uint8 DISK buffer."""
    if isinstance(source, LazyBuffer):
        if not source.device.startswith("DISK:") or len(source.shape) != 1:
            raise ValueError(f"safe_load: {source!r} must be a 1-D buffer on a DISK device")
        if source.dtype != dtypes.uint8:
            raise TypeError(f"safe_load: {source!r} has dtype {source.dtype.name}, must be uint8")
        buf = source
        return buf, read_header(buf.shape[0], lambda a, b: to_numpy(buf.shrink(((a, b),))).tobytes())
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"safe_load: {source!r} is neither a path nor a DISK LazyBuffer")
    path = os.path.abspath(os.fspath(source))
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size

        def read(a: int, b: int) -> bytes:
            f.seek(a)
            return f.read(b - a)
        header = read_header(size, read)
        data = file_bytes(f, size)
    return mapped(data, "DISK:" + path), header


def tensor_view(buf: LazyBuffer, start: int, code: str, shape: tuple[int, ...], begin: int, end: int) -> LazyBuffer:
    """The tensor stored in bytes [start + begin, start + end) of ``buf``."""
    dtype = project_dtype(code)
    if begin == end:
        return LazyBuffer.loadop(LoadOps.EMPTY, shape, dtype, buf.device)
    raw = buf.shrink(((start + begin, start + end),))
    if dtype == dtypes.bool:  # bitcast() refuses bool; the same BITCAST node, built directly
        flat = _node(raw.device, raw.shape, dtype, UnaryOps.BITCAST, dtype, (raw,))
        flat.pos = raw.pos
    else:
        flat = raw.cast(dtype, bitcast=True)
    return flat.reshape(shape)


def safe_load(source: Any) -> SafeTensors:
    """The tensors of a safetensors file (a path or a 1-D uint8 DISK buffer) as lazy views of its bytes."""
    buf, (start, tensors, _) = open_source(source)
    good = {n: tensor_view(buf, start, *t) for n, t in tensors.items() if t[0] in KNOWN}
    return SafeTensors(good, {n: t[0] for n, t in tensors.items() if t[0] not in KNOWN})


def safe_load_metadata(source: Any) -> dict[str, str]:
    """``__metadata__`` of a safetensors file ({} when absent); the whole header is checked first."""
    return dict(open_source(source)[1][2])


def save_plan(tensors: Any, metadata: Any) -> tuple[list[tuple[str, Any]], bytes]:
    """(name, tensor) in file order (larger itemsize first, then by name) and the header with its length."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"safe_save: tensors must be a dict of name -> LazyBuffer, got {type(tensors).__name__}")
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"safe_save: tensor name {name!r} is not a string")
        if name == "__metadata__":
            raise ValueError("safe_save: the name '__metadata__' is reserved")
        if not isinstance(t, (LazyBuffer, MultiLazyBuffer)):
            raise TypeError(f"safe_save: tensor {name!r} is {t!r}, not a LazyBuffer or MultiLazyBuffer")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(f"safe_save: metadata must be a dict of strings, got {type(metadata).__name__}")
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"safe_save: metadata entry {k!r}: {v!r} is not a pair of strings")
    order = sorted(tensors.items(), key=lambda kv: (-kv[1].dtype.itemsize, kv[0]))
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": dict(metadata)}
    at = 0
    for name, t in order:
        size = int(np.prod(t.shape, dtype=np.int64)) * t.dtype.itemsize
        code = next(c for c, n in KNOWN.items() if n == t.dtype.name)
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [at, at + size]}
        at += size
    try:
        text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"safe_save: a name or metadata string cannot be encoded as UTF-8: {e}") from None
    text += b" " * ((8 - len(text) % 8) % 8)
    return order, len(text).to_bytes(8, "little") + text


def stored_bytes(t: Any) -> bytes:
    """The tensor's values as the file stores them (bfloat16: the 16-bit patterns; little-endian)."""
    values = to_numpy(t)
    if t.dtype == dtypes.bfloat16:
        values = (values.view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(values.dtype.newbyteorder("<")).tobytes()


def safe_save(path: Any, tensors: Any, metadata: Any = None) -> None:
    """Write a safetensors file atomically: a temporary file in the target's directory, fsynced, then
    renamed over the target, then the directory fsynced. The target is never left half-written."""
    order, head = save_plan(tensors, metadata)
    target = os.path.abspath(os.fspath(path))
    if os.path.isdir(target):
        raise IsADirectoryError(errno.EISDIR, "safe_save: target is a directory", target)
    mode = 0o666
    if os.path.exists(target):
        mode = os.stat(target).st_mode & 0o777
        if mode & 0o222 == 0 or not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, "safe_save: target file is read-only", target)
    temp = os.path.join(os.path.dirname(target), "." + os.path.basename(target) + "." + secrets.token_hex(8) + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            for _, t in order:
                f.write(stored_bytes(t))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    dirfd = os.open(os.path.dirname(target), os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
