"""Launching a compiled kernel, split into chunks that threads claim when it is large enough.

A threaded kernel (`LinearProgram.threaded`) takes `core, cores` as its last two int64 parameters
and computes only its share `[count*core/cores, count*(core+1)/cores)` of the outermost GLOBAL
loop; calling it once for every `core < cores` computes every output exactly once with the same
code whatever `cores` is, so results never depend on how the work is split or who runs it.

`launch` splits a kernel into `chunk_count` chunks (`cores` = the chunk count, more chunks than
threads) which the caller and up to `threads_for(work) - 1` workers claim one at a time
(runtime/workers.py for native calls: the claim board; runtime/claims.py for Python calls: the
same rule under a lock). The caller claims too and waits only for chunks a worker has already
claimed, never for a worker that has not started: on a host whose other cores are busy the caller
ends up running every chunk itself, at about the one-thread time. A kernel whose estimated work
(bytes + flops) is below `config.parallel_min_work` runs on the caller alone. An exception in a
chunk (a Python call) is raised in the caller once every claimed chunk has finished.
`thread_cap(n)` caps the threads of kernels launched from the calling thread (engine/parallel.py
uses it when several devices run at once, so their kernels share the cores).
"""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from fast import config
from fast.runtime import cpu, workers
from fast.runtime.claims import Claims

CHUNKS_PER_THREAD = 4  # a threaded kernel is cut into this many chunks per thread ...
CHUNK_MIN_WORK = 1 << 20  # ... or fewer, so that a chunk holds at least this much work (bytes + flops)

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()
_LOCAL = threading.local()  # `cap`: the per-thread cap set by `thread_cap`, or absent


def _pool(size: int) -> ThreadPoolExecutor:
    """The shared pool, grown to at least `size` workers."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < size:
            cpu.ensure_kernel_stacks()
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


def thread_budget() -> int:
    """The threads a large kernel launched from this thread gets: every usable core, within `thread_cap`."""
    cap: int | None = getattr(_LOCAL, "cap", None)
    count = cpu.thread_count()
    return count if cap is None else max(1, min(count, cap))


def threads_for(work: int) -> int:
    """How many threads a kernel with `work` estimated bytes + flops gets (within `thread_cap`)."""
    return 1 if work < config.get().parallel_min_work else thread_budget()


def chunk_count(work: int, threads: int, per_thread: int = 0) -> int:
    """The chunks a kernel with `work` estimated bytes + flops is cut into for `threads` threads:
    `per_thread` per thread (0: `CHUNKS_PER_THREAD`; a program whose every chunk repeats set-up work,
    such as a GEMM packing B, asks for fewer), fewer when a chunk would hold less than
    `CHUNK_MIN_WORK`, never fewer than `threads`."""
    return max(threads, min(threads * (per_thread or CHUNKS_PER_THREAD), work // CHUNK_MIN_WORK))


def launch(runner: Any, handles: Sequence[Any], vals: Sequence[int], threaded: bool, work: int,
           wait: bool = False, chunks_per_thread: int = 0) -> float | None:
    """Run `runner` over `handles` with variable values `vals` (plus `core, cores` when threaded);
    returns the elapsed seconds when `wait`. `chunks_per_thread`: see `chunk_count`."""
    if not threaded:
        return runner(*handles, vals=tuple(vals), wait=wait)  # type: ignore[no-any-return]
    threads = threads_for(work)
    start = time.perf_counter()
    if threads == 1:
        runner(*handles, vals=(*vals, 0, 1))
    else:
        run_chunks(runner, handles, tuple(vals), threads, chunk_count(work, threads, chunks_per_thread))
    return time.perf_counter() - start if wait else None


def run_chunks(runner: Any, handles: Sequence[Any], vals: tuple[int, ...], threads: int, chunks: int) -> None:
    """Run chunks `0..chunks-1` of a threaded kernel (`core, cores` = `i, chunks` after `vals`) on
    this thread and up to `threads - 1` others, each chunk exactly once (module docstring)."""
    team = workers.crew(threads - 1)
    native = getattr(runner, "native_call", None)
    call = native(handles, vals) if native is not None and team is not None else None
    if team is not None and team.lock.acquire(blocking=False):  # the hot workers, one caller at a time
        try:
            if call is not None and team.accepts(call):
                team.chunks(call, chunks)
                return
            claims = _claims(runner, handles, vals, chunks)
            team.python(claims.help, threads - 1)
            claims.finish()
        finally:
            team.lock.release()
        return
    claims = _claims(runner, handles, vals, chunks)
    pool = _pool(max(threads, cpu.thread_count()))  # room for every lane's helpers under a thread cap
    for _ in range(min(threads, chunks) - 1):
        pool.submit(claims.help)
    claims.finish()


def _claims(runner: Any, handles: Sequence[Any], vals: tuple[int, ...], chunks: int) -> Claims:
    """The chunks of a kernel as Python tasks."""
    return Claims([functools.partial(runner, *handles, vals=(*vals, core, chunks)) for core in range(chunks)])
