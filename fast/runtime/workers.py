"""Hot worker threads for the shares of a threaded kernel: hand-offs in microseconds.

A thread pool hands work over through a condition variable: on virtual machines a sleeping thread
takes 100-500 µs to wake, which is a tenth of a 4 ms kernel. A `Crew` keeps its workers polling a
shared generation counter in native code (GIL released) for `config.worker_spin_us` (WORKER_SPIN_US,
2 ms by default) after each job, so the next job of a loop of realizes starts almost at once; a
worker that saw nothing for that long sleeps on an Event, which posting also sets (the counter stays
the source of truth, the Event is only a doorbell). A worker woken by its doorbell's timeout, with
no job, sleeps again at once: an idle process does not poll.

Native jobs. A kernel share is posted as a `NativeCall` (a function address and its integer
arguments) when the program offers one: the worker's polling loop calls it itself and publishes
the finished generation, without returning to Python. Neither side then takes the GIL between the
post and the end of the share; a worker that had to take it would sleep on the GIL's condition
variable while the caller holds it, and wake 100-200 µs late (measured on the 2-core Xeon: the
caller waited 0.15-0.18 ms for the other share of a 3 ms row sum). Every kernel parameter is a
pointer or an int64, which the C ABIs of x86-64 and AArch64 pass alike in integer registers, so one
calling loop serves every kernel of up to `MAX_NATIVE_ARGS` parameters; on other machines, and for
longer parameter lists, shares are Python calls.

The polling loops are JIT-compiled with llvmlite (already a dependency); without it, `crew()`
returns None and callers use a plain thread pool. Polling is bounded in time on both sides (the
caller waiting for a share polls as long, then sleeps), so an oversubscribed machine costs at most
that much busy time. The budget is converted to polls once per process (`polls_per_us`: a
calibration of the loop, whose `pause` takes 10-150 cycles by CPU).

Protocol, per worker, over int64 words (`_Worker.words`): the caller writes the job (the number of
native calls, 0 for a Python job, then per call the function address, the argument count and the
arguments), then publishes the generation in word 0 with a release store; the worker runs the job
and publishes the generation in word 1. A `NativeBatch` (one device's kernels, in order) runs its
calls one after another.
A Python job's callable travels in `_Worker.job`, read and written with the GIL held.
"""
from __future__ import annotations

import ctypes
import functools
import platform
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fast import config

CALIBRATION_POLLS = 20_000  # polls timed once per process to convert WORKER_SPIN_US to polls
MAX_NATIVE_ARGS = 40  # a kernel with more parameters runs its share as a Python call
JOB_WORDS = 512  # room for a worker's native calls: two words per call plus its arguments
MAX_NAP_S = 2.5e-4  # a caller waiting past its polling for a native job sleeps at most this long between looks
_POSTED, _FINISHED, _CALLS, _FIRST_CALL = 0, 1, 2, 3  # the job words (then function, count, arguments per call)


@dataclass(frozen=True)
class NativeCall:
    """A call of the native function at `address` with int64/pointer `arguments` (no GIL needed)."""

    address: int
    arguments: tuple[int, ...]


@dataclass(frozen=True)
class NativeBatch:
    """Native calls that one worker makes one after another (the kernels of one device's lane)."""

    calls: tuple[NativeCall, ...]

    def words(self) -> int:
        """The job words the calls take."""
        return sum(2 + len(call.arguments) for call in self.calls)


PythonCall = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
Job = NativeCall | NativeBatch | PythonCall


def _ir(pause: str, declare: str) -> str:
    """The module: `fast_spin` (poll a word), `fast_publish` (release store), `fast_serve` (a
    worker's loop: poll for a job, run native jobs, return on a Python job or when idle)."""
    cases = " ".join(f"i64 {count}, label %call{count}" for count in range(MAX_NATIVE_ARGS + 1))
    calls = []
    for count in range(MAX_NATIVE_ARGS + 1):
        loads = [f"  %i{count}_{k} = add i64 %base, {k}\n"
                 f"  %p{count}_{k} = getelementptr i64, ptr %job, i64 %i{count}_{k}\n"
                 f"  %a{count}_{k} = load i64, ptr %p{count}_{k}, align 8\n" for k in range(count)]
        arguments = ", ".join(f"i64 %a{count}_{k}" for k in range(count))
        calls.append(f"call{count}:\n{''.join(loads)}  call void %f({arguments})\n  br label %after")
    return f"""
{declare}
define i64 @fast_spin(ptr %p, i64 %old, i64 %limit) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %again ]
  %v = load atomic i64, ptr %p acquire, align 8
  %changed = icmp ne i64 %v, %old
  br i1 %changed, label %done, label %again
again:
  {pause}
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %limit
  br i1 %more, label %loop, label %done
done:
  %r = load atomic i64, ptr %p acquire, align 8
  ret i64 %r
}}

define void @fast_publish(ptr %p, i64 %value) {{
  store atomic i64 %value, ptr %p release, align 8
  ret void
}}

define i64 @fast_serve(ptr %job, i64 %seen0, i64 %first, i64 %idle) {{
entry:
  %finished = getelementptr i64, ptr %job, i64 {_FINISHED}
  %calls = getelementptr i64, ptr %job, i64 {_CALLS}
  br label %wait
wait:
  %seen = phi i64 [ %seen0, %entry ], [ %v, %done ]
  %limit = phi i64 [ %first, %entry ], [ %idle, %done ]
  %v = call i64 @fast_spin(ptr %job, i64 %seen, i64 %limit)
  %changed = icmp ne i64 %v, %seen
  br i1 %changed, label %got, label %quiet
quiet:
  ret i64 %seen
got:
  %ncalls = load i64, ptr %calls, align 8
  %python = icmp eq i64 %ncalls, 0
  br i1 %python, label %handback, label %call
handback:
  ret i64 %v
call:
  %c = phi i64 [ 0, %got ], [ %c1, %after ]
  %pos = phi i64 [ {_FIRST_CALL}, %got ], [ %pos1, %after ]
  %fp = getelementptr i64, ptr %job, i64 %pos
  %fn = load i64, ptr %fp, align 8
  %f = inttoptr i64 %fn to ptr
  %npos = add i64 %pos, 1
  %np = getelementptr i64, ptr %job, i64 %npos
  %n = load i64, ptr %np, align 8
  %base = add i64 %pos, 2
  switch i64 %n, label %after [ {cases} ]
{chr(10).join(calls)}
after:
  %pos1 = add i64 %base, %n
  %c1 = add i64 %c, 1
  %more_calls = icmp slt i64 %c1, %ncalls
  br i1 %more_calls, label %call, label %done
done:
  store atomic i64 %v, ptr %finished release, align 8
  br label %wait
}}
"""


@dataclass(frozen=True)
class Natives:
    """The JIT-compiled loops (each call releases the GIL); `engine` keeps their code alive."""

    spin: Callable[[int, int, int], int]
    publish: Callable[[int, int], None]
    serve: Callable[[int, int, int, int], int]
    native_jobs: bool  # whether kernels may be called with int64 words (see the module docstring)
    engine: Any


@functools.lru_cache(maxsize=1)
def natives() -> Natives | None:
    """The polling loops, compiled once per process, or None without llvmlite."""
    try:
        import llvmlite.binding as llvm
    except ImportError:
        return None
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine_name = platform.machine().lower()
    x86 = machine_name in ("x86_64", "amd64")
    pause = ("call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()") if x86 else ("", "")
    module = llvm.parse_assembly(_ir(*pause))
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine(opt=0))
    engine.finalize_object()
    i64, void_p = ctypes.c_int64, ctypes.c_void_p
    spin = ctypes.CFUNCTYPE(i64, void_p, i64, i64)(engine.get_function_address("fast_spin"))
    publish = ctypes.CFUNCTYPE(None, void_p, i64)(engine.get_function_address("fast_publish"))
    serve = ctypes.CFUNCTYPE(i64, void_p, i64, i64, i64)(engine.get_function_address("fast_serve"))
    native_jobs = ctypes.sizeof(void_p) == 8 and machine_name in ("x86_64", "amd64", "aarch64", "arm64")
    return Natives(spin, publish, serve, native_jobs, engine)


def spin_function() -> Callable[[int, int, int], int] | None:
    """`spin(p, old, limit)`: the int64 at `p` once it differs from `old`, or after `limit` polls."""
    loops = natives()
    return None if loops is None else loops.spin


@functools.lru_cache(maxsize=1)
def polls_per_us() -> float:
    """How many polls of `spin_function()` take one microsecond on this machine (best of three)."""
    spin = spin_function()
    if spin is None:
        return 1.0
    idle = np.zeros(1, dtype=np.int64)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        spin(idle.ctypes.data, 0, CALIBRATION_POLLS)
        best = min(best, time.perf_counter() - start)
    return CALIBRATION_POLLS / max(best * 1e6, 1.0)


def idle_polls() -> int:
    """Polls that last `config.worker_spin_us` (at least one)."""
    return max(1, int(config.get().worker_spin_us * polls_per_us()))


class _Worker:
    """One polling thread and its job words (see the module docstring)."""

    def __init__(self, loops: Natives) -> None:
        self.loops = loops
        self.words = np.zeros(_FIRST_CALL + JOB_WORDS, dtype=np.int64)
        self.address = self.words.ctypes.data
        self.job: PythonCall | None = None
        self.error: BaseException | None = None
        self.doorbell = threading.Event()
        self.done = threading.Event()  # set when a Python job ends (native jobs only publish)
        threading.Thread(target=self._loop, name="fast-share", daemon=True).start()

    def _loop(self) -> None:
        seen, first = 0, 1
        while True:
            generation = self.loops.serve(self.address, seen, first, idle_polls())
            seen = generation
            if int(self.words[_FINISHED]) != generation:  # handed back: a Python job
                self._run_python(generation)
                first = idle_polls()
                continue
            self.doorbell.clear()  # idle since the last job (or since waking): sleep
            if int(self.words[_POSTED]) == seen:
                self.doorbell.wait(0.1)
            first = 1  # after sleeping, look once: poll only after a job

    def _run_python(self, generation: int) -> None:
        function, args, kwargs = self.job  # type: ignore[misc]
        try:
            function(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - handed to the caller by `wait`
            self.error = error
        self.loops.publish(self.address + 8 * _FINISHED, generation)
        self.done.set()

    def post(self, job: Job) -> int:
        """Hand `job` to the worker; returns its generation (for `wait`)."""
        self.error = None
        if isinstance(job, NativeCall | NativeBatch):
            self._write_calls(job.calls if isinstance(job, NativeBatch) else (job,))
            self.job = None
        else:
            self.words[_CALLS], self.job = 0, job
            self.done.clear()
        generation = int(self.words[_POSTED]) + 1
        self.loops.publish(self.address + 8 * _POSTED, generation)
        self.doorbell.set()
        return generation

    def _write_calls(self, calls: tuple[NativeCall, ...]) -> None:
        words, position = self.words, _FIRST_CALL
        for call in calls:
            count = len(call.arguments)
            words[position], words[position + 1] = call.address, count
            words[position + 2:position + 2 + count] = call.arguments
            position += 2 + count
        words[_CALLS] = len(calls)

    def wait(self, generation: int) -> None:
        """Poll for the job's end a while (a share usually ends within microseconds of the caller's
        own), then sleep: on the Event for a Python job, in growing naps for a native one."""
        finished = self.address + 8 * _FINISHED
        if self.loops.spin(finished, generation - 1, idle_polls()) != generation:
            nap = 50e-6
            while self.loops.spin(finished, generation - 1, 1) != generation:
                if self.job is not None:
                    self.done.wait(0.1)
                else:
                    time.sleep(nap)
                    nap = min(2 * nap, MAX_NAP_S)
        if self.error is not None:
            raise self.error


class Crew:
    """`size` polling workers; `lock` makes one caller at a time (others use a thread pool)."""

    def __init__(self, size: int, loops: Natives) -> None:
        self.workers = [_Worker(loops) for _ in range(size)]
        self.native_jobs = loops.native_jobs
        self.lock = threading.Lock()

    def accepts(self, job: NativeCall | NativeBatch) -> bool:
        """Whether `job` may be posted as a native job here."""
        batch = job if isinstance(job, NativeBatch) else NativeBatch((job,))
        return self.native_jobs and 0 < len(batch.calls) and batch.words() <= JOB_WORDS \
            and all(len(call.arguments) <= MAX_NATIVE_ARGS for call in batch.calls)

    def run(self, first: Callable[[], Any], jobs: Sequence[Job]) -> None:
        """Post `jobs` to the workers (at most one each), run `first` here, wait for all, then raise
        the first error. A native job must be one the crew `accepts` (ValueError before anything runs:
        the native loop would skip a call it has no case for)."""
        if len(jobs) > len(self.workers):
            raise ValueError(f"Crew.run: {len(jobs)} jobs for {len(self.workers)} workers")
        refused = [job for job in jobs if isinstance(job, NativeCall | NativeBatch) and not self.accepts(job)]
        if refused:
            shown = repr(refused[0])[:200]
            raise ValueError(f"Crew.run: native job beyond the limits ({MAX_NATIVE_ARGS} arguments a call, "
                             f"{JOB_WORDS} words a job, native calls here: {self.native_jobs}): {shown}")
        posted = [worker.post(job) for worker, job in zip(self.workers, jobs, strict=False)]
        error: BaseException | None = None
        try:
            first()
        except BaseException as raised:  # noqa: BLE001 - raised after every share finished
            error = raised
        for worker, generation in zip(self.workers, posted, strict=False):
            try:
                worker.wait(generation)
            except BaseException as raised:  # noqa: BLE001
                error = error or raised
        if error is not None:
            raise error


_CREWS: dict[int, Crew] = {}
_CREWS_LOCK = threading.Lock()


def crew(size: int) -> Crew | None:
    """The process's crew of `size` workers (made on first use), or None without llvmlite."""
    loops = natives()
    if loops is None:
        return None
    with _CREWS_LOCK:
        if size not in _CREWS:
            _CREWS[size] = Crew(size, loops)
        return _CREWS[size]
