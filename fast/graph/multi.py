"""Tensors sharded across several devices: `MultiLazyBuffer` (SPEC §5); the all-reduce of reductions
over the sharded axis is in fast/graph/allreduce.py.

Model. A multi buffer is a tuple of per-device lazy buffers `lbs` (shard i lives on device i), the
sharded `axis` (None: every device holds the whole tensor) and one `real` flag per shard. The tensor
it stands for, its *logical value*, is:
- axis None: the value held by the real shards (each real shard holds all of it);
- axis k: the real shards concatenated along k, in shard order. A shard that is not real holds
  zeros, keeps its own size along k (so `bounds` still describe the whole layout) and never counts.

Invariants, checked by the constructor: at least one shard and at least one real shard; every shard
has the same dtype and rank; with axis None every shard has the same shape, with axis k shards
differ at most along k. Every method returns a new multi buffer and checks its arguments before it
builds anything, so an error leaves nothing half-built. Every operation is defined so that the
result's logical value is the op applied to the operands' logical values.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import compress
from operator import attrgetter, itemgetter
from typing import Any, TypeVar

from fast.device import Device
from fast.dtype import ConstType, DType
from fast.graph.allreduce import Bound, Shape, all_reduce, cumulative, dims, fold, ring_chunks, use_ring
from fast.graph.multi_checks import check_ints, check_layout, check_operands, check_pairs, concrete
from fast.graph.node import LazyBuffer
from fast.ops import BinaryOps, ElementwiseOps, LoadOps, ReduceOps, not_a

Item = TypeVar("Item")
_DEVICE, _SHAPE = attrgetter("device"), attrgetter("shape")
__all__ = ["MultiLazyBuffer", "all_reduce", "ring_chunks", "use_ring"]


# ---------------------------------------------------------------- small helpers

def _replace(items: tuple[Item, ...], axis: int, value: Item) -> tuple[Item, ...]:
    """`items` with entry `axis` replaced by `value` (unchanged when `axis` is out of range)."""
    if not 0 <= axis < len(items):
        return items
    return (*items[:axis], value, *items[axis + 1:])


def _zeros(template: LazyBuffer, dtype: DType | None = None, shape: Shape | None = None) -> LazyBuffer:
    """Constant zeros on `template`'s device (default: its dtype and shape)."""
    zeros = template.const(0, shape if shape is not None else dims(template))
    return zeros if dtype is None or zeros.dtype == dtype else zeros.cast(dtype)


def _relative_bounds(sizes: Sequence[int], real: Sequence[bool]) -> list[Bound | None]:
    """Each real shard's range inside the logical tensor (real shards only, in order); None if not real."""
    real_bounds = iter(cumulative([size for size, flag in zip(sizes, real, strict=True) if flag]))
    return [next(real_bounds) if flag else None for flag in real]


def _slice(lb: LazyBuffer, axis: int | None, bound: Bound | None) -> LazyBuffer:
    """The part of a whole-tensor buffer that a shard with logical range `bound` along `axis` holds."""
    if axis is None or bound is None or bound == (0, dims(lb)[axis]):
        return lb
    return lb.shrink(_replace(tuple((0, size) for size in dims(lb)), axis, bound))


def _own_copy(lb: LazyBuffer, device: str) -> LazyBuffer:
    """`lb` copied to `device` into a buffer of its own (never an alias of lb's memory, even on lb's
    own device), so a shard is a base that can be assigned into without touching the source."""
    if Device.canonicalize(device) != lb.device:
        return lb.copy_to_device(device)
    made = lb.contiguous()
    if made.base is lb.base or made.base.op is not LoadOps.CONTIGUOUS:  # lb itself, or a zero-copy VIEW
        return lb.copy_to_device(device, force=True)
    return made


def _mask_on(operand: MultiLazyBuffer, axis: int | None) -> tuple[bool, ...]:
    """Which result shards `operand` can feed when the result is sharded on `axis`: its own real
    flags, except that an operand sharded on another axis is gathered whole onto every device."""
    if operand.axis is None or operand.axis == axis:
        return tuple(operand.real)
    return (True,) * len(operand.lbs)


def _aligned(operands: Sequence[MultiLazyBuffer], axis: int | None,
             real: Sequence[bool]) -> tuple[MultiLazyBuffer, dict[int, list[LazyBuffer]]]:
    """For each real result shard i, every operand's part for shard i of a result sharded on `axis`.

    The result takes the shard layout of the first operand sharded on `axis` (the template; others
    sharded on `axis` must have the same shard sizes). An unsharded operand's shard is sliced to the
    result shard's range; an operand sharded on another axis is gathered onto the device, then sliced.
    """
    template, sizes = operands[0], [0] * len(real)
    if axis is not None:  # (then some operand is sharded on axis: the template)
        template = next(o for o in operands if o._axis == axis)
        sizes = template._sizes()
        for operand in operands:
            if operand._axis == axis and operand is not template and operand._sizes() != sizes:
                raise ValueError(f"e: operands sharded on axis {axis} have different bounds "
                                 f"{template.bounds} and {operand.bounds}")
    bounds = _relative_bounds(sizes, real)
    if not any(real):
        raise ValueError(f"e: no shard is real in every operand (real flags {[o.real for o in operands]})")
    if axis is not None and sum(compress(sizes, real)) != operands[0].shape[axis]:
        raise ValueError(f"e: the real shards of the operands do not line up along axis {axis} "
                         f"(real flags {[o.real for o in operands]}, bounds {template.bounds})")
    return template, {index: [_part(operand, index, axis, bound) for operand in operands]
                      for index, bound in enumerate(bounds) if real[index]}


def _part(operand: MultiLazyBuffer, index: int, axis: int | None, bound: Bound | None) -> LazyBuffer:
    """What `operand` contributes to result shard `index` (logical range `bound` along `axis`)."""
    shard = operand.lbs[index]
    if operand.axis == axis:
        return shard
    return _slice(shard if operand.axis is None else operand.copy_to_device(shard.device), axis, bound)


class MultiLazyBuffer:
    """One tensor held as shards on a tuple of devices (the model is in the module docstring)."""

    def __init__(self, lbs: Sequence[LazyBuffer], axis: int | None, real: Sequence[bool] | None = None) -> None:
        shards = tuple(lbs)
        flags = tuple(map(bool, real)) if real is not None else (True,) * len(shards)
        self._shape = check_layout(shards, axis, flags)  # (shards' shapes are fixed: computed once)
        self._lbs, self._axis, self._real = shards, axis, flags
        self._devices = tuple(map(_DEVICE, shards))

    # ------------------------------------------------------------ properties
    @property
    def lbs(self) -> list[LazyBuffer]:
        return list(self._lbs)

    @property
    def axis(self) -> int | None:
        return self._axis

    @property
    def real(self) -> list[bool]:
        return list(self._real)

    @property
    def bounds(self) -> list[Bound] | None:
        """The `[start, end)` range of every shard (real or not) along the sharded axis; None if unsharded."""
        return None if self._axis is None else cumulative(self._sizes())

    @property
    def shape(self) -> Shape:
        return self._shape

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> DType:
        return self._lbs[0].dtype

    @property
    def device(self) -> tuple[str, ...]:
        return self._devices

    @property
    def real_lbs(self) -> list[LazyBuffer]:
        return list(compress(self._lbs, self._real))

    def __repr__(self) -> str:
        return f"<MultiLazyBuffer shape={self.shape} axis={self._axis} real={list(self._real)} {self.dtype}>"

    def _each(self, apply: Any, axis: int | None = None) -> MultiLazyBuffer:
        """`apply` to every shard; the result is sharded on `axis` and keeps `real`."""
        return MultiLazyBuffer([apply(lb) for lb in self._lbs], axis, self._real)

    def _each_real(self, apply: Any, otherwise: Any) -> MultiLazyBuffer:
        """`apply` to real shards, `otherwise` to the others; keeps axis and real."""
        lbs = [apply(lb) if self._real[index] else otherwise(lb) for index, lb in enumerate(self._lbs)]
        return MultiLazyBuffer(lbs, self._axis, self._real)

    def _sizes(self) -> list[int]:
        """Each shard's size along the sharded axis (internal: only for sharded buffers)."""
        return list(map(itemgetter(self._axis if self._axis is not None else 0), map(_SHAPE, self._lbs)))

    def _real_shards_with_bounds(self) -> list[tuple[LazyBuffer, Bound]]:
        """Each real shard with its range along the axis inside the logical tensor."""
        bounds = _relative_bounds(self._sizes(), self._real)
        return [(lb, bound) for lb, bound in zip(self._lbs, bounds, strict=True) if bound is not None]

    # ------------------------------------------------------------ creation and copies
    @staticmethod
    def from_sharded(lb: LazyBuffer, devices: Sequence[str], axis: int | None) -> MultiLazyBuffer:
        """Shard i of `lb` along `axis` is `[sz*i, min(size, sz*(i+1)))`, `sz = ceil(size/len(devices))`,
        copied to `devices[i]`; with axis None the whole buffer goes to every device."""
        names = tuple(devices)
        if not names:
            raise ValueError("from_sharded: needs at least one device")
        if axis is None:
            return MultiLazyBuffer([_own_copy(lb, name) for name in names], None)
        shape = concrete("from_sharded", lb)
        if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(shape):
            raise ValueError(f"from_sharded: axis {axis!r} is out of range for shape {shape}")
        size = shape[axis]
        step = -(-size // len(names))
        ranges = [(step * index, min(size, step * (index + 1))) for index in range(len(names))]
        empty = [index for index, (start, end) in enumerate(ranges) if start >= end]
        if empty:
            raise ValueError(f"from_sharded: axis {axis} of size {size} over {len(names)} devices leaves shard "
                             f"{empty[0]} empty (shard size {step}, range [{ranges[empty[0]][0]}, {size}))")
        whole = tuple((0, dim) for dim in shape)
        return MultiLazyBuffer([_own_copy(lb.shrink(_replace(whole, axis, bound)), name)
                                for bound, name in zip(ranges, names, strict=True)], axis)

    def copy_to_device(self, device: str) -> LazyBuffer:
        """The logical value on one device: the first real shard, or the real shards placed at their
        positions along the axis (zero padding) and added."""
        if self._axis is None:
            return self.real_lbs[0].copy_to_device(device)
        axis, total, no_padding = self._axis, self.shape[self._axis], tuple((0, 0) for _ in self.shape)
        return fold(BinaryOps.ADD, [lb.copy_to_device(device).pad(_replace(no_padding, axis, (start, total - end)))
                                     for lb, (start, end) in self._real_shards_with_bounds()])

    # ------------------------------------------------------------ compute
    def e(self, op: ElementwiseOps, *others: MultiLazyBuffer, arg: Any = None) -> MultiLazyBuffer:
        """Elementwise op. Result axis: the last non-None operand axis; result real: the AND of the
        operands' real flags (an operand gathered from another axis counts as real everywhere);
        result shards that are not real are zeros of the result dtype."""
        operands = (self, *others)
        check_operands("e", operands, MultiLazyBuffer)
        axis = None
        for operand in reversed(operands):
            if operand._axis is not None:
                axis = operand._axis
                break
        masks = [_mask_on(o, axis) for o in operands]
        real = masks[0] if masks.count(masks[0]) == len(masks) else tuple(map(all, zip(*masks, strict=True)))
        template, sources = _aligned(operands, axis, real)
        outputs = {index: srcs[0].e(op, *srcs[1:], arg=arg) for index, srcs in sources.items()}
        dtype = next(iter(outputs.values())).dtype
        return MultiLazyBuffer([outputs[index] if index in outputs else _zeros(lb, dtype)
                                for index, lb in enumerate(template.lbs)], axis, real)

    def r(self, op: ReduceOps, axes: Sequence[int]) -> MultiLazyBuffer:
        """Reduce over `axes`. Over the sharded axis: the real shards' results are all-reduced (with
        one real shard that is the shard's own result), the result is unsharded and keeps `real`;
        shards that are not real contribute zeros of the reduced shape and stay not real."""
        if not isinstance(op, ReduceOps):
            raise TypeError(not_a("r", op, "a ReduceOps member"))
        reduce_axes = check_ints("r", "axes", axes)
        if len(set(reduce_axes)) != len(reduce_axes) or any(not 0 <= a < len(self.shape) for a in reduce_axes):
            raise ValueError(f"r: axes {reduce_axes} must be distinct and in range for shape {self.shape}")
        if self._axis is None or self._axis not in reduce_axes:
            return self._each(lambda lb: lb.r(op, reduce_axes), self._axis)
        reduced = {index: lb.r(op, reduce_axes) for index, lb in enumerate(self._lbs) if self._real[index]}
        combined = dict(zip(reduced, all_reduce(op, list(reduced.values())), strict=True))
        shape = dims(next(iter(combined.values())))
        return MultiLazyBuffer([combined[index] if index in combined else _zeros(lb, shape=shape)
                                for index, lb in enumerate(self._lbs)], None, self._real)

    def const(self, val: ConstType) -> MultiLazyBuffer:
        """`val` in every real shard (zeros in the others), same shapes, axis and real."""
        return self._each_real(lambda lb: lb.const(val), _zeros)

    def cast(self, dtype: DType, bitcast: bool = False) -> MultiLazyBuffer:
        return self._each(lambda lb: lb.cast(dtype, bitcast), self._axis)

    def contiguous(self) -> MultiLazyBuffer:
        """CONTIGUOUS of every real shard (shards that are not real stay the zeros they are)."""
        return self._each_real(lambda lb: lb.contiguous(), lambda lb: lb)

    def assign(self, x: MultiLazyBuffer) -> MultiLazyBuffer:
        """Assign `x` shard by shard into every real shard; `x` must be laid out like this buffer (same
        devices, axis and shard sizes) and real wherever this buffer is."""
        check_operands("assign", (self, x), MultiLazyBuffer)
        covered = all(value or not target for value, target in zip(x.real, self._real, strict=True))
        if x.axis != self._axis or x._sizes() != self._sizes() or not covered:
            raise ValueError(f"assign: the value (axis {x.axis}, bounds {x.bounds}, real {x.real}) is not laid out "
                             f"like the target (axis {self._axis}, bounds {self.bounds}, real {self.real})")
        return MultiLazyBuffer([lb.assign(value) if flag else lb for lb, value, flag in
                                zip(self._lbs, x.lbs, self._real, strict=True)], self._axis, self._real)

    # ------------------------------------------------------------ movement
    def reshape(self, shape: Sequence[int]) -> MultiLazyBuffer:
        """Per shard. Sharded: the new axis is the last position whose leading dims multiply to the old
        leading dims; if its size changes, old and new size must divide by the number of real shards."""
        new_shape = check_ints("reshape", "shape", shape)
        if any(size < 0 for size in new_shape) or math.prod(new_shape) != self.size:
            raise ValueError(f"reshape: cannot reshape {self.shape} into {new_shape}")
        if self._axis is None:
            return self._each(lambda lb: lb.reshape(new_shape))
        new_axis = _reshape_axis(self.shape, self._axis, new_shape)
        sizes = self._reshaped_sizes(new_shape, new_axis)
        return MultiLazyBuffer([lb.reshape(_replace(new_shape, new_axis, size))
                                for lb, size in zip(self._lbs, sizes, strict=True)], new_axis, self._real)

    def _reshaped_sizes(self, new_shape: Shape, new_axis: int) -> list[int]:
        """Each shard's size along the new axis: it keeps its elements, in whole rows of the new shape."""
        assert self._axis is not None  # noqa: S101  (internal: only called for sharded buffers)
        old_size, new_size, count = self.shape[self._axis], new_shape[new_axis], len(self.real_lbs)
        if new_size == old_size:
            return [dims(lb)[self._axis] for lb in self._lbs]
        if old_size % count or new_size % count:
            raise ValueError(f"reshape: sharded axis {self._axis} changes size {old_size} -> {new_size}; both must "
                             f"divide by the {count} real shards ({self.shape} -> {new_shape})")
        row = math.prod(new_shape[new_axis + 1:])
        if row == 0 or math.prod(new_shape) == 0:  # no elements to keep: each shard gets new_size / n
            return [new_size // count] * len(self._lbs)
        sizes = [math.prod(dims(lb)[self._axis:]) for lb in self._lbs]
        if any(size % row for size in sizes):
            raise ValueError(f"reshape: {self.shape} -> {new_shape} would move elements between shards "
                             f"(bounds {self.bounds})")
        return [size // row for size in sizes]

    def permute(self, order: Sequence[int]) -> MultiLazyBuffer:
        """Per shard; the sharded axis moves to its new position."""
        perm = check_ints("permute", "order", order, len(self.shape))
        if sorted(perm) != list(range(len(self.shape))):
            raise ValueError(f"permute: {perm} is not a permutation of the {len(self.shape)} axes of {self.shape}")
        return self._each(lambda lb: lb.permute(perm), None if self._axis is None else perm.index(self._axis))

    def expand(self, shape: Sequence[int]) -> MultiLazyBuffer:
        """Per shard; only size-1 axes grow, and never the sharded axis."""
        new_shape = check_ints("expand", "shape", shape, len(self.shape))
        if any(new < 0 or (old != new and old != 1) for old, new in zip(self.shape, new_shape, strict=True)):
            raise ValueError(f"expand: cannot expand {self.shape} to {new_shape}")
        axis = self._axis
        if axis is None:
            return self._each(lambda lb: lb.expand(new_shape))
        if new_shape[axis] != self.shape[axis]:
            raise ValueError(f"expand: cannot change sharded axis {axis} ({self.shape} -> {new_shape})")
        return self._each(lambda lb: lb.expand(_replace(new_shape, axis, dims(lb)[axis])), axis)

    def stride(self, steps: Sequence[int]) -> MultiLazyBuffer:
        """Per shard; the step on the sharded axis must be 1."""
        step_t = check_ints("stride", "steps", steps, len(self.shape))
        if 0 in step_t:
            raise ValueError(f"stride: steps {step_t} may not contain 0")
        if self._axis is not None and step_t[self._axis] != 1:
            raise ValueError(f"stride: step {step_t[self._axis]} on sharded axis {self._axis} must be 1")
        return self._each(lambda lb: lb.stride(step_t), self._axis)

    def shrink(self, arg: Sequence[Sequence[int]]) -> MultiLazyBuffer:
        """Per shard, with the sharded axis whole; or, with every other axis whole, to exactly one real
        shard's range: that shard stays real, the others become zeros that are not real."""
        pairs = check_pairs("shrink", arg, self.shape)
        if any(not 0 <= start <= end <= size for (start, end), size in zip(pairs, self.shape, strict=True)):
            raise ValueError(f"shrink: {pairs} is out of range for shape {self.shape}")
        axis = self._axis
        if axis is None:
            return self._each(lambda lb: lb.shrink(pairs))
        if pairs[axis] == (0, self.shape[axis]):
            return self._each(lambda lb: lb.shrink(_replace(pairs, axis, (0, dims(lb)[axis]))), axis)
        bounds = _relative_bounds([dims(lb)[axis] for lb in self._lbs], self._real)
        matches = [index for index, bound in enumerate(bounds) if bound == pairs[axis]]
        if len(matches) != 1:
            raise ValueError(f"shrink: range {pairs[axis]} on sharded axis {axis} is neither the whole axis "
                             f"(0, {self.shape[axis]}) nor one shard's bound {[b for b in bounds if b]}")
        if any(pairs[dim] != (0, size) for dim, size in enumerate(self.shape) if dim != axis):
            raise ValueError(f"shrink: cannot shrink sharded axis {axis} and other axes at once: {pairs}")
        keep = matches[0]
        return MultiLazyBuffer([lb if index == keep else _zeros(lb) for index, lb in enumerate(self._lbs)],
                               axis, [index == keep for index in range(len(self._lbs))])

    def pad(self, arg: Sequence[Sequence[int]]) -> MultiLazyBuffer:
        """Per shard, with no padding on the sharded axis; or, when exactly one shard is real and
        every other axis is unpadded, padding that restores the whole axis: every shard becomes real,
        the others zeros."""
        pairs = check_pairs("pad", arg, self.shape)
        if any(before < 0 or after < 0 for before, after in pairs):
            raise ValueError(f"pad: {pairs} may not be negative")
        axis = self._axis
        if axis is None:
            return self._each(lambda lb: lb.pad(pairs))
        if pairs[axis] == (0, 0):
            return self._each(lambda lb: lb.pad(pairs), axis)
        kept = [index for index, flag in enumerate(self._real) if flag]
        if len(kept) != 1:
            raise ValueError(f"pad: cannot pad sharded axis {axis} by {pairs[axis]}: {len(kept)} shards are real, "
                             "only a buffer with exactly one real shard can be padded back to its whole axis")
        bounds = cumulative(self._sizes())
        restore = (bounds[kept[0]][0], bounds[-1][1] - bounds[kept[0]][1])
        if pairs[axis] != restore:
            raise ValueError(f"pad: padding {pairs[axis]} on sharded axis {axis} must restore the whole axis: "
                             f"{restore} for shard {kept[0]} of bounds {bounds}")
        if any(pair != (0, 0) for dim, pair in enumerate(pairs) if dim != axis):
            raise ValueError(f"pad: cannot pad sharded axis {axis} and other axes at once: {pairs}")
        return MultiLazyBuffer([lb if index == kept[0] else _zeros(lb) for index, lb in enumerate(self._lbs)],
                               axis, [True] * len(self._lbs))


def _reshape_axis(old_shape: Shape, axis: int, new_shape: Shape) -> int:
    """The last position in `new_shape` whose leading dims multiply to the dims before `axis`."""
    leading = math.prod(old_shape[:axis])
    candidates = [dim for dim in range(len(new_shape)) if math.prod(new_shape[:dim]) == leading]
    if not candidates:
        raise ValueError(f"reshape: {old_shape} -> {new_shape} does not keep sharded axis {axis} "
                         f"(no new axis has leading dims of product {leading})")
    return candidates[-1]
