"""DISK views: which bytes of its file buffer each element of a DISK buffer reads.

Every DISK node carries ``pos``, an int64 array of its shape: per element, the byte offset of the
element in the file buffer it views, -1 where padded. A node that starts a new file buffer (from_numpy,
EMPTY, CUSTOM, COPY) reads ``arange(size) * itemsize``; movement ops move ``pos`` exactly as they move
values; ASSIGN reads its target's bytes, BITCAST and CONTIGUOUS the bytes of their source. DISK hands
out without compute only what it can map: CONTIGUOUS and shape-changing BITCAST need ``consecutive``
views (one ascending run of whole elements, nothing padded), or for BITCAST one of the strided views
that ``bitcast_positions`` accepts.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from reference.dtype import Array
from reference.shape import Shape, apply_movement


def fresh(shape: Shape, itemsize: int) -> Array:
    """The positions of a new file buffer of ``shape``."""
    return (np.arange(math.prod(shape), dtype=np.int64) * itemsize).reshape(shape)


def move(pos: Array, name: str, arg: Any) -> Array:
    """The positions after movement op ``name`` (padding reads nothing: -1)."""
    return np.pad(pos, arg, constant_values=-1) if name == "pad" else apply_movement(pos, name, arg)


def consecutive(pos: Array, itemsize: int) -> bool:
    """True when the view reads one ascending run of whole elements (an empty view is consecutive)."""
    flat = pos.ravel()
    return flat.size == 0 or (flat.min() >= 0 and bool(np.array_equal(flat, flat[0] + itemsize * np.arange(flat.size))))


def _strides(pos: Array) -> list[int] | None:
    """Byte strides when ``pos`` is one unpadded strided view (0 for axes of size 1), else None."""
    if pos.min() < 0:
        return None
    strides = [int(np.take(pos, [1], axis=a).flat[0] - pos.flat[0]) if n > 1 else 0 for a, n in enumerate(pos.shape)]
    grid = np.full(pos.shape, pos.flat[0], dtype=np.int64)
    for axis, (stride, n) in enumerate(zip(strides, pos.shape, strict=True)):
        grid += stride * np.arange(n).reshape([n if a == axis else 1 for a in range(pos.ndim)])
    return strides if np.array_equal(pos, grid) else None


def bitcast_positions(pos: Array, old: int, new: int, shape: Shape) -> Array | None:
    """Positions after a shape-changing BITCAST from itemsize ``old`` to ``new`` (result ``shape``), or None
    when DISK cannot reinterpret the view in place: it must be consecutive, or else one unpadded strided
    view whose last axis is of unit stride (or size 1) and whose other byte strides, start (from the
    lowest byte read) and covered byte span all divide by ``new``."""
    rows = pos[..., :1] if pos.size else np.zeros(shape[:-1] + (1,), np.int64)
    out = rows + new * np.arange(shape[-1], dtype=np.int64)
    if consecutive(pos, old):
        return out
    strides = _strides(pos)
    if strides is None or (pos.shape[-1] != 1 and strides[-1] != old):
        return None
    low = int(pos.min())
    if any(n % new for n in (*strides[:-1], int(pos.flat[0]) - low, int(pos.max()) + old - low)):
        return None
    return out
