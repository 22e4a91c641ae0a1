"""Fusion legality ("may these fuse?"): pure predicates of the graph and the current realizes
(fast/engine/fusion.py's docstring lists them; its `choose_realizes` is the policy that uses them).
  - `is_expanding_view`, `has_pad_mask`, `is_identity_view`, `is_row_broadcast`, `is_broadcast_of`:
    properties of one edge;
  - `op_keeps_zero`, `pad_is_safe`: may a base be computed through a pad mask;
  - `reduce_fusion_target`: the one kernel a reduce may join (a `Placement`), or None;
  - `row_computable`: may a base read through a row broadcast be computed in the row kernel.

Invariant: every function here reads the graph and the realizes it is given and mutates nothing.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fast.engine.fusion_graph import ELEMENTWISE, Graph, is_const_base, is_unrealized
from fast.ops import (
    UNARY_BITCAST,
    UNARY_CAST,
    LoadOps,
    ReduceOps,
    TernaryOps,
    cast_const,
    exec_alu,
    normalize_const,
)

if TYPE_CHECKING:
    from fast.graph.node import LazyBuffer
    from fast.shape.shapetracker import ShapeTracker
    from fast.shape.symbolic import sint
    from fast.shape.view import View


# ---------------------------------------------------------------- legality: one edge

def _view_expands(view: View) -> bool:
    return any(stride == 0 and _extent(start, end) > 1
               for stride, (start, end) in zip(view.strides, view.ranges(), strict=True))


def _extent(start: sint, end: sint) -> int:
    if isinstance(start, int) and isinstance(end, int):
        return end - start
    return 2  # a symbolic extent may exceed 1


def is_expanding_view(st: ShapeTracker) -> bool:
    """True when some base element is read at more than one valid position: a stride-0 axis with more
    than one valid position, in any view of the stack (an expand hidden behind a reshape counts)."""
    return any(_view_expands(view) for view in st.views)


def has_pad_mask(st: ShapeTracker) -> bool:
    """True when any view of the stack is masked (View.create drops masks that cover everything)."""
    return any(view.mask is not None for view in st.views)


def is_identity_view(view: LazyBuffer, base: LazyBuffer) -> bool:
    """The view reads every element of `base` once, in order (a reshape at most)."""
    return view is base or (view.st.contiguous and view.size == base.size)


def is_row_broadcast(view: LazyBuffer, base: LazyBuffer) -> bool:
    """The view is `base` expanded along its size-1 axes and nothing else (a reduced row read back
    at every position of the row): `from_shape(base.shape).expand(view.shape)`, unmasked."""
    return view is not base and is_broadcast_of(view.st, base.shape)


def is_broadcast_of(st: ShapeTracker, shape: tuple[sint, ...]) -> bool:
    """`st` is exactly `shape` expanded along some of its size-1 axes (at least one)."""
    if len(st.shape) != len(shape) or st.shape == shape \
            or any(old != new and old != 1 for old, new in zip(shape, st.shape, strict=True)):
        return False
    return _expanded_from(st, shape)


@functools.lru_cache(maxsize=4096)
def _expanded_from(st: ShapeTracker, shape: tuple[sint, ...]) -> bool:
    """`st == from_shape(shape).expand(st.shape)` (memoized: a schedule asks it of the same views
    in every round of `_assign_reduces`; trackers are immutable values)."""
    from fast.shape.shapetracker import ShapeTracker
    return st == ShapeTracker.from_shape(shape).expand(st.shape)


# ---------------------------------------------------------------- legality: pads

def _is_positive_zero(value: object) -> bool:
    if isinstance(value, float):
        return value == 0.0 and math.copysign(1.0, value) > 0
    return value is not None and not isinstance(value, float) and value == 0


def op_keeps_zero(base: LazyBuffer) -> bool:
    """Whether the base's op maps all-zero operands to +0 (bit-exact), per docs/semantics.md.

    Evaluated with the exact scalar evaluator, so it is right for every op x dtype. The result:
    unsafe are EXP2 (1), LOG2 (-inf), float DIV (0/0 = NaN), CMPEQ (0 == 0 is True) and float NEG
    (-0.0: later DIVs would give -inf where +inf belongs). Safe are ADD SUB MUL MAX MOD XOR
    MULACC, integer DIV (x/0 = 0) and NEG, CMPLT (0 < 0 is False), WHERE (False picks 0), SIN,
    SQRT, CAST (0 -> 0, 0.0, False) and BITCAST (all-zero bits). Loads, constants and reduces are
    leaves or kernel boundaries here: they read through the mask themselves, so they give 0.
    """
    op = base.op
    if not isinstance(op, ELEMENTWISE):
        return True
    if op is UNARY_BITCAST:
        return True
    operand_dtype = base.srcs[-1].dtype
    zero = normalize_const(0, operand_dtype)
    try:
        if op is UNARY_CAST:
            return _is_positive_zero(cast_const(zero, operand_dtype, base.dtype))
        operands = (False, zero, zero) if op is TernaryOps.WHERE else (zero,) * len(base.srcs)
        return _is_positive_zero(exec_alu(op, operand_dtype, operands))
    except (TypeError, ValueError, ArithmeticError):
        return False


def pad_is_safe(base: LazyBuffer, realizes: Iterable[LazyBuffer] | set[LazyBuffer]) -> bool:
    """May `base` be computed inside a kernel that reads it through a pad mask?

    Inside such a kernel every leaf of base's fused subgraph (loads and constants) is read through
    the mask, so at padded positions all leaves are 0; the result must then be the 0 that the pad
    promises, so every fused op must keep zero. The walk stops at realized bases, `realizes` and
    reduces (a reduce is never fused through a pad: its consumers must read it contiguously).
    """
    boundary = set(realizes)
    seen: set[LazyBuffer] = set()
    stack = [base]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node is not base and (node.realized is not None or node in boundary):
            continue
        if isinstance(node.op, ReduceOps) or isinstance(node.op, LoadOps):
            continue
        if not op_keeps_zero(node):
            return False
        stack.extend(src.base for src in node.srcs if is_unrealized(src))
    return True


# ---------------------------------------------------------------- legality: reduces

@dataclass(frozen=True)
class Placement:
    """The kernel output a reduce is computed for; `row`: the kernel iterates the reduce's input
    shape (the reduce is read back broadcast along its rows, possibly with other reduces of the
    same rows), else it iterates the reduce's output shape."""

    target: LazyBuffer
    row: bool


def _edge_kind(view: LazyBuffer, node: LazyBuffer, full: tuple[sint, ...]) -> str | None:
    """How a consumer reads `node` inside a reduce's kernel: "identity", "same" (identity without
    a reshape, allowed in row kernels), "broadcast" (a row broadcast to `full`), or None."""
    if view is node or (view.shape == node.shape and is_identity_view(view, node)):
        return "same"
    if is_identity_view(view, node):
        return "identity"
    return "broadcast" if is_row_broadcast(view, node) and view.shape == full else None


def reduce_fusion_target(reduce: LazyBuffer, graph: Graph, realizes: set[LazyBuffer]) -> Placement | None:
    """The one kernel output whose kernel may compute `reduce`, or None when there is none.

    Legal when every path from the reduce to a kernel output runs through unrealized elementwise
    bases (or, in a row kernel, reduces of the same rows) and all those paths end at one output.
    Each edge reads its predecessor by identity, or broadcasts a reduced row back over the reduce's
    input shape; with a broadcast the kernel is a row kernel: its output has that input shape and
    no edge on the way reshapes. A reduce that is itself in `realizes` is its own kernel.
    """
    if reduce in realizes:
        return Placement(reduce, False)
    full = reduce.srcs[0].shape
    kinds: set[str | None] = set()
    targets: set[LazyBuffer] = set()
    seen: set[LazyBuffer] = set()
    stack = [reduce]
    while stack:
        node = stack.pop()
        for consumer, views in graph.readers.get(node, {}).items():
            kinds.update(_edge_kind(view, node, full) for view in views)
            if None in kinds:
                return None
            if consumer in realizes:
                if isinstance(consumer.op, ReduceOps):
                    return None
                targets.add(consumer)
            elif isinstance(consumer.op, ReduceOps):
                if consumer.arg != reduce.arg or consumer.srcs[0].shape != full:
                    return None
                kinds.add("broadcast")  # a second reduce over the same rows: only a row kernel holds both
                if consumer not in seen:
                    seen.add(consumer)
                    stack.append(consumer)
            elif not isinstance(consumer.op, ELEMENTWISE):
                return None
            elif consumer not in seen:
                seen.add(consumer)
                stack.append(consumer)
    if len(targets) != 1:
        return None
    target, row = next(iter(targets)), "broadcast" in kinds
    if row and ("identity" in kinds or target.shape != full):
        return None
    return Placement(target, row)


def row_computable(base: LazyBuffer, graph: Graph, realizes: set[LazyBuffer]) -> bool:
    """May `base`, read through a row broadcast, be computed inside the reading kernel? Yes when its
    unrealized subgraph is elementwise ops over same-shape reads that reach an unrealized reduce (the
    row kernel computes that reduce; everything else in it is cheap per row)."""
    reaches_reduce = False
    stack, seen = [base], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node.op, ReduceOps):
            reaches_reduce = True
            continue
        if node is not base and node in realizes:
            continue
        if not isinstance(node.op, ELEMENTWISE):
            return False
        for src in node.srcs:
            if is_unrealized(src) and not is_const_base(src.base):
                if src.shape != node.shape or not is_identity_view(src, src.base):
                    return False
                stack.append(src.base)
    return reaches_reduce
