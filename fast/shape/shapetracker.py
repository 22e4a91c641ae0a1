"""ShapeTracker: a stack of Views describing how a logical tensor reads a flat base buffer.

Invariants:
- ``views[0]`` indexes the base buffer; each later view indexes the row-major elements of the previous
  view's shape; ``shape`` is the last view's shape.
- movement ops rewrite the last view; ``reshape`` pushes a contiguous view when the last view cannot express
  it. After every op the last two views are merged while one view can express both.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

from fast.shape.sizes import Range, strides_for_shape
from fast.shape.symbolic import MulNode, Node, NumNode, SumNode, Variable, all_int, as_node, sint, sint_prod, sym_and
from fast.shape.view import View, is_symbolic


def _symbolic_view(view: View) -> bool:
    return is_symbolic(view.shape, view.strides, view.offset, view.mask)


def _concrete(arg: object) -> bool:
    """True when ``arg`` is a tuple of plain ints (no bools) or of tuples of plain ints: a movement
    argument that is safe as a memo key (a symbolic one is not: bound Variables compare equal whatever
    their value). A hot path: C-level passes only."""
    if type(arg) is not tuple:
        return False
    if all_int(arg):
        return True
    return _TUPLE_ONLY.issuperset(map(type, arg)) and all_int(chain.from_iterable(arg))  # type: ignore[arg-type]


_TUPLE_ONLY = frozenset({tuple})


def _make(views: tuple[View, ...]) -> ShapeTracker:
    """A tracker of ``views`` built without ``__post_init__``'s validation: for views this module made."""
    tracker = object.__new__(ShapeTracker)
    object.__setattr__(tracker, "views", views)
    return tracker


@functools.lru_cache(maxsize=8192)
def _memo_move(tracker: ShapeTracker, op: str, method: Any, arg: tuple[Any, ...]) -> ShapeTracker:
    """``tracker.<op>(arg)`` for a non-symbolic tracker and a ``_concrete`` argument. Trackers are
    immutable and such keys compare equal only when interchangeable, so the answer can be shared;
    errors are not cached (they are raised again on every call). ``method`` (``View.<op>``) is part
    of the key so that a replaced implementation (the debug tools plant bugs) is never hidden."""
    return getattr(tracker, "_" + op)(arg)  # type: ignore[no-any-return]


def _default_idxs(shape: Sequence[sint]) -> list[Node]:
    """One Variable ``idx{i}`` in ``[0, size - 1]`` per axis (NumNode(0) for axes of size 0 or 1)."""
    return [Variable(f"idx{i}", 0, as_node(size).max - 1) if as_node(size).max > 1 else NumNode(0)
            for i, size in enumerate(shape)]


def _unravel(flat: Node, shape: Sequence[sint]) -> list[Node]:
    """Row-major coordinates of ``flat`` in ``shape`` (the outermost coordinate is not wrapped)."""
    coordinates: list[Node] = []
    weight: sint = 1
    for axis in reversed(range(len(shape))):
        size = shape[axis]
        if size == 1:
            coordinates.append(NumNode(0))
        else:
            coordinate = flat // weight
            coordinates.append(coordinate if axis == 0 else coordinate % size)
        weight = weight * size
    return coordinates[::-1]


@dataclass(frozen=True)
class ShapeTracker:
    """An immutable, hashable stack of views; see the module docstring."""

    views: tuple[View, ...]

    def __reduce__(self) -> tuple[type[ShapeTracker], tuple[tuple[View, ...]]]:
        """Pickled by its views (cached hashes and flags are per process)."""
        return (ShapeTracker, (self.views,))

    def __hash__(self) -> int:
        """Cached: trackers key the lazy graph's weak cache on every node built (the fast path is one
        attribute read; the first call computes it)."""
        try:
            return self._hash  # type: ignore[attr-defined,no-any-return]
        except AttributeError:
            object.__setattr__(self, "_hash", hash(self.views))
            return self._hash  # type: ignore[attr-defined,no-any-return]

    @property
    def symbolic(self) -> bool:
        """Whether any view holds a symbolic value (shape, stride, offset or mask); cached."""
        try:
            return self._symbolic  # type: ignore[attr-defined,no-any-return]
        except AttributeError:
            object.__setattr__(self, "_symbolic", any(_symbolic_view(view) for view in self.views))
            return self._symbolic  # type: ignore[attr-defined,no-any-return]

    def __post_init__(self) -> None:
        if not isinstance(self.views, tuple) or not self.views or not all(isinstance(v, View) for v in self.views):
            raise TypeError(f"ShapeTracker: views must be a non-empty tuple of View, got {self.views!r}")

    @staticmethod
    def from_shape(shape: Sequence[sint]) -> ShapeTracker:
        """A contiguous tracker over a buffer of ``shape``."""
        return _make((View.create(tuple(shape)),))

    @property
    def shape(self) -> tuple[sint, ...]:
        return self.views[-1].shape

    @property
    def size(self) -> sint:
        """The number of elements (an int whenever it is constant); cached."""
        try:
            return self._size  # type: ignore[attr-defined,no-any-return]
        except AttributeError:
            object.__setattr__(self, "_size", sint_prod(self.shape))
            return self._size  # type: ignore[attr-defined,no-any-return]

    @property
    def contiguous(self) -> bool:
        """One view reading the buffer in order from element 0."""
        return len(self.views) == 1 and self.views[0].contiguous

    @property
    def consecutive(self) -> bool:
        """One unmasked view whose elements are a consecutive range of the buffer (any offset)."""
        view = self.views[-1]
        return len(self.views) == 1 and view.mask is None and view.strides == strides_for_shape(view.shape)

    def real_size(self) -> int:
        """An upper bound on ``1 + max index`` read at valid positions (exact for one view); 0 if none is valid."""
        if any(size == 0 for size in self.shape) or self.views[0].all_invalid:
            return 0
        if len(self.views) > 1 and self.expr_idxs()[1] == 0:
            return 0
        view = self.views[0]
        highest = as_node(view.offset)
        for stride, (start, end) in zip(view.strides, view.ranges(), strict=True):
            highest = highest + (stride * (end - 1) if as_node(stride).min >= 0 else stride * start)
        return highest.max + 1

    def vars(self) -> set[Variable]:
        """Every Variable in every view."""
        return set().union(*(view.vars() for view in self.views))

    def unbind(self) -> tuple[ShapeTracker, dict[Variable, int]]:
        """This tracker with unbound variables, plus the values the bound ones carried."""
        pairs = [view.unbind() for view in self.views]
        values: dict[Variable, int] = {}
        for _, bound in pairs:
            values.update(bound)
        return ShapeTracker(tuple(view for view, _ in pairs)), values

    @property
    def var_vals(self) -> dict[Variable, int]:
        """The values of the bound variables."""
        return self.unbind()[1]

    def _replace_last(self, view: View) -> ShapeTracker:
        if len(self.views) == 1:
            return _make((view,))
        return _make((*self.views[:-1], view)).simplify()

    # Movement ops: memoised (``_memo_move``) for non-symbolic trackers and plain-int arguments.

    def pad(self, arg: Sequence[Range]) -> ShapeTracker:
        return _memo_move(self, "pad", View.pad, arg) if _concrete(arg) and not self.symbolic else self._pad(arg)

    def _pad(self, arg: Sequence[Range]) -> ShapeTracker:
        return self._replace_last(self.views[-1].pad(arg))

    def shrink(self, arg: Sequence[Range]) -> ShapeTracker:
        if _concrete(arg) and not self.symbolic:
            return _memo_move(self, "shrink", View.shrink, arg)
        return self._shrink(arg)

    def _shrink(self, arg: Sequence[Range]) -> ShapeTracker:
        return self._replace_last(self.views[-1].shrink(arg))

    def expand(self, new_shape: Sequence[sint]) -> ShapeTracker:
        if _concrete(new_shape) and not self.symbolic:
            return _memo_move(self, "expand", View.expand, new_shape)
        return self._expand(new_shape)

    def _expand(self, new_shape: Sequence[sint]) -> ShapeTracker:
        return self._replace_last(self.views[-1].expand(new_shape))

    def permute(self, order: Sequence[int]) -> ShapeTracker:
        if _concrete(order) and not self.symbolic:
            return _memo_move(self, "permute", View.permute, order)
        return self._permute(order)

    def _permute(self, order: Sequence[int]) -> ShapeTracker:
        return self._replace_last(self.views[-1].permute(order))

    def stride(self, steps: Sequence[int]) -> ShapeTracker:
        if _concrete(steps) and not self.symbolic:
            return _memo_move(self, "stride", View.stride, steps)
        return self._stride(steps)

    def _stride(self, steps: Sequence[int]) -> ShapeTracker:
        return self._replace_last(self.views[-1].stride(steps))

    def reshape(self, new_shape: Sequence[sint]) -> ShapeTracker:
        """Reshape the last view, or push a contiguous view over it; then merge views where possible."""
        if _concrete(new_shape) and not self.symbolic:
            return _memo_move(self, "reshape", View.reshape, new_shape)
        return self._reshape(new_shape)

    def _reshape(self, new_shape: Sequence[sint]) -> ShapeTracker:
        reshaped = self.views[-1].reshape(new_shape)
        if reshaped is not None:
            return self._replace_last(reshaped)
        return _make((*self.views, View.create(tuple(new_shape)))).simplify()

    def simplify(self) -> ShapeTracker:
        """Merge the last two views while one view can express them."""
        tracker = self
        while len(tracker.views) >= 2 and (merged := tracker.views[-2] + tracker.views[-1]) is not None:
            tracker = _make((*tracker.views[:-2], merged))
        return tracker

    def __add__(self, other: ShapeTracker) -> ShapeTracker:
        """The tracker applying ``other``'s views to the row-major elements of this tracker."""
        if not isinstance(other, ShapeTracker):
            return NotImplemented
        tracker = self
        for view in other.views:
            tracker = _make((*tracker.views, view)).simplify()
        return tracker

    def invert(self, out_shape: Sequence[sint]) -> ShapeTracker | None:
        """A tracker over this tracker's output that yields the base elements in ``out_shape``, or None."""
        shapes = [view.shape for view in self.views[-2::-1]] + [tuple(out_shape)]
        inverses = [view.invert(shape) for view, shape in zip(self.views[::-1], shapes, strict=True)]
        if any(inverse is None for inverse in inverses):
            return None
        return ShapeTracker(tuple(v for v in inverses if v is not None)).reshape(tuple(out_shape))

    def expr_idxs(self, idxs: Sequence[Node] | None = None) -> tuple[Node, Node]:
        """(base buffer index, validity) at position ``idxs`` (default: Variables ``idx0..``)."""
        idxs = _default_idxs(self.shape) if idxs is None else list(idxs)
        if len(idxs) != len(self.shape):
            raise ValueError(f"expr_idxs: expected {len(self.shape)} indices for shape {self.shape}, got {len(idxs)}")
        if any(size == 0 for size in self.shape):
            return NumNode(0), NumNode(0)
        index, valid = self.views[-1].expr(idxs)
        return self._expr_below(index, valid, len(self.views) - 1)

    def expr_node(self, flat_idx: Node | None = None) -> tuple[Node, Node]:
        """(base buffer index, validity) at the row-major flat position ``flat_idx`` (default: Variable ``idx``)."""
        if any(size == 0 for size in self.shape):
            return NumNode(0), NumNode(0)
        if flat_idx is None:
            highest = as_node(self.size).max - 1
            flat_idx = Variable("idx", 0, highest) if highest > 0 else NumNode(0)
        index, valid = self.views[-1].expr(_unravel(flat_idx, self.shape))
        return self._expr_below(index, valid, len(self.views) - 1)

    def _expr_below(self, index: Node, valid: Node, level: int) -> tuple[Node, Node]:
        """Push ``index`` (a flat position in ``views[level]``'s input) down through the earlier views."""
        for view in reversed(self.views[:level]):
            if any(size == 0 for size in view.shape):
                return NumNode(0), NumNode(0)
            index, inner_valid = view.expr(_unravel(index, view.shape))
            valid = sym_and([valid, inner_valid])
        return index, valid

    def real_strides(self, ignore_valid: bool = False) -> tuple[sint | None, ...]:
        """Stride of each axis in the base buffer; None where it is not a plain stride (or masked, unless
        ``ignore_valid``)."""
        last = self.views[-1]
        if len(self.views) == 1 and last.mask is None:
            return last.strides
        idxs = _default_idxs(self.shape)
        index, valid = self.expr_idxs(idxs)
        found: dict[Node, sint] = {}
        unusable: set[Variable] = set()
        for term in index.nodes if isinstance(index, SumNode) else (index,):
            base, factor = (term.a, term.b) if isinstance(term, MulNode) else (term, 1)
            if isinstance(base, Variable) and base not in found and base in idxs:
                found[base] = factor.b if isinstance(factor, NumNode) else factor
            else:
                unusable |= term.vars()
        strides: list[sint | None] = []
        for idx in idxs:
            if not isinstance(idx, Variable):
                strides.append(0)
            elif idx in unusable or (not ignore_valid and idx in valid.vars()):
                strides.append(None)
            else:
                strides.append(found.get(idx, 0))
        return tuple(strides)

    def unit_stride_axes(self, ignore_valid: bool = False) -> list[int]:
        """Axes whose real stride is exactly 1."""
        return [axis for axis, stride in enumerate(self.real_strides(ignore_valid)) if stride == 1]

    def axis_is_masked(self, axis: int) -> bool:
        """True when validity depends on the position along ``axis``."""
        idxs = _default_idxs(self.shape)
        _, valid = self.expr_idxs(idxs)
        return isinstance(idxs[axis], Variable) and idxs[axis] in valid.vars()
