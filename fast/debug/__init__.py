"""Debugging `fast` with `reference`: replay a graph, find the first node that differs, see the graph.

- `compare(*buffers, rtol=None, atol=None) -> Report`: the graph of the buffers replayed on `reference`
  node by node; `report.first` is None, or the first node whose value differs (comparison.py).
- `trace()`: record the calls that build a graph, so that rewrites `fast` makes while building
  (constant folding, all-reduce, split reduces) are checked too (trace.py).
- `graph(*buffers, path)`: the lazy graph and the kernels of its schedule as Graphviz DOT, and SVG/PNG
  when `dot` is installed (graph.py); `rebuild(*buffers)`: a fresh unrealized copy of a graph (to draw
  one that is realized already). `GRAPH=1` writes one per realize into `GRAPH_DIR`, and
  `DEBUG=2` prints a schedule table (hooks.py, table.py).
- `python -m fast.debug FILE.py`: run a script under `trace()` and print the report of its last
  expression (__main__.py).
See docs/debugging.md. This package sits on top of `fast` and imports `reference` (and conformance's
tolerance rules) only when `compare` is called.
"""
from __future__ import annotations

from typing import Any

from fast.debug import hooks, inputs
from fast.debug.graph import graph
from fast.debug.report import Difference, KernelRef, Report
from fast.debug.table import schedule_table
from fast.debug.trace import trace

hooks.register()


def compare(*buffers: Any, rtol: float | None = None, atol: float | None = None) -> Report:
    """The graph of `buffers` (LazyBuffer, MultiLazyBuffer or fast.xp array) replayed on `reference`
    node by node; TypeError for anything else (fast/debug/inputs.py).

    `report.first` is None when every node agrees, unfused (each op alone on reference's values of its
    inputs) and in the fused schedule, within the tolerances of docs/semantics.md (plus
    |reference - fast| <= atol + rtol * |reference| when given); otherwise the first node, in program
    order, that differs. The user's graph is not changed or realized."""
    from fast.debug.comparison import compare as run  # imports reference and conformance's rules on first use
    return run(*inputs.buffers("compare", buffers), rtol=rtol, atol=atol)


def rebuild(*buffers: Any) -> list[Any]:
    """A fresh, unrealized `fast` copy of the graph of `buffers` (buffers or fast.xp arrays; from its
    trace where traced, else from the lazy graph; realized inputs copied, DISK ones into a temporary
    folder): e.g. to draw the graph of buffers that are already realized, `graph(*rebuild(out),
    path=...)`. Nothing of the user's changes."""
    from fast.debug.actual import rebuild as run
    from fast.debug.fromgraph import collect
    from fast.debug.trace import paused
    from fast.debug.values import DiskMap
    with paused():
        return run(collect(inputs.buffers("rebuild", buffers)), DiskMap())


__all__ = ["Difference", "KernelRef", "Report", "compare", "graph", "rebuild", "schedule_table", "trace"]
