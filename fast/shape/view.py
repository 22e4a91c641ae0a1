"""View: one strided, offset, masked window onto a flat buffer.

Invariants (kept by ``View.create``, the only constructor code should use):
- position ``p`` is valid iff ``mask[a][0] <= p[a] < mask[a][1]`` on every axis (always, when ``mask`` is None);
  a valid position reads buffer element ``offset + sum(p[a] * strides[a])``.
- size-1 axes have stride 0; a mask covering everything is None; a mask that is single-valued on an axis has
  that axis's stride folded into ``offset``; a view with an empty mask range is "all invalid": strides 0,
  offset 0 and every mask range ``(0, 0)``.
- ``contiguous`` is True exactly when offset is 0, there is no mask and the strides are C-contiguous.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from fast.shape.sizes import (
    Range,
    add_sizes,
    compare,
    definitely_less,
    flatten_ranges,
    ints_or_none,
    is_empty,
    match_groups,
    merge_group,
    restrict,
    smax,
    smin,
    split_range,
    strides_for_shape,
    suffix_products,
    unravel,
)
from fast.shape.symbolic import Node, Variable, as_sint, is_sint, sint, sint_prod, sym_and, sym_sum


def _check_shape(op: str, shape: Sequence[sint]) -> tuple[sint, ...]:
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"{op}: shape must be a tuple of sizes, got {shape!r}")
    for size in shape:
        if not is_sint(size):
            raise TypeError(f"{op}: sizes must be int or Node, got {size!r} in {shape}")
        if isinstance(size, int) and size < 0:
            raise ValueError(f"{op}: sizes must be non-negative, got {shape}")
    return tuple(as_sint(size) for size in shape)


def _check_arity(op: str, argument: object, shape: tuple[sint, ...]) -> None:
    if not isinstance(argument, (tuple, list)) or len(argument) != len(shape):
        raise ValueError(f"{op}: expected {len(shape)} entries for shape {shape}, got {argument!r}")


def _check_pairs(op: str, argument: Sequence[Range], shape: tuple[sint, ...]) -> tuple[Range, ...]:
    _check_arity(op, argument, shape)
    for pair in argument:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(is_sint(x) for x in pair):
            raise TypeError(f"{op}: entries must be pairs of sizes, got {pair!r} in {argument!r}")
    return tuple((as_sint(start), as_sint(end)) for start, end in argument)


def _canonical(shape: tuple[sint, ...], strides: tuple[sint, ...], offset: sint,
               mask: tuple[Range, ...] | None) -> View:
    strides = tuple(0 if size == 1 else as_sint(stride) for size, stride in zip(shape, strides, strict=True))
    if mask is not None:
        if any(is_empty(start, end) for start, end in mask):
            return View(shape, (0,) * len(shape), 0, ((0, 0),) * len(shape), False)
        if all(start == 0 and end == size for (start, end), size in zip(mask, shape, strict=True)):
            mask = None
        else:
            single = [compare(end - start, 1) == 0 for start, end in mask]
            folded = (start * stride for (start, _), stride, one in zip(mask, strides, single, strict=True) if one)
            offset = add_sizes([offset, *folded])
            strides = tuple(0 if one else stride for stride, one in zip(strides, single, strict=True))
    contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
    return View(shape, strides, offset, mask, contiguous)


_create_cached = functools.lru_cache(maxsize=8192)(_canonical)


def is_symbolic(*values: object) -> bool:
    """True when any (nested) value is a Node; such views bypass the cache since bound variables compare equal."""
    return any(is_symbolic(*v) if isinstance(v, tuple) else isinstance(v, Node) for v in values)


@dataclass(frozen=True)
class View:
    """See the module docstring for the invariants; build with ``View.create``."""

    shape: tuple[sint, ...]
    strides: tuple[sint, ...]
    offset: sint
    mask: tuple[Range, ...] | None
    contiguous: bool

    def __hash__(self) -> int:
        """Cached (views are immutable and shared through the creation cache)."""
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.shape, self.strides, self.offset, self.mask, self.contiguous))
            object.__setattr__(self, "_hash", cached)
        return cached

    @staticmethod
    def create(shape: Sequence[sint], strides: Sequence[sint] | None = None, offset: sint = 0,
               mask: Sequence[Range] | None = None) -> View:
        """The canonical view; default strides are C-contiguous."""
        shape = _check_shape("View.create", shape)
        stride_tuple = strides_for_shape(shape) if strides is None else tuple(as_sint(s) for s in strides)
        mask_tuple = None if mask is None else tuple((as_sint(b), as_sint(e)) for b, e in mask)
        if len(stride_tuple) != len(shape) or (mask_tuple is not None and len(mask_tuple) != len(shape)):
            raise ValueError(f"View.create: shape {shape}, strides {strides} and mask {mask} disagree in length")
        arguments = (shape, stride_tuple, as_sint(offset), mask_tuple)
        return _canonical(*arguments) if is_symbolic(*arguments) else _create_cached(*arguments)

    @property
    def all_invalid(self) -> bool:
        """True when the mask leaves no valid position."""
        return self.mask is not None and any(is_empty(start, end) for start, end in self.mask)

    def ranges(self) -> tuple[Range, ...]:
        """The valid range of every axis (the mask, or the full axes)."""
        return self.mask if self.mask is not None else tuple((0, size) for size in self.shape)

    def vars(self) -> set[Variable]:
        """Every Variable in the shape, strides, offset and mask."""
        values = [*self.shape, *self.strides, self.offset, *(x for pair in self.ranges() for x in pair)]
        return set().union(*(v.vars() for v in values if isinstance(v, Node)))

    def unbind(self) -> tuple[View, dict[Variable, int]]:
        """This view with bound variables replaced by unbound ones, plus their values."""
        bound = dict(var.unbind() for var in self.vars() if var._val is not None)
        if not bound:
            return self, {}
        mapping: dict[Variable, Node | int] = {var: var for var in bound}

        def replace(value: sint) -> sint:
            return as_sint(value.substitute(mapping)) if isinstance(value, Node) else value

        mask = None if self.mask is None else tuple((replace(b), replace(e)) for b, e in self.mask)
        return View.create(tuple(map(replace, self.shape)), tuple(map(replace, self.strides)),
                           replace(self.offset), mask), bound

    def expr(self, idxs: Sequence[Node]) -> tuple[Node, Node]:
        """(buffer index, validity) of position ``idxs``; validity is nonzero exactly at valid positions."""
        terms = [idx * stride for idx, stride in zip(idxs, self.strides, strict=True) if stride != 0]
        conditions: list[Node] = []
        for idx, (start, end), size in zip(idxs, self.ranges(), self.shape, strict=True):
            if start != 0:
                conditions.append(idx >= start)
            if end != size:
                conditions.append(idx < end)
        return sym_sum([self.offset, *terms]), sym_and(conditions)

    def _resize(self, ranges: tuple[Range, ...], pad_mask: tuple[Range, ...] | None = None) -> View:
        """Window ``[start, end)`` of every axis (starts may be negative and ends past the size when padding)."""
        shape = tuple(end - start for start, end in ranges)
        if self.all_invalid:
            return View.create(shape, mask=((0, 0),) * len(shape))
        shifts = (start * stride for (start, _), stride in zip(ranges, self.strides, strict=True))
        offset = add_sizes([self.offset, *shifts])
        mask = pad_mask
        if self.mask is not None:
            bounds = pad_mask if pad_mask is not None else tuple((0, size) for size in shape)
            mask = tuple((smax(b - start, low), smin(e - start, high)) for (b, e), (start, _), (low, high)
                         in zip(self.mask, ranges, bounds, strict=True))
        return View.create(shape, self.strides, offset, mask)

    def pad(self, arg: Sequence[Range]) -> View:
        """Surround every axis with ``(before, after)`` invalid positions."""
        pairs = _check_pairs("pad", arg, self.shape)
        if any(definitely_less(x, 0) for pair in pairs for x in pair):
            raise ValueError(f"pad: amounts must be non-negative, got {arg!r}")
        if all(before == 0 and after == 0 for before, after in pairs):
            return self
        sizes = zip(pairs, self.shape, strict=True)
        ranges = tuple((-before, size + after) for (before, after), size in sizes)
        return self._resize(ranges, tuple((b, size + b) for (b, _), size in zip(pairs, self.shape, strict=True)))

    def shrink(self, arg: Sequence[Range]) -> View:
        """Keep ``[start, end)`` of every axis; requires ``0 <= start <= end <= size``."""
        pairs = _check_pairs("shrink", arg, self.shape)
        for (start, end), size in zip(pairs, self.shape, strict=True):
            if definitely_less(start, 0) or definitely_less(end, start) or definitely_less(size, end):
                raise ValueError(f"shrink: need 0 <= start <= end <= size, got {arg!r} for shape {self.shape}")
        if all(start == 0 and end == size for (start, end), size in zip(pairs, self.shape, strict=True)):
            return self
        return self._resize(pairs)

    def expand(self, new_shape: Sequence[sint]) -> View:
        """Broadcast size-1 axes to new sizes; every other axis keeps its size."""
        new_shape = _check_shape("expand", new_shape)
        _check_arity("expand", new_shape, self.shape)
        if any(old != new and old != 1 for old, new in zip(self.shape, new_shape, strict=True)):
            raise ValueError(f"expand: only size-1 axes can change, got {self.shape} -> {new_shape}")
        mask = None
        if self.mask is not None:
            mask = tuple((0, new) if old != new and (start, end) == (0, 1) else (start, end)
                         for (start, end), old, new in zip(self.mask, self.shape, new_shape, strict=True))
        return View.create(new_shape, self.strides, self.offset, mask)

    def permute(self, order: Sequence[int]) -> View:
        """Reorder the axes: axis ``a`` of the result is axis ``order[a]`` of this view."""
        if not isinstance(order, (tuple, list)) or not all(isinstance(a, int) for a in order):
            raise TypeError(f"permute: order must be a tuple of ints, got {order!r}")
        if sorted(order) != list(range(len(self.shape))):
            raise ValueError(f"permute: {order!r} is not a permutation of the {len(self.shape)} axes")
        mask = None if self.mask is None else tuple(self.mask[a] for a in order)
        return View.create(tuple(self.shape[a] for a in order), tuple(self.strides[a] for a in order),
                           self.offset, mask)

    def stride(self, steps: Sequence[int]) -> View:
        """Keep every ``|k|``-th element of each axis, flipping the axis first when ``k < 0``."""
        _check_arity("stride", steps, self.shape)
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in steps):
            raise TypeError(f"stride: steps must be ints, got {steps!r}")
        if any(k == 0 for k in steps):
            raise ValueError(f"stride: steps must be nonzero, got {steps!r}")
        offset: sint = self.offset
        shape, strides, mask = [], [], []
        for k, size, stride, (start, end) in zip(steps, self.shape, self.strides, self.ranges(), strict=True):
            if k < 0:
                offset = offset + (size - 1) * stride
                start, end = size - end, size - start
            shape.append(-(-size // abs(k)))
            strides.append(stride * k)
            mask.append((-(-start // abs(k)), -(-end // abs(k))))
        return View.create(shape, strides, offset, mask if self.mask is not None else None)

    def reshape(self, new_shape: Sequence[sint]) -> View | None:
        """The same elements in row-major order under ``new_shape``, or None when one view cannot express it."""
        new_shape = _check_shape("reshape", new_shape)
        if new_shape == self.shape:
            return self
        if compare(sint_prod(self.shape), sint_prod(new_shape)) != 0:
            raise ValueError(f"reshape: cannot reshape {self.shape} to {new_shape}: element counts differ"
                             " (or cannot be proven equal)")
        if any(size == 0 for size in self.shape) or self.contiguous:
            return View.create(new_shape)
        if self.all_invalid:
            return View.create(new_shape, mask=((0, 0),) * len(new_shape)) if new_shape else None
        return _reshape_strided(self, new_shape)

    def minify(self) -> View:
        """An equivalent view (same flat order) with size-1 axes dropped and mergeable axes merged."""
        axes = [a for a, size in enumerate(self.shape) if size != 1]
        ranges = self.ranges()
        shape: list[sint] = []
        for previous, axis in zip([None, *axes], axes, strict=False):
            if previous is not None and ranges[previous] == (0, self.shape[previous]) \
                    and ranges[axis] == (0, self.shape[axis]) \
                    and compare(self.strides[previous], self.strides[axis] * self.shape[axis]) == 0:
                shape[-1] = shape[-1] * self.shape[axis]
            else:
                shape.append(self.shape[axis])
        return self.reshape(tuple(shape)) or self

    def __add__(self, other: View) -> View | None:
        """The single view equal to applying ``other`` to the row-major elements of ``self``, or None."""
        if not isinstance(other, View):
            return NotImplemented
        if self.contiguous:
            return other
        if any(size == 0 for size in other.shape):
            return View.create(other.shape)
        if other.contiguous and compare(sint_prod(other.shape), sint_prod(self.shape)) == 0:
            return self.reshape(other.shape)
        if self.all_invalid or other.all_invalid:
            return View.create(other.shape, mask=((0, 0),) * len(other.shape)) if other.shape else None
        base = self.minify()
        if is_symbolic(base.shape, base.strides, base.offset, base.mask, other.shape, other.strides, other.offset,
                     other.mask):
            return None
        return _compose(base, other)

    def invert(self, out_shape: Sequence[sint]) -> View | None:
        """A view over this view's output that yields the ``out_shape`` base elements in order, or None.

        Possible only when the valid region maps one-to-one onto the whole base (permutes, flips, pads)."""
        shape, strides = ints_or_none(self.shape), ints_or_none(self.strides)
        ranges = ints_or_none(flatten_ranges(self.ranges()))
        out = ints_or_none(out_shape)
        if shape is None or strides is None or ranges is None or out is None or not isinstance(self.offset, int):
            return None
        starts, ends = ranges[0::2], ranges[1::2]
        order = sorted(range(len(shape)), key=lambda a: -abs(strides[a]))
        expected = 1
        for axis in reversed([a for a in order if ends[a] - starts[a] != 1]):
            if abs(strides[axis]) != expected:
                return None
            expected *= ends[axis] - starts[axis]
        lowest = self.offset + sum(min(st * b, st * (e - 1)) for st, b, e in zip(strides, starts, ends, strict=True))
        if expected != sint_prod(out) or lowest != 0 or self.all_invalid:
            return None
        flips = tuple(-1 if st < 0 else 1 for st in strides)
        return View.create(shape).shrink(tuple(zip(starts, ends, strict=True))).stride(flips).permute(order)


def _reshape_strided(view: View, new_shape: tuple[sint, ...]) -> View | None:
    """Reshape by merging each group of old axes into one axis and splitting it into the new axes."""
    old_axes = [a for a, size in enumerate(view.shape) if size != 1]
    new_axes = [a for a, size in enumerate(new_shape) if size != 1]
    groups = match_groups([view.shape[a] for a in old_axes], [new_shape[a] for a in new_axes])
    if groups is None:
        return None
    strides: list[sint] = [0] * len(new_shape)
    ranges: list[Range] = [(0, size) for size in new_shape]
    offset, old_ranges = view.offset, view.ranges()
    for old_group, new_group in groups:
        olds, news = old_axes[old_group], new_axes[new_group]
        merged = merge_group([view.shape[a] for a in olds], [view.strides[a] for a in olds],
                              [old_ranges[a] for a in olds])
        if merged is None:
            return None
        stride, (start, end), correction = merged
        sizes = [new_shape[a] for a in news]
        split: list[Range] | None = [(0, size) for size in sizes] if len(sizes) > 1 else [(start, end)]
        if len(sizes) > 1 and (compare(start, 0) != 0 or compare(end, sint_prod(sizes)) != 0):
            int_sizes = ints_or_none(sizes)
            split = None if int_sizes is None or not isinstance(start, int) or not isinstance(end, int) \
                else split_range(start, end, int_sizes)
        if split is None:
            return None
        for axis, weight, axis_range in zip(news, suffix_products(sizes), split, strict=True):
            strides[axis], ranges[axis] = stride * weight, axis_range
        offset = offset + correction
    return View.create(new_shape, strides, offset, ranges if view.mask is not None else None)


def _compose(base: View, top: View) -> View | None:
    """``base + top`` for concrete views: take the base coordinates of top's first valid element and the
    coordinate step of each top axis, check that no carry happens anywhere in top's valid box, then let
    base's mask restrict single top axes."""
    shape, base_strides, top_strides = ints_or_none(base.shape), ints_or_none(base.strides), ints_or_none(top.strides)
    top_flat, base_flat = ints_or_none(flatten_ranges(top.ranges())), ints_or_none(flatten_ranges(base.ranges()))
    offsets = ints_or_none([top.offset, base.offset])
    if shape is None or base_strides is None or top_strides is None or top_flat is None or base_flat is None \
            or offsets is None:
        return None
    starts, lengths = top_flat[0::2], [end - start for start, end in zip(top_flat[0::2], top_flat[1::2], strict=True)]
    first = offsets[0] + sum(b * st for b, st in zip(starts, top_strides, strict=True))
    if not 0 <= first < math.prod(shape):
        return None
    origin = unravel(first, shape)
    deltas = [[0] * len(shape) if n < 2 or not 0 <= first + st < math.prod(shape) else
              [b - a for a, b in zip(origin, unravel(first + st, shape), strict=True)]
              for st, n in zip(top_strides, lengths, strict=True)]
    if any(n > 1 and st != 0 and not any(d) for st, n, d in zip(top_strides, lengths, deltas, strict=True)):
        return None
    strides = [sum(bs * d for bs, d in zip(base_strides, delta, strict=True)) for delta in deltas]
    offset = offsets[1] + sum(bs * o for bs, o in zip(base_strides, origin, strict=True)) \
        - sum(b * st for b, st in zip(starts, strides, strict=True))
    ranges = restrict(shape, list(zip(base_flat[0::2], base_flat[1::2], strict=True)), origin, deltas, starts, lengths)
    return None if ranges is None else View.create(top.shape, strides, offset, ranges)
