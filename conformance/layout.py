"""The suite's model of SPEC §5 sharding: how each op changes a multi buffer's layout.

A `Layout` is what the suite knows statically about a `MultiLazyBuffer`: its devices, sharded axis,
real flags and the size of every shard along the axis. The logical shape keeps the axis size summed
over the real shards. Each function returns the new layout (and shape) or raises `ValueError` for a
misuse the SPEC forbids, so strategies can check a candidate step before emitting it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

Shape = tuple[int, ...]
Pairs = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Layout:
    """devices, axis (None: replicated), real flag per shard, shard sizes along axis (() when None)."""

    devices: tuple[str, ...]
    axis: int | None
    real: tuple[bool, ...]
    sizes: tuple[int, ...] = ()

    @property
    def all_real(self) -> bool:
        return all(self.real)

    @property
    def n_real(self) -> int:
        return sum(self.real)

    @property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """Cumulative [start, end) of every shard along the axis."""
        ends = [0]
        for size in self.sizes:
            ends.append(ends[-1] + size)
        return tuple(zip(ends, ends[1:], strict=False))

    @property
    def uneven(self) -> bool:
        return len(set(self.sizes)) > 1


def shard(shape: Shape, devices: tuple[str, ...], axis: int | None) -> Layout:
    """`from_sharded`: ceil-sized shards; an empty shard is a ValueError."""
    if axis is None:
        return Layout(devices, None, (True,) * len(devices))
    if not 0 <= axis < len(shape):
        raise ValueError(f"from_sharded: axis {axis} out of range for {shape}")
    n, k = shape[axis], len(devices)
    size = -(-n // k)
    sizes = tuple(min(n, size * (i + 1)) - size * i for i in range(k))
    if any(s <= 0 for s in sizes):
        raise ValueError(f"from_sharded: {n} over {k} devices leaves an empty shard")
    return Layout(devices, axis, (True,) * k, sizes)


def elementwise(layouts: list[Layout]) -> Layout:
    """`e`: same devices; axis = last non-None; real = AND; sizes of the operand owning that axis."""
    if any(lay.devices != layouts[0].devices for lay in layouts):
        raise ValueError("e: operands on different device tuples")
    axis = next((lay.axis for lay in reversed(layouts) if lay.axis is not None), None)
    owner = next(lay for lay in reversed(layouts) if lay.axis == axis)
    real = tuple(all(flags) for flags in zip(*(lay.real for lay in layouts), strict=True))
    if not any(real):
        raise ValueError("e: no real shard left")
    return Layout(owner.devices, axis, real, owner.sizes)


def reduce(layout: Layout, axes: tuple[int, ...]) -> Layout:
    """`r`: over the sharded axis the result is unsharded (real kept); otherwise the axis stays."""
    if layout.axis is None or layout.axis not in axes:
        return layout
    return Layout(layout.devices, None, layout.real)


def _reshape(layout: Layout, shape: Shape, new: Shape) -> Layout:
    axis = layout.axis
    assert axis is not None
    prefix = math.prod(shape[:axis])
    candidates = [i for i in range(len(new)) if math.prod(new[:i]) == prefix]
    if not candidates:
        raise ValueError(f"reshape: no axis of {new} keeps the {prefix} elements before sharded axis {axis}")
    new_axis, old, n = candidates[-1], shape[axis], layout.n_real
    new_size = new[new_axis]
    if new_size == old:
        return Layout(layout.devices, new_axis, layout.real, layout.sizes)
    if not layout.all_real or old % n or new_size % n:
        raise ValueError(f"reshape: sharded axis size {old} -> {new_size} does not divide over {n} shards")
    return Layout(layout.devices, new_axis, layout.real, (new_size // n,) * len(layout.sizes))


def _shrink(layout: Layout, shape: Shape, pairs: Pairs) -> Layout:
    axis = layout.axis
    assert axis is not None
    if pairs[axis] == (0, shape[axis]):
        return layout
    whole_elsewhere = all(p == (0, s) for i, (p, s) in enumerate(zip(pairs, shape, strict=True)) if i != axis)
    if not layout.all_real or pairs[axis] not in layout.bounds or not whole_elsewhere:
        raise ValueError(f"shrink: {pairs[axis]} on sharded axis must be whole or one shard of {layout.bounds}")
    index = layout.bounds.index(pairs[axis])
    real = tuple(i == index for i in range(len(layout.real)))
    return Layout(layout.devices, axis, real, layout.sizes)


def _pad(layout: Layout, pairs: Pairs) -> Layout:
    axis = layout.axis
    assert axis is not None
    if pairs[axis] == (0, 0):
        return layout
    if layout.n_real != 1:
        raise ValueError("pad: the sharded axis may only be padded around exactly one real shard")
    start, end = layout.bounds[layout.real.index(True)]
    want = tuple((start, layout.bounds[-1][1] - end) if i == axis else (0, 0) for i in range(len(pairs)))
    if pairs != want:
        raise ValueError(f"pad: {pairs} must be {want} to restore the sharded axis")
    return Layout(layout.devices, axis, (True,) * len(layout.real), layout.sizes)


def movement(layout: Layout, shape: Shape, kind: str, arg: tuple, new_shape: Shape) -> Layout:  # type: ignore[type-arg]
    """The layout after a movement op whose single-buffer result shape is `new_shape`."""
    axis = layout.axis
    if axis is None:
        return layout
    if kind == "reshape":
        return _reshape(layout, shape, new_shape)
    if kind == "permute":
        return Layout(layout.devices, arg.index(axis), layout.real, layout.sizes)
    if kind == "expand":
        if new_shape[axis] != shape[axis]:
            raise ValueError(f"expand: {new_shape} changes sharded axis {axis}")
        return layout
    if kind == "stride":
        if arg[axis] != 1:
            raise ValueError(f"stride: step {arg[axis]} on sharded axis {axis}")
        return layout
    if kind == "shrink":
        return _shrink(layout, shape, arg)
    return _pad(layout, arg)


def movement_shape(shape: Shape, kind: str, arg: tuple) -> Shape:  # type: ignore[type-arg]
    """The result shape of a movement op on a single buffer; ValueError when invalid."""
    if kind in ("reshape", "expand"):
        if kind == "reshape" and math.prod(arg) != math.prod(shape):
            raise ValueError(f"reshape: {shape} -> {arg}")
        if kind == "expand" and (len(arg) != len(shape) or
                                 any(o not in (1, n) for o, n in zip(shape, arg, strict=True))):
            raise ValueError(f"expand: {shape} -> {arg}")
        return tuple(arg)
    if len(arg) != len(shape):
        raise ValueError(f"{kind}: {arg} does not match rank of {shape}")
    if kind == "permute":
        if sorted(arg) != list(range(len(shape))):
            raise ValueError(f"permute: {arg}")
        return tuple(shape[a] for a in arg)
    if kind == "stride":
        if 0 in arg:
            raise ValueError(f"stride: {arg}")
        return tuple(len(range(0, s, abs(k))) for s, k in zip(shape, arg, strict=True))
    if kind == "pad":
        if any(b < 0 or a < 0 for b, a in arg):
            raise ValueError(f"pad: {arg}")
        return tuple(b + s + a for (b, a), s in zip(arg, shape, strict=True))
    if any(not 0 <= b <= e <= s for (b, e), s in zip(arg, shape, strict=True)):
        raise ValueError(f"shrink: {arg} outside {shape}")
    return tuple(e - b for b, e in arg)
