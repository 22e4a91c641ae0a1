"""The engine observers this package registers (fast/engine/realize.py calls them; the engine knows
nothing of them):
- GRAPH=1: before each `realize` that has something to run, the picture of its graph and kernels
  (graph.py) goes to `GRAPH_DIR` as `realize-<pid>-<n>.dot` (and `.svg` when `dot` is installed); with
  DEBUG >= 1 the path is printed.
- DEBUG >= 2: before a schedule runs, its table (table.py).
Both read the configuration when called (so `config.override` applies) and change nothing.
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path

from fast import config
from fast.debug.graph import to_dot, write
from fast.debug.table import schedule_table
from fast.engine.realize import REALIZE_OBSERVERS, SCHEDULE_OBSERVERS
from fast.engine.schedule import ScheduleItem, plan_schedule
from fast.graph.node import LazyBuffer

_COUNTER = itertools.count()


def write_realize_graph(outs: Sequence[LazyBuffer]) -> list[Path]:
    """GRAPH=1: the picture of one realize (nothing when there is nothing to run)."""
    if not config.get().graph:
        return []
    steps = plan_schedule(outs)
    if not steps:
        return []
    path = Path(config.get().graph_dir) / f"realize-{os.getpid()}-{next(_COUNTER):05d}.dot"
    written = write(to_dot(outs, steps), path)
    if config.get().debug >= 1:
        print(f"graph: {', '.join(str(p) for p in written)}")
    return written


def print_schedule_table(items: Sequence[ScheduleItem]) -> None:
    """DEBUG >= 2: the schedule table before it runs."""
    if config.get().debug >= 2 and items:
        print(schedule_table(items))


def register() -> None:
    """Add the observers to the engine (once)."""
    if write_realize_graph not in REALIZE_OBSERVERS:
        REALIZE_OBSERVERS.append(write_realize_graph)
    if print_schedule_table not in SCHEDULE_OBSERVERS:
        SCHEDULE_OBSERVERS.append(print_schedule_table)
