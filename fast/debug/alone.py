"""Each node of the graph alone on `fast`, unfused, on reference's values of its inputs.

`AloneRuns.get(record)` builds the record by itself over realized copies of reference's values of its
inputs, realizes and reads it: it tells whether the op itself is wrong, whatever fusion does. Runs are
made on demand, in program order, each once (compare stops at the first difference: later records are
never run). How the inputs are made:
- a constant expression is rebuilt as one (constant folding still applies, as in the user's graph);
- a view is rebuilt as the same movement ops over its input (so a (16, 1536, 384) expand of a weight
  costs the weight's bytes);
- a record whose own alone run gave exactly reference's bits lends its realized buffer (a copy of the
  same bits would be made otherwise: the product of a matmul is the largest value of a transformer);
- anything else is a copy of reference's value (`values.materialize`), made once and lent to every
  later reader in the same way (the file of a safetensors load is read by a shrink per tensor);
- a record an assign writes into is never lent: each of its readers gets a fresh copy.
A movement op is an index map, the same for any values: it is checked once per (op, argument, input
shape, dtype, device) on a probe input whose elements are 1, 2, 3, ... (every position distinct, none
zero, so a wrong index or mask shows) against reference on the same probe; a signature that agreed is
not run again, one that differed runs on the real values (which the report then shows).
`Alone.agrees`: the run was checked here (bit-identical, or by its probe) and needs no verdict.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import fast
import reference
from fast.debug.actual import is_input, kernel_ref
from fast.debug.fromgraph import Nodes
from fast.debug.pages import equal_bits
from fast.debug.records import DeviceMap, Record, is_movement
from fast.debug.report import KernelRef
from fast.debug.runs import Outcome, describe, recorded_config
from fast.debug.values import Value, materialize, read, read_reusing

# calls that keep a constant a constant expression (fast folds or views it; nothing is realized)
CONSTANT_CALLS = frozenset({"e", "r", "cast", "copy_to_device", "reshape", "pad", "expand", "permute", "shrink",
                            "stride"})
PROBE_DTYPES = {"float32": 1 << 24, "float64": 1 << 53, "int32": 1 << 31, "int64": 1 << 53, "uint32": 1 << 32,
                "uint64": 1 << 53}  # dtypes holding 1..n exactly up to this n


def constant_records(nodes: Nodes) -> set[Record]:
    """Constant expressions: CONST loadops, `const` calls, and ops, casts, copies and views whose
    inputs are all constant expressions."""
    found: set[Record] = set()
    for record in nodes.order:
        sources = nodes.inputs[record]
        if record.method == "const" or (record.method == "loadop" and record.op == "CONST") or \
                (record.target == "self" and record.method in CONSTANT_CALLS and all(s in found for s in sources)):
            found.add(record)
    return found


@dataclass
class Alone:
    """One record run alone on fast: its value or error, the schedule items that ran it, and whether
    it was found to agree here (`agrees`, module docstring)."""

    outcome: Outcome
    kernels: list[KernelRef] = field(default_factory=list)
    agrees: bool = False


def same_bits(want: Value | None, got: Value | None, devices: DeviceMap) -> bool:
    """Same dtype, shape, device and bytes (so -0.0 is not 0.0, and a NaN matches only its own bits)."""
    if want is None or got is None or want.shards is not None or got.shards is not None or \
            not isinstance(want.device, str) or (want.dtype, want.shape, devices(want.device)) != \
            (got.dtype, got.shape, got.device) or want.array.dtype != got.array.dtype:
        return False
    unsigned = np.dtype(f"u{want.array.dtype.itemsize}")  # (every dtype's itemsize is 1, 2, 4 or 8)
    mine, theirs = (np.ascontiguousarray(value.array).reshape(-1).view(unsigned) for value in (want, got))
    return equal_bits(mine, theirs)


class AloneRuns:
    """The records' alone runs (module docstring). `get(record)` is None for inputs and for records
    whose inputs reference has no values of."""

    def __init__(self, nodes: Nodes, expected: dict[Record, Outcome], devices: DeviceMap) -> None:
        self.nodes, self.expected, self.devices = nodes, expected, devices
        self.constants = constant_records(nodes)
        self.done: dict[Record, Alone | None] = {}
        self.probes: dict[Any, Alone | None] = {}  # signature -> the probe's run when it agreed, else None
        self.lent: dict[Record, Any] = {}  # record -> its alone buffer, holding reference's bits
        self.readers = {record: len(users) for record, users in nodes.users().items()}
        self.scratch: dict[tuple[str, int], np.ndarray] = {}  # arrays reused to read values (read_reusing)
        # records an alone run writes into (an assign's target): never lent, each reader gets a fresh copy
        self.assigned = {nodes.inputs[record][0] for record in nodes.order if record.method == "assign"}

    def get(self, record: Record) -> Alone | None:
        if record not in self.done:
            runnable = not is_input(record) and all(self.expected[s].has_value for s in self.nodes.inputs[record])
            probed = self.probe(record) if runnable else None
            self.done[record] = None if not runnable else probed if probed is not None else self.run(record)
            for source in self.nodes.inputs[record]:  # a lent buffer is kept until its last reader ran
                self.readers[source] -= 1
                if not self.readers[source]:
                    self.lent.pop(source, None)
        return self.done[record]

    def run(self, record: Record) -> Alone:
        """`record` alone (module docstring). Its kernels are not looked up here (`kernels`: only the
        report needs them, and planning twice per record would double the cost of small ones)."""
        try:
            inputs = [self.input(source) for source in self.nodes.inputs[record]]
            with recorded_config(record):
                obj = record.apply(fast, inputs, self.devices)
            fast.realize(obj)
            got = read_reusing(obj, self.scratch) or read(fast, obj)
        except Exception as error:  # noqa: BLE001 - what fast raises is an outcome
            return Alone(Outcome(error=describe(error)))
        agrees = self.expected[record].error is None and same_bits(self.expected[record].value, got, self.devices)
        if agrees and self.readers[record] and not hasattr(obj, "lbs") and record not in self.assigned:
            self.lent[record] = obj
        if agrees:  # (the value is not kept: it may sit in a reused array)
            return Alone(Outcome(obj), [], agrees)
        return Alone(Outcome(obj, replace(got, array=got.array.copy())), [], agrees)

    def kernels(self, record: Record) -> list[KernelRef]:
        """The schedule items that run `record` alone (built again over fresh inputs, planned, not run)."""
        found = self.done.get(record)
        if found is not None and found.kernels:
            return found.kernels
        try:
            inputs = [self.input(source) for source in self.nodes.inputs[record]]
            with recorded_config(record):
                obj = record.apply(fast, inputs, self.devices)
            return [kernel_ref(item, position) for position, item in enumerate(fast.schedule(obj))]
        except Exception:  # noqa: BLE001 - the run itself failed: no items to name
            return []

    def input(self, record: Record) -> Any:
        """`record` as an input of an alone run (module docstring)."""
        if record in self.constants or is_movement(record):
            inputs = [self.input(source) for source in self.nodes.inputs[record]]
            with recorded_config(record):
                return record.apply(fast, inputs, self.devices)
        if record in self.lent:
            return self.lent[record]
        value = self.expected[record].value
        if value is None:
            raise RuntimeError(f"no reference value for input {record.op}")
        obj = materialize(fast, value, self.devices)
        if record not in self.assigned and not hasattr(obj, "lbs"):
            self.lent[record] = obj  # later readers share the copy (a whole safetensors file: one per reader)
        return obj

    def probe_key(self, record: Record) -> tuple[Any, ...] | None:
        """For a movement op over a probe-able input: its signature (op, arguments, input shape, dtype
        and device); None for any other record."""
        if not is_movement(record) or record in self.constants or self.expected[record].error is not None:
            return None
        source = self.expected[self.nodes.inputs[record][0]].obj  # (its value may not be read yet)
        if source is None or hasattr(source, "lbs") or source.device.startswith("DISK:") \
                or math.prod(source.shape) + 1 >= PROBE_DTYPES.get(source.dtype.name, 0):
            return None
        return (record.method, repr(record.args), repr(record.kwargs), tuple(source.shape), source.dtype.name,
                source.device)

    def probe(self, record: Record) -> Alone | None:
        """For a movement op over a probe-able input: reference's outcome marked `agrees` when the op
        agreed on the probe of its signature (run once per signature); None: run it on its values."""
        key = self.probe_key(record)
        if key is None:
            return None
        if key not in self.probes:
            source = self.expected[self.nodes.inputs[record][0]].obj
            self.probes[key] = probe_movement(record, source, self.devices)
        found = self.probes[key]
        return None if found is None else Alone(self.expected[record], found.kernels, agrees=True)


def probe_movement(record: Record, source: Any, devices: DeviceMap) -> Alone | None:
    """`record` (a movement op) on fast and on reference over the probe 1, 2, 3, ... of the shape,
    dtype and device of `source` (reference's input): fast's run when both give the same shape,
    dtype and values, else None."""
    shape = tuple(source.shape)
    array = np.arange(1, math.prod(shape) + 1, dtype=np.dtype(source.dtype.name)).reshape(shape)
    probe = Value(array, source.dtype.name, source.device)
    try:
        obj = record.apply(fast, [materialize(fast, probe, devices)], devices)
        items = fast.schedule(obj)
        got = read(fast, obj)
        want = read(reference, record.apply(reference, [materialize(reference, probe)]))
    except Exception:  # noqa: BLE001 - an error is for the run on the real values to report
        return None
    if (want.dtype, want.shape) != (got.dtype, got.shape) or not np.array_equal(want.array, got.array):
        return None
    return Alone(Outcome(obj, got), [kernel_ref(item, position) for position, item in enumerate(items)])
