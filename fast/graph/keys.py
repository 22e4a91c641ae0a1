"""Pure helpers of graph building, split out of fast/graph/node.py: memoised ShapeTrackers, weak-cache
keys and normalised constants. Nothing here knows about LazyBuffer.

Invariants: every memoised value is immutable (ShapeTrackers, normalised constants), so sharing it
between nodes is safe; symbolic shapes are never memoised (bound Variables compare equal whatever
their value, so a memo would hand one binding's tracker to another).
"""
from __future__ import annotations

import functools
import math
import struct
from typing import Any

import numpy as np

from fast.dtype import ConstType, DType, dtypes
from fast.ops import normalize_const
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Node, sint


def integer_shape(shape: tuple[sint, ...]) -> bool:
    return all(type(size) is int for size in shape)


@functools.lru_cache(maxsize=4096)
def _memo_tracker(shape: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker.from_shape(shape)


def tracker(shape: tuple[sint, ...]) -> ShapeTracker:
    """`ShapeTracker.from_shape`, memoised for integer shapes (trackers are immutable)."""
    return _memo_tracker(tuple(shape)) if integer_shape(shape) else ShapeTracker.from_shape(shape)


@functools.lru_cache(maxsize=4096)
def _memo_broadcast(shape: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker.from_shape((1,) * len(shape)).expand(shape)


def broadcast_tracker(shape: tuple[sint, ...]) -> ShapeTracker:
    """The view broadcasting a scalar to `shape`."""
    for size in shape:
        if type(size) is not int:
            return ShapeTracker.from_shape((1,) * len(shape)).expand(shape)
    return _memo_broadcast(tuple(shape))


def max_size(shape: tuple[sint, ...]) -> int:
    """The element count of `shape` with every symbolic size at its maximum: what a Buffer holds."""
    size = 1
    for dim in shape:
        size *= dim.max if isinstance(dim, Node) else dim
    return size


def arg_key(arg: Any) -> Any:
    """Cache key of an arg: floats by their bits (so -0.0 and 0.0, or NaNs, never merge wrongly)."""
    return ("float", struct.pack("<d", arg)) if isinstance(arg, float) else arg


def bound_values(st: ShapeTracker) -> tuple[tuple[str, int | None], ...]:
    """Values of bound variables in `st` (bound variables compare equal whatever their value)."""
    if not st.symbolic:
        return ()
    return tuple(sorted((var.expr, var._val) for var in st.vars()))


@functools.lru_cache(maxsize=4096)
def _memo_normalize(kind: str, value: ConstType, sign: float, dtype: DType) -> ConstType:
    return normalize_const(value, dtype)


def normalized(value: ConstType, dtype: DType) -> ConstType:
    """`ops.normalize_const`, memoised by (type, value, sign of zero, dtype); NaNs are not memoised,
    nor floats of float32/float64 (normalize_const answers those faster than the memo can)."""
    if type(value) is float and (dtype is dtypes.float32 or dtype is dtypes.float64) or value != value:
        return normalize_const(value, dtype)
    sign = math.copysign(1.0, value) if isinstance(value, float) else 0.0
    return _memo_normalize(type(value).__name__, value, sign, dtype)


def const_value(opname: str, value: object, dtype: DType) -> ConstType:
    """A user-given constant, normalised to `dtype`; TypeError for anything but bool/int/float."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"{opname}: value must be a bool, int or float, got {value!r}")
    return normalized(value, dtype)
