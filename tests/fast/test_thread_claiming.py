"""Threads claim work, so nobody waits for a thread that has not started (issue 29): kernel chunks on
the crew's claim board with a worker that starts late or never before the caller is done, Python
claims, replay batches and device lanes whose helper never starts, an exception in a kernel, and
the same bits for THREADS 1, 2, 3 and 8 on awkward sizes."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import fast
from fast import BinaryOps, ReduceOps, UnaryOps, config
from fast.engine import parallel
from fast.runtime import clang, launch, workers
from fast.runtime.claims import Claims
from fast.runtime.host import HostMemory

pytestmark = pytest.mark.skipif(workers.natives() is None, reason="needs llvmlite (the claim loops are JIT-compiled)")

CHUNK_SOURCE = """#define _GNU_SOURCE
#include <stdint.h>
#include <unistd.h>
#include <sys/syscall.h>
void chunk(int64_t* hits, int64_t* who, int64_t delay_us, int64_t core, int64_t cores) {
  if (delay_us > 0) usleep((unsigned)delay_us);
  hits[core] += 1 + 1000 * cores;
  who[core] = (int64_t)syscall(SYS_gettid);
}
"""


@pytest.fixture(scope="module")
def program() -> clang.ClangProgram:
    """`chunk(hits, who, delay_us, core, cores)`: sleeps, counts its call in hits[core] (plus 1000 *
    cores, so the chunk count is checked) and records the thread that ran it in who[core]."""
    return clang.ClangProgram("chunk", clang.ClangCompiler().compile(CHUNK_SOURCE))


@pytest.fixture(scope="module")
def team() -> workers.Crew:
    crew = workers.crew(1)
    assert crew is not None
    return crew


def memory(array: np.ndarray) -> HostMemory:
    return HostMemory(array.view(np.uint8), 0, array.nbytes)


@pytest.fixture
def busy_worker(team: workers.Crew) -> Iterator[threading.Event]:
    """The crew's worker held in a Python job until the yielded Event is set (it cannot claim meanwhile)."""
    release, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(30)
    with team.lock:
        assert team.python(hold, 1) == 1
    assert started.wait(30)
    try:
        yield release
    finally:
        release.set()
        deadline = time.perf_counter() + 30
        while not team.workers[0].idle() and time.perf_counter() < deadline:
            time.sleep(0.001)


def run_chunks(team: workers.Crew, program: clang.ClangProgram, chunks: int,
               delay_us: int) -> tuple[np.ndarray, np.ndarray]:
    hits, who = np.zeros(chunks, np.int64), np.zeros(chunks, np.int64)
    with team.lock:
        team.chunks(program.native_call([memory(hits), memory(who)], (delay_us,)), chunks)
    return hits, who


def test_a_worker_that_never_starts_strands_nothing(team: workers.Crew, program: clang.ClangProgram,
                                                    busy_worker: threading.Event) -> None:
    hits, who = run_chunks(team, program, 16, 1000)
    assert hits.tolist() == [1 + 16_000] * 16  # every chunk once, each with cores = 16
    assert set(who.tolist()) == {threading.get_native_id()}  # all on the caller: the worker never came
    busy_worker.set()  # the worker now comes back to an empty board: it claims nothing
    time.sleep(0.05)
    assert hits.tolist() == [1 + 16_000] * 16


def test_a_worker_that_starts_late_claims_what_is_left(team: workers.Crew, program: clang.ClangProgram,
                                                        busy_worker: threading.Event) -> None:
    timer = threading.Timer(0.05, busy_worker.set)  # the worker comes free while the caller works
    timer.start()
    try:
        hits, who = run_chunks(team, program, 16, 20_000)
    finally:
        timer.cancel()
    assert hits.tolist() == [1 + 16_000] * 16
    caller = threading.get_native_id()
    assert who[0] == caller  # the caller started alone
    assert len(set(who.tolist())) == 2, who  # then the late worker claimed some of the rest


def test_batches_of_a_worker_that_never_starts_run_on_the_caller(team: workers.Crew, program: clang.ClangProgram,
                                                                  busy_worker: threading.Event) -> None:
    hits, who = np.zeros(3, np.int64), np.zeros(3, np.int64)
    calls = [workers.NativeCall(program.address, (hits.ctypes.data, who.ctypes.data, 0, core, 3)) for core in range(3)]
    ran: list[int] = []
    with team.lock:
        team.batches(lambda: ran.append(1), [workers.NativeBatch((call,)) for call in calls])
    assert ran == [1] and hits.tolist() == [3001] * 3 and set(who.tolist()) == {threading.get_native_id()}


def test_chunk_count_has_more_chunks_than_threads_but_enough_work_each() -> None:
    assert launch.chunk_count(1 << 40, 2) == 2 * launch.CHUNKS_PER_THREAD
    assert launch.chunk_count(3 * launch.CHUNK_MIN_WORK, 2) == 3
    assert launch.chunk_count(1, 3) == 3


class PythonKernel:
    """A 'kernel' without a native call: records (core, cores) per call and fails on `fail_at`."""

    def __init__(self, fail_at: int | None = None, delay: float = 0.0) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.fail_at, self.delay = fail_at, delay

    def __call__(self, *handles: Any, vals: tuple[int, ...] = ()) -> None:
        *_, core, cores = vals
        time.sleep(self.delay)
        self.calls.append((core, cores, threading.get_ident()))
        if core == self.fail_at:
            raise ValueError(f"kernel chunk {core} of {cores} failed")


def test_an_exception_in_a_kernel_reaches_the_caller_after_every_chunk_ran() -> None:
    kernel = PythonKernel(fail_at=3)
    with config.override(threads=2), pytest.raises(ValueError, match="kernel chunk 3 of 8 failed"):
        launch.launch(kernel, [], (), threaded=True, work=1 << 40)
    assert sorted(core for core, _, _ in kernel.calls) == list(range(8))
    kernel = PythonKernel(fail_at=5)
    with launch.thread_cap(2), config.override(threads=2), workers.crew(1).lock:  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="kernel chunk 5 of 8 failed"):  # the crew is busy: the pool path
            launch.launch(kernel, [], (), threaded=True, work=1 << 40)
    assert sorted(core for core, _, _ in kernel.calls) == list(range(8))


def test_python_claims_with_a_helper_that_never_starts_or_starts_late() -> None:
    kernel = PythonKernel(delay=0.01)
    claims = Claims([lambda core=core: kernel(vals=(core, 12)) for core in range(12)])  # type: ignore[misc]
    late = threading.Timer(0.03, claims.help)
    late.start()
    claims.finish()
    late.join()
    assert sorted(core for core, _, _ in kernel.calls) == list(range(12))
    assert len({ident for _, _, ident in kernel.calls}) == 2  # the late helper took some
    alone = PythonKernel()
    claims = Claims([lambda core=core: alone(vals=(core, 4)) for core in range(4)])  # type: ignore[misc]
    claims.finish()  # no helper at all
    assert claims.help() == 0 and sorted(core for core, _, _ in alone.calls) == list(range(4))


def test_lanes_whose_helper_never_starts_run_on_the_caller(monkeypatch: pytest.MonkeyPatch,
                                                           busy_worker: threading.Event) -> None:
    class IdlePool:
        def submit(self, *args: Any) -> None:
            pass  # a pool thread that never gets a core

    monkeypatch.setattr(parallel, "_pool", lambda size: IdlePool())
    rng = np.random.default_rng(0)
    data = rng.uniform(-1, 1, (64, 8)).astype(np.float32)
    with config.override(parallel_devices=True, parallel_devices_min_work=0):
        sharded = fast.MultiLazyBuffer.from_sharded(fast.from_numpy(data, "CLANG"), ("CLANG", "CLANG:1"), 0)
        total = sharded.e(BinaryOps.MUL, sharded).r(ReduceOps.SUM, (0,))
        fast.realize(total)
    np.testing.assert_allclose(fast.to_numpy(total), (data * data).sum(0, keepdims=True), rtol=1e-5)


# ---------------------------------------------------------------- the same bits for every thread count

def exp(x: fast.LazyBuffer) -> fast.LazyBuffer:
    return x.e(BinaryOps.MUL, x.const(1.4426950408889634)).e(UnaryOps.EXP2)


def softmax(x: fast.LazyBuffer) -> fast.LazyBuffer:
    e = exp(x.e(BinaryOps.SUB, x.r(ReduceOps.MAX, (1,)).expand(x.shape)))
    return e.e(BinaryOps.DIV, e.r(ReduceOps.SUM, (1,)).expand(x.shape))


def matmul(a: fast.LazyBuffer, b: fast.LazyBuffer) -> fast.LazyBuffer:
    (m, k), n = a.shape, b.shape[1]
    left = a.reshape((m, k, 1)).expand((m, k, n))
    right = b.reshape((1, k, n)).expand((m, k, n))
    return left.e(BinaryOps.MUL, right).r(ReduceOps.SUM, (1,)).reshape((m, n))


GRAPHS: dict[str, tuple[tuple[tuple[int, ...], ...], Callable[..., fast.LazyBuffer]]] = {
    "mul_add": (((1_000_003,), (1_000_003,)), lambda a, b: a.e(BinaryOps.MUL, b).e(BinaryOps.ADD, a)),
    "exp_chain": (((77, 1031),), lambda a: exp(a).e(BinaryOps.MUL, a)),
    "softmax": (((1023, 77),), softmax),
    "total_sum": (((999_983,),), lambda a: a.r(ReduceOps.SUM, (0,))),
    "column_sum": (((1001, 37),), lambda a: a.r(ReduceOps.SUM, (0,))),
    "matmul": (((67, 129), (129, 61)), matmul),
}


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_bits_do_not_depend_on_the_thread_count(name: str, device: str) -> None:
    shapes, build = GRAPHS[name]
    rng = np.random.default_rng(len(name))
    arrays = [rng.uniform(-2, 2, shape).astype(np.float32) for shape in shapes]
    inputs = [fast.from_numpy(array, device) for array in arrays]
    fast.realize(*inputs)
    results = {}
    for threads in (1, 2, 3, 8):
        with config.override(threads=threads, parallel_min_work=0):
            results[threads] = fast.to_numpy(build(*inputs)).view(np.uint32)
    for threads in (2, 3, 8):
        np.testing.assert_array_equal(results[threads], results[1], err_msg=f"{name} on {device}, THREADS={threads}")
