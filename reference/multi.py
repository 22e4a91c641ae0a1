"""MultiLazyBuffer: one LazyBuffer per device, sharded along ``axis`` (or replicated), per SPEC §5.

The logical value is the real shards joined along the axis, so positions along the axis count real
shards only (``_positions``). Every rule violation is a ValueError raised before any shard is built.
"""
from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

from reference.dtype import ConstType, DType
from reference.lazy import LazyBuffer, check_e, check_r
from reference.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from reference.shape import Shape, canonical_device, check_movement, resolve


def _with_axis(shape: Sequence[Any], axis: int, value: Any) -> tuple[Any, ...]:
    return tuple(value if a == axis else s for a, s in enumerate(shape))


def _whole(shape: Shape, axis: int, rng: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """A shrink argument keeping every axis whole except ``axis``, which keeps ``rng``."""
    return tuple(rng if a == axis else (0, s) for a, s in enumerate(shape))


def _positions(sizes: Sequence[int], real: Sequence[bool]) -> list[tuple[int, int] | None]:
    """Where each real shard sits along the axis of the logical tensor (only real shards count); None if not real."""
    starts = itertools.accumulate((size if r else 0 for size, r in zip(sizes, real, strict=True)), initial=0)
    return [(p, p + size) if r else None for p, size, r in zip(starts, sizes, real, strict=False)]


class MultiLazyBuffer:
    """Shards ``lbs`` (one per device) along ``axis`` (None: each device holds the whole tensor)."""

    def __init__(self, lbs: Sequence[LazyBuffer], axis: int | None, real: Sequence[bool] | None = None) -> None:
        lbs = list(lbs)
        real = [True] * len(lbs) if real is None else [bool(r) for r in real]
        if not lbs or not all(isinstance(lb, LazyBuffer) for lb in lbs):
            raise ValueError(f"MultiLazyBuffer: needs a non-empty list of LazyBuffers, got {lbs!r}")
        if len(real) != len(lbs) or not any(real):
            raise ValueError(f"MultiLazyBuffer: real {real} must have one flag per shard and one True")
        if any(lb.dtype != lbs[0].dtype for lb in lbs):
            raise ValueError(f"MultiLazyBuffer: shard dtypes differ: {[lb.dtype.name for lb in lbs]}")
        nd = len(lbs[0].shape)
        if axis is not None and not (isinstance(axis, int) and 0 <= axis < nd):
            raise ValueError(f"MultiLazyBuffer: axis {axis!r} out of range for shape {lbs[0].shape}")
        def off_axis(shape: Shape) -> Shape:
            return tuple(d for a, d in enumerate(shape) if a != axis)
        if any(len(lb.shape) != nd or off_axis(lb.shape) != off_axis(lbs[0].shape) for lb in lbs):
            raise ValueError(f"MultiLazyBuffer: shard shapes {[lb.shape for lb in lbs]} differ off axis {axis}")
        self.lbs, self.axis, self.real = lbs, axis, real

    def __repr__(self) -> str:
        return f"<MultiLazyBuffer {self.device} {self.shape} {self.dtype} axis={self.axis} real={self.real}>"

    @property
    def dtype(self) -> DType:
        """The dtype of every shard."""
        return self.lbs[0].dtype

    @property
    def device(self) -> tuple[str, ...]:
        """The device of each shard."""
        return tuple(lb.device for lb in self.lbs)

    @property
    def real_lbs(self) -> list[LazyBuffer]:
        """The shards that count."""
        return [lb for lb, r in zip(self.lbs, self.real, strict=True) if r]

    @property
    def bounds(self) -> list[tuple[int, int]] | None:
        """Cumulative [start, end) of every shard along the axis (None when unsharded)."""
        ends = list(itertools.accumulate(self._sizes(), initial=0))
        return None if self.axis is None else list(zip(ends, ends[1:], strict=False))

    @property
    def shape(self) -> Shape:
        """The shard shape with the axis size summed over the real shards."""
        first = self.real_lbs[0].shape
        if self.axis is None:
            return first
        return _with_axis(first, self.axis, sum(lb.shape[self.axis] for lb in self.real_lbs))

    @property
    def size(self) -> int:
        """Number of elements of ``shape``."""
        return math.prod(self.shape)

    @staticmethod
    def from_sharded(lb: LazyBuffer, devices: Sequence[str], axis: int | None) -> MultiLazyBuffer:
        """Copy ``lb`` to each device, sliced into ceil(n/k)-sized shards along ``axis``; every shard is a
        buffer of its own (a COPY even on lb's device), so it can be assigned into without touching lb."""
        devs = [canonical_device(d) for d in devices]
        if not isinstance(lb, LazyBuffer) or not devs:
            raise ValueError(f"from_sharded: needs a LazyBuffer and at least one device, got {lb!r}, {devices!r}")
        if axis is None:
            return MultiLazyBuffer([lb.copy_to_device(d, force=True) for d in devs], None)
        if not (isinstance(axis, int) and 0 <= axis < len(lb.shape)):
            raise ValueError(f"from_sharded: axis {axis!r} out of range for shape {lb.shape}")
        n, k = lb.shape[axis], len(devs)
        sz = -(-n // k)
        ranges = [(sz * i, min(n, sz * (i + 1))) for i in range(k)]
        if any(s >= e for s, e in ranges):
            raise ValueError(f"from_sharded: axis {axis} of size {n} over {k} devices gives an empty shard {ranges}")
        shards = [lb.shrink(_whole(lb.shape, axis, r)).copy_to_device(d, force=True)
                  for r, d in zip(ranges, devs, strict=True)]
        return MultiLazyBuffer(shards, axis)

    def _sizes(self) -> list[int]:
        """Each shard's size along the sharded axis (sharded buffers only)."""
        return [lb.shape[self.axis or 0] for lb in self.lbs]

    def copy_to_device(self, device: str) -> LazyBuffer:
        """Unsharded: the first real shard, copied. Sharded: the real shards copied, placed at their
        positions among the real shards by padding, and summed."""
        device = canonical_device(device)
        if self.axis is None:
            return self.real_lbs[0].copy_to_device(device)
        total, axis = self.shape[self.axis], self.axis
        parts = [lb.copy_to_device(device).pad(_with_axis([(0, 0)] * len(lb.shape), axis, (p[0], total - p[1])))
                 for lb, p in zip(self.lbs, _positions(self._sizes(), self.real), strict=True) if p is not None]
        return functools.reduce(lambda x, y: x.e(BinaryOps.ADD, y), parts)

    def _operand(self, i: int, axis: int | None, position: tuple[int, int] | None) -> LazyBuffer:
        """This operand's part of result shard ``i`` (at ``position`` along ``axis``): its own shard when
        sharded on ``axis``, else the whole tensor (unsharded, or gathered from another axis) sliced."""
        if self.axis == axis or axis is None or position is None:
            return self.lbs[i]
        whole = self.lbs[i] if self.axis is None else self.copy_to_device(self.lbs[i].device)
        return whole.shrink(_whole(whole.shape, axis, position))

    def e(self, op: UnaryOps | BinaryOps | TernaryOps, *in_srcs: MultiLazyBuffer, arg: Any = None) -> MultiLazyBuffer:
        """Elementwise op over operands on the same devices; axis: the last non-None one; real: the AND
        of the operands' masks, where an operand sharded on another axis counts as real everywhere."""
        msrcs = (self, *in_srcs)
        if not all(isinstance(m, MultiLazyBuffer) for m in msrcs):
            raise ValueError(f"e: every operand of {op!r} must be a MultiLazyBuffer, got {in_srcs!r}")
        out_dtype = check_e(op, [(m.shape, m.dtype, m.device) for m in msrcs])
        axis = next((m.axis for m in reversed(msrcs) if m.axis is not None), None)
        layout = next(m for m in msrcs if m.axis == axis)
        if axis is not None and any(m.axis == axis and m._sizes() != layout._sizes() for m in msrcs):
            raise ValueError(f"{op.name}: operands sharded on axis {axis} have different bounds "
                             f"{[m.bounds for m in msrcs]}")
        masks = [m.real if m.axis in (None, axis) else [True] * len(m.lbs) for m in msrcs]
        real = [all(rs) for rs in zip(*masks, strict=True)]
        positions = _positions(layout._sizes() if axis is not None else [0] * len(real), real)
        if not any(real) or (axis is not None and sum(p[1] - p[0] for p in positions if p) != self.shape[axis]):
            raise ValueError(f"{op.name}: the operands' real masks {[m.real for m in msrcs]} leave no real shard or "
                             f"do not cover axis {axis}")
        lbs = []
        for i, lb in enumerate(layout.lbs):
            if real[i]:
                srcs = [m._operand(i, axis, positions[i]) for m in msrcs]
                lbs.append(srcs[0].e(op, *srcs[1:], arg=arg))
            else:
                lbs.append(LazyBuffer.loadop(LoadOps.CONST, lb.shape, out_dtype, lb.device, 0))
        return MultiLazyBuffer(lbs, axis, real)

    def r(self, op: ReduceOps, axis: tuple[int, ...]) -> MultiLazyBuffer:
        """Reduce; over the sharded axis the real shards' results are all-reduced among the real shards
        (the others become zeros) and the result is unsharded, keeping ``real``."""
        axes, _ = check_r(op, self.shape, self.device, axis)
        if self.axis is None or self.axis not in axes:
            return MultiLazyBuffer([lb.r(op, axes) for lb in self.lbs], self.axis, self.real)
        parts = [lb.r(op, axes) for lb in self.real_lbs]
        combine = BinaryOps.ADD if op is ReduceOps.SUM else BinaryOps.MAX

        def all_reduced(device: str) -> LazyBuffer:
            return functools.reduce(lambda x, y: x.e(combine, y), [p.copy_to_device(device) for p in parts])
        return MultiLazyBuffer([all_reduced(lb.device) if r else lb.const(0, parts[0].shape)
                                for lb, r in zip(self.lbs, self.real, strict=True)], None, self.real)

    def const(self, val: ConstType) -> MultiLazyBuffer:
        """``val`` in every real shard, zeros in the others; keeps axis and real."""
        return MultiLazyBuffer([lb.const(val if r else 0) for lb, r in zip(self.lbs, self.real, strict=True)],
                               self.axis, self.real)

    def cast(self, dtype: DType, bitcast: bool = False) -> MultiLazyBuffer:
        """Cast per shard."""
        return MultiLazyBuffer([lb.cast(dtype, bitcast) for lb in self.lbs], self.axis, self.real)

    def contiguous(self) -> MultiLazyBuffer:
        """CONTIGUOUS of every real shard (the others stay the zeros they are)."""
        return MultiLazyBuffer([lb.contiguous() if r else lb for lb, r in zip(self.lbs, self.real, strict=True)],
                               self.axis, self.real)

    def assign(self, x: MultiLazyBuffer) -> MultiLazyBuffer:
        """Assign into every real shard; ``x`` must have self's devices, shape, axis and shard sizes and
        be real wherever self is."""
        if not isinstance(x, MultiLazyBuffer) or (x.device, x.shape, x.axis) != (self.device, self.shape, self.axis) \
                or (self.axis is not None and x._sizes() != self._sizes()) \
                or any(r and not xr for r, xr in zip(self.real, x.real, strict=True)):
            raise ValueError(f"ASSIGN: {x!r} is not laid out like the target {self!r}")
        return MultiLazyBuffer([s.assign(d) if r else s for s, d, r in zip(self.lbs, x.lbs, self.real, strict=True)],
                               self.axis, self.real)

    def _reshaped_axis(self, ax: int, new: Shape) -> int:
        """The sharded axis after reshaping to ``new``: the last dim with the old prefix product. A
        sharded axis of size 0 may be reshaped too (SPEC §5 has no exception for it)."""
        old, n = self.shape[ax], len(self.real_lbs)
        cands = [i for i in range(len(new)) if math.prod(new[:i]) == math.prod(self.shape[:ax])]
        na = cands[-1] if cands else -1
        if na < 0 or (new[na] != old and (old % n or new[na] % n)) or \
                (old and any(lb.shape[ax] * new[na] % old for lb in self.lbs)):
            raise ValueError(f"reshape: cannot reshape {self.shape} sharded on axis {ax} over {n} real shards "
                             f"to {new}")
        return na

    def _reshaped_size(self, size: int, ax: int, new_size: int) -> int:
        """A shard's size along the new axis: unchanged when the axis keeps its size, else scaled by
        new size / old size (an axis of size 0: each shard gets new size / real shards)."""
        old = self.shape[ax]
        if new_size == old:
            return size
        return new_size // len(self.real_lbs) if old == 0 else size * new_size // old

    def reshape(self, shape: Any) -> MultiLazyBuffer:
        """Reshape per shard; each shard's size along the new axis scales by new size / old size."""
        new = check_movement("reshape", self.shape, resolve("reshape", shape))[1]
        if self.axis is None:
            return MultiLazyBuffer([lb.reshape(new) for lb in self.lbs], None, self.real)
        ax = self.axis
        na = self._reshaped_axis(ax, new)
        lbs = [lb.reshape(_with_axis(new, na, self._reshaped_size(lb.shape[ax], ax, new[na]))) for lb in self.lbs]
        return MultiLazyBuffer(lbs, na, self.real)

    def pad(self, arg: Any) -> MultiLazyBuffer:
        """Pad per shard; the sharded axis only to restore the whole axis around the one real shard."""
        pairs = check_movement("pad", self.shape, arg)[0]
        if self.axis is None or self.bounds is None or pairs[self.axis] == (0, 0):
            return MultiLazyBuffer([lb.pad(pairs) for lb in self.lbs], self.axis, self.real)
        i = self.real.index(True)
        s, e = self.bounds[i]
        want = _with_axis([(0, 0)] * len(self.shape), self.axis, (s, self.bounds[-1][1] - e))
        if sum(self.real) != 1 or pairs != want:
            raise ValueError(f"pad: {arg!r} on sharded axis {self.axis} must be {want} with exactly one real shard "
                             f"(real {self.real})")
        return MultiLazyBuffer([lb if r else lb.const(0) for lb, r in zip(self.lbs, self.real, strict=True)], self.axis)

    def expand(self, shape: Any) -> MultiLazyBuffer:
        """Expand per shard; the sharded axis may not change."""
        new = check_movement("expand", self.shape, shape)[1]
        if self.axis is not None and new[self.axis] != self.shape[self.axis]:
            raise ValueError(f"expand: {new} changes sharded axis {self.axis} of shape {self.shape}")
        ax = self.axis
        return MultiLazyBuffer([lb.expand(new if ax is None else _with_axis(new, ax, lb.shape[ax])) for lb in self.lbs],
                               ax, self.real)

    def permute(self, order: Any) -> MultiLazyBuffer:
        """Permute per shard; the axis moves with it."""
        order = check_movement("permute", self.shape, order)[0]
        axis = None if self.axis is None else order.index(self.axis)
        return MultiLazyBuffer([lb.permute(order) for lb in self.lbs], axis, self.real)

    def shrink(self, arg: Any) -> MultiLazyBuffer:
        """Shrink per shard; on the sharded axis only the whole axis or exactly one real shard's range."""
        pairs = check_movement("shrink", self.shape, arg)[0]
        ax = self.axis
        if ax is None:
            return MultiLazyBuffer([lb.shrink(pairs) for lb in self.lbs], None, self.real)
        if pairs[ax] == (0, self.shape[ax]):
            return MultiLazyBuffer([lb.shrink(_with_axis(pairs, ax, (0, lb.shape[ax]))) for lb in self.lbs],
                                   ax, self.real)
        positions = _positions(self._sizes(), self.real)
        if positions.count(pairs[ax]) != 1 or pairs != _whole(self.shape, ax, pairs[ax]):
            raise ValueError(f"shrink: {arg!r} on sharded axis {ax} must keep the whole axis or exactly one real "
                             f"shard's range {positions}, with every other axis whole")
        idx = positions.index(pairs[ax])
        return MultiLazyBuffer([lb if i == idx else lb.const(0) for i, lb in enumerate(self.lbs)], ax,
                               [i == idx for i in range(len(self.lbs))])

    def stride(self, steps: Any) -> MultiLazyBuffer:
        """Stride per shard; the step on the sharded axis must be 1."""
        steps = check_movement("stride", self.shape, steps)[0]
        if self.axis is not None and steps[self.axis] != 1:
            raise ValueError(f"stride: step {steps[self.axis]} on sharded axis {self.axis} must be 1")
        return MultiLazyBuffer([lb.stride(steps) for lb in self.lbs], self.axis, self.real)

