"""Compiling compare's kernels ahead: the fused schedule's, and every node's alone run's, built in a
few compiler runs on other threads while compare goes on (with a cold kernel cache, compiling a
hundred single-op kernels one process at a time took most of compare's time).

`Builder.submit(items)` lowers and renders, on the caller's thread, each kernel of `items` that this
process has not compiled (engine/realize.py `_pending_build`: what running the item would compile,
so the program store then holds it for the run), and hands the sources to one background thread,
which builds them: CLANG kernels together (runtime/clang_batch.py: a few C files, on up to
`thread_count()` compiler processes at once), other compilers that may build on other threads
(`Compiler.parallel_builds`) one by one. A long kernel (`LARGE_LINES`: a GEMM's) gains nothing from
sharing a file: it is handed to a pool of `thread_count()` threads as soon as it is lowered, so it
compiles while the next ones are lowered. `wait()` returns once everything submitted is built.
A structure seen again with other constants is also rendered with its constants as parameters (the
kernel its second item runs, engine/realize.py `get_kernel`).

`alone_items(runs)`: the items the alone runs of alone.py will schedule, planned without running
anything: each node over placeholders, realized buffers of the shape, dtype and device of
reference's values of its inputs, allocated and never written (a movement op or constant input is
rebuilt over them as `AloneRuns.input` does); a movement op that will be probed, once per probe
signature, with the copy that reads it back (engine/readback.py). A node whose planning fails,
whose inputs are on DISK or sharded, is left out: its run compiles what it needs, as before.

Only time changes: every item still compiles, or finds, its own kernel when it runs; a kernel that
was not built ahead (or failed to) is compiled then.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import fast
from fast.codegen.const_args import kernel_keys
from fast.debug.actual import is_input
from fast.debug.alone import AloneRuns
from fast.debug.records import Record, is_movement
from fast.debug.runs import recorded_config
from fast.engine.readback import _readable_on_host
from fast.engine.realize import _pending_build, lowered
from fast.engine.schedule import ScheduleItem
from fast.ops import KernelOps
from fast.runtime import clang_batch
from fast.runtime.base import Compiler
from fast.runtime.clang import ClangCompiler
from fast.runtime.cpu import thread_count


def kernels(items: Sequence[ScheduleItem]) -> Iterator[tuple[Compiler, clang_batch.Kernel]]:
    """(compiler, kernel) of each item's kernel that running it would compile, each once (module
    docstring)."""
    firsts: dict[Any, tuple[int, ...]] = {}  # (device, structure) -> the constants of its first item
    done: set[Any] = set()
    for item in items:
        if item.ast.op is not KernelOps.SINK:
            continue
        try:
            device = item.bufs[0].device
            structure, bits = kernel_keys(item.ast)
            params = firsts.setdefault((device, structure), bits) != bits
            key = (device, structure) if params else (device, structure, bits)
            if key in done:
                continue
            done.add(key)
            found = _pending_build(item)
            if found is None:
                continue
            program, source = lowered(item.ast, device, const_params=params)
            yield found[0], clang_batch.Kernel(program.name, source)
        except Exception:  # noqa: BLE001 - raised again, in schedule order, by the item itself
            continue


def _build(compiler: Compiler, group: list[clang_batch.Kernel]) -> None:
    if isinstance(compiler, ClangCompiler):
        clang_batch.build(compiler, group, thread_count())
        return
    for kernel in group:
        _compile(compiler, kernel.source)


LARGE_LINES = 500  # a kernel this long compiles for longer than a compiler run costs to start: built alone, at once


def _compile(compiler: Compiler, source: str) -> None:
    try:
        compiler.compile_cached(source)
    except Exception:  # noqa: BLE001 - left to the item
        pass


class Builder:
    """Builds submitted items' kernels on background threads (module docstring): a long kernel
    (`LARGE_LINES`) as soon as it is lowered, on its own; the others together once `submit` has
    lowered them all."""

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None  # one thread handing out the batches in turn
        self.large: ThreadPoolExecutor | None = None
        self.pending: list[Future[None]] = []
        self.sources: set[str] = set()

    def _large(self, compiler: Compiler, source: str) -> Future[None]:
        if self.large is None:
            self.large = ThreadPoolExecutor(max_workers=thread_count(), thread_name_prefix="fast-debug-large")
        return self.large.submit(_compile, compiler, source)

    def submit(self, items: Sequence[ScheduleItem]) -> list[Future[None]]:
        """Lower the new kernels of `items` here and build them in the background: the builds, for
        `wait`."""
        groups: dict[int, tuple[Compiler, list[clang_batch.Kernel]]] = {}
        builds = []
        for compiler, kernel in kernels(items):
            if kernel.source in self.sources or not compiler.parallel_builds:
                continue
            self.sources.add(kernel.source)
            if kernel.source.count("\n") >= LARGE_LINES:
                if not compiler.is_cached(kernel.source):
                    builds.append(self._large(compiler, kernel.source))
                continue
            groups.setdefault(id(compiler), (compiler, []))[1].append(kernel)
        if groups and self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fast-debug-build")
        for compiler, group in groups.values():
            assert self.pool is not None
            builds.append(self.pool.submit(_build, compiler, group))
        self.pending += builds
        return builds

    def wait(self, builds: Sequence[Future[None]] | None = None) -> None:
        """Return once `builds` (default: everything submitted) are built; an error is left to the item."""
        for future in self.pending if builds is None else builds:
            future.exception()

    def close(self) -> None:
        """Drop the builds not started, wait for those running (they write into the cache folder)."""
        for pool in (self.pool, self.large):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self.pool = self.large = None


class Ahead:
    """compare's builds (module docstring) and their time, added to `seconds` as the stages "ahead"
    (lowering and planning here) and "waiting for builds": the user's schedule at once
    (`start`), then before the fused schedule runs, its new kernels and every alone run's
    (`before_fused`, which returns once the fused schedule's are built)."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.builder, self.seconds = Builder(), seconds
        self.fused: list[Future[None]] = []
        self.planned_alone = False

    def _add(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - since
        return now

    def start(self, buffers: Sequence[Any]) -> None:
        """Build the kernels of the user's own schedule of `buffers` (what the fused clone will run
        when the user realized nothing of it): they compile while reference runs."""
        start = time.perf_counter()
        try:
            self.fused = self.builder.submit(plan_schedule_items(buffers))
        except Exception:  # noqa: BLE001 - the fused run meets it
            self.fused = []
        self._add("ahead", start)

    def before_fused(self, alone: AloneRuns, items: list[ScheduleItem]) -> None:
        start = time.perf_counter()
        self.fused += self.builder.submit(items)
        if not self.planned_alone:
            self.planned_alone = True
            self.builder.submit(alone_items(alone))
        start = self._add("ahead", start)
        self.builder.wait(self.fused)
        self._add("waiting for builds", start)

    def wait(self) -> None:
        start = time.perf_counter()
        self.builder.wait()
        self._add("waiting for builds", start)

    def close(self) -> None:
        self.builder.close()


def plan_schedule_items(buffers: Sequence[Any]) -> list[ScheduleItem]:
    """The items `fast.realize(*buffers)` would run (nothing is run or changed)."""
    return fast.schedule(*[getattr(buffer, "lazy", buffer) for buffer in buffers])


class Placeholders:
    """Realized, unwritten buffers standing for reference's values in a planned alone run: one per
    input record of the run (two input records of one signature get two buffers, as their copies
    would be), reused across runs."""

    def __init__(self) -> None:
        self.pool: dict[tuple[Any, ...], Any] = {}

    def get(self, obj: Any, nth: int) -> Any:
        """The `nth` placeholder of the shape, dtype and device of reference's `obj`."""
        if hasattr(obj, "lbs") or obj.device.startswith("DISK:") or obj.dtype.name == "bfloat16" \
                or not all(isinstance(size, int) for size in obj.shape):
            raise ValueError("compare plans no alone run over this input")
        key = (tuple(obj.shape), obj.dtype.name, obj.device, nth)
        if key not in self.pool:
            buffer = fast.LazyBuffer.loadop(fast.LoadOps.EMPTY, tuple(obj.shape),
                                            getattr(fast.dtypes, obj.dtype.name), obj.device)
            buffer.buffer.allocate()
            self.pool[key] = buffer
        return self.pool[key]


def _planned(runs: AloneRuns, placeholders: Placeholders, record: Record) -> Any:
    """`record` built over placeholders (module docstring)."""
    taken: dict[Record, Any] = {}

    def source(input_record: Record) -> Any:
        if input_record in runs.constants or is_movement(input_record):
            inputs = [source(s) for s in runs.nodes.inputs[input_record]]
            with recorded_config(input_record):
                return input_record.apply(fast, inputs, runs.devices)
        if input_record not in taken:
            obj = runs.expected[input_record].obj
            nth = sum(1 for other in taken if runs.expected[other].obj is not None and
                      _signature(runs.expected[other].obj) == _signature(obj))
            taken[input_record] = placeholders.get(obj, nth)
        return taken[input_record]
    inputs = [source(s) for s in runs.nodes.inputs[record]]
    with recorded_config(record):
        return record.apply(fast, inputs, runs.devices)


def _signature(obj: Any) -> tuple[Any, ...]:
    return tuple(obj.shape), obj.dtype.name, str(obj.device)


def _probe_plan(runs: AloneRuns, placeholders: Placeholders, record: Record) -> list[ScheduleItem]:
    """The items of `record`'s probe (alone.probe_movement): the op over a probe, read back."""
    source = runs.expected[runs.nodes.inputs[record][0]].obj
    obj = record.apply(fast, [placeholders.get(source, 0)], runs.devices)
    if math.prod(obj.shape) == 0:
        return fast.schedule(obj)
    return fast.schedule(obj) + fast.schedule(_readable_on_host(obj))


def _run_plan(obj: Any, constant: bool) -> list[ScheduleItem]:
    """The items realizing `obj` and, for a `constant` expression or a view of a realized buffer
    (nothing to realize), those of the copy that reads it back (alone.py reads it with `to_numpy`)."""
    items = fast.schedule(obj)
    if items or hasattr(obj, "lbs") or (obj.base is obj and obj.realized is not None) \
            or not (constant or obj.base.realized is not None):
        return items
    return fast.schedule(_readable_on_host(obj))


def alone_items(runs: AloneRuns) -> list[ScheduleItem]:
    """The schedule items of every alone run `runs` would make, planned (module docstring)."""
    placeholders, probed, items = Placeholders(), set(), []
    for record in runs.nodes.order:
        if is_input(record) or not all(runs.expected[s].has_value for s in runs.nodes.inputs[record]):
            continue
        try:
            key = runs.probe_key(record)
            if key is None:
                items += _run_plan(_planned(runs, placeholders, record), record in runs.constants)
            elif key not in probed:
                probed.add(key)
                items += _probe_plan(runs, placeholders, record)
        except Exception:  # noqa: BLE001 - the run itself will meet it
            continue
    return items
