"""Gathers in kernels: the views a kernel reads a GATHER node's sources through (scheduling), and the
check of its indices before the kernel runs (realize).

A GATHER base `g = x.gather(indices, axis)` (fast/graph/gather.py) of shape O = (A..., I..., B...)
read at the kernel position mapped by `st` (kernel shape K -> O) becomes a gathered LOAD of x's
buffer whose index is the value of a LOAD of the indices' buffer:
- `index_view`: the indices of shape I reshaped to (1.., I.., 1..), expanded to O, then `st`: the
  plain view of the index LOAD over K;
- `source_view`: x's view of shape (A..., n, B...) with the gathered axis moved last, reshaped and
  expanded to (A..., I..., B..., n), then `st` with an innermost axis of size n appended to each of
  its views (`with_inner_axis`): a view over (K..., n) whose last axis lowering indexes with the
  loaded value, after wrapping a negative index once and clamping it into [0, n) (codegen/gather.py),
  so no index can read outside x's buffer.

Out-of-range indices (outside [-n, n)) are an IndexError: `check_indices` reads the first `count`
elements of the indices' buffer (the whole indices: the graph made them a contiguous base) before
the kernel is launched and raises naming `take` / `gather`, the first bad index and the axis size.
The answer is remembered per Buffer, version and bound, as engine/fma_guard.py does for its check.
"""
from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fast.device import Buffer, Device
from fast.dtype import DType
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import all_int, sint
from fast.shape.view import View

Shape = tuple[sint, ...]


@dataclass(frozen=True, eq=False)
class IndexCheck:
    """Before a kernel runs: every one of the first `count` elements of `buffer` (read as `dtype`)
    must lie in [-size, size), `size` being the gathered axis' size (number `axis` of x)."""

    buffer: Buffer
    dtype: DType
    count: int
    size: int
    axis: int


def with_inner_axis(st: ShapeTracker, n: sint) -> ShapeTracker:
    """`st` over (K..., n): each view gets an innermost axis of size n (position (k, v) reads the
    element `v` of the row its view mapped k to), so the first view indexes a buffer of shape (O..., n)."""
    views = []
    for view in st.views:
        mask = None if view.mask is None else (*view.mask, (0, n))
        views.append(View.create((*view.shape, n), (*(stride * n for stride in view.strides), 1), view.offset * n,
                                 mask))
    return ShapeTracker(tuple(views))


def _memoized(build: Callable[[Shape, Shape, int, ShapeTracker], ShapeTracker]
              ) -> Callable[[Shape, Shape, int, ShapeTracker], ShapeTracker]:
    """`build`, answered from a cache when every size is an int (bound Variables compare equal
    whatever their value, so symbolic arguments are never cache keys)."""
    cached = functools.lru_cache(maxsize=1024)(build)

    def view(x_shape: Shape, index_shape: Shape, axis: int, st: ShapeTracker) -> ShapeTracker:
        if all_int(x_shape) and all_int(index_shape) and not st.symbolic:
            return cached(x_shape, index_shape, axis, st)
        return build(x_shape, index_shape, axis, st)
    return view


@_memoized
def source_view(x_shape: Shape, index_shape: Shape, axis: int, st: ShapeTracker) -> ShapeTracker:
    """The view (shape (K..., n)) over x's own shape that the gathered LOAD reads (module docstring)."""
    before, after = x_shape[:axis], x_shape[axis + 1:]
    n, ndim = x_shape[axis], len(x_shape)
    order = (*range(axis), *range(axis + 1, ndim), axis)
    moved = ShapeTracker.from_shape(x_shape).permute(order)
    spread = moved.reshape((*before, *(1 for _ in index_shape), *after, n))
    return spread.expand((*before, *index_shape, *after, n)) + with_inner_axis(st, n)


@_memoized
def index_view(x_shape: Shape, index_shape: Shape, axis: int, st: ShapeTracker) -> ShapeTracker:
    """The view (shape K) over the indices' own shape that the index LOAD reads."""
    before, after = x_shape[:axis], x_shape[axis + 1:]
    spread = ShapeTracker.from_shape(index_shape).reshape((*(1 for _ in before), *index_shape, *(1 for _ in after)))
    return spread.expand((*before, *index_shape, *after)) + st


# ---------------------------------------------------------------- the check before launch

_CHECKED: weakref.WeakKeyDictionary[Buffer, tuple[int, int, int, int, int | None]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()  # lanes of engine/parallel.py launch kernels concurrently


def _values(buffer: Buffer, dtype: DType, count: int) -> np.ndarray:
    window = getattr(buffer.handle, "window", None)  # host memory: read in place
    raw = window().view(dtype.np) if window is not None else buffer.as_numpy().view(dtype.np)
    return raw[:count]


def first_bad_index(values: np.ndarray, size: int) -> int | None:
    """The first element of `values` (an integer array) outside [-size, size), or None."""
    if values.size == 0:
        return None
    if values.dtype.kind == "u":
        bad = values.astype(np.uint64) >= np.uint64(size)
    else:
        wide = values.astype(np.int64)
        bad = (wide < -size) | (wide >= size)
    hits = np.flatnonzero(bad)
    return int(values[hits[0]]) if hits.size else None


def check_indices(checks: tuple[IndexCheck, ...]) -> None:
    """IndexError naming `take` and the first out-of-range index of any check; remembered per Buffer
    and version (a realized buffer's contents change only through an assign, which bumps it). Indices
    that another MPI rank owns are checked by that rank, which runs the gather (docs/mpi.md)."""
    for check in checks:
        buffer = check.buffer
        if "@" in buffer.device and Device[buffer.device].remote:
            continue
        key = (buffer.version, id(buffer.handle), check.count, check.size)
        with _LOCK:
            known = _CHECKED.get(buffer)
        if known is not None and known[:4] == key:
            bad = known[4]
        else:
            bad = first_bad_index(_values(buffer, check.dtype, check.count), check.size)
            with _LOCK:
                _CHECKED[buffer] = (*key, bad)
        if bad is not None:
            raise IndexError(f"take (gather): index {bad} is out of bounds for axis {check.axis} with size "
                             f"{check.size} (indices must lie in [-{check.size}, {check.size}))")
