"""Values shared by the renderer tests (C, LLVM, LLVM vectors): edge values of every dtype, and
conversions between Python values and storage arrays (bfloat16 as its uint16 bit patterns)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fast.dtype import DType, dtypes
from fast.ops import bfloat16_bits_to_float, float32_to_bfloat16_bits, normalize_const

FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 1.5, -2.5, 3.0, 0.1, 1e-3, 65504.0, 70000.0, 1e30, -1e30, 1e-40, 6e-8,
               3.3e38, 1e300, math.inf, -math.inf, math.nan, 2.0**-24, 127.9, -128.9, 255.5, 4294967295.0, -0.5,
               2.0**63, -(2.0**63), 2.0**63 - 1024, 2.0**64, 2.0**64 - 2048, -2147483648.5]


def edge_values(dtype: DType, floats: Sequence[float] = FLOAT_EDGES, extra_ints: Sequence[int] = ()) -> list:
    """Edge values of `dtype`, normalised, without duplicates (`floats` for float dtypes; integer
    dtypes get small values, their limits and `extra_ints`)."""
    if dtype == dtypes.bool:
        return [False, True]
    if dtypes.is_int(dtype):
        low, high = dtypes.min(dtype), dtypes.max(dtype)
        raw: Sequence[object] = [0, 1, -1, 2, -2, 3, 7, -7, 100, -100, low, high, low + 1, high - 1, *extra_ints]
    else:
        raw = floats
    seen: dict[str, object] = {}
    for value in raw:
        normal = normalize_const(value, dtype)  # type: ignore[arg-type]
        seen.setdefault(repr(normal), normal)
    return list(seen.values())


def to_storage(values: list, dtype: DType) -> np.ndarray:
    if dtype == dtypes.bfloat16:
        return np.array([float32_to_bfloat16_bits(float(v)) for v in values], dtype=np.uint16)
    return np.array(values, dtype=dtype.storage_np)


def from_storage(array: np.ndarray, dtype: DType) -> list:
    if dtype == dtypes.bfloat16:
        return [bfloat16_bits_to_float(int(bits)) for bits in array]
    return [x.item() for x in array]
