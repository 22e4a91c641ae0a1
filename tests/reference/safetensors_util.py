"""Helpers for the safetensors tests (test_ref_safetensors*.py): values, raw files and an independent
oracle for them, written with numpy, json and struct only (no code of `fast` or `reference`)."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

NUMPY_CODES = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
               "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64, "F16": np.float16,
               "F32": np.float32, "F64": np.float64}
CODES = [*NUMPY_CODES, "BF16"]
NAMES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16", "U32": "uint32",
         "I32": "int32", "U64": "uint64", "I64": "int64", "F16": "float16", "BF16": "bfloat16",
         "F32": "float32", "F64": "float64"}
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "BF16": 2, "F16": 2, "U32": 4, "I32": 4, "F32": 4,
         "U64": 8, "I64": 8, "F64": 8, "F8_E4M3": 1, "C64": 8}
LIMIT = 100_000_000


def sample(code: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random bit patterns of `code` (so NaN payloads, infinities and extremes occur); bools are 0 or 1."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if code == "BOOL":
        return rng.integers(0, 2, count).astype(np.bool_).reshape(shape)
    raw = rng.integers(0, 256, count * SIZES[code], dtype=np.uint8)
    return raw.view(np.uint16 if code == "BF16" else NUMPY_CODES[code]).reshape(shape)


def bits(values: np.ndarray) -> bytes:
    """The bytes of an array (bools as 0/1 whatever their storage)."""
    return (values != 0).astype(np.uint8).tobytes() if values.dtype == np.bool_ else values.tobytes()


def loaded_bits(impl: Any, tensor: Any) -> bytes:
    """A loaded tensor's stored bytes, via to_numpy (bfloat16 comes back as float32: keep the top half)."""
    values = impl.to_numpy(tensor)
    if tensor.dtype == impl.dtypes.bfloat16:
        return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return bits(values)


def raw_file(path: Path, header: Any, data: bytes = b"", length: int | None = None) -> Path:
    """Write 8-byte length + header (an object as JSON, or bytes as given) + data; `length` overrides N."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def parse_oracle(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """(header dict, data section) of a file assumed valid."""
    (length,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + length]), blob[8 + length:]


def ours(impl: Any, code: str, values: np.ndarray, device: str = "CLANG") -> Any:
    """A buffer of the project's dtype for `code` holding `values` (bfloat16 from uint16 bit patterns)."""
    if code == "BF16":
        return impl.from_numpy(values, device).cast(impl.dtypes.bfloat16, bitcast=True)
    return impl.from_numpy(values, device)


def package_bytes(safetensors: Any, code: str, values: np.ndarray) -> bytes:
    """A one-tensor file written by the safetensors package's core serializer (dtype names as torch's)."""
    dtype = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn"}[code]
    data = np.ascontiguousarray(values)
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
        spec = safetensors.TensorSpec(dtype=dtype, shape=data.shape, data_ptr=data.ctypes.data, data_len=data.nbytes)
        return bytes(safetensors.serialize({"x": spec}, metadata=None))
    return bytes(safetensors.serialize({"x": {"dtype": dtype, "shape": list(data.shape), "data": data.tobytes()}}))
