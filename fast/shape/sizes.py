"""Arithmetic on sizes, strides and ranges that may be symbolic (`sint`), on plain values only: no
View here. fast/shape/view.py builds Views from these answers (reshaping by merging and splitting
axis groups, composing views); fast/shape/shapetracker.py unravels flat indices with `unravel`.

Invariant: every function is pure; the ones that must decide an order (`smax`, `smin`) raise
ValueError when the variables' bounds cannot, the others answer None ("not decidable / not a box").
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from fast.shape.symbolic import as_node, as_sint, sint

Range = tuple[sint, sint]


def strides_for_shape(shape: Sequence[sint]) -> tuple[sint, ...]:
    """C-contiguous strides, with 0 for size-1 axes."""
    strides: list[sint] = []
    running: sint = 1
    for size in reversed(shape):
        strides.append(0 if size == 1 else running)
        running = running * size
    return tuple(reversed(strides))


def compare(left: sint, right: sint) -> int | None:
    """Sign of ``left - right``: 0 when known equal, 1 when known ``>=``, -1 when known ``<=``, else None."""
    if isinstance(left, int) and isinstance(right, int):
        return (left > right) - (left < right)
    difference = as_node(left) - right
    if left == right or difference.min == difference.max == 0:
        return 0
    return 1 if difference.min >= 0 else -1 if difference.max <= 0 else None


def definitely_less(left: sint, right: sint) -> bool:
    """True only when ``left < right`` for every value of the variables."""
    return (as_node(left) - right).max < 0


def smax(left: sint, right: sint) -> sint:
    """Maximum of two sizes; raises ValueError when symbolic bounds cannot decide it."""
    order = compare(left, right)
    if order is None:
        raise ValueError(f"cannot decide max({left}, {right}) symbolically")
    return left if order >= 0 else right


def smin(left: sint, right: sint) -> sint:
    """Minimum of two sizes; raises ValueError when symbolic bounds cannot decide it."""
    order = compare(left, right)
    if order is None:
        raise ValueError(f"cannot decide min({left}, {right}) symbolically")
    return left if order <= 0 else right


def add_sizes(values: Iterable[sint]) -> sint:
    """Sum in plain ints when every value is an int."""
    return as_sint(sum(values, 0))


def is_empty(start: sint, end: sint) -> bool:
    order = compare(end, start)
    return order is not None and order <= 0


def ints_or_none(values: Sequence[sint]) -> tuple[int, ...] | None:
    """The values as ints, or None when any is symbolic."""
    return tuple(values) if all(isinstance(v, int) for v in values) else None  # type: ignore[arg-type]


def match_groups(old: Sequence[sint], new: Sequence[sint]) -> list[tuple[slice, slice]] | None:
    """Split two lists of non-1 sizes into consecutive groups with equal products (None when impossible)."""
    groups: list[tuple[slice, slice]] = []
    i = j = start_i = start_j = 0
    old_product: sint = 1
    new_product: sint = 1
    while i < len(old) or j < len(new):
        if j == len(new) or (i < len(old) and compare(old_product, new_product) != 1):
            old_product, i = old_product * old[i], i + 1
        else:
            new_product, j = new_product * new[j], j + 1
        if i > start_i and j > start_j and compare(old_product, new_product) == 0:
            groups.append((slice(start_i, i), slice(start_j, j)))
            start_i, start_j, old_product, new_product = i, j, 1, 1
    return groups if (start_i, start_j) == (len(old), len(new)) else None


def suffix_products(sizes: Sequence[sint]) -> list[sint]:
    """``[prod(sizes[a + 1:]) for a in range(len(sizes))]``."""
    products: list[sint] = [1] * len(sizes)
    for a in reversed(range(len(sizes) - 1)):
        products[a] = products[a + 1] * sizes[a + 1]
    return products


def merge_group(shape: Sequence[sint], strides: Sequence[sint],
                 ranges: Sequence[Range]) -> tuple[sint, Range, sint] | None:
    """Merge consecutive axes into one: (stride, valid flat range, offset correction), or None.

    The valid region must be a flat range: axes after the last masked one are full and axes before it are
    single-valued. Single-valued axes may have any stride; the difference is moved into the offset."""
    weights = suffix_products(shape)
    masked = [a for a, (r, size) in enumerate(zip(ranges, shape, strict=True)) if r != (0, size)]
    box_axis = masked[-1] if masked else 0
    single = [compare(end - start, 1) == 0 for start, end in ranges]
    if not all(single[:box_axis]):
        return None
    correction: sint = 0
    for axis in range(len(shape)):
        needed = strides[-1] * weights[axis]
        if compare(strides[axis], needed) != 0:
            if not single[axis]:
                return None
            correction = correction + (strides[axis] - needed) * ranges[axis][0]
    start = add_sizes(r[0] * w for r, w in zip(ranges, weights, strict=True))
    end = add_sizes([start, (ranges[box_axis][1] - ranges[box_axis][0]) * weights[box_axis]])
    return strides[-1], (start, end), correction


def split_range(start: int, end: int, sizes: Sequence[int]) -> list[Range] | None:
    """Ranges per axis of ``sizes`` whose box is the flat range ``[start, end)``, or None if it is no box."""
    weights = [math.prod(sizes[a + 1:]) for a in range(len(sizes))]
    for axis, (size, weight) in enumerate(zip(sizes, weights, strict=True)):
        if start % weight or end % weight or (start // weight) // size != (end // weight - 1) // size:
            continue
        prefix = [((start // w) % s, (start // w) % s + 1) for s, w in zip(sizes[:axis], weights, strict=False)]
        middle = ((start // weight) % size, (end // weight - 1) % size + 1)
        return [*prefix, middle, *((0, s) for s in sizes[axis + 1:])]
    return None


def unravel(value: int, shape: Sequence[int]) -> list[int]:
    """Row-major coordinates of ``0 <= value < prod(shape)``."""
    weights = [math.prod(shape[a + 1:]) for a in range(len(shape))]
    return [value // w if a == 0 else (value // w) % s for a, (s, w) in enumerate(zip(shape, weights, strict=True))]


def steps_inside(origin: int, delta: int, start: int, end: int) -> tuple[int, int]:
    """The half-open range of steps ``k`` with ``start <= origin + k * delta < end`` (delta != 0)."""
    if delta > 0:
        return -((origin - start) // delta), -((origin - end) // delta)
    return (origin - end) // -delta + 1, (origin - start) // -delta + 1


def restrict(shape: Sequence[int], base_ranges: Sequence[tuple[int, int]], origin: Sequence[int],
              deltas: Sequence[Sequence[int]], starts: Sequence[int], lengths: Sequence[int]) -> list[Range] | None:
    """Top's valid ranges intersected with base's mask, or None when that is not a box (or a carry happens).

    Base coordinate ``a`` at top position ``p`` is ``origin[a] + sum((p[i] - starts[i]) * deltas[i][a])``."""
    ranges: list[Range] = [(b, b + n) for b, n in zip(starts, lengths, strict=True)]
    for axis, (mask_start, mask_end) in enumerate(base_ranges):
        low = origin[axis] + sum(min(0, d[axis] * (n - 1)) for d, n in zip(deltas, lengths, strict=True))
        high = origin[axis] + sum(max(0, d[axis] * (n - 1)) for d, n in zip(deltas, lengths, strict=True))
        if low < 0 or high >= shape[axis]:
            return None
        if mask_start <= low and high < mask_end:
            continue
        movers = [i for i, (d, n) in enumerate(zip(deltas, lengths, strict=True)) if d[axis] != 0 and n > 1]
        if high < mask_start or low >= mask_end:
            if not ranges:
                return None
            ranges[0] = (0, 0)
        elif len(movers) != 1:
            return None
        else:
            low_step, high_step = steps_inside(origin[axis], deltas[movers[0]][axis], mask_start, mask_end)
            mover_start, mover_end = ranges[movers[0]]
            ranges[movers[0]] = (smax(mover_start, starts[movers[0]] + low_step),
                                 smin(mover_end, starts[movers[0]] + high_step))
    return ranges


def flatten_ranges(ranges: Sequence[Range]) -> list[sint]:
    return [x for pair in ranges for x in pair]
