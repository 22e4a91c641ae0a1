"""Tensors sharded across several devices: `MultiLazyBuffer` (SPEC §5) and its all-reduce.

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
from functools import reduce
from itertools import accumulate
from typing import Any, TypeVar, cast

import numpy as np

from fast import config
from fast.dtype import ConstType, DType
from fast.lazy import LazyBuffer
from fast.ops import BinaryOps, ElementwiseOps, ReduceOps

Shape = tuple[int, ...]
Bound = tuple[int, int]
Item = TypeVar("Item")

RING_MIN_ELEMENTS = 256_000  # RING=1: ring only above this many elements (and more than 2 devices)
RING_FACTORS = (32, 16, 8, 4, 2, 1)  # chunk sizes are multiples of the largest of these dividing numel
_COMBINE = {ReduceOps.SUM: BinaryOps.ADD, ReduceOps.MAX: BinaryOps.MAX}


# ---------------------------------------------------------------- all-reduce

def use_ring(ndev: int, numel: int, ring_level: int) -> bool:
    """SPEC §5: ring when RING >= 2, or RING >= 1 with more than 2 devices and > 256,000 elements."""
    if ring_level >= 2:
        return True
    return ring_level >= 1 and ndev > 2 and numel > RING_MIN_ELEMENTS


def ring_chunks(numel: int, ndev: int) -> list[Bound]:
    """The ring's chunks of a flat tensor of `numel` elements, as ordered, disjoint, non-empty
    `[start, end)` ranges covering `range(numel)` exactly once; at most `ndev` of them."""
    if ndev < 1 or numel < 0:
        raise ValueError(f"ring_chunks: need ndev >= 1 and numel >= 0, got ndev={ndev}, numel={numel}")
    factor = next(f for f in RING_FACTORS if numel % f == 0)
    base, extra = divmod(numel // factor, ndev)
    sizes = [factor * (base + (1 if index < extra else 0)) for index in range(ndev)]
    return [(start, end) for start, end in _cumulative(sizes) if end > start]


def all_reduce(op: ReduceOps, parts: Sequence[LazyBuffer]) -> list[LazyBuffer]:
    """Combine equally shaped `parts` (one per device) with `op`; returns one buffer per part, on the
    part's device, each holding the combination of all parts. Naive or ring per `use_ring`."""
    if op not in _COMBINE:
        raise TypeError(f"all_reduce: {op} is not a reduce op")
    if len(parts) == 1:
        return list(parts)
    numel = math.prod(_dims(parts[0]))
    if use_ring(len(parts), numel, config.get().ring):
        return _ring_all_reduce(_COMBINE[op], parts)
    return _naive_all_reduce(_COMBINE[op], parts)


def _fold(op: BinaryOps, buffers: Sequence[LazyBuffer]) -> LazyBuffer:
    """`buffers[0] op buffers[1] op ...`, left to right (a fixed order: every device gets the same bits)."""
    return reduce(lambda total, buffer: total.e(op, buffer), buffers[1:], buffers[0])


def _naive_all_reduce(op: BinaryOps, parts: Sequence[LazyBuffer]) -> list[LazyBuffer]:
    """Every device combines copies of all parts, in part order."""
    return [_fold(op, [part.copy_to_device(target.device) for part in parts]) for target in parts]


def _ring_all_reduce(op: BinaryOps, parts: Sequence[LazyBuffer]) -> list[LazyBuffer]:
    """Reduce-scatter then all-gather around the ring of devices, on flattened chunks.

    After reduce-scatter step s, device (c+s+1) % ndev holds chunk c combined over devices
    c .. c+s+1; so after ndev-1 steps chunk c is complete on device (c-1) % ndev, from which the
    all-gather passes it on, one device per step."""
    ndev, shape = len(parts), _dims(parts[0])
    numel = math.prod(shape)
    chunks = ring_chunks(numel, ndev)
    if not chunks:  # zero elements: nothing to combine
        return list(parts)
    devices = [part.device for part in parts]
    flat = [part.reshape((numel,)) for part in parts]
    pieces = [[row.shrink((chunk,)) for chunk in chunks] for row in flat]  # pieces[device][chunk]
    for step in range(ndev - 1):
        for chunk in range(len(chunks)):
            source, target = (chunk + step) % ndev, (chunk + step + 1) % ndev
            incoming = pieces[source][chunk].copy_to_device(devices[target])
            pieces[target][chunk] = pieces[target][chunk].e(op, incoming)
    for step in range(ndev - 1):
        for chunk in range(len(chunks)):
            source = (chunk + ndev - 1 + step) % ndev
            target = (source + 1) % ndev
            pieces[target][chunk] = pieces[source][chunk].copy_to_device(devices[target])
    return [_assemble(row, chunks, numel).reshape(shape) for row in pieces]


def _assemble(pieces: Sequence[LazyBuffer], chunks: Sequence[Bound], numel: int) -> LazyBuffer:
    """Concatenate flat chunks: pad each into place and add (the padding is zeros)."""
    if len(pieces) == 1:
        return pieces[0]
    placed = [piece.pad(((start, numel - end),)) for piece, (start, end) in zip(pieces, chunks, strict=True)]
    return _fold(BinaryOps.ADD, placed)


# ---------------------------------------------------------------- small helpers

def _replace(items: tuple[Item, ...], axis: int, value: Item) -> tuple[Item, ...]:
    """`items` with entry `axis` replaced by `value`."""
    return tuple(value if dim == axis else item for dim, item in enumerate(items))


def _dims(lb: LazyBuffer) -> Shape:
    """A shard's shape as ints (multi buffers hold concrete shapes only: checked by `_concrete`)."""
    return cast(Shape, lb.shape)


def _concrete(op: str, lb: LazyBuffer) -> Shape:
    """`lb`'s shape, or ValueError when it is symbolic (sharding needs concrete sizes)."""
    if not all(isinstance(size, int) for size in lb.shape):
        raise ValueError(f"{op}: symbolic shape {lb.shape} is not supported for sharded buffers")
    return _dims(lb)


def _zeros(template: LazyBuffer, dtype: DType | None = None, shape: Shape | None = None) -> LazyBuffer:
    """Constant zeros on `template`'s device (default: its dtype and shape)."""
    zeros = template.const(0, shape if shape is not None else _dims(template))
    return zeros if dtype is None or zeros.dtype == dtype else zeros.cast(dtype)


def _ints(op: str, name: str, values: Any, length: int | None = None) -> tuple[int, ...]:
    """`values` as a tuple of Python ints (of `length` entries when given), else ValueError."""
    try:
        items = tuple(values)
    except TypeError as error:
        raise ValueError(f"{op}: {name} must be a sequence of ints, got {values!r}") from error
    if not all(isinstance(item, (int, np.integer)) and not isinstance(item, bool) for item in items):
        raise ValueError(f"{op}: {name} must be a sequence of ints, got {values!r}")
    items = tuple(int(item) for item in items)
    if length is not None and len(items) != length:
        raise ValueError(f"{op}: {name} {items} needs {length} entries")
    return items


def _pairs(op: str, arg: Any, shape: Shape) -> tuple[Bound, ...]:
    """`arg` as one (int, int) pair per dimension of `shape`, else ValueError."""
    try:
        pairs = tuple(_ints(op, "each pair", pair, 2) for pair in arg)
    except TypeError as error:
        raise ValueError(f"{op}: argument must be a sequence of pairs, got {arg!r}") from error
    if len(pairs) != len(shape):
        raise ValueError(f"{op}: argument {arg!r} needs {len(shape)} pairs for shape {shape}")
    return tuple((pair[0], pair[1]) for pair in pairs)


def _check_operands(op: str, operands: Sequence[Any]) -> None:
    """Every operand is a MultiLazyBuffer on the same devices, with the same shape."""
    for operand in operands:
        if not isinstance(operand, MultiLazyBuffer):
            raise ValueError(f"{op}: every operand must be a MultiLazyBuffer, got {type(operand).__name__}")
        if operand.device != operands[0].device:
            raise ValueError(f"{op}: operands live on different devices {operands[0].device} and {operand.device}")
        if operand.shape != operands[0].shape:
            raise ValueError(f"{op}: operand shapes differ: {operands[0].shape} and {operand.shape}")


def _cumulative(sizes: Sequence[int]) -> list[Bound]:
    """Consecutive `[start, end)` ranges of the given sizes, starting at 0."""
    edges = list(accumulate(sizes, initial=0))
    return list(zip(edges[:-1], edges[1:], strict=True))


def _relative_bounds(sizes: Sequence[int], real: Sequence[bool]) -> list[Bound | None]:
    """Each real shard's range inside the logical tensor (real shards only, in order); None if not real."""
    real_bounds = iter(_cumulative([size for size, flag in zip(sizes, real, strict=True) if flag]))
    return [next(real_bounds) if flag else None for flag in real]


def _slice(lb: LazyBuffer, axis: int | None, bound: Bound | None) -> LazyBuffer:
    """The part of a whole-tensor buffer that a shard with logical range `bound` along `axis` holds."""
    if axis is None or bound is None or bound == (0, _dims(lb)[axis]):
        return lb
    return lb.shrink(_replace(tuple((0, size) for size in _dims(lb)), axis, bound))


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
    template = next((o for o in operands if axis is not None and o.axis == axis), operands[0])
    sizes = [_dims(lb)[axis] for lb in template.lbs] if axis is not None else [0] * len(real)
    for operand in operands:
        if axis is not None and operand.axis == axis and [_dims(lb)[axis] for lb in operand.lbs] != sizes:
            raise ValueError(f"e: operands sharded on axis {axis} have different bounds "
                             f"{template.bounds} and {operand.bounds}")
    bounds = _relative_bounds(sizes, real)
    if not any(real):
        raise ValueError(f"e: no shard is real in every operand (real flags {[o.real for o in operands]})")
    if axis is not None and sum(bound[1] - bound[0] for bound in bounds if bound) != operands[0].shape[axis]:
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


def _check_layout(shards: Sequence[LazyBuffer], axis: int | None, real: Sequence[bool]) -> None:
    if not shards:
        raise ValueError("MultiLazyBuffer: needs at least one shard")
    if len(real) != len(shards) or not any(real):
        raise ValueError(f"MultiLazyBuffer: real={list(real)} needs one flag per shard ({len(shards)}), "
                         "at least one True")
    if not all(isinstance(lb, LazyBuffer) for lb in shards):
        raise ValueError(f"MultiLazyBuffer: shards must be LazyBuffers, got {[type(lb).__name__ for lb in shards]}")
    if any(lb.dtype != shards[0].dtype for lb in shards):
        raise ValueError(f"MultiLazyBuffer: shards have different dtypes {[lb.dtype for lb in shards]}")
    first = _concrete("MultiLazyBuffer", shards[0])
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(first)):
        raise ValueError(f"MultiLazyBuffer: axis {axis!r} is out of range for shape {first}")
    for lb in shards:
        shape = _concrete("MultiLazyBuffer", lb)
        if len(shape) != len(first) or any(shape[d] != first[d] for d in range(len(first)) if d != axis):
            raise ValueError(f"MultiLazyBuffer: shard shapes {[_dims(lb) for lb in shards]} differ "
                             f"{'' if axis is None else f'outside axis {axis}'}")


class MultiLazyBuffer:
    """One tensor held as shards on a tuple of devices (the model is in the module docstring)."""

    def __init__(self, lbs: Sequence[LazyBuffer], axis: int | None, real: Sequence[bool] | None = None) -> None:
        shards = tuple(lbs)
        flags = tuple(bool(flag) for flag in real) if real is not None else (True,) * len(shards)
        _check_layout(shards, axis, flags)
        self._lbs, self._axis, self._real = shards, axis, flags

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
        return None if self._axis is None else _cumulative(self._sizes())

    @property
    def shape(self) -> Shape:
        first = _dims(self._lbs[0])
        if self._axis is None:
            return first
        return _replace(first, self._axis, sum(_dims(lb)[self._axis] for lb in self.real_lbs))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> DType:
        return self._lbs[0].dtype

    @property
    def device(self) -> tuple[str, ...]:
        return tuple(lb.device for lb in self._lbs)

    @property
    def real_lbs(self) -> list[LazyBuffer]:
        return [lb for lb, flag in zip(self._lbs, self._real, strict=True) if flag]

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
        return [_dims(lb)[self._axis if self._axis is not None else 0] for lb in self._lbs]

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
            return MultiLazyBuffer([lb.copy_to_device(name) for name in names], None)
        shape = _concrete("from_sharded", lb)
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
        return MultiLazyBuffer([lb.shrink(_replace(whole, axis, bound)).copy_to_device(name)
                                for bound, name in zip(ranges, names, strict=True)], axis)

    def copy_to_device(self, device: str) -> LazyBuffer:
        """The logical value on one device: the first real shard, or the real shards placed at their
        positions along the axis (zero padding) and added."""
        if self._axis is None:
            return self.real_lbs[0].copy_to_device(device)
        axis, total, no_padding = self._axis, self.shape[self._axis], tuple((0, 0) for _ in self.shape)
        return _fold(BinaryOps.ADD, [lb.copy_to_device(device).pad(_replace(no_padding, axis, (start, total - end)))
                                     for lb, (start, end) in self._real_shards_with_bounds()])

    # ------------------------------------------------------------ compute
    def e(self, op: ElementwiseOps, *others: MultiLazyBuffer, arg: Any = None) -> MultiLazyBuffer:
        """Elementwise op. Result axis: the last non-None operand axis; result real: the AND of the
        operands' real flags (an operand gathered from another axis counts as real everywhere);
        result shards that are not real are zeros of the result dtype."""
        operands = (self, *others)
        _check_operands("e", operands)
        axis = next((o.axis for o in reversed(operands) if o.axis is not None), None)
        real = tuple(all(column) for column in zip(*(_mask_on(o, axis) for o in operands), strict=True))
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
            raise TypeError(f"r: {op!r} is not a ReduceOps")
        reduce_axes = _ints("r", "axes", axes)
        if len(set(reduce_axes)) != len(reduce_axes) or any(not 0 <= a < len(self.shape) for a in reduce_axes):
            raise ValueError(f"r: axes {reduce_axes} must be distinct and in range for shape {self.shape}")
        if self._axis is None or self._axis not in reduce_axes:
            return self._each(lambda lb: lb.r(op, reduce_axes), self._axis)
        reduced = {index: lb.r(op, reduce_axes) for index, lb in enumerate(self._lbs) if self._real[index]}
        combined = dict(zip(reduced, all_reduce(op, list(reduced.values())), strict=True))
        shape = _dims(next(iter(combined.values())))
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
        _check_operands("assign", (self, x))
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
        new_shape = _ints("reshape", "shape", shape)
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
            return [_dims(lb)[self._axis] for lb in self._lbs]
        if old_size % count or new_size % count:
            raise ValueError(f"reshape: sharded axis {self._axis} changes size {old_size} -> {new_size}; both must "
                             f"divide by the {count} real shards ({self.shape} -> {new_shape})")
        row = math.prod(new_shape[new_axis + 1:])
        if row == 0:
            return [new_size // count] * len(self._lbs)
        sizes = [math.prod(_dims(lb)[self._axis:]) for lb in self._lbs]
        if any(size % row for size in sizes):
            raise ValueError(f"reshape: {self.shape} -> {new_shape} would move elements between shards "
                             f"(bounds {self.bounds})")
        return [size // row for size in sizes]

    def permute(self, order: Sequence[int]) -> MultiLazyBuffer:
        """Per shard; the sharded axis moves to its new position."""
        perm = _ints("permute", "order", order, len(self.shape))
        if sorted(perm) != list(range(len(self.shape))):
            raise ValueError(f"permute: {perm} is not a permutation of the {len(self.shape)} axes of {self.shape}")
        return self._each(lambda lb: lb.permute(perm), None if self._axis is None else perm.index(self._axis))

    def expand(self, shape: Sequence[int]) -> MultiLazyBuffer:
        """Per shard; only size-1 axes grow, and never the sharded axis."""
        new_shape = _ints("expand", "shape", shape, len(self.shape))
        if any(new < 0 or (old != new and old != 1) for old, new in zip(self.shape, new_shape, strict=True)):
            raise ValueError(f"expand: cannot expand {self.shape} to {new_shape}")
        axis = self._axis
        if axis is None:
            return self._each(lambda lb: lb.expand(new_shape))
        if new_shape[axis] != self.shape[axis]:
            raise ValueError(f"expand: cannot change sharded axis {axis} ({self.shape} -> {new_shape})")
        return self._each(lambda lb: lb.expand(_replace(new_shape, axis, _dims(lb)[axis])), axis)

    def stride(self, steps: Sequence[int]) -> MultiLazyBuffer:
        """Per shard; the step on the sharded axis must be 1."""
        step_t = _ints("stride", "steps", steps, len(self.shape))
        if 0 in step_t:
            raise ValueError(f"stride: steps {step_t} may not contain 0")
        if self._axis is not None and step_t[self._axis] != 1:
            raise ValueError(f"stride: step {step_t[self._axis]} on sharded axis {self._axis} must be 1")
        return self._each(lambda lb: lb.stride(step_t), self._axis)

    def shrink(self, arg: Sequence[Sequence[int]]) -> MultiLazyBuffer:
        """Per shard, with the sharded axis whole; or, with every other axis whole, to exactly one real
        shard's range: that shard stays real, the others become zeros that are not real."""
        pairs = _pairs("shrink", arg, self.shape)
        if any(not 0 <= start <= end <= size for (start, end), size in zip(pairs, self.shape, strict=True)):
            raise ValueError(f"shrink: {pairs} is out of range for shape {self.shape}")
        axis = self._axis
        if axis is None:
            return self._each(lambda lb: lb.shrink(pairs))
        if pairs[axis] == (0, self.shape[axis]):
            return self._each(lambda lb: lb.shrink(_replace(pairs, axis, (0, _dims(lb)[axis]))), axis)
        bounds = _relative_bounds([_dims(lb)[axis] for lb in self._lbs], self._real)
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
        pairs = _pairs("pad", arg, self.shape)
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
        bounds = _cumulative(self._sizes())
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
