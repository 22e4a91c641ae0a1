"""The `graph_build` workload: the cost of the lazy layer itself, in microseconds per node.

Builds a chain of elementwise nodes (alternately `x + c` with a fresh constant c and `x * leaf`
with a realized leaf) and schedules it (one kernel), timing the two apart; nothing is compiled or
run. The check: the schedule succeeds at Python's default recursion limit and fuses the chain into
one kernel (when the limit is too low, the timing is still taken with a raised limit, and the check
fails). Extras: building with the weak node cache off, rebuilding a graph that is still alive (every
node a cache hit), and creating a trivial slotted Python object, for scale.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import statistics
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

import fast
from bench.graphs import graph_chain
from bench.runner import count_kernels
from bench.timing import Budget, timed
from fast import config


@contextlib.contextmanager
def recursion_limit(limit: int | None) -> Iterator[None]:
    """Raise Python's recursion limit to `limit` for the block (no change when None)."""
    previous = sys.getrecursionlimit()
    if limit is not None:
        sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def needed_recursion_limit(leaf: fast.LazyBuffer, nodes: int) -> int | None:
    """None when scheduling the chain works at the current limit, else a limit that should do."""
    graph = graph_chain(leaf, nodes)
    try:
        fast.schedule(graph)
    except RecursionError:
        return sys.getrecursionlimit() + 20 * nodes
    return None


def time_build_and_schedule(leaf: fast.LazyBuffer, nodes: int, budget: Budget) -> tuple[list[float], list[float]]:
    """Seconds to build and to schedule the chain, per repeat (each graph dropped before the next)."""
    builds: list[float] = []
    schedules: list[float] = []
    while len(builds) < budget.max_repeats:
        if len(builds) >= budget.min_repeats and sum(builds) + sum(schedules) >= budget.seconds:
            break
        gc.collect()
        build_s, graph = timed(lambda: graph_chain(leaf, nodes))
        schedule_s, items = timed(functools.partial(fast.schedule, graph))
        del graph, items
        builds.append(build_s)
        schedules.append(schedule_s)
    return builds, schedules


def time_build(leaf: fast.LazyBuffer, nodes: int, rounds: int, cache: bool) -> float:
    """Best microseconds per node over `rounds` builds (the graph is dropped between rounds)."""
    best = float("inf")
    with config.override(lazycache=cache):
        for _ in range(rounds):
            gc.collect()
            seconds, graph = timed(lambda: graph_chain(leaf, nodes))
            best = min(best, seconds / nodes * 1e6)
            del graph
    return best


def time_rebuild(leaf: fast.LazyBuffer, nodes: int, rounds: int) -> float:
    """Best microseconds per node when rebuilding a graph that is still alive (every node a cache hit)."""
    with config.override(lazycache=True):
        alive = graph_chain(leaf, nodes)
        best = float("inf")
        for _ in range(rounds):
            seconds, again = timed(lambda: graph_chain(leaf, nodes))
            best = min(best, seconds / nodes * 1e6)
            if again is not alive:
                raise AssertionError("the weak cache should return the live graph")
        return best


class _Trivial:
    __slots__ = ("a", "b", "c")

    def __init__(self, a: object, b: object, c: object) -> None:
        self.a, self.b, self.c = a, b, c


def time_baseline(nodes: int, rounds: int) -> float:
    """Best microseconds to create one trivial slotted Python object."""
    best = float("inf")
    for _ in range(rounds):
        seconds, kept = timed(lambda: [_Trivial(i, None, ()) for i in range(nodes)])
        best = min(best, seconds / nodes * 1e6)
        del kept
    return best


def graph_leaf(device: str) -> fast.LazyBuffer:
    """A small realized leaf with values in [0.5, 1)."""
    leaf = fast.from_numpy(np.linspace(0.5, 1.0, 16, endpoint=False, dtype=np.float32).reshape(4, 4), device)
    fast.realize(leaf)
    return leaf


def run_graph_build(device: str, nodes: int, budget: Budget, rounds: int = 3) -> dict[str, Any]:
    """The graph_build row for `device`: median build + schedule time, µs per node for each, extras."""
    leaf = graph_leaf(device)
    limit = needed_recursion_limit(leaf, nodes)
    with recursion_limit(limit):
        kernels = count_kernels(fast.schedule(graph_chain(leaf, nodes)))
        builds, schedules = time_build_and_schedule(leaf, nodes, budget)
    totals = [b + s for b, s in zip(builds, schedules, strict=True)]
    ok = limit is None and kernels == 1
    reason = (f"schedule raised RecursionError at the default recursion limit {sys.getrecursionlimit()} "
              f"(timed with {limit})" if limit is not None else f"{kernels} kernels, expected 1")
    return {"median_ms": statistics.median(totals) * 1e3, "min_ms": min(totals) * 1e3,
            "max_ms": max(totals) * 1e3, "repeats": len(totals), "kernels": kernels, "nodes": nodes,
            "build_us_per_node": statistics.median(builds) / nodes * 1e6,
            "schedule_us_per_node": statistics.median(schedules) / nodes * 1e6,
            "us_per_node_cache_off": time_build(leaf, nodes, rounds, cache=False),
            "us_per_node_cache_hit": time_rebuild(leaf, nodes, rounds),
            "us_per_trivial_object": time_baseline(nodes, rounds),
            "check": {"ok": True} if ok else {"ok": False, "reason": reason}}
