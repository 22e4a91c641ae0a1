"""A captured plan's kernels run as one native sequence (engine/replay_native.py, runtime/sequence.py):
the same bits as the uncaptured function on awkward sizes and every thread count, threaded and
unthreaded kernels mixed, and the one-by-one launches when the crew is busy."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import fast
from fast import BinaryOps, ReduceOps, UnaryOps, config, from_numpy, to_numpy
from fast.engine import replay_native
from fast.runtime import workers
from fast.runtime.native_loops import natives

pytestmark = pytest.mark.skipif(natives() is None, reason="no native loops (llvmlite or sched_yield/usleep missing)")
RNG = np.random.default_rng(11)


def graph(x: fast.LazyBuffer, w: fast.LazyBuffer) -> tuple[fast.LazyBuffer, fast.LazyBuffer]:
    """A matmul-shaped reduce, a row softmax of it (reduces and broadcasts) and an elementwise chain."""
    rows, inner = x.shape
    product = x.reshape((rows, 1, inner)).expand((rows, w.shape[0], inner)) \
        .e(BinaryOps.MUL, w.reshape((1, *w.shape)).expand((rows, *w.shape))).r(ReduceOps.SUM, (2,)) \
        .reshape((rows, w.shape[0]))
    top = product.r(ReduceOps.MAX, (1,)).expand(product.shape)
    e = product.e(BinaryOps.SUB, top).e(UnaryOps.EXP2)
    soft = e.e(BinaryOps.DIV, e.r(ReduceOps.SUM, (1,)).expand(e.shape))
    return soft, x.e(BinaryOps.MUL, x).e(BinaryOps.ADD, x)


class Spy:
    """Counts the native runs that ran (True) and those that handed back (False)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.results: list[bool] = []
        original = replay_native.NativePlan.run

        def run(plan: replay_native.NativePlan, table: Any) -> bool:
            result = original(plan, table)
            self.results.append(result)
            return result
        monkeypatch.setattr(replay_native.NativePlan, "run", run)


def check_same_bits(device: str, rows: int, inner: int, out: int, calls: int = 3) -> None:
    w = from_numpy(RNG.standard_normal((out, inner)).astype(np.float32), device)
    captured = fast.jit(lambda x: graph(x, w))
    for _ in range(calls):
        data = RNG.standard_normal((rows, inner)).astype(np.float32)
        got = captured(from_numpy(data, device))
        want = graph(from_numpy(data, device), w)
        for a, b in zip(got, want, strict=True):
            assert to_numpy(a).tobytes() == to_numpy(b).tobytes()


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_same_bits_every_thread_count(device: str, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    # 1 row; primes; a case whose elementwise and matmul kernels are over PARALLEL_MIN_WORK (threaded)
    with config.override(threads=threads, parallel_min_work=1 << 12):
        for rows, inner, out in ((1, 5, 3), (7, 13, 17), (67, 97, 33)):
            check_same_bits(device, rows, inner, out)
    assert spy.results and all(spy.results)


def test_busy_crew_falls_back_to_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another caller holding the crew: the plan launches its steps one by one, with the same bits."""
    spy = Spy(monkeypatch)
    with config.override(threads=2, parallel_min_work=1 << 12):
        check_same_bits("CLANG", 5, 7, 3, calls=1)  # the first call traces (no native run)
        team = workers.crew(1)
        assert team is not None
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with team.lock:
                held.set()
                release.wait(30)
        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(30)
        try:
            check_same_bits("CLANG", 67, 97, 33, calls=2)
        finally:
            release.set()
            holder.join()
    assert False in spy.results


def test_plans_with_guarded_kernels_launch_one_by_one() -> None:
    """A plan with an FMA-guarded kernel does not qualify (the guard scans inputs in Python)."""
    class Step:
        op = fast.ops.KernelOps.SINK
        variables = ()

        class kernel:  # noqa: N801 - a stand-in for realize.CompiledKernel
            class runner:  # noqa: N801
                native_call = None

            class program:  # noqa: N801
                bounded_inputs = (1,)
    assert not replay_native.qualifies([Step()])
    assert not replay_native.qualifies([])
