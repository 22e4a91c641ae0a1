"""Multi-device replays whose other lanes run as native jobs (fast/engine/replay_lanes.py): the third
realize of a sharded structure takes that path, gives the bits of the first, and leaves it (running
through `run_schedule`) whenever the plan does not allow it."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import fast
from fast import BinaryOps, MultiLazyBuffer, ReduceOps, UnaryOps, config, from_numpy
from fast.engine import parallel, replay_lanes
from fast.runtime import cpu, workers

realize_module = importlib.import_module("fast.engine.realize")
DEVICES = ("CLANG", "CLANG:1", "CLANG:2")
RNG = np.random.default_rng(5)
pytestmark = pytest.mark.skipif(workers.natives() is None,
                                reason="needs llvmlite (the workers' loops are JIT-compiled)")


@pytest.fixture
def outcomes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Lanes on for small buffers, two threads at most (one per lane of two devices); yields the
    answers of every `replay_lanes.run` call."""
    seen: list[bool] = []
    original = replay_lanes.run

    def recording(*args: object) -> bool:
        seen.append(original(*args))  # type: ignore[arg-type]
        return seen[-1]

    monkeypatch.setattr(replay_lanes, "run", recording)
    with config.override(parallel_devices=True, parallel_devices_min_work=1 << 12, threads=2):
        yield seen


def shard(data: np.ndarray, devices: tuple[str, ...], axis: int = 0) -> MultiLazyBuffer:
    sharded = MultiLazyBuffer.from_sharded(from_numpy(data, "CLANG"), devices, axis)
    fast.realize(sharded)
    return sharded


def realize_three_times(build: Callable[[], list[MultiLazyBuffer]]) -> list[list[np.ndarray]]:
    """Each output of three fresh graphs of one structure: scheduled, replayed (which makes the lane
    plan), replayed again."""
    results = []
    for _ in range(3):
        outputs = build()
        fast.realize(*outputs)
        results.append([fast.to_numpy(out) for out in outputs])
    return results


@pytest.mark.parametrize("shape", [(4096, 3), (2999, 7), (1031, 17)])
def test_sharded_sum_replays_with_native_lanes(outcomes: list[bool], shape: tuple[int, int]) -> None:
    """A sharded reduction (a kernel per device, then the all-reduce's copies and adds), prime and
    uneven shard sizes included: the third realize runs natively and matches the first bit for bit."""
    x, y = (RNG.uniform(-1, 1, shape).astype(np.float32) for _ in range(2))
    a, b = shard(x, DEVICES[:2]), shard(y, DEVICES[:2])
    results = realize_three_times(lambda: [a.e(BinaryOps.MUL, b).e(BinaryOps.ADD, a).r(ReduceOps.SUM, (0,))])
    assert outcomes == [False, True]  # the second replay makes the plan; the third goes native
    for later in results[1:]:
        np.testing.assert_array_equal(later[0], results[0][0])
    np.testing.assert_allclose(results[0][0], (x * y + x).sum(0, keepdims=True), rtol=1e-4, atol=1e-4)


def test_several_kernels_per_lane_run_in_order(outcomes: list[bool]) -> None:
    """Two outputs of different shapes per device (two kernels in each lane, no all-reduce)."""
    x = RNG.uniform(-1, 1, (3001, 5)).astype(np.float32)
    a = shard(x, DEVICES[:2])

    def build() -> list[MultiLazyBuffer]:
        return [a.e(BinaryOps.MUL, a).r(ReduceOps.SUM, (1,)), a.e(UnaryOps.NEG).e(BinaryOps.ADD, a.const(1.5))]

    results = realize_three_times(build)
    assert outcomes[-1] is True
    for later in results[1:]:
        for got, first in zip(later, results[0], strict=True):
            np.testing.assert_array_equal(got, first)
    np.testing.assert_allclose(results[0][0], (x * x).sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(results[0][1], 1.5 - x)


def test_three_devices(outcomes: list[bool]) -> None:
    x = RNG.uniform(-1, 1, (6007,)).astype(np.float32)
    a = shard(x, DEVICES)
    with config.override(threads=3):
        results = realize_three_times(lambda: [a.e(BinaryOps.MUL, a).r(ReduceOps.MAX, (0,))])
    assert outcomes[-1] is True
    assert results[2][0].tolist() == results[0][0].tolist() == [np.float32((x * x).max())]


def test_lanes_that_would_get_several_threads_replay_through_run_schedule(outcomes: list[bool],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With four cores for two lanes, each lane's kernel would run on two threads: not a native job."""
    monkeypatch.setattr(cpu, "available_cores", lambda: 4)
    x = RNG.uniform(-1, 1, (1 << 16,)).astype(np.float32)
    a = shard(x, DEVICES[:2])
    with config.override(threads=0, parallel_min_work=1):
        results = realize_three_times(lambda: [a.e(BinaryOps.MUL, a).r(ReduceOps.SUM, (0,))])
    assert outcomes == [False, False]
    np.testing.assert_array_equal(results[2][0], results[0][0])


def test_other_constant_values_replay_through_run_schedule(outcomes: list[bool]) -> None:
    x = RNG.uniform(-1, 1, (4099,)).astype(np.float32)
    a = shard(x, DEVICES[:2])
    for value in (2.0, 2.0, 3.0):
        out = a.e(BinaryOps.MUL, a.const(value)).r(ReduceOps.SUM, (0,))
        np.testing.assert_allclose(fast.to_numpy(out), (x * value).sum(keepdims=True), rtol=1e-4)
    assert True not in outcomes[2:]  # 3.0: the recorded values differ, `run` is not asked


def test_busy_workers_leave_the_replay_to_run_schedule(outcomes: list[bool]) -> None:
    """When another caller holds the crew, the replay runs through `run_schedule` (its own threads)."""
    x = RNG.uniform(-1, 1, (4096,)).astype(np.float32)
    a = shard(x, DEVICES[:2])
    realize_three_times(lambda: [a.e(BinaryOps.ADD, a).r(ReduceOps.SUM, (0,))])
    team = workers.crew(1)
    assert team is not None
    with team.lock:
        out = a.e(BinaryOps.ADD, a).r(ReduceOps.SUM, (0,))
        np.testing.assert_allclose(fast.to_numpy(out), (x + x).sum(keepdims=True), rtol=1e-4)
    assert outcomes[-2:] == [True, False]


def test_native_plan_moves_each_lanes_waiting_suffix_after_the_lanes() -> None:
    """Three devices' all-reduce: the first copy (into CLANG, from CLANG:1's kernel) waits across lanes."""
    plan = parallel.LanePlan(cut=4, lanes=[[0, 2], [1], [3]], waits=[[], [], [1], []])
    assert replay_lanes.native_plan(plan, 6) == replay_lanes.NativePlan([[0], [1], [3]], [2, 4, 5])
    waiting_first = parallel.LanePlan(cut=3, lanes=[[0], [1, 2]], waits=[[], [0], []])
    assert replay_lanes.native_plan(waiting_first, 3) is None  # one lane left: not worth it
    three = parallel.LanePlan(cut=4, lanes=[[0, 3], [1], [2]], waits=[[], [], [0], []])
    assert replay_lanes.native_plan(three, 4) == replay_lanes.NativePlan([[0, 3], [1]], [2])
