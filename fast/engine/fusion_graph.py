"""Fusion's view of the lazy graph: `collect_graph` walks the unrealized bases reachable from the
outputs into a `Graph` (sources before users, each base's readers and the views they read it
through), plus the base predicates fusion and scheduling share (fast/engine/fusion.py).

Invariants: the walk is iterative (graphs may be deep) and reads the graph without mutating it;
`Graph.order` lists every unrealized base reachable from the outputs once, sources first;
`readers[b][c]` holds the distinct views (by ShapeTracker) through which `c` reads `b`, in source order.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fast.ops import (
    LOAD_ASSIGN,
    LOAD_CONST,
    LOAD_COPY,
    LOAD_CUSTOM,
    LOAD_VIEW,
    BinaryOps,
    GatherOps,
    TernaryOps,
    UnaryOps,
)

if TYPE_CHECKING:
    from fast.graph.node import LazyBuffer

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
