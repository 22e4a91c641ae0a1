"""Running schedules: `run_schedule`, `realize`, DEBUG lines and IR dumps (the items that are not
kernels run in engine/items.py; stage names and AST text are engine/dumps.py; the kernels, their
pipeline and the program cache are engine/kernel_cache.py, whose names this module re-exports).

Diagnostics (read from `config.get()` at call time):
- `debug` 1: one line per `realize` (items, kernels, time); 2: one line per item (device, kernel
  name, global shape, time, GB/s, GFLOP/s); 3: also each newly compiled kernel's AST and IR;
  4: also its source.
- `dump_ir`: comma-separated stages printed whatever `debug` is: "schedule" (the items of each
  `run_schedule`), "ast", "ir", "source" (per newly compiled kernel).

Invariants: a lazy base is realized exactly when its Buffer is allocated (fast/graph/node.py), so
`run_schedule` realizes by allocating outputs just before filling them; an assign item bumps its
target's version after it has run, and `realize` then tells the lazy layer (`assign_realized`).
Realized bases drop their sources after `realize`.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from fast import config
from fast.device import Buffer, Device
from fast.engine import gathers, replay, replay_lanes
from fast.engine.dumps import dump_stages
from fast.engine.items import require_allocated, run_copy, run_custom
from fast.engine.kernel_cache import (
    _CACHE_LOCK,
    AST_KERNELS,
    COMPILE_OBSERVERS,
    PROGRAMS,
    CompiledKernel,
    _pending_build,
    ast_key,
    compile_item,
    get_kernel,
    kernel_for,
    lowered,
    lowering_settings,
    runnable,
    uses_parameters,
)
from fast.engine.prebuild import prebuild
from fast.engine.schedule import ScheduleItem, Step, check_stale_outputs, lazy_buffers, plan_schedule
from fast.graph.node import LazyBuffer
from fast.graph.versions import assign_realized
from fast.ops import KernelOps, LazyOp, LoadOps
from fast.runtime.cpu import thread_count
from fast.runtime.launch import launch

__all__ = ["AST_KERNELS", "COMPILE_OBSERVERS", "PROGRAMS", "REALIZE_OBSERVERS", "RECORDING", "SCHEDULE_OBSERVERS",
           "CompiledKernel", "ast_key", "compile_item", "get_kernel", "kernel_for", "lowered", "lowering_settings",
           "realize", "run_schedule", "runnable", "uses_parameters", "_CACHE_LOCK"]

# Observers that fast/debug registers (GRAPH=1 pictures, the DEBUG=2 schedule table); the engine only calls
# them: each of REALIZE_OBSERVERS with the outputs of every `realize` before anything is scheduled, each of
# SCHEDULE_OBSERVERS with the items of every `run_schedule` before they run. They must not change the graph.
REALIZE_OBSERVERS: list[Callable[[Sequence[LazyBuffer]], object]] = []
SCHEDULE_OBSERVERS: list[Callable[[Sequence[ScheduleItem]], None]] = []
# `on` is set on a thread while fast/engine/capture.py records a traced function there: each realize then
# schedules afresh (no schedule replay), so every item runs through `run_schedule` and its observers.
RECORDING = threading.local()


# ---------------------------------------------------------------- running items

def _run_kernel(item: ScheduleItem, timed: bool) -> str:
    device = item.bufs[0].device
    kernel, constants = get_kernel(device, item.ast)
    program = kernel.program
    if len(constants) != program.const_slots:
        raise RuntimeError(f"run_schedule: {program.name} takes {program.const_slots} constants, got {len(constants)}")
    require_allocated(item)
    if item.index_checks:  # out-of-range gather indices raise before anything is written
        gathers.check_indices(item.index_checks)
    for buffer in item.outputs:
        buffer.allocate(zeroed=False)  # a kernel writes every element of its outputs
    guarded = bool(program.bounded_inputs)
    if guarded:
        kernel = runnable(kernel, item.ast, device, item.bufs)
        program = kernel.program
    try:
        values = tuple(item.var_vals[variable] for variable in program.variables) + constants
    except KeyError as error:
        raise RuntimeError(f"run_schedule: no value for symbolic variable {error} of {program.name}") from error
    elapsed = launch(kernel.runner, [buffer.handle for buffer in item.bufs], values, program.threaded,
                     program.mem_bytes + program.flops, timed, program.chunks_per_thread)
    if not timed:  # the description is for DEBUG=2 lines only
        return program.name
    info = f"{kernel.program.name:<28} global {str(item.ast.src[0].arg.st.shape):<16}"
    if guarded and not program.bounded_inputs:
        info += " (without FMA: an input is beyond the bound)"
    if elapsed is not None:
        seconds = max(elapsed, 1e-9)
        info += (f" {elapsed * 1e3:9.3f} ms {kernel.program.mem_bytes / seconds * 1e-9:9.3f} GB/s"
                 f" {kernel.program.flops / seconds * 1e-9:9.3f} GFLOP/s")
    return info


def _run_item(item: ScheduleItem, timed: bool) -> str:
    """Run one item; returns its DEBUG=2 description (with time and rates when `timed`)."""
    op, device = item.ast.op, item.bufs[0].device
    if op is not LoadOps.COPY and "@" in device and Device[device].remote:
        for buffer in item.outputs:  # placeholders: another rank runs this item
            buffer.allocate(zeroed=False)
        return f"{op.name.lower()} on {device} (another rank's)"
    if op is KernelOps.SINK:
        return _run_kernel(item, timed)
    start = time.perf_counter()
    if op is LoadOps.COPY:
        info = run_copy(item)
    elif op is LoadOps.CUSTOM:
        info = run_custom(item)
    elif op is LoadOps.EMPTY:
        item.bufs[0].allocate()
        info = f"empty {item.bufs[0].nbytes} bytes"
    elif op is LoadOps.VIEW:
        require_allocated(item)
        item.bufs[0].allocate()
        info = f"view of {item.bufs[1]!r} at byte {item.bufs[0].offset}"
    else:
        raise RuntimeError(f"run_schedule: cannot run an item of kind {op}")
    return f"{info:<45} {(time.perf_counter() - start) * 1e3:9.3f} ms" if timed else info


def _run_and_record(number: int, item: ScheduleItem, debug: int, printing: Any = None) -> None:
    """Run one item, bump the versions of an assign's targets once it ran, print its DEBUG=2 line
    (under `printing`, a lock, when items run on several threads)."""
    info = _run_item(item, timed=debug >= 2)
    if item.assign:
        for buffer in item.outputs:
            buffer.bump_version()
    if debug >= 2:
        line = f"*** {item.bufs[0].device:<10} {number:4d} {info}"
        if printing is None:
            print(line)
        else:
            with printing:
                print(line, flush=True)


def _compile_ahead(items: Sequence[ScheduleItem]) -> None:
    """Compile (or find) every kernel of a parallel run on the caller's thread, in schedule order, so
    compiles and their DEBUG>=3 / DUMP_IR output keep that order and the lanes' threads, once
    started, only run kernels (engine/prebuild.py builds the new ones beforehand, in parallel, each
    LLVM compile in its own context). A kernel that fails to compile is left to its item, which
    compiles it again and raises in schedule order."""
    prebuild(items, _pending_build, thread_count())
    for item in items:
        if item.ast.op is KernelOps.SINK:
            try:
                get_kernel(item.bufs[0].device, item.ast)
            except Exception:  # raised again, in schedule order, by the item itself
                continue


def _run_devices_in_parallel(items: Sequence[ScheduleItem], debug: int, plans: list[Any] | None) -> bool:
    """Run the items with each device's items on its own thread (engine/parallel.py) when config
    `parallel_devices` is on and `parallel.lane_plan` finds it worth it; False (nothing run)
    otherwise. `plans`: a replayed template's memo of its plan (empty until the first replay)."""
    first = items[0].bufs[0].device
    if all(item.bufs[0].device == first for item in items) or not config.get().parallel_devices:
        return False  # the common single-device schedule: decided in a few attribute reads
    if any("@" in buffer.device for item in items for buffer in item.bufs):
        return False  # MPI transfers run in schedule order on the caller's thread (docs/mpi.md)
    from fast.engine import parallel  # here, not at the top: the single-device path never needs it

    if plans:
        plan = plans[0]
    else:
        plan = parallel.lane_plan(items, config.get().parallel_devices_min_work)
        if plans is not None:
            plans.append(plan)
    if plan is None or parallel.in_lane():
        return False
    _compile_ahead(items)
    parallel.run_parallel(items[:plan.cut], plan.lanes,
                          lambda number, item: _run_and_record(number, item, debug, parallel.PRINT_LOCK), plan.waits)
    for number in range(plan.cut, len(items)):  # the small items after the last large one: no hand-offs
        _run_and_record(number, items[number], debug)
    return True


def run_schedule(items: Sequence[ScheduleItem], plans: list[Any] | None = None) -> None:
    """Run the items (see the module docstring for what is printed). Items on one device run in
    schedule order; items on different devices run concurrently when they do not depend on each
    other (engine/parallel.py), and their DEBUG=2 lines then follow completion order. The first
    error in schedule order is raised; items after it are not started. `plans`: see
    `_run_devices_in_parallel`."""
    debug = config.get().debug
    for observe in SCHEDULE_OBSERVERS:
        observe(items)
    if "schedule" in dump_stages():
        for number, item in enumerate(items):
            print(f"schedule {number}: {item.ast.op.name} bufs={list(item.bufs)}")
    if len(items) > 1 and _run_devices_in_parallel(items, debug, plans):
        return
    if len(items) > 1:
        prebuild(items, _pending_build, thread_count())
    for number, item in enumerate(items):
        _run_and_record(number, item, debug)


# ---------------------------------------------------------------- public helpers

def realize(*buffers: Any) -> None:
    """Run everything needed so the buffers (LazyBuffer or MultiLazyBuffer) hold values. A graph
    whose structure was realized before replays its recorded schedule (engine/replay.py). Buffers
    whose bases all hold values return at once (after the stale-view check the scheduler would make):
    their schedule is empty, and `to_numpy` asks for it twice on every read."""
    start = time.perf_counter()
    outs = lazy_buffers(buffers)
    for observe in REALIZE_OBSERVERS:
        observe(outs)
    if all(out.base.realized is not None for out in outs):
        check_stale_outputs(outs)
        return
    signature, template = (None, None) if getattr(RECORDING, "on", False) else replay.prepare(outs)
    if signature is not None and template is not None and _replay(template, signature):
        replay.drop_sources(template, signature)
        if config.get().debug >= 1:
            _print_realized(start, [ast for ast, _ in template.items])
        return
    steps = _schedule_and_run(outs)
    if signature is not None and (recorded := replay.record(signature, steps)) is not None:
        replay.TEMPLATES.store(signature, recorded)
    if config.get().debug >= 1:
        _print_realized(start, [step.item.ast for step in steps])


def _print_realized(start: float, ran: list[LazyOp]) -> None:
    """DEBUG >= 1: one line per realize that ran anything (`ran`: what it ran)."""
    if ran:
        kernels = sum(ast.op is KernelOps.SINK for ast in ran)
        print(f"realize: {len(ran)} items, {kernels} kernels in {(time.perf_counter() - start) * 1e3:.2f} ms")


def _replay(template: replay.Template, signature: replay.Signature) -> bool:
    """Run a recorded schedule over the graph of `signature`; False (nothing run) when the graph's
    constants differ from the recorded ones and the template cannot take new values."""
    if template.index_checks:  # gather indices (leaves, realized): checked before any item runs
        leaves = signature.leaves
        gathers.check_indices(tuple(gathers.IndexCheck(leaves[number].realized, *rest)  # type: ignore[arg-type]
                                    for number, *rest in template.index_checks))
    same_values = tuple(signature.consts) == template.consts
    settings = config.get()
    quiet = settings.debug < 2 and (not settings.dump_ir or not dump_stages())
    plain = template.direct and quiet
    bits = None if same_values or not plain else replay.slot_bits(template, signature)
    if not same_values and bits is None:
        return False
    if not plain:
        if not (same_values and quiet
                and replay_lanes.run(template, signature, get_kernel, runnable)):
            run_schedule(replay.instantiate(template, signature), template.plans)
        return True
    buffers = replay.buffers_of(template, signature)
    kernels = template.kernels if bits is None and template.kernels else _template_kernels(template, buffers, bits)
    for (ast, _), bufs, (kernel, constants) in zip(template.items, buffers, kernels, strict=True):
        replay_lanes.run_kernel(kernel, constants, ast, bufs, runnable)
    return True


def _template_kernels(template: replay.Template, buffers: list[tuple[Buffer, ...]],
                      bits: list[tuple[int, ...]] | None) -> list[tuple[CompiledKernel, tuple[int, ...]]]:
    """The kernel and constant parameters of each replayed item: for the recorded constants (kept in
    the template: the key fixes them) or for the slot values `bits`."""
    devices = [bufs[0].device for bufs in buffers]
    asts = [ast for ast, _ in template.items]
    if bits is None:
        template.kernels[:] = [get_kernel(device, ast) for device, ast in zip(devices, asts, strict=True)]
        return template.kernels
    return [kernel_for(device, ast, structure, item_bits, own_values=False) for device, ast, structure, item_bits
            in zip(devices, asts, template.structures, bits, strict=True)]


def _schedule_and_run(outs: list[LazyBuffer]) -> list[Step]:
    """Schedule `outs`, run the items, do the assign bookkeeping and drop realized bases' sources."""
    steps = plan_schedule(outs)
    items = [step.item for step in steps]
    run_schedule(items)
    assigned = {id(step.owner): step.owner for step in steps if step.item.assign and step.owner.op is LoadOps.ASSIGN}
    for owner in assigned.values():
        assign_realized(owner.srcs[1])  # a VIEW base assigned into expects its new contents
    for step in steps:  # a kernel with several outputs has several owners
        for owner in step.owners:
            if owner.realized is not None:
                owner.srcs = ()  # the graph below a realized base can be freed; `op` stays
    return steps
