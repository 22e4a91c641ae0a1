"""The `fast` side of compare: the whole graph in its fused schedule, and narrowing.

- each node alone, unfused: alone.py.
- `run_fused`: a clone of the whole graph (graph records clone exactly, trace records replay the user's
  calls), the user's realizes in place, then the outputs realized together: the schedule the user's
  graph gets. Read back: the records whose clone is a buffer of that schedule. Kernel membership is
  taken from the plan before running it.
- `first_fused`: for a value that differs only fused, clones of the graph up to each ancestor in turn,
  realized fused, to find the first one that differs.
The user's objects are never realized or changed here; DISK devices go through a `DiskMap`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import fast
from fast import config
from fast.debug.fromgraph import Nodes
from fast.debug.records import DeviceMap, Record
from fast.debug.report import KernelRef
from fast.debug.runs import Outcome, Replay, describe, recorded_config
from fast.debug.table import item_members
from fast.debug.values import Value, materialize
from fast.engine.realize import get_kernel
from fast.engine.schedule import ScheduleItem, lazy_buffers, plan_schedule
from fast.ops import KernelOps


def kernel_ref(item: ScheduleItem, position: int) -> KernelRef:
    """Name and source of a schedule item (a kernel's from the program cache: compiled once)."""
    device = item.bufs[0].device
    if item.ast.op is not KernelOps.SINK:
        return KernelRef(item.ast.op.name.lower(), item.ast.op.name.lower(), device, None, position)
    try:
        kernel, _ = get_kernel(device, item.ast)
    except Exception as error:  # noqa: BLE001 - a kernel that does not compile is still named
        return KernelRef("kernel", f"(does not compile: {describe(error)})", device, None, position)
    return KernelRef("kernel", kernel.program.name, device, kernel.source, position)


def is_input(record: Record) -> bool:
    """A realized input (values given): nothing of fast's to check."""
    return record.target == "value" or (record.target == "module" and record.method == "from_numpy")


# ---------------------------------------------------------------- the fused schedule

def _clone_maker(replay: Replay, devices: DeviceMap,
                 leaves: Mapping[Record, Value] | None = None) -> Callable[[Record, list[Any]], Any]:
    """Clones of records; a record of `leaves` is a fresh realized copy of the value given for it."""
    def get(source: Record) -> Any:
        return replay.outcomes[source].obj

    def make(record: Record, inputs: list[Any]) -> Any:
        if leaves is not None and record in leaves:
            return materialize(fast, leaves[record], devices)
        with recorded_config(record):
            return record.clone(get, devices) if record.clone is not None else record.apply(fast, inputs, devices)
    return make


def _bases(obj: Any) -> list[Any]:
    return [lb.base for lb in getattr(obj, "lbs", [obj])]


def observable(obj: Any) -> bool:
    """A clone whose value is a buffer of the schedule (a realized base, or shards that all are)."""
    return all(lb.base is lb and lb.realized is not None for lb in getattr(obj, "lbs", [obj]))


@dataclass
class Fused:
    """The clone run: outcomes per record, the schedule's items and which item computes which base."""

    replay: Replay
    items: list[ScheduleItem] = field(default_factory=list)
    member: dict[int, int] = field(default_factory=dict)  # id(base) -> index into items
    error: str | None = None

    def kernel(self, record: Record) -> KernelRef | None:
        outcome = self.replay.outcomes.get(record)
        if outcome is None or outcome.obj is None:
            return None
        for base in _bases(outcome.obj):
            if id(base) in self.member:
                index = self.member[id(base)]
                return kernel_ref(self.items[index], index)
        return None


Planned = Callable[[list[ScheduleItem]], None]  # called with a schedule's items before they run


def _run_planned(fused: Fused, records: list[Record], planned: Planned | None = None) -> str | None:
    """Plan, note membership, and realize the clones of `records` (`planned` sees the items first)."""
    objects = fused.replay.objects(records)
    try:
        steps = plan_schedule(lazy_buffers(objects))
    except Exception as error:  # noqa: BLE001
        return describe(error)
    item_members(steps, len(fused.items), fused.member)
    if planned is not None:
        planned([step.item for step in steps])
    fused.items += [step.item for step in steps]
    return fused.replay.realize(records)


def run_fused(nodes: Nodes, devices: DeviceMap, records: list[Record] | None = None,
              outputs: list[Record] | None = None, fresh: bool = False,
              leaves: Mapping[Record, Value] | None = None, planned: Planned | None = None) -> Fused:
    """Clone `records` (default: all), realize `outputs` (default: the requested ones) fused, reading
    right after each realize (before a later assign can overwrite them) what it realized: the
    records asked for (views included: one small copy kernel each) and every observable clone.
    `fresh`: no sharing with earlier clones (the lazy cache off). `leaves`: records made as copies
    of the values given (local.py), not clones. `planned`: called with each schedule's items before
    they run."""
    replay = Replay(fast, nodes, lambda record, inputs: None, records)
    replay.make = _clone_maker(replay, devices, leaves)
    fused = Fused(replay)

    def run(group: list[Record]) -> None:
        fused.error = _run_planned(fused, group, planned) or fused.error
        asked = set(group)
        for record, outcome in replay.outcomes.items():
            if outcome.obj is not None and outcome.value is None and outcome.error is None \
                    and (observable(outcome.obj) or (record in asked and fused.error is None)):
                replay.read(record)
    with config.override(lazycache=False) if fresh else config.override():
        replay.build(run)
        run(outputs if outputs is not None else nodes.outputs)
    return fused


def fused_value(record: Record, nodes: Nodes, devices: DeviceMap,
                leaves: Mapping[Record, Value] | None = None) -> Outcome:
    """`record`'s value when the graph up to it is cloned afresh and realized fused (`leaves`: see
    `run_fused`)."""
    wanted, stack = {record}, [record]
    while stack:
        for source in nodes.inputs[stack.pop()]:
            if source not in wanted:
                wanted.add(source)
                stack.append(source)
    fused = run_fused(nodes, devices, [r for r in nodes.order if r in wanted], [record], fresh=True, leaves=leaves)
    outcome = fused.replay.outcomes[record]
    if outcome.obj is not None and outcome.value is None and outcome.error is None:
        fused.replay.read(record)
    if fused.error is not None and outcome.value is None:
        outcome.error = outcome.error or fused.error
    return outcome


def first_fused(candidates: list[Record], nodes: Nodes, devices: DeviceMap,
                differs: Callable[[Record, Outcome], bool]) -> Record | None:
    """The first of `candidates` (program order) whose freshly fused value differs."""
    for record in candidates:
        if not is_input(record) and differs(record, fused_value(record, nodes, devices)):
            return record
    return None


def rebuild(nodes: Nodes, devices: DeviceMap) -> list[Any]:
    """A fresh `fast` clone of the collected graph, realizing nothing but its inputs: what the outputs
    would be scheduled as if realized in one go (for pictures of graphs the user has realized)."""
    replay = Replay(fast, nodes, lambda record, inputs: None)
    replay.make = _clone_maker(replay, devices)
    replay.build(lambda group: None)
    return [replay.outcomes[record].obj for record in nodes.outputs]
