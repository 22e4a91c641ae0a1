"""A fused value checked on its kernel's own inputs, where the whole graph gives it no tolerance.

The tolerance of a value through the whole graph (tolerances.py `full`) is unspecified past any step
conformance has no rule for, e.g. the SQRT of a variance: in a transformer, everything after the first
layer norm. A wrong kernel there (a matmul tile storing garbage) would pass unseen. So a fused value
that is unspecified where it differs from reference's by more than `GROSS` (relative; rounding through
a whole model stays far below it) is checked again, locally:
- its kernel's inputs are the nearest ancestors that are buffers of the fused schedule (their values
  as fast computed them, read in the fused run) or realized inputs (`KernelGraph.leaves`);
- reference evaluates the records between those leaves and the value, from the leaves' values, and
  conformance's rules give their tolerances with the leaves exact;
- fast's value of any of those records is its clone realized fused from fresh copies of the leaves.
`comparison.py` compares the value itself, then, if it differs, each record of its kernel in program
order, and reports the first that differs.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import reference
from fast.debug.actual import Fused, fused_value, is_input
from fast.debug.fromgraph import Nodes
from fast.debug.records import DeviceMap, Record
from fast.debug.runs import Outcome, Replay
from fast.debug.tolerances import Tolerances
from fast.debug.values import Value, materialize

GROSS = 1e-3  # |reference - fast| > GROSS * max(1, |reference|) where unspecified: worth a local check
UNHANDLED = frozenset({"assign", "__init__", "from_sharded"})  # calls a local graph does not rebuild


def gross(want: Value, got: Value, tolerance: np.ndarray | None) -> bool:
    """Some element whose tolerance is unspecified (NaN or inf) differs by more than GROSS relative,
    or in being NaN or infinite."""
    if tolerance is None or want.shards is not None or want.shape != got.shape or want.dtype == "bool":
        return False
    loose = ~np.isfinite(tolerance)
    if not loose.any():
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        e, a = want.array.astype(np.float64), got.array.astype(np.float64)
        far = np.abs(e - a) > GROSS * np.maximum(1.0, np.abs(e))
        odd = (np.isnan(e) != np.isnan(a)) | (np.isinf(e) != np.isinf(a))
    return bool(np.any(loose & (far | odd)))


class KernelGraph:
    """The records from `record`'s kernel inputs to it, evaluated from those inputs (module docstring).
    `order`: the records computed from the leaves, in program order, `record` last."""

    def __init__(self, nodes: Nodes, expected: dict[Record, Outcome], fused: Fused, record: Record,
                 devices: DeviceMap) -> None:
        self.devices, self.record = devices, record
        self.leaves: dict[Record, Value] = {}
        inside: set[Record] = {record}
        stack = [record]
        while stack:
            for source in nodes.inputs[stack.pop()]:
                if source in inside or source in self.leaves:
                    continue
                value = _leaf_value(source, expected, fused)
                if value is not None:
                    self.leaves[source] = value
                else:
                    inside.add(source)
                    stack.append(source)
        self.order = [r for r in nodes.order if r in inside]
        local_order = [r for r in nodes.order if r in inside or r in self.leaves]
        self.nodes = Nodes(local_order, {r: () if r in self.leaves else nodes.inputs[r] for r in local_order},
                           [record])
        self.expected: dict[Record, Outcome] = {}
        self.tolerances: Tolerances | None = None

    def usable(self) -> bool:
        """Whether the local graph can be rebuilt: single-device plain calls over leaves with values."""
        return all(r.method not in UNHANDLED and not (r.method == "loadop" and r.op in ("EMPTY", "CUSTOM"))
                   for r in self.order) and all(value.shards is None for value in self.leaves.values())

    def evaluate(self) -> None:
        """Reference's values of the local records from the leaves, and their tolerances."""
        def make(record: Record, inputs: list[Any]) -> Any:
            if record in self.leaves:
                return materialize(reference, self.leaves[record])
            return record.apply(reference, inputs)
        replay = Replay(reference, self.nodes, make)
        replay.build(lambda group: None)
        error = replay.realize(self.order)
        for record in self.order:
            outcome = replay.outcomes[record]
            if outcome.error is None and error is None:
                replay.read(record)
        self.expected = replay.outcomes
        values = {r: o.value for r, o in self.expected.items() if o.value is not None}
        values.update(self.leaves)
        self.tolerances = Tolerances(self.nodes.order, self.nodes.inputs, values, frozenset(self.leaves))

    def fast_value(self, record: Record) -> Outcome:
        """fast's value of `record`: its local graph cloned and realized fused from copies of the leaves."""
        return fused_value(record, self.nodes, self.devices, self.leaves)


def _leaf_value(record: Record, expected: dict[Record, Outcome], fused: Fused) -> Value | None:
    """The value a kernel input holds: a realized input's own, or fast's fused value of a buffer of
    the schedule; None for a record computed inside the kernel."""
    if is_input(record):
        return expected[record].value
    outcome = fused.replay.outcomes.get(record)
    return None if outcome is None or outcome.error is not None else outcome.value
