"""Schedule replay (fast/engine/replay.py): a graph whose structure was realized before skips
scheduling, runs on its own buffers, and nothing stale is ever replayed."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import fast
from fast import BinaryOps, ReduceOps, config, from_numpy, realize, to_numpy
from fast.engine import replay
from fast.runtime.base import COMPILE_COUNTER

realize_module = importlib.import_module("fast.engine.realize")  # the module (fast.engine.realize is also a function)

RNG = np.random.default_rng(3)
STALE = "assign has since overwritten"


@pytest.fixture
def schedules(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the graphs that go through the scheduler (the rest were replayed)."""
    calls: list[int] = []
    original = realize_module.plan_schedule

    def counting(outs):  # type: ignore[no-untyped-def]
        steps = original(outs)
        if steps:  # to_numpy's second realize of a realized buffer schedules nothing
            calls.append(len(outs))
        return steps

    monkeypatch.setattr(realize_module, "plan_schedule", counting)
    replay.TEMPLATES.clear()
    return calls


def graph(x: fast.LazyBuffer, y: fast.LazyBuffer) -> fast.LazyBuffer:
    return x.e(BinaryOps.MUL, y).e(BinaryOps.ADD, x).r(ReduceOps.SUM, (1,))


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_same_structure_over_other_buffers_is_replayed(schedules: list[int], device: str) -> None:
    for round_number in range(4):
        a, b = (RNG.standard_normal((5, 33)).astype(np.float32) for _ in range(2))
        out = graph(from_numpy(a, device), from_numpy(b, device))
        np.testing.assert_allclose(to_numpy(out), (a * b + a).sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
        assert len(schedules) == 1, round_number  # scheduled once, then replayed


def test_another_constant_is_a_slot_of_the_same_structure(schedules: list[int]) -> None:
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    x = from_numpy(a, "CLANG")
    compiles = COMPILE_COUNTER.snapshot()[0]
    for constant in (2.0, 3.0, 2.0, -0.0, 5.5, float("inf")):
        out = x.e(BinaryOps.MUL, x.const(constant))
        np.testing.assert_array_equal(to_numpy(out), a * np.float32(constant))
        del out
    assert len(schedules) == 1  # 2.0 scheduled; the other values replayed with their slot's value
    assert COMPILE_COUNTER.snapshot()[0] - compiles <= 2  # inline for 2.0, then one parametrized kernel


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float16, np.float64, np.bool_])
def test_constant_slots_of_every_kind_replay_their_bits(schedules: list[int], dtype: type) -> None:
    a = (RNG.standard_normal((3, 5)) * 9).astype(dtype)
    x = from_numpy(a, "LLVM")
    values = [True, False, True] if dtype is np.bool_ else [3, -2, 7] if dtype is not np.uint8 else [3, 250, 7]
    for value in values:
        op = BinaryOps.MAX if dtype is np.bool_ else BinaryOps.ADD
        got = to_numpy(x.e(op, x.const(value)))
        added = (a + np.array(value).astype(dtype)).astype(dtype)
        want = np.maximum(a, np.bool_(value)) if dtype is np.bool_ else added
        np.testing.assert_array_equal(got, want)
    assert len(schedules) == 1


def test_equal_constants_are_one_slot_and_unequal_ones_another_structure(schedules: list[int]) -> None:
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    x = from_numpy(a, "CLANG")
    for first, second in ((2.0, 2.0), (3.0, 3.0), (2.0, 5.0), (4.0, 6.0), (7.0, 7.0)):
        out = x.e(BinaryOps.ADD, x.const(first)).e(BinaryOps.MUL, x.const(second))
        np.testing.assert_array_equal(to_numpy(out), (a + np.float32(first)) * np.float32(second))
    assert len(schedules) == 2  # one structure with one slot, one with two


def test_new_constants_of_a_two_device_graph_are_scheduled(schedules: list[int]) -> None:
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    x, y = from_numpy(a, "CLANG"), from_numpy(a, "CLANG:1")
    for constant in (2.0, 3.0, 3.0):
        left = x.e(BinaryOps.MUL, x.const(constant))
        right = y.e(BinaryOps.ADD, y.const(constant)).copy_to_device("CLANG")
        out = left.e(BinaryOps.ADD, right)
        np.testing.assert_array_equal(to_numpy(out), a * np.float32(constant) + (a + np.float32(constant)))
    assert len(schedules) == 2  # not a one-device kernel-only template: 3.0 is scheduled, then replayed


def test_new_constants_under_debug_are_scheduled(schedules: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    x = from_numpy(a, "CLANG")
    with config.override(debug=2):
        for constant in (2.0, 3.0):
            np.testing.assert_array_equal(to_numpy(x.e(BinaryOps.MUL, x.const(constant))), a * np.float32(constant))
    capsys.readouterr()
    assert len(schedules) == 2


def test_one_input_twice_is_not_two_inputs(schedules: list[int]) -> None:
    a, b = (RNG.standard_normal((3, 6)).astype(np.float32) for _ in range(2))
    x, y = from_numpy(a, "CLANG"), from_numpy(b, "CLANG")
    np.testing.assert_allclose(to_numpy(graph(x, y)), (a * b + a).sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(graph(y, y)), (b * b + b).sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(graph(x, x)), (a * a + a).sum(1, keepdims=True), rtol=1e-6)
    assert len(schedules) == 3 - 1  # (y, y) and (x, x) share a structure; (x, y) has another


def test_a_realized_intermediate_changes_the_structure(schedules: list[int]) -> None:
    a = RNG.standard_normal((4, 4)).astype(np.float32)
    x = from_numpy(a, "CLANG")
    lazy_product = x.e(BinaryOps.MUL, x)
    np.testing.assert_allclose(to_numpy(lazy_product.e(BinaryOps.ADD, x)), a * a + a, rtol=1e-6)
    product = x.e(BinaryOps.MUL, x.const(1.5))
    realize(product)
    np.testing.assert_allclose(to_numpy(product.e(BinaryOps.ADD, x)), a * 1.5 + a, rtol=1e-6)


def test_assigns_are_never_replayed_and_stale_reads_still_raise(schedules: list[int]) -> None:
    values = np.array([1, 2, 3], np.int32)
    for _ in range(2):
        t = from_numpy(values, "CLANG")
        realize(t.assign(t.e(BinaryOps.ADD, t)))
        assert to_numpy(t).tolist() == [2, 4, 6]
    assert replay.signature([from_numpy(values, "CLANG").contiguous()]) is None
    fresh = from_numpy(values, "CLANG")
    realize(fresh.reshape((3, 1)).e(BinaryOps.MUL, fresh.reshape((3, 1))))  # records this structure
    t = from_numpy(values, "CLANG")
    view = t.reshape((3, 1))
    stale = view.e(BinaryOps.MUL, view)
    realize(t.assign(t.const(7)))
    with pytest.raises(RuntimeError, match=STALE):
        realize(stale)


def test_configuration_is_part_of_the_key(schedules: list[int]) -> None:
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    x = from_numpy(a, "CLANG")
    for noopt in (False, True, False):
        with config.override(noopt=noopt):
            np.testing.assert_allclose(to_numpy(graph(x, x)), (a * a + a).sum(1, keepdims=True), rtol=1e-5)
    assert len(schedules) == 2


def test_several_outputs_and_row_kernels_replay(schedules: list[int]) -> None:
    for _ in range(3):
        a = RNG.standard_normal((6, 40)).astype(np.float32)
        x = from_numpy(a, "CLANG")
        total, largest = x.r(ReduceOps.SUM, (1,)), x.r(ReduceOps.MAX, (1,))
        row = x.e(BinaryOps.SUB, largest.expand((6, 40))).r(ReduceOps.SUM, (1,))
        realize(total, largest, row)
        np.testing.assert_allclose(to_numpy(total), a.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(to_numpy(largest), a.max(1, keepdims=True))
        np.testing.assert_allclose(to_numpy(row), (a - a.max(1, keepdims=True)).sum(1, keepdims=True), rtol=1e-5,
                                   atol=1e-4)
    assert schedules.count(3) == 1


def test_replay_prints_debug_lines(schedules: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    x = from_numpy(np.ones((2, 3), np.float32), "CLANG")
    realize(graph(x, x))
    with config.override(debug=2):
        realize(graph(from_numpy(np.ones((2, 3), np.float32), "CLANG"), x))
        realize(graph(from_numpy(np.ones((2, 3), np.float32), "CLANG"), x))
    assert len(schedules) == 2 and capsys.readouterr().out.count("***") == 2


@pytest.mark.parametrize("devices", [("CLANG", "CLANG:1"), ("LLVM", "LLVM:1", "LLVM:2"), ("CLANG", "LLVM")])
def test_sharded_reductions_with_their_copies_replay(schedules: list[int], devices: tuple[str, ...]) -> None:
    """A sharded sum's all-reduce copies partial sums between devices: the schedule of kernels and
    copies is recorded once and replayed over new inputs, on every device in parallel."""
    for round_number in range(3):
        a, b = (RNG.standard_normal((len(devices) * 8, 33)).astype(np.float32) for _ in range(2))
        x = fast.MultiLazyBuffer.from_sharded(from_numpy(a, "CLANG"), devices, 0)
        y = fast.MultiLazyBuffer.from_sharded(from_numpy(b, "CLANG"), devices, 0)
        realize(x, y)
        schedules.clear()  # the shards' copies above are scheduled each round (their sources are new)
        out = x.e(BinaryOps.MUL, y).e(BinaryOps.ADD, x).r(ReduceOps.SUM, (0,))
        got = to_numpy(out)
        np.testing.assert_allclose(got, (a * b + a).sum(0, keepdims=True), rtol=1e-5, atol=1e-5)
        assert len(schedules) == (1 if round_number == 0 else 0), round_number


def test_copies_from_disk_are_never_replayed(schedules: list[int], tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "data.bin"
    a = np.arange(64, dtype=np.float32)
    path.write_bytes(a.tobytes())
    for _ in range(2):
        disk = fast.LazyBuffer.loadop(fast.LoadOps.EMPTY, (64,), fast.dtypes.float32, f"DISK:{path}")
        out = disk.copy_to_device("CLANG").e(BinaryOps.ADD, from_numpy(a, "CLANG"))
        np.testing.assert_array_equal(to_numpy(out), a + a)
    assert len(schedules) == 2


def _signature(parts: tuple[int, ...], hashed: int) -> replay.Signature:
    return replay.Signature(parts, hashed, [], [], [])


def test_template_cache_tells_equal_hashes_apart_by_parts() -> None:
    cache = replay.TemplateCache()
    first, second = replay.Template((), (1,)), replay.Template((), (2,))
    cache.store(_signature((1,), 7), first)
    cache.store(_signature((2,), 7), second)  # the same hash, other parts: a second entry in the bucket
    assert cache.lookup(_signature((1,), 7)) is first
    assert cache.lookup(_signature((2,), 7)) is second
    assert cache.lookup(_signature((3,), 7)) is None and cache.lookup(_signature((1,), 8)) is None
    third = replay.Template((), (3,))
    cache.store(_signature((1,), 7), third)  # the same parts again: replaced, not added
    assert cache.lookup(_signature((1,), 7)) is third and sum(map(len, cache.values())) == 2


def test_template_cache_evicts_the_least_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "MAX_TEMPLATES", 3)
    cache = replay.TemplateCache()
    templates = [replay.Template((), (number,)) for number in range(5)]
    for number in range(3):
        cache.store(_signature((number,), number % 2), templates[number])
    assert cache.lookup(_signature((0,), 0)) is templates[0]  # 0 used last: 1 is now the oldest
    cache.store(_signature((3,), 1), templates[3])
    assert cache.lookup(_signature((1,), 1)) is None
    assert [cache.lookup(_signature((number,), number % 2)) for number in (0, 2, 3)] == \
        [templates[0], templates[2], templates[3]]
    cache.store(_signature((4,), 0), templates[4])  # 0 is now the oldest (looked up before 2 and 3)
    assert cache.lookup(_signature((0,), 0)) is None and sum(map(len, cache.values())) == 3
