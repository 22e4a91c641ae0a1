"""Fusion: which lazy bases get a buffer of their own in a schedule, and which reduce each kernel holds.

The unit of decision is a *base* (a `LazyBuffer` with `lb.base is lb`). A base that is realized
already, or that is chosen here ("realizes"), is a kernel boundary: kernels load it and one kernel
(or copy) stores it. Every other unrealized base is inlined into each kernel that reads it.

Legality ("may these fuse?") is a set of pure functions of the graph and the current realizes:
  - `is_expanding_view`, `has_pad_mask`, `is_identity_view`: properties of one edge;
  - `op_keeps_zero`, `pad_is_safe`: may a base be computed through a pad mask;
  - `reduce_fusion_target`: the one kernel a reduce may join, or None.
  - a GATHER reads both sources from buffers (they are realized); the gather itself is inlined into
    its readers like an elementwise op (a gathered LOAD), under the same expand and pad rules.
  - `is_row_broadcast`, `row_computable`: may a reduced row be read back along the row in-kernel.
Policy ("which fusion first?") lives in `choose_realizes`: fixed rules first (outputs, loads,
forced realizes, expands other than row broadcasts), then unsafe pads in topological order
(deepest first, so a shallower pad can fuse over a realized deeper one), then reduces in
topological order: a reduce joins its consumer's kernel when legal (a kernel holds any number of
reduces over the same rows; in a row kernel — softmax, layernorm — they are read back broadcast
along the row and the output has the rows' full shape); otherwise `chase_point` realizes the end of its single-consumer,
contiguous, elementwise chain, so those ops still share its kernel.

Invariants of the result (`Fusion`): every base in `realizes` is unrealized and in the graph; all
reduces of one kernel reduce the same axes of the same shape; in a plain kernel (`reduce_of` names
its first reduce) every path from a reduce to the output reads by identity; a row kernel's output
has the shape its reduces reduce; no
unrealized, non-constant base is read through an expanding view unless it is in `realizes` or is a
row broadcast of a row-computable base; every base read through a pad mask computes 0 from
all-zero leaves (`pad_is_safe`). Nothing is mutated.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fast.ops import (
    LOAD_ASSIGN,
    LOAD_CONST,
    LOAD_COPY,
    LOAD_CUSTOM,
    LOAD_VIEW,
    UNARY_BITCAST,
    UNARY_CAST,
    BinaryOps,
    GatherOps,
    LoadOps,
    ReduceOps,
    TernaryOps,
    UnaryOps,
    cast_const,
    exec_alu,
    normalize_const,
)

if TYPE_CHECKING:
    from fast.graph.node import LazyBuffer
    from fast.shape.shapetracker import ShapeTracker
    from fast.shape.symbolic import sint
    from fast.shape.view import View

ELEMENTWISE = (UnaryOps, BinaryOps, TernaryOps)
GATHER = GatherOps.GATHER
SOURCE_MUST_BE_REALIZED = frozenset({LOAD_COPY, LOAD_CUSTOM, LOAD_VIEW})


# ---------------------------------------------------------------- the graph

@dataclass
class Graph:
    """The unrealized bases reachable from the outputs.

    `order` lists them sources before users; `readers[b]` maps each consumer base of `b` to the
    distinct views (by ShapeTracker) through which it reads `b`, in source order.
    """

    outputs: list[LazyBuffer]
    order: list[LazyBuffer] = field(default_factory=list)
    readers: dict[LazyBuffer, dict[LazyBuffer, list[LazyBuffer]]] = field(default_factory=dict)

    def add_read(self, base: LazyBuffer, consumer: LazyBuffer, view: LazyBuffer) -> None:
        views = self.readers.setdefault(base, {}).setdefault(consumer, [])
        if all(known.st != view.st for known in views):
            views.append(view)


def is_unrealized(lb: LazyBuffer) -> bool:
    return lb.base.realized is None


def is_disk_assign(base: LazyBuffer) -> bool:
    """An ASSIGN into DISK: run as a byte copy of its value (DISK runs no kernels), so the value is a buffer."""
    return base.op is LOAD_ASSIGN and base.device.startswith("DISK:")


def is_const_base(base: LazyBuffer) -> bool:
    return base.op is LOAD_CONST and base.realized is None


def collect_graph(outs: Sequence[LazyBuffer]) -> Graph:
    """Walk the sources of `outs` (iteratively: graphs may be deep) down to realized bases."""
    graph = Graph([out.base for out in outs if is_unrealized(out)])
    state: dict[LazyBuffer, bool] = {}  # False: being visited, True: done
    stack: list[tuple[LazyBuffer, bool]] = [(base, False) for base in reversed(graph.outputs)]
    while stack:
        base, finished = stack.pop()
        if finished:
            state[base] = True
            graph.order.append(base)
            continue
        if base in state:
            continue
        state[base] = False
        stack.append((base, True))
        for src in reversed(base.srcs):
            if is_unrealized(src):
                graph.add_read(src.base, base, src)
                if src.base not in state:
                    stack.append((src.base, False))
    for readers in graph.readers.values():  # source order of consumers' reads, for determinism
        for views in readers.values():
            views.reverse()
    return graph


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


# ---------------------------------------------------------------- policy

def chase_point(reduce: LazyBuffer, graph: Graph, realizes: set[LazyBuffer]) -> LazyBuffer:
    """Where to realize a reduce that cannot join a consumer: the end of its chain of single
    consumers that are elementwise, not yet realized, and read their predecessor by identity."""
    node = reduce
    while True:
        consumers = graph.readers.get(node, {})
        if len(consumers) != 1:
            return node
        consumer, views = next(iter(consumers.items()))
        if consumer in realizes or not isinstance(consumer.op, ELEMENTWISE) or len(views) != 1 \
                or not is_identity_view(views[0], node):
            return node
        node = consumer


@dataclass(frozen=True)
class Fusion:
    """The decision: bases that get their own buffer (in graph order), and each kernel's reduce."""

    realizes: tuple[LazyBuffer, ...]
    reduce_of: dict[LazyBuffer, LazyBuffer]


def _fixed_realizes(graph: Graph) -> dict[LazyBuffer, None]:
    """Outputs (except plain constants), non-CONST loads, forced realizes, sources that must be
    buffers (COPY, CUSTOM, VIEW; both sources of a GATHER, even constants), and unrealized
    non-constant bases read through an expand."""
    realizes: dict[LazyBuffer, None] = {out: None for out in graph.outputs if not is_const_base(out)}
    for node in graph.order:
        if (isinstance(node.op, LoadOps) and node.op is not LOAD_CONST) or node.forced_realize:
            realizes[node] = None
        for src in node.srcs:
            if node.op is GATHER and is_unrealized(src):  # read from buffers, constants too (gather.py)
                realizes[src.base] = None
            if not is_unrealized(src) or is_const_base(src.base):
                continue
            if node.op in SOURCE_MUST_BE_REALIZED or is_disk_assign(node):
                realizes[src.base] = None
            elif is_expanding_view(src.st) and not (isinstance(node.op, ELEMENTWISE)
                                                    and is_row_broadcast(src, src.base)):
                realizes[src.base] = None
    return realizes


def _row_broadcasts(graph: Graph) -> list[LazyBuffer]:
    """Non-constant bases some node reads through a row broadcast, in graph order (`_assign_reduces`
    skips the realized ones each round: this does not depend on what is realized)."""
    found = []
    for base in graph.order:
        if is_const_base(base):
            continue
        if any(is_row_broadcast(view, base) for views in graph.readers.get(base, {}).values() for view in views):
            found.append(base)
    return found


def _unsafe_pads(graph: Graph, realizes: dict[LazyBuffer, None]) -> None:
    for node in graph.order:  # sources first: a realized deeper pad makes shallower ones safe
        for src in node.srcs:
            base = src.base
            if not is_unrealized(src) or is_const_base(base) or base in realizes or not has_pad_mask(src.st):
                continue
            if not pad_is_safe(base, realizes):
                realizes[base] = None


def _place_reduces(reduces: list[LazyBuffer], graph: Graph, chosen: set[LazyBuffer]
                   ) -> tuple[dict[LazyBuffer, LazyBuffer], LazyBuffer | None]:
    """Each reduce's kernel (reduce_of holds the first reduce of each plain kernel), or the first
    reduce that cannot join one. A kernel may hold several reduces, all over the same rows (same
    axes of the same input shape): a plain kernel stores at their output shape, a row kernel at
    their input shape."""
    reduce_of: dict[LazyBuffer, LazyBuffer] = {}
    rows: dict[LazyBuffer, LazyBuffer] = {}
    for reduce in reduces:
        placement = reduce_fusion_target(reduce, graph, chosen)
        if placement is None:
            return reduce_of, reduce
        kernels = rows if placement.row else reduce_of
        other = reduce_of if placement.row else rows
        first = kernels.setdefault(placement.target, reduce)
        if placement.target in other or first.arg != reduce.arg or first.srcs[0].shape != reduce.srcs[0].shape:
            return reduce_of, reduce
    return reduce_of, None


def _assign_reduces(graph: Graph, realizes: dict[LazyBuffer, None]) -> dict[LazyBuffer, LazyBuffer]:
    """Give each reduce a kernel, realizing chase points (and row broadcasts that no row kernel
    computes) until every kernel is legal. Each round adds one new base to `realizes`."""
    reduces = [node for node in graph.order if isinstance(node.op, ReduceOps)]
    broadcasts = [base for base in _row_broadcasts(graph) if not isinstance(base.op, ReduceOps)]
    while True:
        chosen = set(realizes)
        broadcast = next((base for base in broadcasts if base not in realizes
                          and not row_computable(base, graph, chosen)), None)
        if broadcast is not None:
            realizes[broadcast] = None
            continue
        reduce_of, conflict = _place_reduces(reduces, graph, chosen)
        if conflict is None:
            return reduce_of
        realizes[chase_point(conflict, graph, chosen)] = None


def choose_realizes(graph: Graph) -> Fusion:
    """Apply the rules of the module docstring; pure (reads the graph, mutates nothing)."""
    realizes = _fixed_realizes(graph)
    _unsafe_pads(graph, realizes)
    reduce_of = _assign_reduces(graph, realizes)
    ordered = tuple(node for node in graph.order if node in realizes)
    return Fusion(ordered, reduce_of)
