"""Graph-building cost of the lazy layer: microseconds per elementwise node.

Builds a chain of 10,000 elementwise nodes (alternately `x + c` with a fresh constant c and `x * leaf`
with a realized `from_numpy` leaf), with the weak cache on and off, best of several rounds, and
rebuilds it while it is alive (every node a cache hit). For
scale, also times the creation of a trivial Python object with a few attributes. Nothing is
realized. Writes bench/results/graph_build.json and prints a one-line summary.

Run: python bench/bench_graph_build.py [--nodes N] [--rounds R]
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from fast import config  # noqa: E402
from fast.device import Device  # noqa: E402
from fast.lazy import LazyBuffer, from_numpy  # noqa: E402
from fast.ops import BinaryOps  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "graph_build.json"


def build_chain(leaf: LazyBuffer, nodes: int) -> LazyBuffer:
    """`nodes` elementwise nodes alternating ADD of a fresh constant and MUL by the leaf."""
    x = leaf
    for step in range(nodes):
        if step % 2 == 0:
            x = x.e(BinaryOps.ADD, x.const(float(step + 2)))
        else:
            x = x.e(BinaryOps.MUL, leaf)
    return x


def time_build(leaf: LazyBuffer, nodes: int, rounds: int, cache: bool) -> float:
    """Best microseconds per node over `rounds` builds (the graph is dropped between rounds)."""
    best = float("inf")
    with config.override(lazycache=cache):
        for _ in range(rounds):
            gc.collect()
            start = time.perf_counter()
            graph = build_chain(leaf, nodes)
            best = min(best, (time.perf_counter() - start) / nodes * 1e6)
            del graph
    return best


def time_rebuild(leaf: LazyBuffer, nodes: int, rounds: int) -> float:
    """Best microseconds per node when rebuilding a graph that is still alive (every node a cache hit)."""
    with config.override(lazycache=True):
        alive = build_chain(leaf, nodes)
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            again = build_chain(leaf, nodes)
            best = min(best, (time.perf_counter() - start) / nodes * 1e6)
            assert again is alive, "the weak cache should return the live graph"
        return best


class _Trivial:
    __slots__ = ("a", "b", "c")

    def __init__(self, a: object, b: object, c: object) -> None:
        self.a, self.b, self.c = a, b, c


def time_baseline(nodes: int, rounds: int) -> float:
    """Best microseconds to create one trivial slotted Python object."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        kept = [_Trivial(i, None, ()) for i in range(nodes)]
        best = min(best, (time.perf_counter() - start) / nodes * 1e6)
        del kept
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    device = Device.DEFAULT
    leaf = from_numpy(np.arange(16, dtype=np.float32).reshape(4, 4), device)
    result = {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "device": device,
        "nodes": options.nodes,
        "rounds": options.rounds,
        "us_per_node_cache_on": round(time_build(leaf, options.nodes, options.rounds, True), 3),
        "us_per_node_cache_off": round(time_build(leaf, options.nodes, options.rounds, False), 3),
        "us_per_node_cache_hit": round(time_rebuild(leaf, options.nodes, options.rounds), 3),
        "us_per_trivial_object": round(time_baseline(options.nodes, options.rounds), 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"graph build: {result['us_per_node_cache_on']} us/node (cache on), "
          f"{result['us_per_node_cache_off']} us/node (cache off), "
          f"{result['us_per_node_cache_hit']} us/node (rebuild, all cache hits), "
          f"trivial object {result['us_per_trivial_object']} us; {options.nodes} nodes -> {RESULTS}")


if __name__ == "__main__":
    main()
