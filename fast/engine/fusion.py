"""Fusion: which lazy bases get a buffer of their own in a schedule, and which reduce each kernel holds.

The unit of decision is a *base* (a `LazyBuffer` with `lb.base is lb`). A base that is realized
already, or that is chosen here ("realizes"), is a kernel boundary: kernels load it and one kernel
(or copy) stores it. Every other unrealized base is inlined into each kernel that reads it.

The graph walk is fast/engine/fusion_graph.py, the legality predicates fast/engine/fusion_legality.py;
this module is the policy and re-exports both modules' names.

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

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fast.engine.fusion_graph import (
    ELEMENTWISE,
    GATHER,
    SOURCE_MUST_BE_REALIZED,
    Graph,
    collect_graph,
    is_const_base,
    is_disk_assign,
    is_unrealized,
)
from fast.engine.fusion_legality import (
    Placement,
    has_pad_mask,
    is_broadcast_of,
    is_expanding_view,
    is_identity_view,
    is_row_broadcast,
    op_keeps_zero,
    pad_is_safe,
    reduce_fusion_target,
    row_computable,
)
from fast.ops import LOAD_CONST, LoadOps, ReduceOps

if TYPE_CHECKING:
    from fast.graph.node import LazyBuffer

__all__ = ["ELEMENTWISE", "GATHER", "SOURCE_MUST_BE_REALIZED", "Fusion", "Graph", "Placement", "chase_point",
           "choose_realizes", "collect_graph", "has_pad_mask", "is_broadcast_of", "is_const_base",
           "is_disk_assign", "is_expanding_view", "is_identity_view", "is_row_broadcast", "is_unrealized",
           "op_keeps_zero", "pad_is_safe", "reduce_fusion_target", "row_computable"]


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
