"""`compare(*buffers)`: replay a `fast` graph on `reference` node by node; report the first node that differs.

1. fromgraph.collect: the records of the buffers (trace records where the user traced, else rebuilt
   from the lazy graph), in program order.
2. runs.run_reference: every record built, realized and read on reference (the expected values).
3. tolerances.Tolerances: conformance's tolerance per record, `alone` and `full` (docs/semantics.md).
4. alone.AloneRuns (each op by itself, unfused, on reference's input values, on demand) and actual.run_fused
   (a clone of the graph in its fused schedule).
5. The first record in program order whose value or error differs, unfused or fused; a value that
   differs only fused is narrowed to the first ancestor whose fused value differs (actual.first_fused).

Invariants: the user's graph is not changed and not realized (only realized inputs are read);
recording is paused; GRAPH=1 writes no picture of compare's own realizes; `fast` copies of DISK
buffers live in a temporary folder removed before returning.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from fast import config
from fast.debug.actual import Fused, first_fused, is_input, kernel_ref, run_fused
from fast.debug.ahead import Ahead
from fast.debug.alone import AloneRuns
from fast.debug.floors import Floors
from fast.debug.fromgraph import Nodes, collect
from fast.debug.local import KernelGraph, gross
from fast.debug.pages import base_pages
from fast.debug.records import DeviceMap, Record
from fast.debug.report import Difference, KernelRef, Report
from fast.debug.runs import UNCOMPARED, Outcome, error_kind, run_reference
from fast.debug.tolerances import Tolerances, bad
from fast.debug.trace import paused
from fast.debug.values import DiskMap, Value


@dataclass
class Verdict:
    """How one record's actual outcome differs from the expected one."""

    reason: str
    actual: Value | None = None
    bad: np.ndarray | None = None
    tolerance: np.ndarray | None = None
    error: str | None = None


class ExpectedValues(Mapping[Record, Value]):
    """Reference's values by record, each read when first looked up (a deferred view is read only if
    a tolerance or verdict needs it); `in` does not read one."""

    def __init__(self, expected: dict[Record, Outcome]) -> None:
        self.expected = expected

    def __getitem__(self, record: Record) -> Value:
        outcome = self.expected.get(record)
        value = None if outcome is None else outcome.value
        if value is None:
            raise KeyError(record)
        return value

    def __contains__(self, record: object) -> bool:
        outcome = self.expected.get(record)  # type: ignore[call-overload]
        return outcome is not None and outcome.has_value

    def __iter__(self) -> Iterator[Record]:
        return (record for record, outcome in self.expected.items() if outcome.has_value)

    def __len__(self) -> int:
        return sum(outcome.has_value for outcome in self.expected.values())


@dataclass
class Context:
    nodes: Nodes
    expected: dict[Record, Outcome]
    tolerances: Tolerances
    devices: DeviceMap
    rtol: float | None
    atol: float | None
    alone: AloneRuns
    fused: Fused
    skip_fused: set[Record] = field(default_factory=set)
    floors: Floors = field(init=False)
    seconds: dict[str, float] = field(default_factory=dict)  # time per stage, in order

    def __post_init__(self) -> None:
        self.floors = Floors(self.tolerances)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def name(self, record: Record) -> str:
        return f"v{self.tolerances.number[record]}"

    def code(self, record: Record) -> str:
        return f"{self.name(record)} = {record.render(self.name)}"


def _device(devices: DeviceMap, device: Any) -> Any:
    return tuple(devices(d) for d in device) if isinstance(device, tuple) else devices(device)


def _layout(value: Value) -> Any:
    """A multi buffer's sharding: axis, real flags and every shard's shape (None for one buffer)."""
    return None if value.shards is None else (value.axis, value.real, tuple(s.shape for s in value.shards))


def _identical(want: np.ndarray, got: np.ndarray) -> bool:
    """Same dtype, shape and values (NaN-free): agrees under any tolerance, none needs building."""
    return want.dtype == got.dtype and want.shape == got.shape and bool(np.array_equal(want, got))


def verdict(ctx: Context, expected: Outcome, actual: Outcome, tolerance: Callable[[], np.ndarray | None],
            surely_within: Callable[[Value, Value], bool] | None = None) -> Verdict | None:
    """None when `actual` agrees with `expected` (or nothing can be compared), else how it differs.
    `tolerance` is called only when the values are not identical and `surely_within` (a cheap
    sufficient test, tolerances.py) does not accept them: building one is costly."""
    if any(error is not None and error.startswith(UNCOMPARED) for error in (expected.error, actual.error)):
        return None
    if expected.error is not None or actual.error is not None:
        if error_kind(expected.error) == error_kind(actual.error):
            return None
        return Verdict(f"reference: {expected.error or 'no error'}; fast: {actual.error or 'no error'}",
                       actual.value, error=actual.error)
    want, got = expected.value, actual.value
    if want is None or got is None:
        return None
    meta = [(what, a, b) for what, a, b in (("shape", want.shape, got.shape), ("dtype", want.dtype, got.dtype),
                                            ("device", _device(ctx.devices, want.device), got.device),
                                            ("layout (axis, real, shard shapes)", _layout(want), _layout(got)))
            if a != b]
    if meta:
        return Verdict("; ".join(f"{what} {a} (reference) vs {b} (fast)" for what, a, b in meta), got)
    if _identical(want.array, got.array) or (surely_within is not None and surely_within(want, got)):
        return None
    limit = tolerance()
    mask = bad(want, got, limit, ctx.rtol, ctx.atol)
    if not mask.any():
        return None
    return Verdict(f"{int(mask.sum())} of {mask.size} elements differ", got, mask, limit)


def _skip_fused(nodes: Nodes) -> set[Record]:
    """Records whose fused value is not compared: inputs and values computed from undefined memory
    (EMPTY). (Assign targets are read right after the realize that computed them, actual.run_fused.)"""
    skip: set[Record] = set()
    undefined: set[Record] = set()
    for record in nodes.order:
        sources = nodes.inputs[record]
        if record.method == "assign":  # its target's old value does not matter
            sources = sources[1:]
        if (record.method == "loadop" and record.op == "EMPTY") or \
                (record.method != "const" and any(source in undefined for source in sources)):
            undefined.add(record)
        if is_input(record):
            skip.add(record)
    return skip | undefined


def _fused_outcome(ctx: Context, record: Record) -> Outcome | None:
    outcome = ctx.fused.replay.outcomes.get(record)
    if record in ctx.skip_fused or outcome is None:
        return None
    if outcome.value is None and outcome.error is None and record in ctx.nodes.outputs and ctx.fused.error:
        return Outcome(error=ctx.fused.error)
    return outcome if outcome.value is not None or outcome.error is not None else None


def _first(ctx: Context) -> Difference | None:
    """The first difference in program order (module docstring, step 5)."""
    for record in ctx.nodes.order:
        expected = ctx.expected[record]
        with ctx.stage("unfused"):
            alone = ctx.alone.get(record)
        undefined = record.method == "loadop" and record.op == "EMPTY"  # no value to compare
        unfused = None if alone is None or undefined or alone.agrees else \
            verdict(ctx, expected, alone.outcome, partial(ctx.tolerances.alone, record),
                    partial(ctx.tolerances.surely_within_alone, record))
        fused_outcome = _fused_outcome(ctx, record)
        fused = None if fused_outcome is None else \
            verdict(ctx, expected, fused_outcome, partial(ctx.tolerances.full, record),
                    partial(ctx.floors.surely_within, record))
        if unfused is not None:
            return _difference(ctx, record, unfused, True, fused is not None if fused_outcome else None)
        if fused is not None:
            with ctx.stage("narrowing"):
                return _narrow(ctx, record, fused)
        if fused_outcome is not None and _unspecified_gross(ctx, record, fused_outcome):
            with ctx.stage("narrowing"):
                found = _local(ctx, record, fused_outcome)
            if found is not None:
                return found
    return None


def _unspecified_gross(ctx: Context, record: Record, outcome: Outcome) -> bool:
    """The fused value agreed only because its tolerance is unspecified where it differs grossly."""
    want, got = ctx.expected[record].value, outcome.value
    return want is not None and got is not None and record in ctx.tolerances.full_arrays and \
        gross(want, got, ctx.tolerances.full_arrays[record])


def _local(ctx: Context, record: Record, outcome: Outcome) -> Difference | None:
    """local.py: `record`'s fused value on its kernel's own inputs; if it differs, the first record of
    its kernel (program order) whose fused value from those inputs differs."""
    graph = KernelGraph(ctx.nodes, ctx.expected, ctx.fused, record, ctx.devices)
    if not graph.usable():
        return None
    graph.evaluate()
    tolerances = graph.tolerances
    assert tolerances is not None  # (set by evaluate)
    found = verdict(ctx, graph.expected[record], outcome, partial(tolerances.full, record))
    if found is None:
        return None
    for candidate in graph.order[:-1]:
        earlier = verdict(ctx, graph.expected[candidate], graph.fast_value(candidate),
                          partial(tolerances.full, candidate))
        if earlier is not None:
            record, found = candidate, earlier
            break
    found.reason += (" (on its kernel's inputs as fast computed them: through the whole graph its "
                     "tolerance is unspecified)")
    return _difference(ctx, record, found, False, True, graph.expected)


def _ancestors(nodes: Nodes, record: Record) -> list[Record]:
    found, stack = set(), [record]
    while stack:
        for source in nodes.inputs[stack.pop()]:
            if source not in found:
                found.add(source)
                stack.append(source)
    return [r for r in nodes.order if r in found]


def _narrow(ctx: Context, record: Record, found: Verdict) -> Difference:
    """A value that differs only fused: the first ancestor whose own fused value differs, or itself."""
    seen: dict[Record, Verdict] = {}

    def differs(candidate: Record, outcome: Outcome) -> bool:
        result = verdict(ctx, ctx.expected[candidate], outcome, lambda: ctx.tolerances.full(candidate))
        if result is not None:
            seen[candidate] = result
        return result is not None
    earlier = first_fused(_ancestors(ctx.nodes, record), ctx.nodes, ctx.devices, differs)
    if earlier is None:
        return _difference(ctx, record, found, False, True)
    return _difference(ctx, earlier, seen[earlier], False, True)


def _kernel(ctx: Context, record: Record) -> tuple[KernelRef | None, bool]:
    """The fused schedule's item computing `record`, else the first one reading it (through views):
    (item, whether it only reads it)."""
    users, seen, queue = ctx.nodes.users(), {record}, [record]
    while queue:
        current = queue.pop(0)
        found = ctx.fused.kernel(current)
        if found is not None:
            return found, current is not record
        for user in users[current]:
            if user not in seen:
                seen.add(user)
                queue.append(user)
    return None, False


def _difference(ctx: Context, record: Record, found: Verdict, unfused: bool, fused: bool | None,
                local: dict[Record, Outcome] | None = None) -> Difference:
    """The report of `record`; `local`: reference's values on its kernel's inputs (local.py)."""
    values = ctx.expected if local is None else {**ctx.expected, **local}
    expected = values[record]
    want = expected.value
    inputs = [(ctx.name(s), None if values[s].value is None else values[s].value.array)  # type: ignore[union-attr]
              for s in ctx.nodes.inputs[record]]
    alone = ctx.alone.get(record)
    kernel, reads = _kernel(ctx, record)
    return Difference(
        ctx.tolerances.number[record], ctx.code(record), record.op, record.arg,
        want.shape if want else None, want.dtype if want else None, want.device if want else None,
        want.array if want else None, found.actual.array if found.actual else None, found.bad, found.tolerance,
        expected.error, found.error, found.reason, unfused, fused, inputs,
        kernel, ctx.alone.kernels(record) if alone is not None and unfused else [], record.origin == "trace", reads)


def _notes(ctx: Context) -> list[str]:
    notes = []
    rebuilt = [r for r in ctx.nodes.order if r.origin == "graph" and r.target != "value"]
    if rebuilt:
        notes.append(f"{len(rebuilt)} nodes rebuilt from the lazy graph (not traced): rewrites fast made while "
                     "building them (constant folding, all-reduce, split reduces) are compared as built; "
                     "build the graph under fast.debug.trace() to check those too")
    failed = [ctx.name(r) for r in ctx.nodes.order if (e := ctx.expected[r].error) and not e.startswith(UNCOMPARED)]
    if failed:
        notes.append(f"reference raised at {', '.join(failed[:8])}{' ...' if len(failed) > 8 else ''}")
    return notes


def _check_tolerance(name: str, value: float | None) -> None:
    if value is not None and (not isinstance(value, (int, float)) or not value >= 0):
        raise ValueError(f"compare: {name} must be a number >= 0 or None, got {value!r}")


def compare(*buffers: Any, rtol: float | None = None, atol: float | None = None) -> Report:
    """Compare the graph of `buffers` with reference node by node (module docstring). `rtol`, `atol`:
    extra slack on top of docs/semantics.md, |reference - fast| <= atol + rtol * |reference|."""
    _check_tolerance("rtol", rtol)
    _check_tolerance("atol", atol)
    devices = DiskMap()
    try:
        with paused(), config.override(graph=False), base_pages():
            return _compare(buffers, rtol, atol, devices)
    finally:
        devices.close()


def _compare(buffers: Sequence[Any], rtol: float | None, atol: float | None, devices: DeviceMap) -> Report:
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    nodes = collect(buffers)
    seconds["collect"] = time.perf_counter() - start
    ahead = Ahead(seconds)
    try:
        ahead.start(buffers)
        expected = run_reference(nodes)
        seconds["reference"] = time.perf_counter() - start - sum(seconds.values())
        alone = AloneRuns(nodes, expected, devices)
        fused = run_fused(nodes, devices, planned=partial(ahead.before_fused, alone))
        seconds["fused"] = time.perf_counter() - start - sum(seconds.values())
        ctx = Context(nodes, expected, Tolerances(nodes.order, nodes.inputs, ExpectedValues(expected)), devices,
                      rtol, atol, alone, fused, _skip_fused(nodes), seconds)
        waited = seconds.get("waiting for builds", 0.0)
        with ctx.stage("compare"):  # tolerances and verdicts (the unfused runs, narrowing and waiting apart)
            ahead.wait()
            first = _first(ctx)
    finally:
        ahead.close()
    seconds["compare"] -= seconds.get("unfused", 0.0) + seconds.get("narrowing", 0.0) + \
        seconds.get("waiting for builds", 0.0) - waited
    schedule = [kernel_ref(item, position) for position, item in enumerate(ctx.fused.items)]
    return Report([ctx.code(r) for r in nodes.order], first, _notes(ctx) + [_timing(ctx)], schedule,
                  sum(r.origin == "trace" for r in nodes.order))


def _timing(ctx: Context) -> str:
    ran = sum(alone is not None for alone in ctx.alone.done.values())
    parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in ctx.seconds.items())
    return f"time per stage (s): {parts}; {ran} nodes run unfused, alone"
