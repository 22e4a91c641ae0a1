"""Recording what a traced function runs, and replaying it on new input buffers (`fast.jit`, fast/jit.py).

Recording: while a `Recorder` is active on a thread, `realize` schedules afresh (no schedule replay:
RECORDING) so every item runs through `run_schedule`, whose observer (`_observe`) appends the
items in order. The recorder holds one `ref` on every Buffer an item touches, so nothing recorded is
freed (and its memory handed to another Buffer) before the plan is built. It knows which memory is
*traced*: the inputs' and everything an item computes from traced memory; a read-back of a traced
value (`to_numpy`, `bool()`, `np.asarray` ...: engine/READ_OBSERVERS) raises `TraceError`,
since Python control flow on it could not be replayed, and so does an assign item (into an input:
mutating a captured input; into anything else: state the capture does not model).

Planning (`Plan.build`), per recorded Buffer, by the memory it lives in (its root, `Buffer.base`):
- an input's memory: the same Buffer, root or view of each call's input (slot by argument);
- an output's memory (an output of the function is read from it): a fresh root per call (the caller
  keeps the result), views of it rebuilt on the new root;
- anything else: a fixed Buffer, kept by the plan: constants realized before the call (weights),
  intermediates (allocated once, reused by every call; those whose lifetimes within a call do not
  overlap share one allocation: fast/engine/plan_memory.py) and the results of *hoisted* items.
An item is replayed when it reads traced memory or writes an output's memory; every other item
(copies of weights from DISK, casts of weights) ran once during the trace and is hoisted: its
output is a constant of the plan. Replay runs the replayed items in recorded order: kernels
through the FMA guard (runnable) and `launch`, copies, CUSTOM host functions (the same
function object, on the new buffers), EMPTY and VIEW items.

Bound Variables: the arguments' bound Variables (`Recorder.bound`) are per-call values. Items that
use one are replayed (never hoisted), and kernels take their values per call (`Step.parameters`);
Buffers are sized for the Variables' maxima, as the scheduler sizes them. A replayed CUSTOM call
keeps the trace's shapes, so such a plan is `per_length` (fast/captured.py keys it by the values).

Invariants: a plan reads its fixed Buffers only while their versions are those seen at the trace
(`Plan.current`; an assign into a captured weight forces a new trace); a replay allocates nothing
but its outputs; the items and kernels replayed are the ones the trace ran, so results are
bit-identical to the uncaptured function for the same inputs.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fast import config
from fast.device import Buffer
from fast.engine import replay_lanes
from fast.engine.items import run_copy, run_custom
from fast.engine.plan_memory import share_intermediates
from fast.engine.readback import READ_OBSERVERS
from fast.engine.realize import RECORDING, SCHEDULE_OBSERVERS, get_kernel, runnable
from fast.engine.replay_native import NativePlan, qualifies
from fast.engine.schedule import ScheduleItem
from fast.graph.node import LazyBuffer
from fast.ops import KernelOps, LoadOps
from fast.shape.symbolic import Variable

EMPTY_OUTPUT = -1  # the table position of a zero-size output in `Plan.outputs` (it has no Buffer)


def is_empty(lb: LazyBuffer) -> bool:
    """Whether `lb` has no elements (a zero in its shape): it never realizes into a Buffer."""
    return any(isinstance(size, int) and size == 0 for size in lb.shape)


class TraceError(RuntimeError):
    """A captured function did something a capture cannot replay (see the module docstring)."""


_LOCAL = threading.local()  # `recorder`: the Recorder active on this thread, if any


def active() -> Recorder | None:
    """The recorder tracing on this thread, or None."""
    return getattr(_LOCAL, "recorder", None)


class Recorder:
    """The items run while a function is traced, and which memory holds traced values (by root id).
    Use as a context manager; `inputs[k]` is argument k's realized Buffer."""

    def __init__(self, name: str, inputs: Sequence[Buffer], bound: Mapping[Variable, int] | None = None) -> None:
        self.name = name
        self.inputs = list(inputs)
        self.bound = dict(bound or {})  # the arguments' bound Variables and their values at the trace
        self.items: list[ScheduleItem] = []
        self.held: dict[int, Buffer] = {}  # id -> Buffer holding one ref of ours
        self.traced: set[int] = {id(buffer.base) for buffer in inputs}

    def __enter__(self) -> Recorder:
        if active() is not None:
            raise TraceError(f"jit({self.name}): already tracing on this thread")
        _LOCAL.recorder = self
        RECORDING.on = True
        return self

    def __exit__(self, *exc: object) -> None:
        _LOCAL.recorder = None
        RECORDING.on = False

    def release(self) -> None:
        """Drop the refs taken while recording."""
        for buffer in self.held.values():
            buffer.ref(-1)
        self.held.clear()

    def add(self, item: ScheduleItem) -> None:
        """Record one item (before it runs), or raise TraceError for what cannot be replayed."""
        if item.assign:
            target = item.bufs[0]
            if id(target.base) in {id(buffer.base) for buffer in self.inputs}:
                slot = next(k for k, buffer in enumerate(self.inputs) if buffer.base is target.base)
                raise TraceError(f"jit({self.name}): assign into argument {slot} ({target!r}): a captured "
                                 "function must not mutate its inputs")
            raise TraceError(f"jit({self.name}): assign into {target!r}, which the function did not create: "
                             "assigns inside a captured function are not supported")
        if any("@" in buffer.device for buffer in item.bufs):
            raise TraceError(f"jit({self.name}): {item.ast.op.name} on MPI devices {[b.device for b in item.bufs]}"
                             " cannot be captured")
        for buffer in item.bufs:
            if id(buffer) not in self.held:
                buffer.ref(1)
                self.held[id(buffer)] = buffer
        self.items.append(item)
        if any(id(buffer.base) in self.traced for buffer in item.inputs) or any(v in self.bound for v in item.var_vals):
            self.traced.update(id(buffer.base) for buffer in item.outputs)

    def check_read(self, lb: Any) -> None:
        """Raise TraceError when the value of `lb` depends on traced memory."""
        if not isinstance(lb, LazyBuffer):
            return
        seen: set[int] = set()
        stack = [lb.base]
        while stack:
            base = stack.pop()
            if id(base) in seen:
                continue
            seen.add(id(base))
            stored = base.realized
            if stored is not None:
                if id(stored.base) in self.traced:
                    raise TraceError(
                        f"jit({self.name}): reading the value of {lb!r}, computed from the inputs, while tracing "
                        "(to_numpy, bool(), int(), float(), np.asarray ...): Python control flow on traced "
                        "values cannot be captured; use array ops (where, maximum) or pass the value as a "
                        "non-array argument")
                continue
            stack.extend(src.base for src in base.srcs)


def _observe(items: Sequence[ScheduleItem]) -> None:
    recorder = active()
    if recorder is not None:
        for item in items:
            recorder.add(item)


def _check_read(lb: Any) -> None:
    recorder = active()
    if recorder is not None:
        recorder.check_read(lb)


SCHEDULE_OBSERVERS.append(_observe)
READ_OBSERVERS.append(_check_read)


# ---------------------------------------------------------------- the plan

# A per-call buffer, built in order into the call's table: ("in", k) argument k's Buffer;
# ("in_root", k) its root; ("out", j) fresh root j; ("view", position, size, dtype, offset): a view of
# the root at `position` of the table, at byte `offset` from that root's start.
Dynamic = tuple[Any, ...]


@dataclass
class Step:
    """One replayed item: its op, AST, table positions of its buffers and, for a kernel, the kernel
    (realize.CompiledKernel) and its parameter values (shape variables, then constants). `variables`:
    the kernel's shape variables that the arguments bind (their values are taken per call), with
    `values` holding the trace's values for them."""

    op: Any
    ast: Any
    positions: tuple[int, ...]
    kernel: Any = None
    values: tuple[int, ...] = ()
    variables: tuple[Variable, ...] = ()

    def parameters(self, bound: Mapping[Variable, int]) -> tuple[int, ...]:
        """The kernel's parameter values for a call whose arguments bind `bound`."""
        if not self.variables:
            return self.values
        count = len(self.variables)
        return tuple(bound.get(variable, value) for variable, value
                     in zip(self.variables, self.values[:count], strict=True)) + self.values[count:]


class Plan:
    """What one traced signature replays (module docstring). `outputs[j]`: (table position of the
    output's Buffer, its base's shape, dtype, device, view tracker relative to the base)."""

    def __init__(self, table: list[Buffer | None], dynamic: list[tuple[int, Dynamic]], steps: list[Step],
                 roots: list[tuple[str, int, Any]], outputs: list[tuple[int, Any, Any, str, Any]],
                 versions: list[tuple[Buffer, int]]) -> None:
        self.table, self.dynamic, self.steps, self.roots = table, dynamic, steps, roots
        self.outputs, self.versions = outputs, versions
        self._held = [buffer for buffer in table if buffer is not None]
        # a replayed CUSTOM call's shapes are those of the trace: a plan with one replays only the
        # values of the bound Variables it was traced with
        self.per_length = any(step.op is LoadOps.CUSTOM for step in steps)
        for buffer in self._held:
            buffer.ref(1)
        self.native = NativePlan(steps, [position for position, _ in dynamic]) if qualifies(steps) else None

    def __del__(self) -> None:
        for buffer in getattr(self, "_held", ()):
            buffer.ref(-1)

    def current(self) -> bool:
        """Whether no fixed Buffer was assigned into since the trace."""
        return all(buffer.version == version for buffer, version in self.versions)

    def run(self, inputs: Sequence[Buffer], bound: Mapping[Variable, int]) -> list[Buffer | None]:
        """Replay on the inputs' Buffers (realized, laid out as at the trace) with the arguments'
        bound Variables' values `bound`; the outputs' Buffers (None for a zero-size output)."""
        table = self.table.copy()
        for position, spec in self.dynamic:
            table[position] = self._make(spec, inputs, table)
        native = self.native
        if native is not None and native.usable and config.get().debug < 2 and native.run(table):
            return self._results(table)
        for step in self.steps:
            bufs = [table[position] for position in step.positions]
            _run_step(step, bufs, bound)  # type: ignore[arg-type]
        return self._results(table)

    def _results(self, table: list[Buffer | None]) -> list[Buffer | None]:
        return [None if position == EMPTY_OUTPUT else table[position] for position, *_ in self.outputs]

    def _make(self, spec: Dynamic, inputs: Sequence[Buffer], table: list[Buffer | None]) -> Buffer:
        kind = spec[0]
        if kind == "in":
            return inputs[spec[1]]
        if kind == "in_root":
            return inputs[spec[1]].base
        if kind == "out":
            device, size, dtype = self.roots[spec[1]]
            return Buffer(device, size, dtype)
        root = table[spec[1]]
        assert root is not None
        return Buffer(root.device, spec[2], spec[3], base=root, offset=spec[4])


def _run_step(step: Step, bufs: list[Buffer], bound: Mapping[Variable, int]) -> None:
    """Run one replayed item on `bufs` (outputs first), as run_schedule would."""
    op = step.op
    if op is KernelOps.SINK:
        for buffer in bufs[len(step.ast.src):]:
            if not buffer.is_allocated():
                buffer.allocate()  # a view of memory an earlier step filled
        replay_lanes.run_kernel(step.kernel, step.parameters(bound), step.ast, bufs, runnable)
    elif op is LoadOps.COPY:
        run_copy(ScheduleItem(step.ast, tuple(bufs)))
    elif op is LoadOps.CUSTOM:
        for buffer in bufs[1:]:
            buffer.allocate()
        run_custom(ScheduleItem(step.ast, tuple(bufs)))
    elif op is LoadOps.EMPTY:
        bufs[0].allocate()
    elif op is LoadOps.VIEW:
        bufs[1].allocate()
        bufs[0].allocate()
    else:
        raise TraceError(f"jit: cannot replay an item of kind {op}")


def build_plan(recorder: Recorder, outs: Sequence[LazyBuffer]) -> Plan:
    """The plan of a finished trace whose function returned `outs` (realized); see the module docstring."""
    items, inputs = recorder.items, recorder.inputs
    stored: list[Buffer | None] = []
    for lb in outs:
        buffer = lb.base.realized
        if buffer is None and not is_empty(lb):
            raise TraceError(f"jit({recorder.name}): output {lb!r} did not realize")
        stored.append(buffer)  # None: a zero-size output (no memory; each call makes a new one)
    written = {id(buffer.base) for item in items for buffer in item.outputs}
    in_roots: dict[int, int] = {}
    for k, buffer in enumerate(inputs):
        in_roots.setdefault(id(buffer.base), k)
    out_roots = {id(buffer.base): buffer.base for buffer in stored
                 if buffer is not None and id(buffer.base) in written and id(buffer.base) not in in_roots}
    layout = _Layout(inputs, in_roots, out_roots)
    replayed = _replayed(items, set(in_roots), out_roots, recorder.bound)
    steps = [_step(item, layout, recorder.bound) for item in replayed]
    outputs = [(EMPTY_OUTPUT if buffer is None else layout.position(buffer), lb.base.shape, lb.dtype, lb.device,
                lb.st) for lb, buffer in zip(outs, stored, strict=True)]
    again = {id(item) for item in replayed}
    pinned = {id(buffer.base) for item in items if id(item) not in again for buffer in item.bufs}
    table = share_intermediates(layout.table, steps, pinned)
    versions = [(buffer, buffer.version) for buffer in table if buffer is not None]
    return Plan(table, layout.dynamic, steps, layout.roots, outputs, versions)


def _replayed(items: Sequence[ScheduleItem], traced: set[int], out_roots: dict[int, Buffer],
              bound: Mapping[Variable, int]) -> list[ScheduleItem]:
    """The items a call must run again: those reading traced memory or using a Variable the
    arguments bind (their outputs then hold traced values too) and those writing an output's
    memory; the others are hoisted (ran once, in the trace)."""
    replayed = []
    for item in items:
        reads_traced = any(id(buffer.base) in traced for buffer in item.inputs) \
            or any(variable in bound for variable in item.var_vals)
        if reads_traced or any(id(buffer.base) in out_roots for buffer in item.outputs):
            replayed.append(item)
        if reads_traced:
            traced.update(id(buffer.base) for buffer in item.outputs)
    return replayed


def _step(item: ScheduleItem, layout: _Layout, bound: Mapping[Variable, int]) -> Step:
    positions = tuple(layout.position(buffer) for buffer in item.bufs)
    if item.ast.op is not KernelOps.SINK:
        return Step(item.ast.op, item.ast, positions)
    kernel, constants = get_kernel(item.bufs[0].device, item.ast)
    variables = tuple(kernel.program.variables)
    try:
        values = tuple(item.var_vals[variable] for variable in variables) + constants
    except KeyError as error:
        raise TraceError(f"jit: no value for symbolic variable {error} of {kernel.program.name}") from error
    per_call = variables if any(variable in bound for variable in variables) else ()
    return Step(item.ast.op, item.ast, positions, kernel, values, per_call)


class _Layout:
    """Numbers the Buffers of the replayed items: `table[p]` a fixed Buffer or None, `dynamic` the
    per-call Buffers as (p, how to make it), in an order where a root comes before its views."""

    def __init__(self, inputs: Sequence[Buffer], in_roots: dict[int, int], out_roots: dict[int, Buffer]) -> None:
        self.inputs, self.in_roots = inputs, in_roots
        self.in_exact: dict[int, int] = {}
        for k, buffer in enumerate(inputs):
            self.in_exact.setdefault(id(buffer), k)
        self.out_numbers = {key: number for number, key in enumerate(out_roots)}
        self.roots = [(root.device, root.size, root.dtype) for root in out_roots.values()]
        self.table: list[Buffer | None] = []
        self.dynamic: list[tuple[int, Dynamic]] = []
        self.positions: dict[int, int] = {}

    def position(self, buffer: Buffer) -> int:
        found = self.positions.get(id(buffer))
        if found is not None:
            return found
        root = buffer.base
        spec: Dynamic | None = None
        if id(buffer) in self.in_exact:
            spec = ("in", self.in_exact[id(buffer)])
        elif id(root) in self.in_roots:
            spec = ("in_root", self.in_roots[id(root)]) if buffer is root else \
                ("view", self.position(root), buffer.size, buffer.dtype, buffer.offset)
        elif id(root) in self.out_numbers:
            spec = ("out", self.out_numbers[id(root)]) if buffer is root else \
                ("view", self.position(root), buffer.size, buffer.dtype, buffer.offset)
        position = self.positions[id(buffer)] = len(self.table)
        self.table.append(buffer if spec is None else None)
        if spec is not None:
            self.dynamic.append((position, spec))
        return position
