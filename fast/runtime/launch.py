"""Launching a compiled kernel, split across CPU threads when it is large enough.

A threaded kernel (`LinearProgram.threaded`) takes `core, cores` as its last two int64 parameters
and computes only its share of the outermost GLOBAL loop. `launch` calls it once per core value on
a process-wide thread pool (ctypes releases the GIL during the call, so the shares run in parallel)
and waits for all of them; an exception in any share is raised in the caller. Every output element
is computed by exactly one share with the same code, so results never depend on the thread count.
The shares go to a crew of polling workers (runtime/workers.py: microsecond hand-offs; a program
with `native_call` is called by the worker's native loop, without the GIL) when no other launch
holds it, else to the pool. `thread_cap(n)` caps the threads of kernels launched from the
calling thread (engine/parallel.py uses it when several devices run at once, so their kernels share
the cores).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from fast import config
from fast.runtime import cpu, workers

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()
_LOCAL = threading.local()  # `cap`: the per-thread cap set by `thread_cap`, or absent


def _pool(size: int) -> ThreadPoolExecutor:
    """The shared pool, grown to at least `size` workers."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < size:
            _POOL = ThreadPoolExecutor(max_workers=size, thread_name_prefix="fast-kernel")
            _POOL_SIZE = size
        return _POOL


@contextmanager
def thread_cap(cap: int | None) -> Iterator[None]:
    """Kernels launched from this thread inside the block use at most `cap` threads (None: no cap)."""
    previous = getattr(_LOCAL, "cap", None)
    _LOCAL.cap = cap
    try:
        yield
    finally:
        _LOCAL.cap = previous


def threads_for(work: int) -> int:
    """How many threads a kernel with `work` estimated bytes + flops gets (within `thread_cap`)."""
    if work < config.get().parallel_min_work:
        return 1
    cap: int | None = getattr(_LOCAL, "cap", None)
    count = cpu.thread_count()
    return count if cap is None else max(1, min(count, cap))


def _share(team: workers.Crew, runner: Any, handles: Sequence[Any], vals: tuple[int, ...]) -> workers.Job:
    """One share as a job for `team`: a native call when the program offers one the crew accepts
    (no GIL needed), else a Python call of the program."""
    native = getattr(runner, "native_call", None)
    call = native(handles, vals) if native is not None else None
    if call is not None and team.accepts(call):
        return call  # type: ignore[no-any-return]
    return (runner, tuple(handles), {"vals": vals})


def launch(runner: Any, handles: Sequence[Any], vals: Sequence[int], threaded: bool, work: int,
           wait: bool = False) -> float | None:
    """Run `runner` over `handles` with variable values `vals` (plus `core, cores` when threaded);
    returns the elapsed seconds when `wait`."""
    if not threaded:
        return runner(*handles, vals=tuple(vals), wait=wait)  # type: ignore[no-any-return]
    cores = threads_for(work)
    start = time.perf_counter()
    if cores == 1:
        runner(*handles, vals=(*vals, 0, 1))
        return time.perf_counter() - start if wait else None
    team = workers.crew(cores - 1)
    if team is not None and team.lock.acquire(blocking=False):  # hot workers, one caller at a time
        try:
            team.run(lambda: runner(*handles, vals=(*vals, 0, cores)),
                     [_share(team, runner, handles, (*vals, core, cores)) for core in range(1, cores)])
        finally:
            team.lock.release()
    else:
        pool = _pool(max(cores, cpu.thread_count()))  # room for every lane's shares under a thread cap
        shares = [pool.submit(runner, *handles, vals=(*vals, core, cores)) for core in range(1, cores)]
        runner(*handles, vals=(*vals, 0, cores))
        for share in shares:
            share.result()
    return time.perf_counter() - start if wait else None
