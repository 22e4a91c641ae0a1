"""Evaluation: ``realize`` computes the requested buffers op by op with numpy, then writes assigns.

Only the requested buffers (and the storage of assigns) keep their values; intermediate values live
for one ``realize`` call. Zero-copy views are computed like any node (their value equals the bytes
they view) and then read their storage.
"""
from __future__ import annotations

import typing
from typing import Any

import numpy as np

from reference import ops
from reference.dtype import Array, DType, bf16_to_f32, dtypes, f32_to_bf16
from reference.lazy import LazyBuffer, Storage
from reference.multi import MultiLazyBuffer
from reference.ops import GatherOps, LoadOps, ReduceOps, UnaryOps
from reference.shape import apply_movement


def to_public(arr: Array, dt: DType) -> Array:
    """A fresh copy of a stored array as ``to_numpy`` shows it (bfloat16 as float32)."""
    return bf16_to_f32(arr) if dt == dtypes.bfloat16 else np.array(arr, dtype=dt.np)


def _const_array(val: Any, dt: DType, shape: tuple[int, ...]) -> Array:
    if dt == dtypes.bfloat16:
        return np.full(shape, f32_to_bf16(np.array([val], dtype=np.float32))[0], dtype=np.uint16)
    return np.full(shape, val, dtype=dt.storage)


def _custom(lb: LazyBuffer, vals: list[Array]) -> Array:
    """Call ``fn(out, *inputs)`` on public-form arrays; the result is rounded into storage."""
    out = np.zeros(lb.shape, dtype=lb.dtype.np)
    lb.arg(out, *(to_public(v, s.dtype) for v, s in zip(vals, lb.srcs, strict=True)))
    return f32_to_bf16(out) if lb.dtype == dtypes.bfloat16 else out


def compute(lb: LazyBuffer, vals: list[Array]) -> Array:
    """The value of ``lb`` from the values of the sources it reads."""
    op = lb.op
    if op is LoadOps.EMPTY:
        return np.zeros(lb.shape, dtype=lb.dtype.storage)
    if op is LoadOps.CONST:
        return _const_array(lb.arg, lb.dtype, lb.shape)
    if op is LoadOps.CUSTOM:
        return _custom(lb, vals)
    if op in (LoadOps.COPY, LoadOps.CONTIGUOUS, LoadOps.ASSIGN):
        return vals[0]
    if op is LoadOps.VIEW:
        return apply_movement(vals[0], *lb.arg)
    if op is UnaryOps.CAST:
        return ops.cast(vals[0], lb.srcs[0].dtype, lb.dtype)
    if op is UnaryOps.BITCAST:
        return ops.bitcast(vals[0], lb.dtype)
    if isinstance(op, ReduceOps):
        return ops.reduce(op, lb.srcs[0].dtype, vals[0], lb.arg)
    if op is GatherOps.GATHER:
        return ops.gather(vals[0], vals[1], lb.arg)
    return ops.elementwise(op, lb.srcs[-1].dtype, vals)


def _check_fresh(lb: LazyBuffer, reads: tuple[tuple[Storage, int], ...]) -> None:
    """RuntimeError when memory ``lb`` reads (or, for a view, stands for) was assigned after it was built."""
    for storage, version in reads:
        if storage.version > version:
            raise RuntimeError(f"{lb.op.name}: {lb!r} was built before an assign that has since been realized "
                               "into memory it reads; the value it was built from no longer exists")


def _evaluate(root: LazyBuffer, cache: dict[int, Array], assigns: list[LazyBuffer]) -> None:
    """Compute ``root`` and every unrealized node below it into ``cache`` (iterative post-order)."""
    stack: list[tuple[LazyBuffer, bool]] = [(root, False)]
    while stack:
        lb, ready = stack.pop()
        if lb.is_realized() or id(lb) in cache:
            continue
        if not ready:
            _check_fresh(lb, lb._reads)
            stack.append((lb, True))
            stack.extend((s, False) for s in lb._sources)
            continue
        vals = [cache[id(s)] if s.realized is None else s.realized for s in lb._sources]
        cache[id(lb)] = np.asarray(compute(lb, vals))
        if lb.op is LoadOps.ASSIGN:
            assigns.append(lb)


def _lazy_buffers(buffers: tuple[Any, ...]) -> list[LazyBuffer]:
    out: list[LazyBuffer] = []
    for b in buffers:
        if not isinstance(b, (LazyBuffer, MultiLazyBuffer)):
            raise TypeError(f"realize: {b!r} is not a LazyBuffer or MultiLazyBuffer")
        out.extend(b.lbs if isinstance(b, MultiLazyBuffer) else [b])
    return out


def realize(*buffers: LazyBuffer | MultiLazyBuffer) -> None:
    """Evaluate the buffers (memoised); assigns met on the way are written after all values, into the
    storage their targets share (a stale view asked for raises RuntimeError, even if realized)."""
    lbs, cache, assigns = _lazy_buffers(buffers), dict[int, Array](), list[LazyBuffer]()
    for lb in lbs:
        _check_fresh(lb, () if lb._alias is None else (lb._alias,))
    with np.errstate(all="ignore"):
        for lb in lbs:
            _evaluate(lb, cache, assigns)
    for a in assigns:
        storage, target = a._storage, a.srcs[1]
        storage.write(a._offset, cache[id(a)], a.dtype)
        storage.version += 1
        a._done = True
        if target._alias is not None:  # a zero-copy view now stands for the new contents
            target._alias = (storage, storage.version)
    for lb in lbs:
        if not lb.is_realized():
            lb._store(cache[id(lb)])


def to_numpy(buffer: LazyBuffer | MultiLazyBuffer) -> Array:
    """Realize and return a fresh numpy array (bfloat16 as float32; multi: real shards joined)."""
    realize(buffer)
    if isinstance(buffer, LazyBuffer):
        return to_public(typing.cast(Array, buffer.realized), buffer.dtype)
    parts = [to_numpy(lb) for lb in buffer.real_lbs]
    return parts[0] if buffer.axis is None else np.concatenate(parts, axis=buffer.axis)
