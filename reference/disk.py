"""DISK views: which bytes of its file buffer each element of a DISK buffer reads.

Every DISK node carries ``pos``: per element, the byte offset of the element in the file buffer it
views, -1 where padded. It is a ``Run`` while the view reads one ascending run of whole elements (a new
buffer, its reshapes, the shrinks that keep it one run, BITCAST of those: what safetensors views are),
so a view of a large file costs nothing to build; any other view is an int64 array of its shape.
A node that starts a new file buffer (from_numpy,
EMPTY, CUSTOM, COPY) reads ``arange(size) * itemsize``; movement ops move ``pos`` exactly as they move
values; ASSIGN reads its target's bytes, BITCAST and CONTIGUOUS the bytes of their source. DISK hands
out without compute only what it can map: CONTIGUOUS and shape-changing BITCAST need ``consecutive``
views (one ascending run of whole elements, nothing padded), or for BITCAST one of the strided views
that ``bitcast_positions`` accepts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from reference.dtype import Array
from reference.shape import Shape, apply_movement


@dataclass(frozen=True)
class Run:
    """Consecutive positions: element i (row-major) of ``shape`` is at byte ``first + i * itemsize``."""

    first: int
    itemsize: int
    shape: Shape

    def array(self) -> Array:
        return (self.first + np.arange(math.prod(self.shape), dtype=np.int64) * self.itemsize).reshape(self.shape)


Pos = Array | Run


def fresh(shape: Shape, itemsize: int) -> Pos:
    """The positions of a new file buffer of ``shape``."""
    return Run(0, itemsize, shape)


def as_array(pos: Pos) -> Array:
    return pos.array() if isinstance(pos, Run) else pos


def _shrunk_run(pos: Run, arg: Any) -> Run | None:
    """The shrink of a run when it is still one run: axes before the first one left longer than 1 keep one
    index, the axes after it are kept whole."""
    sizes = [end - start for start, end in arg]
    longer = next((axis for axis, size in enumerate(sizes) if size != 1), len(sizes))
    if any((start, end) != (0, n) for (start, end), n in zip(arg[longer + 1:], pos.shape[longer + 1:], strict=True)):
        return None
    step, first = pos.itemsize, pos.first
    for (start, _), n in reversed(list(zip(arg, pos.shape, strict=True))):
        first, step = first + start * step, step * n
    return Run(first, pos.itemsize, tuple(sizes))


def move(pos: Pos, name: str, arg: Any) -> Pos:
    """The positions after movement op ``name`` (padding reads nothing: -1)."""
    if isinstance(pos, Run) and name == "reshape":
        return Run(pos.first, pos.itemsize, tuple(arg))
    if isinstance(pos, Run) and name == "shrink" and (run := _shrunk_run(pos, arg)) is not None:
        return run
    pos = as_array(pos)
    return np.pad(pos, arg, constant_values=-1) if name == "pad" else apply_movement(pos, name, arg)


def consecutive(pos: Pos, itemsize: int) -> bool:
    """True when the view reads one ascending run of whole elements (an empty view is consecutive)."""
    if isinstance(pos, Run):
        return pos.itemsize == itemsize or math.prod(pos.shape) <= 1
    flat = pos.ravel()
    return flat.size == 0 or (flat.min() >= 0 and bool(np.array_equal(flat, flat[0] + itemsize * np.arange(flat.size))))


def first(pos: Pos) -> int:
    """The byte position of the first element (0 for an empty view)."""
    if isinstance(pos, Run):
        return pos.first
    return int(pos.flat[0]) if pos.size else 0


def _strides(pos: Array) -> list[int] | None:
    """Byte strides when ``pos`` is one unpadded strided view (0 for axes of size 1), else None."""
    if pos.min() < 0:
        return None
    strides = [int(np.take(pos, [1], axis=a).flat[0] - pos.flat[0]) if n > 1 else 0 for a, n in enumerate(pos.shape)]
    grid = np.full(pos.shape, pos.flat[0], dtype=np.int64)
    for axis, (stride, n) in enumerate(zip(strides, pos.shape, strict=True)):
        grid += stride * np.arange(n).reshape([n if a == axis else 1 for a in range(pos.ndim)])
    return strides if np.array_equal(pos, grid) else None


def bitcast_positions(pos: Pos, old: int, new: int, shape: Shape) -> Pos | None:
    """Positions after a shape-changing BITCAST from itemsize ``old`` to ``new`` (result ``shape``), or None
    when DISK cannot reinterpret the view in place: it must be consecutive, or else one unpadded strided
    view whose last axis is of unit stride (or size 1) and whose other byte strides, start (from the
    lowest byte read) and covered byte span all divide by ``new``."""
    if consecutive(pos, old):
        return Run(first(pos), new, shape)
    pos = as_array(pos)
    rows = pos[..., :1] if pos.size else np.zeros(shape[:-1] + (1,), np.int64)
    out = rows + new * np.arange(shape[-1], dtype=np.int64)
    strides = _strides(pos)
    if strides is None or (pos.shape[-1] != 1 and strides[-1] != old):
        return None
    low = int(pos.min())
    if any(n % new for n in (*strides[:-1], int(pos.flat[0]) - low, int(pos.max()) + old - low)):
        return None
    return out
