"""Graph-building cost of the lazy layer: microseconds per elementwise node (kept for its command line;
the measurement now lives in bench/graph_build.py and is also the `graph_build` workload of
`python -m bench`).

Builds a chain of 10,000 elementwise nodes (alternately `x + c` with a fresh constant c and `x * leaf`
with a realized leaf), with the weak cache on and off, best of several rounds, and rebuilds it while it
is alive (every node a cache hit). For scale, also times the creation of a trivial Python object. Nothing
is realized. Prints a one-line summary and writes graph_build.json into a new temporary folder, or
into bench/results/ with `--save` (or another folder with `--out-dir`; bench/outputs.py).

Run: python bench/bench_graph_build.py [--nodes N] [--rounds R] [--save]
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.graph_build import graph_leaf, time_baseline, time_build, time_rebuild  # noqa: E402
from bench.outputs import add_output_options, destination  # noqa: E402
from fast.device import Device  # noqa: E402


def main() -> None:
    """Measure, write graph_build.json, print the summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    add_output_options(parser, "graph_build")
    options = parser.parse_args()
    device = Device.DEFAULT
    leaf = graph_leaf(device)
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
    folder, prefix = destination(options, "graph_build")
    results = folder / f"{prefix}.json"
    results.write_text(json.dumps(result, indent=2) + "\n")
    print(f"graph build: {result['us_per_node_cache_on']} us/node (cache on), "
          f"{result['us_per_node_cache_off']} us/node (cache off), "
          f"{result['us_per_node_cache_hit']} us/node (rebuild, all cache hits), "
          f"trivial object {result['us_per_trivial_object']} us; {options.nodes} nodes -> {results}")


if __name__ == "__main__":
    main()
