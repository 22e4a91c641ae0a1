"""Hot worker threads for the shares of a threaded kernel: hand-offs in microseconds.

A thread pool hands work over through a condition variable: on virtual machines a sleeping thread
takes 100-500 µs to wake, which is a tenth of a 4 ms kernel. A `Crew` keeps its workers polling a
shared generation counter in native code (GIL released) for a short while after each job, so the
next job starts almost at once; a worker that saw nothing for `SPINS` polls sleeps on an Event,
which `post` also sets (the counter stays the source of truth, the Event is only a doorbell).

Polling is bounded (`SPINS`) on both sides, so an oversubscribed machine, where the other thread
is not running, costs at most that much busy time before falling back to sleeping.
The polling loop is a tiny function JIT-compiled with llvmlite (already a dependency): `spin(p,
old, limit)` returns the int64 at `p` once it differs from `old`, or after `limit` polls. Without
llvmlite, `crew()` returns None and callers use a plain thread pool. Protocol per worker: the caller
stores the job, then bumps `flags[0]`; the worker runs it and stores the generation in `flags[1]`.
The job object is read and written with the GIL held, which orders it with the counters.
"""
from __future__ import annotations

import ctypes
import functools
import platform
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

SPINS = 4_000  # polls a worker (or a caller waiting for a share) makes before sleeping: ~0.1 ms

_SPIN_IR = """
{declare}
define i64 @fast_spin(ptr %p, i64 %old, i64 %limit) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %again ]
  %v = load volatile i64, ptr %p, align 8
  %changed = icmp ne i64 %v, %old
  br i1 %changed, label %done, label %again
again:
  {pause}
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %limit
  br i1 %more, label %loop, label %done
done:
  %r = load volatile i64, ptr %p, align 8
  ret i64 %r
}}
"""


@functools.lru_cache(maxsize=1)
def spin_function() -> Callable[[int, int, int], int] | None:
    """The JIT-compiled polling loop (GIL released while it runs), or None without llvmlite."""
    try:
        import llvmlite.binding as llvm
    except ImportError:
        return None
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    pause = ("call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()") if x86 else ("", "")
    module = llvm.parse_assembly(_SPIN_IR.format(pause=pause[0], declare=pause[1]))
    machine = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    address = engine.get_function_address("fast_spin")
    function = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(address)
    function._engine = engine  # type: ignore[attr-defined]  # keep the code alive
    return function  # type: ignore[no-any-return]


class _Worker:
    """One polling thread; `flags[0]`: generation posted, `flags[1]`: generation finished."""

    def __init__(self, spin: Callable[[int, int, int], int]) -> None:
        self.spin = spin
        self.flags = np.zeros(2, dtype=np.int64)
        self.posted = self.flags.ctypes.data
        self.finished = self.posted + 8
        self.job: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None = None
        self.error: BaseException | None = None
        self.doorbell = threading.Event()
        self.done = threading.Event()
        threading.Thread(target=self._loop, name="fast-share", daemon=True).start()

    def _loop(self) -> None:
        seen = 0
        while True:
            generation = self.spin(self.posted, seen, SPINS)
            if generation == seen:
                self.doorbell.clear()
                if int(self.flags[0]) == seen:
                    self.doorbell.wait(0.1)
                continue
            seen = generation
            function, args, kwargs = self.job  # type: ignore[misc]
            try:
                function(*args, **kwargs)
            except BaseException as error:  # noqa: BLE001 - handed to the caller by `wait`
                self.error = error
            self.flags[1] = generation
            self.done.set()

    def post(self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        self.job, self.error = (function, args, kwargs), None
        self.done.clear()
        generation = int(self.flags[0]) + 1
        self.flags[0] = generation
        self.doorbell.set()
        return generation

    def wait(self, generation: int) -> None:
        """Poll for the share a while (it usually ends within microseconds of ours), then sleep."""
        if self.spin(self.finished, generation - 1, SPINS) != generation:
            while not self.done.wait(0.1):
                pass
        if self.error is not None:
            raise self.error


class Crew:
    """`size` polling workers; `lock` makes one caller at a time (others use a thread pool)."""

    def __init__(self, size: int, spin: Callable[[int, int, int], int]) -> None:
        self.workers = [_Worker(spin) for _ in range(size)]
        self.lock = threading.Lock()

    def run(self, calls: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]) -> None:
        """Run calls[1:] on the workers and calls[0] here; wait for all, then raise the first error."""
        posted = [worker.post(*call) for worker, call in zip(self.workers, calls[1:], strict=False)]
        error: BaseException | None = None
        try:
            function, args, kwargs = calls[0]
            function(*args, **kwargs)
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
    spin = spin_function()
    if spin is None:
        return None
    with _CREWS_LOCK:
        if size not in _CREWS:
            _CREWS[size] = Crew(size, spin)
        return _CREWS[size]
