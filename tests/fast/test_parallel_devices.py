"""Items on different devices run concurrently (fast/engine/parallel.py, realize.run_schedule): same
results as sequential execution, dependency order, errors, overlap in time, thread caps."""
from __future__ import annotations

import importlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import fast
from fast import BinaryOps, LazyBuffer, LoadOps, MultiLazyBuffer, ReduceOps, UnaryOps, config, dtypes, from_numpy
from fast.device import Buffer
from fast.engine import parallel
from fast.engine.schedule import ScheduleItem
from fast.ops import LazyOp
from fast.runtime import launch

realize_module = importlib.import_module("fast.engine.realize")
DEVICES = ("CLANG", "CLANG:1", "CLANG:2", "CLANG:3")
RNG = np.random.default_rng(11)


@pytest.fixture
def parallel_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Parallel execution on, even for tiny buffers; yields a list that counts parallel runs."""
    runs: list[int] = []
    original = parallel.LaneRun.run

    def counting(self: parallel.LaneRun) -> None:
        runs.append(len(self.lanes))
        original(self)

    monkeypatch.setattr(parallel.LaneRun, "run", counting)
    with config.override(parallel_devices=True, parallel_devices_min_work=0):
        yield runs


def custom(shape: tuple[int, ...], device: str, fn: Callable[..., Any], *srcs: LazyBuffer) -> LazyBuffer:
    return LazyBuffer.loadop(LoadOps.CUSTOM, shape, dtypes.float32, device, arg=fn, src=srcs)


def both_ways(build: Callable[[], Any]) -> tuple[np.ndarray, np.ndarray]:
    """`to_numpy(build())` run sequentially and in parallel (fresh graphs each time)."""
    with config.override(parallel_devices=False):
        sequential = fast.to_numpy(build())
    return sequential, fast.to_numpy(build())


def shard(data: np.ndarray, ndev: int, axis: int | None = 0) -> MultiLazyBuffer:
    sharded = MultiLazyBuffer.from_sharded(from_numpy(data, "CLANG"), DEVICES[:ndev], axis)
    fast.realize(sharded)
    return sharded


# ---------------------------------------------------------------- same results as sequential

@pytest.mark.parametrize("ndev", [2, 3, 4])
def test_sharded_elementwise_matches_sequential(parallel_runs: list[int], ndev: int) -> None:
    x, y = RNG.uniform(-2, 2, (2, 10, 6)).astype(np.float32), RNG.uniform(0.5, 2, (10, 6)).astype(np.float32)

    def build() -> MultiLazyBuffer:
        a, b = shard(x[0], ndev), shard(y, ndev)
        return a.e(BinaryOps.MUL, b).e(UnaryOps.EXP2).e(BinaryOps.SUB, shard(x[1], ndev))

    sequential, concurrent = both_ways(build)
    np.testing.assert_array_equal(concurrent, sequential)
    np.testing.assert_allclose(concurrent, np.exp2(x[0] * y) - x[1], rtol=1e-5)
    assert parallel_runs and max(parallel_runs) == ndev


@pytest.mark.parametrize("ring", [0, 2])
@pytest.mark.parametrize("ndev, shape", [(2, (12, 33)), (3, (7, 5)), (4, (10, 40)), (3, (5, 1000))])
def test_sharded_reductions_match_sequential(parallel_runs: list[int], ring: int, ndev: int,
                                             shape: tuple[int, int]) -> None:
    data = RNG.uniform(-1, 1, shape).astype(np.float32)
    for axes in ((0,), (0, 1), (1,)):
        def build(axes: tuple[int, ...] = axes) -> MultiLazyBuffer:
            return shard(data, ndev).e(BinaryOps.MUL, shard(data, ndev)).r(ReduceOps.SUM, axes)

        with config.override(ring=ring):
            sequential, concurrent = both_ways(build)
        np.testing.assert_array_equal(concurrent, sequential)
        np.testing.assert_allclose(concurrent, (data * data).sum(axes, keepdims=True), rtol=1e-4, atol=1e-5)
    assert parallel_runs


def test_max_reduction_and_uneven_shards_match_sequential(parallel_runs: list[int]) -> None:
    data = RNG.uniform(-1, 1, (10, 3)).astype(np.float32)  # 4 + 4 + 2 rows over 3 devices
    sequential, concurrent = both_ways(lambda: shard(data, 3).e(UnaryOps.NEG).r(ReduceOps.MAX, (0,)))
    np.testing.assert_array_equal(concurrent, sequential)
    np.testing.assert_array_equal(concurrent, (-data).max(0, keepdims=True))


def test_copies_between_devices_match_sequential(parallel_runs: list[int]) -> None:
    data = RNG.uniform(-1, 1, (10, 4)).astype(np.float32)  # 4 + 4 + 2 rows over 3 devices, 3 + 3 + 3 + 1 over 4

    def gathered() -> LazyBuffer:
        return shard(data, 3).e(BinaryOps.ADD, shard(data, 3)).copy_to_device("CLANG:3")

    def resharded() -> MultiLazyBuffer:  # an unrealized value on CLANG copied out to every device
        return MultiLazyBuffer.from_sharded(from_numpy(data, "CLANG").e(UnaryOps.NEG), DEVICES, 0)

    for build, want in ((gathered, data + data), (resharded, -data)):
        sequential, concurrent = both_ways(build)
        np.testing.assert_array_equal(concurrent, sequential)
        np.testing.assert_array_equal(concurrent, want)
    assert parallel_runs


def test_assign_into_sharded_buffers_matches_sequential(parallel_runs: list[int]) -> None:
    data = RNG.uniform(-1, 1, (8, 5)).astype(np.float32)

    def run() -> tuple[np.ndarray, list[int]]:
        target = shard(data, 4)
        for step in range(3):
            target = target.assign(target.e(BinaryOps.MUL, target.const(2.0)).e(BinaryOps.ADD, target.const(step)))
            fast.realize(target)
        versions = [lb.base.buffer.version for lb in target.lbs]
        return fast.to_numpy(target), versions

    with config.override(parallel_devices=False):
        sequential, sequential_versions = run()
    concurrent, versions = run()
    np.testing.assert_array_equal(concurrent, sequential)
    np.testing.assert_array_equal(concurrent, ((data * 2) * 2 + 1) * 2 + 2)
    assert versions == sequential_versions == [3, 3, 3, 3]
    assert parallel_runs


# ---------------------------------------------------------------- dependency order

def item(outputs: list[Buffer], inputs: list[Buffer]) -> ScheduleItem:
    """A COPY-shaped item writing `outputs` and reading `inputs` (for dependency analysis only)."""
    return ScheduleItem(LazyOp(LoadOps.COPY, (), 0), (*outputs, *inputs))


def test_dependencies_compare_memory_by_base() -> None:
    a, b, c = (Buffer(device, 8, dtypes.float32) for device in ("CLANG", "CLANG:1", "CLANG:1"))
    a_view = a.view(4, dtypes.float32, 16)
    items = [item([a], []), item([b], [a_view]), item([c], [a]), item([a_view], [c]), item([b], [b])]
    deps = parallel.dependencies(items)
    assert deps[0] == set()
    assert deps[1] == {0}           # reads a (through a view) after item 0 wrote it
    assert deps[2] == {0}
    assert deps[3] == {0, 1, 2}     # writes a: after its writer and both readers; reads c: after item 2
    assert deps[4] == {1}           # in place on b: after b's writer


def test_a_copy_waits_for_the_kernel_producing_its_source(parallel_runs: list[int]) -> None:
    def slow_fill(out: np.ndarray) -> None:
        time.sleep(0.2)
        out[:] = np.arange(out.size, dtype=np.float32)

    source = custom((6,), "CLANG", slow_fill)
    moved = source.copy_to_device("CLANG:1").e(BinaryOps.MUL, source.copy_to_device("CLANG:1").const(3.0))
    np.testing.assert_array_equal(fast.to_numpy(moved), np.arange(6, dtype=np.float32) * 3)
    assert parallel_runs


def test_an_assign_waits_for_a_copy_reading_the_old_value(parallel_runs: list[int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    original = realize_module.run_copy  # (engine/items.py; realize.py calls it by this name)

    def slow_copy(copy_item: ScheduleItem) -> str:
        time.sleep(0.2)  # without the write-after-read dependency the assign would run meanwhile
        return original(copy_item)

    monkeypatch.setattr(realize_module, "run_copy", slow_copy)
    x = from_numpy(np.arange(5, dtype=np.float32), "CLANG")
    old = x.copy_to_device("CLANG:1")
    updated = x.assign(x.e(BinaryOps.ADD, x.const(100.0)))
    fast.realize(old, updated)
    np.testing.assert_array_equal(fast.to_numpy(old), np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(fast.to_numpy(updated), np.arange(5, dtype=np.float32) + 100)
    assert parallel_runs


# ---------------------------------------------------------------- errors

def fails(message: str, delay: float = 0.0) -> Callable[..., None]:
    def fn(out: np.ndarray, *inputs: np.ndarray) -> None:
        time.sleep(delay)
        raise ValueError(message)
    return fn


def records(log: list[str], name: str, delay: float = 0.0) -> Callable[..., None]:
    def fn(out: np.ndarray, *inputs: np.ndarray) -> None:
        time.sleep(delay)
        log.append(name)
        out[:] = 1.0
    return fn


def items_of(*buffers: LazyBuffer) -> list[ScheduleItem]:
    return [entry for buffer in buffers for entry in fast.schedule(buffer)]


def test_an_error_on_one_device_reaches_the_caller(parallel_runs: list[int]) -> None:
    data = RNG.uniform(-1, 1, (6,)).astype(np.float32)
    sharded = shard(data, 2)
    broken = custom((3,), "CLANG:1", fails("device one broke"), sharded.lbs[1])
    fine = sharded.lbs[0].e(UnaryOps.NEG)
    with pytest.raises(ValueError, match="device one broke"):
        fast.realize(fine, broken)
    assert parallel_runs


def test_the_first_error_in_schedule_order_is_raised_and_later_items_do_not_start(parallel_runs: list[int]) -> None:
    log: list[str] = []
    items = items_of(custom((2,), "CLANG:1", records(log, "before", 0.2)), custom((2,), "CLANG", fails("early")),
                     custom((2,), "CLANG:1", records(log, "after")))
    with pytest.raises(ValueError, match="early"):
        realize_module.run_schedule(items)
    assert log == ["before"]  # item 0 (before the failure) ran; item 2 (after it) never started
    items = items_of(custom((2,), "CLANG:1", fails("slow, first in order", 0.2)), custom((2,), "CLANG", fails("fast")))
    with pytest.raises(ValueError, match="slow, first in order"):
        realize_module.run_schedule(items)


def test_an_interrupted_lane_keeps_its_dependents_from_starting(parallel_runs: list[int],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    original = parallel.LaneRun._run

    def interrupted(self: parallel.LaneRun, index: int, live: int) -> None:
        if index == 0:  # the caller claims the first item itself, before any helper is posted
            raise KeyboardInterrupt
        original(self, index, live)

    monkeypatch.setattr(parallel.LaneRun, "_run", interrupted)
    x = from_numpy(np.arange(4, dtype=np.float32), "CLANG")
    items = fast.schedule(x.copy_to_device("CLANG:1"), x.assign(x.e(BinaryOps.ADD, x.const(1.0))))
    assert [entry.ast.op for entry in items][0] is LoadOps.COPY and items[1].assign  # copy, then the assign
    with pytest.raises(KeyboardInterrupt):
        realize_module.run_schedule(items)
    buffer = x.base.buffer  # the copy never read x, so the assign (after it in order) must not have run
    assert buffer.version == 0 and buffer.as_numpy().tolist() == [0.0, 1.0, 2.0, 3.0]


# ---------------------------------------------------------------- overlap, threads, cost

def test_items_on_two_devices_overlap_in_time(parallel_runs: list[int]) -> None:
    spans: dict[str, tuple[float, float]] = {}

    def sleeper(name: str) -> Callable[..., None]:
        def fn(out: np.ndarray) -> None:
            start = time.perf_counter()
            time.sleep(0.3)
            spans[name] = (start, time.perf_counter())
            out[:] = 1.0
        return fn

    a, b = custom((4,), "CLANG", sleeper("a")), custom((4,), "CLANG:1", sleeper("b"))
    start = time.perf_counter()
    fast.realize(a, b)
    wall = time.perf_counter() - start
    assert spans["a"][0] < spans["b"][1] and spans["b"][0] < spans["a"][1], spans  # the intervals intersect
    assert wall < 0.5, wall  # sequentially 0.6 s
    with config.override(parallel_devices=False):
        spans.clear()
        fast.realize(custom((4,), "CLANG", sleeper("a")), custom((4,), "CLANG:1", sleeper("b")))
    assert spans["a"][1] <= spans["b"][0] or spans["b"][1] <= spans["a"][0]


def test_kernels_are_capped_to_share_the_cores(parallel_runs: list[int]) -> None:
    caps: dict[str, int] = {}

    def cap_seen(name: str) -> Callable[..., None]:
        def fn(out: np.ndarray) -> None:
            caps[name] = launch.threads_for(1 << 40)
            time.sleep(0.05)
            out[:] = 0.0
        return fn

    with config.override(threads=8):
        fast.realize(*(custom((2,), device, cap_seen(device)) for device in DEVICES))
        assert caps == dict.fromkeys(DEVICES, 2)
        assert launch.threads_for(1 << 40) == 8  # no cap outside the lanes
        caps.clear()  # a lane waiting for another (the copy's) does not count: the producer gets every thread
        fast.realize(custom((2,), "CLANG", cap_seen("alone")).copy_to_device("CLANG:1"))
        assert caps == {"alone": 8}
    with launch.thread_cap(3), config.override(threads=2):
        assert launch.threads_for(1 << 40) == 2 and launch.threads_for(1) == 1


def test_single_device_and_small_schedules_stay_on_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> None:
        raise AssertionError("no parallel run expected")

    monkeypatch.setattr(parallel.LaneRun, "run", refuse)
    x = from_numpy(np.arange(12, dtype=np.float32), "CLANG")
    assert fast.to_numpy(x.e(BinaryOps.MUL, x).r(ReduceOps.SUM, (0,))).tolist() == [506.0]
    with config.override(parallel_devices_min_work=1 << 20):  # tiny buffers on two devices: not worth a thread
        np.testing.assert_array_equal(fast.to_numpy(shard(np.ones((4, 2), np.float32), 2).r(ReduceOps.SUM, (0,))),
                                      [[4.0, 4.0]])
    with config.override(parallel_devices=False, parallel_devices_min_work=0):
        fast.realize(shard(np.ones((4, 2), np.float32), 2).e(UnaryOps.NEG))


def test_a_custom_function_that_realizes_runs_its_schedule_sequentially(parallel_runs: list[int]) -> None:
    data = np.arange(8, dtype=np.float32).reshape(4, 2)

    def nested(out: np.ndarray) -> None:
        out[:] = fast.to_numpy(shard(data, 2).r(ReduceOps.SUM, (0,)))

    outer = custom((1, 2), "CLANG:1", nested)
    other = from_numpy(data, "CLANG").e(UnaryOps.NEG)
    fast.realize(outer, other)
    assert fast.to_numpy(outer).tolist() == [[12.0, 16.0]]
    assert parallel_runs == [2]  # the nested realize did not start a parallel run of its own


def test_debug_two_prints_one_line_per_item(parallel_runs: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    data = RNG.uniform(-1, 1, (6, 4)).astype(np.float32)
    sharded = shard(data, 3)
    total = sharded.e(BinaryOps.MUL, sharded).r(ReduceOps.SUM, (0,))
    count = len(fast.schedule(total))
    with config.override(debug=2):
        fast.realize(total)
    lines = capsys.readouterr().out.strip().splitlines()
    items = [line for line in lines if line.startswith("***")]  # (DEBUG=2 also prints the schedule table)
    numbers = sorted(int(re.match(r"\*\*\* \S+\s+(\d+) ", line).group(1)) for line in items)  # type: ignore[union-attr]
    assert numbers == list(range(count))
    assert re.fullmatch(rf"realize: {count} items, \d+ kernels in [0-9.]+ ms", lines[-1])


def test_disk_items_share_one_lane(tmp_path: Any) -> None:
    disk = from_numpy(np.arange(4, dtype=np.float32), f"DISK:{tmp_path / 'd.bin'}")
    copied = disk.copy_to_device("CLANG:1")
    lanes = {parallel.lane_of(entry) for entry in fast.schedule(copied)}
    assert lanes == {"DISK"}
    assert parallel.lane_of(fast.schedule(from_numpy(np.ones(2, np.float32), "CLANG:2").e(UnaryOps.NEG))[0]) \
        == "CLANG:2"


def test_threads_for_the_lanes_are_reused() -> None:
    """A lane thread that went idle takes the next lane: no new thread per realize. (The pause lets
    each worker mark itself idle: a lane submitted in the instant between a worker finishing its
    task and waiting for the next one may start a thread, up to the pool's size; on a loaded host
    that happened at three realizes of five.)"""
    with config.override(parallel_devices=True, parallel_devices_min_work=0):
        for _ in range(2):
            fast.realize(shard(np.ones((4, 2), np.float32), 2).e(UnaryOps.NEG))
            time.sleep(0.05)
        before = threading.active_count()
        for _ in range(5):
            fast.realize(shard(np.ones((4, 2), np.float32), 2).e(UnaryOps.NEG))
            time.sleep(0.05)
    assert threading.active_count() <= before, [thread.name for thread in threading.enumerate()]


def test_the_small_tail_of_a_sharded_sum_runs_on_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the items up to the last large one run in lanes; the all-reduce's small items after it run
    afterwards on the caller's thread, in schedule order (no thread hand-offs), with the same result."""
    data = RNG.uniform(-1, 1, (4096, 64)).astype(np.float32)
    sharded = shard(data, 2)
    total = sharded.e(BinaryOps.MUL, sharded).r(ReduceOps.SUM, (0,))
    items = fast.schedule(total)
    large = [parallel.item_work(item) >= 1 << 19 for item in items]
    cut = parallel.parallel_prefix(items, 1 << 19)
    assert any(large) and not any(large[cut:]) and large[cut - 1] and cut < len(items)
    threads: dict[int, int] = {}
    original = realize_module._run_and_record

    def recording(number: int, item: ScheduleItem, *args: Any) -> None:
        threads[number] = threading.get_ident()
        original(number, item, *args)

    monkeypatch.setattr(realize_module, "_run_and_record", recording)
    with config.override(parallel_devices=True, parallel_devices_min_work=1 << 19):
        fast.realize(total)
    assert sorted(threads) == list(range(len(threads)))
    tail = [threads[number] for number in range(cut, len(threads))]
    assert tail and all(ident == threading.get_ident() for ident in tail)
    # the large items ran in lanes: on at most two threads (the caller runs a lane whose helper did not
    # get a core in time: tests/fast/test_thread_claiming.py)
    assert 1 <= len({threads[number] for number in range(cut)}) <= 2
    np.testing.assert_allclose(fast.to_numpy(total), (data * data).sum(0, keepdims=True), rtol=1e-4)
