"""The native loops of the worker crew (runtime/workers.py), JIT-compiled once per process with llvmlite.

Every function here is called through ctypes, which releases the GIL, so a worker polling or
running kernels holds no Python lock. Kernel parameters are pointers or int64s, which the C ABIs of
x86-64 and AArch64 pass alike in integer registers, so one calling loop serves every kernel of up
to `MAX_NATIVE_ARGS` parameters (`native_jobs` is False on other machines: shares are then Python
calls).

The claim board (int64 words, one per crew; see `fast_claim`):
- `CLAIM`: `(generation << 32) | (tasks << 16) | next`. A task is claimed by a compare-and-swap
  that increments `next` while `next < tasks`, so each task runs exactly once whoever claims it,
  and a thread that read an older generation's word can never claim a task of a newer one (its
  swap fails). The job's other words are read only after a successful claim: the job cannot end,
  and the caller cannot rewrite them, before that task is counted in `DONE`.
- `DONE`: tasks finished (atomic add after each task).
- `MODE`: `CHUNKS` (one kernel: task i calls it with `core = i, cores = tasks` appended to its
  arguments at `ARGS`, `COUNT` of them, function at `CALL`) or `BATCHES` (task i runs the native
  calls listed at offset `board[TABLE + i]`: their number, then per call function, count, arguments).

Polling is bounded: `fast_relax` pauses, and every `YIELD_EVERY` polls gives the core away with
`sched_yield` (another thread or process on that core runs first; on an idle core it returns at
once). The number of polls that lasts a given time is calibrated once per process (`polls_per_us`).

The loops' LLVM IR and the board's layout (the constants, re-exported here) are
fast/runtime/native_loops_ir.py; this module compiles it and calls it.
"""
from __future__ import annotations

import ctypes
import functools
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fast.runtime.native_loops_ir import (
    ARGS,
    BATCHES,
    CALIBRATION_POLLS,
    CALL,
    CHUNKS,
    CLAIM,
    COUNT,
    DONE,
    FINISHED,
    MAX_NATIVE_ARGS,
    MAX_TASKS,
    MODE,
    POSTED,
    TABLE,
    YIELD_EVERY,
    _ir,
)

__all__ = ["ARGS", "BATCHES", "CALIBRATION_POLLS", "CALL", "CHUNKS", "CLAIM", "COUNT", "DONE", "FINISHED",
           "MAX_NATIVE_ARGS", "MAX_TASKS", "MODE", "POSTED", "TABLE", "YIELD_EVERY", "Natives",
           "natives", "polls", "polls_per_us", "spin_function"]


@dataclass(frozen=True)
class Natives:
    """The JIT-compiled loops (each call releases the GIL); `engine` keeps their code alive."""

    spin: Callable[[int, int, int], int]
    wait_count: Callable[[int, int, int], int]
    publish: Callable[[int, int], None]
    claim: Callable[[int], int]
    serve: Callable[[int, int, int, int, int], int]
    program: Callable[[int, int, int, int], int]  # fast_program(board, words, nsteps, wait_polls)
    native_jobs: bool  # whether kernels may be called with int64 words (see the module docstring)
    engine: Any


def _libc_address(name: str) -> int:
    """The address of the C library's function `name` (`sched_yield`, `usleep`), or 0 without one."""
    try:
        return ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value or 0
    except (AttributeError, OSError):
        return 0


@functools.lru_cache(maxsize=1)
def natives() -> Natives | None:
    """The loops, compiled once per process, or None without llvmlite (or without sched_yield and
    usleep)."""
    try:
        import llvmlite.binding as llvm
    except ImportError:
        return None
    address, nap = _libc_address("sched_yield"), _libc_address("usleep")
    if not address or not nap:
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

    def function(name: str, restype: Any, *argtypes: Any) -> Any:
        return ctypes.CFUNCTYPE(restype, *argtypes)(engine.get_function_address(name))
    function("fast_init", None, void_p, void_p)(address, nap)
    native_jobs = ctypes.sizeof(void_p) == 8 and machine_name in ("x86_64", "amd64", "aarch64", "arm64")
    return Natives(function("fast_spin", i64, void_p, i64, i64), function("fast_wait_count", i64, void_p, i64, i64),
                   function("fast_publish", None, void_p, i64), function("fast_claim", i64, void_p),
                   function("fast_serve", i64, void_p, void_p, i64, i64, i64),
                   function("fast_program", i64, void_p, void_p, i64, i64), native_jobs, engine)


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


def polls(microseconds: float) -> int:
    """Polls that last about `microseconds` (at least one)."""
    return max(1, int(microseconds * polls_per_us()))
