"""Replaying a multi-device template with the other devices' kernels as native jobs (`run`, called
by engine/realize.py's `_replay`).

A recorded multi-device schedule (a sharded graph: each device's kernels, then the all-reduce's
small copies and kernels) otherwise replays through `run_schedule`: its items are rebuilt, their
kernels looked up, and each lane but the caller's runs as a Python job on a worker thread, which
takes the GIL for every item (and, on a VM, starts 100-200 µs late when it has to wait for it).
Here every lane but the first becomes one `NativeBatch` of its kernels (runtime/workers.py), a
task on the crew's claim board: a worker that claims it calls the kernels in order without the GIL.
The caller runs the first lane, then claims every batch no worker has claimed yet and runs it
itself (natively), and waits only for batches a worker has claimed: a lane whose thread does not
get a core holds the realize no longer than the work it claimed. The first lane runs under the
thread cap the lanes would have (`cpu.thread_count() // lanes`), the items after the lanes in
schedule order with no cap, each with its kernel resolved once per template. The lanes are the lane plan's, each
cut before its first item that waits for another lane's item (`native_plan`: with three devices
the all-reduce's first copy lands in a lane); what is cut off runs after the lanes.

When: the template's lane plan exists (its first replay ran through `run_schedule`, which made
it), at least two lanes keep items, every item of the other lanes is a kernel
that needs no FMA guard (which reads values an earlier kernel of the lane may write) and would run
on one thread under the cap, and the crew of workers is free and accepts the calls. Otherwise `run`
returns False having run nothing, and the caller replays through `run_schedule`. The effects are
those of `run_schedule` on the same items: the same kernels on the same buffers, each device's in
schedule order, the items after the lanes once the lanes are done.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from fast import config
from fast.device import Buffer
from fast.engine import parallel, replay
from fast.engine.items import run_copy
from fast.engine.schedule import ScheduleItem
from fast.ops import KernelOps, LazyOp
from fast.runtime import cpu, workers
from fast.runtime.launch import launch, thread_cap, threads_for

KernelOf = Callable[[str, LazyOp], tuple[Any, tuple[int, ...]]]  # realize.get_kernel
Guard = Callable[[Any, LazyOp, str, Sequence[Buffer]], Any]  # realize.runnable


class NativePlan(NamedTuple):
    """The lanes of a `LanePlan` cut before each lane's first item that waits for another lane's
    item, and everything else (`tail`, schedule order), run once the lanes are done."""

    lanes: list[list[int]]
    tail: list[int]


def native_plan(plan: parallel.LanePlan, count: int) -> NativePlan | None:
    """The `NativePlan` of `plan` for `count` items, or None when fewer than two lanes keep items.
    Moving an item after the lanes keeps every dependency: an item that depends on a moved one is
    later in its lane (moved too) or waits for it across lanes (moved too)."""
    lanes = []
    for lane in plan.lanes:
        keep = next((position for position, index in enumerate(lane) if plan.waits[index]), len(lane))
        if keep:
            lanes.append(lane[:keep])
    if len(lanes) < 2:
        return None
    kept = {index for lane in lanes for index in lane}
    return NativePlan(lanes, [index for index in range(count) if index not in kept])


def run(template: replay.Template, signature: replay.Signature, kernel_of: KernelOf, guard: Guard) -> bool:
    """Replay `template` over the graph of `signature` with native lanes; False (nothing run) when
    the plan does not allow it (module docstring)."""
    if not template.plans or template.plans[0] is None or parallel.in_lane() or not config.get().parallel_devices:
        return False
    if not template.native:
        template.native.append(native_plan(template.plans[0], len(template.items)))
    plan: NativePlan | None = template.native[0]
    if plan is None:
        return False
    buffers = replay.buffers_of(template, signature)
    kernels = _kernels(template, buffers, kernel_of)
    cap = max(1, cpu.thread_count() // len(plan.lanes))
    jobs = _native_jobs(template, plan.lanes[1:], kernels, buffers, cap)
    team = workers.crew(len(plan.lanes) - 1) if jobs is not None else None
    if jobs is None or team is None or not all(team.accepts(job) for job in jobs):
        return False
    if not team.lock.acquire(blocking=False):
        return False
    try:
        team.batches(lambda: _run_items(template, plan.lanes[0], kernels, buffers, guard, cap), jobs)
    finally:
        team.lock.release()
    _run_items(template, plan.tail, kernels, buffers, guard, None)
    return True


def _kernels(template: replay.Template, buffers: list[tuple[Buffer, ...]],
             kernel_of: KernelOf) -> list[tuple[Any, tuple[int, ...]] | None]:
    """Per item, its kernel and constant parameters (None for a copy); found once per template
    (with the recorded constant values: `run` is only called when the graph's are the same; the
    devices are part of the template's key)."""
    if not template.kernels:
        template.kernels[:] = [kernel_of(bufs[0].device, ast) if ast.op is KernelOps.SINK else None
                               for (ast, _), bufs in zip(template.items, buffers, strict=True)]
    return template.kernels


def _native_jobs(template: replay.Template, lanes: list[list[int]], kernels: list[Any],
                 buffers: list[tuple[Buffer, ...]], cap: int) -> list[workers.NativeBatch] | None:
    """One batch of native calls per lane, its outputs allocated; None when a lane holds anything
    else than kernels that run natively on one thread."""
    jobs: list[workers.NativeBatch] = []
    for lane in lanes:
        calls: list[workers.NativeCall] = []
        for index in lane:
            found, (ast, _) = kernels[index], template.items[index]
            if found is None or found[0].program.bounded_inputs:
                return None
            kernel, constants = found
            program, native_call = kernel.program, getattr(kernel.runner, "native_call", None)
            with thread_cap(cap):
                if native_call is None or (program.threaded and threads_for(program.mem_bytes + program.flops) > 1):
                    return None
            for buffer in buffers[index][:len(ast.src)]:
                buffer.allocate(zeroed=False)
            values = (*constants, 0, 1) if program.threaded else constants
            calls.append(native_call([buffer.handle for buffer in buffers[index]], values))
        jobs.append(workers.NativeBatch(tuple(calls)))
    return jobs


def _run_items(template: replay.Template, indices: Iterable[int], kernels: list[Any],
               buffers: list[tuple[Buffer, ...]], guard: Guard, cap: int | None) -> None:
    """Run the items `indices` in order on this thread (kernels under the thread cap `cap`, if any)."""
    if cap is not None:
        with thread_cap(cap):
            _run_items(template, indices, kernels, buffers, guard, None)
        return
    for index in indices:
        ast, bufs, found = template.items[index][0], buffers[index], kernels[index]
        if found is None:
            run_copy(ScheduleItem(ast, bufs))
        else:
            run_kernel(found[0], found[1], ast, bufs, guard)


def run_kernel(kernel: Any, constants: tuple[int, ...], ast: LazyOp, bufs: Sequence[Buffer], guard: Guard) -> None:
    """Launch a replayed item's kernel on `bufs`: its outputs allocated, the FMA guard's choice of
    kernel (`guard`, realize.runnable) when it has fused multiply-adds (also realize's direct path)."""
    for buffer in bufs[:len(ast.src)]:  # a SINK's sources are its STOREs, one per output
        buffer.allocate(zeroed=False)
    if kernel.program.bounded_inputs:
        kernel = guard(kernel, ast, bufs[0].device, bufs)
    program = kernel.program
    launch(kernel.runner, [buffer.handle for buffer in bufs], constants, program.threaded,
           program.mem_bytes + program.flops, chunks_per_thread=program.chunks_per_thread)
