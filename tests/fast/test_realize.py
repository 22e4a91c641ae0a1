"""Running schedules on CLANG: values against numpy, devices and copies, caches, DEBUG lines, to_numpy."""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import fast
from fast import (
    BinaryOps,
    LazyBuffer,
    LoadOps,
    MultiLazyBuffer,
    ReduceOps,
    TernaryOps,
    UnaryOps,
    config,
    dtypes,
    from_numpy,
    to_numpy,
)
from fast.engine.realize import PROGRAMS
from fast.runtime.base import COMPILE_COUNTER

RNG = np.random.default_rng(7)
X = RNG.uniform(-4, 4, (3, 4, 5)).astype(np.float32)
Y = RNG.uniform(0.5, 4, (3, 4, 5)).astype(np.float32)
I = RNG.integers(-100, 100, (3, 4, 5)).astype(np.int32)
J = RNG.integers(-5, 6, (3, 4, 5)).astype(np.int32)

Graph = Callable[[LazyBuffer, LazyBuffer], LazyBuffer]
CASES: dict[str, tuple[Graph, Callable[[np.ndarray, np.ndarray], np.ndarray], bool]] = {
    "chain": (lambda x, y: x.e(BinaryOps.MUL, y).e(BinaryOps.SUB, x).e(UnaryOps.NEG),
              lambda x, y: -(x * y - x), False),
    "div_sqrt_sin": (lambda x, y: x.e(BinaryOps.DIV, y).e(UnaryOps.SIN).e(BinaryOps.ADD, y.e(UnaryOps.SQRT)),
                     lambda x, y: np.sin(x / y) + np.sqrt(y), False),
    "exp2_log2": (lambda x, y: y.e(UnaryOps.LOG2).e(BinaryOps.MAX, x.e(UnaryOps.EXP2)),
                  lambda x, y: np.maximum(np.log2(y), np.exp2(x)), False),
    "where_cmp": (lambda x, y: x.e(BinaryOps.CMPLT, y).e(TernaryOps.WHERE, x, y),
                  lambda x, y: np.where(x < y, x, y), False),
    "mulacc": (lambda x, y: x.e(TernaryOps.MULACC, y, x), lambda x, y: x * y + x, False),
    "sum_axis": (lambda x, y: x.e(BinaryOps.MUL, y).r(ReduceOps.SUM, (1,)),
                 lambda x, y: (x * y).sum(1, keepdims=True), False),
    "max_two_axes": (lambda x, y: x.r(ReduceOps.MAX, (0, 2)).e(BinaryOps.ADD, y.r(ReduceOps.SUM, (0, 2))),
                     lambda x, y: x.max((0, 2), keepdims=True) + y.sum((0, 2), keepdims=True), False),
    "permute_flip": (lambda x, y: x.permute((2, 0, 1)).stride((-1, 1, 2)).e(BinaryOps.ADD,
                                                                           y.permute((2, 0, 1)).stride((1, 1, 2))),
                     lambda x, y: x.transpose(2, 0, 1)[::-1, :, ::2] + y.transpose(2, 0, 1)[:, :, ::2], False),
    "shrink_pad": (lambda x, y: x.shrink(((1, 3), (0, 4), (2, 5))).pad(((0, 1), (0, 0), (2, 0))).e(
        BinaryOps.MUL, y), lambda x, y: np.pad(x[1:3, :, 2:5], ((0, 1), (0, 0), (2, 0))) * y, False),
    "expand_sum": (lambda x, y: x.r(ReduceOps.SUM, (2,)).expand((3, 4, 5)).e(BinaryOps.SUB, y),
                   lambda x, y: x.sum(2, keepdims=True) - y, False),
    "cast_chain": (lambda x, y: x.cast(dtypes.int32).cast(dtypes.float16).e(BinaryOps.ADD, y.cast(dtypes.float16)),
                   lambda x, y: x.astype(np.int32).astype(np.float16) + y.astype(np.float16), False),
    "int_div_mod": (lambda x, y: x.e(BinaryOps.DIV, y).e(BinaryOps.ADD, x.e(BinaryOps.MOD, y)),
                    lambda x, y: _int_div(x, y) + _int_mod(x, y), True),
    "int_sum_xor": (lambda x, y: x.e(BinaryOps.XOR, y).r(ReduceOps.SUM, (0, 1)),
                    lambda x, y: (x ^ y).sum((0, 1), keepdims=True, dtype=np.int32), True),
    "int_cmpeq": (lambda x, y: x.e(BinaryOps.CMPEQ, y.e(BinaryOps.MUL, y)).cast(dtypes.int32),
                  lambda x, y: (x == y * y).astype(np.int32), True),
}


def _int_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    quotient = np.abs(x) // np.where(y == 0, 1, np.abs(y))
    return np.where(y == 0, 0, np.where((x < 0) == (y < 0), quotient, -quotient)).astype(x.dtype)


def _int_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x - _int_div(x, y) * y).astype(x.dtype)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_match_numpy(name: str) -> None:
    graph, expect, integer = CASES[name]
    left, right = (I, J) if integer else (X, Y)
    out = graph(from_numpy(left, "CLANG"), from_numpy(right, "CLANG"))
    with np.errstate(all="ignore"):
        expected = expect(left, right)
    result = to_numpy(out)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    if integer:
        np.testing.assert_array_equal(result, expected)
    else:
        np.testing.assert_allclose(result, expected, rtol=2e-3 if result.dtype == np.float16 else 1e-5, atol=1e-6)


def test_running_the_same_graph_again_compiles_nothing() -> None:
    def graph(seed: int) -> LazyBuffer:
        x = from_numpy(np.full((7, 3), seed, np.float64), "CLANG")
        return x.e(BinaryOps.MUL, x.const(1.25)).r(ReduceOps.SUM, (0,)).e(UnaryOps.SQRT)
    np.testing.assert_allclose(to_numpy(graph(1)), np.sqrt(np.full((1, 3), 7 * 1.25)))
    compiles, programs = COMPILE_COUNTER.snapshot(), len(PROGRAMS)
    np.testing.assert_allclose(to_numpy(graph(2)), np.sqrt(np.full((1, 3), 7 * 2.5)))
    assert COMPILE_COUNTER.snapshot() == compiles and len(PROGRAMS) == programs


def test_debug_two_prints_one_line_per_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    x = from_numpy(X, "CLANG")
    out = x.r(ReduceOps.SUM, (2,)).contiguous().expand((3, 4, 5)).e(BinaryOps.MUL, x).copy_to_device("CLANG:1")
    with config.override(debug=2):
        fast.realize(out)
    lines = capsys.readouterr().out.strip().splitlines()
    number = r"\s+[0-9.]+"
    kernel = re.compile(rf"\*\*\* CLANG\s+\d+ \w+\s+global \([0-9, ]+\)\s*{number} ms{number} GB/s{number} GFLOP/s")
    assert sum(bool(kernel.fullmatch(line)) for line in lines) == 2, lines
    copy = re.compile(rf"\*\*\* CLANG:1\s+2 copy 240 bytes CLANG -> CLANG:1\s+{number} ms")
    assert any(copy.fullmatch(line) for line in lines)
    assert re.fullmatch(r"realize: 3 items, 2 kernels in [0-9.]+ ms", lines[-1])


def test_debug_levels_and_dump_stages(capsys: pytest.CaptureFixture[str]) -> None:
    x = from_numpy(np.arange(11, dtype=np.int16), "CLANG")
    with config.override(debug=1):
        fast.realize(x.e(BinaryOps.MUL, x.const(3)).e(BinaryOps.XOR, x))
    assert re.fullmatch(r"realize: 1 items, 1 kernels in [0-9.]+ ms\n", capsys.readouterr().out)
    with config.override(dump_ir="schedule,ast,ir,source"):
        fast.realize(x.e(BinaryOps.MUL, x.const(5)).e(BinaryOps.XOR, x.const(91)).e(BinaryOps.MOD, x))
    printed = capsys.readouterr().out
    for marker in ("schedule 0: SINK", "--- ast (CLANG)", "= MOD", "--- ir (CLANG)", "kernel E_11", "--- source",
                   "void E_11("):
        assert marker in printed
    with config.override(dump_ir="ast,bogus"), pytest.raises(ValueError, match="bogus"):
        fast.realize(x.e(BinaryOps.ADD, x.const(2)).e(BinaryOps.MUL, x))


@pytest.mark.parametrize("count", [2, 3])
def test_clang_devices_with_copies(count: int) -> None:
    devices = tuple(f"CLANG:{n}" for n in range(count))
    data = RNG.uniform(-1, 1, (7, 4)).astype(np.float32)
    sharded = MultiLazyBuffer.from_sharded(from_numpy(data, "CLANG"), devices, 0)
    total = sharded.e(BinaryOps.MUL, sharded).r(ReduceOps.SUM, (0,))
    assert total.axis is None
    items = fast.schedule(total)
    assert {item.bufs[0].device for item in items} == {"CLANG", *devices[1:]}
    assert sum(item.ast.op is LoadOps.COPY for item in items) >= count
    np.testing.assert_allclose(to_numpy(total), (data * data).sum(0, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(to_numpy(sharded.e(UnaryOps.NEG)), -data)
    gathered = sharded.copy_to_device(devices[-1])
    np.testing.assert_allclose(to_numpy(gathered), data)


def test_to_numpy_of_views_constants_and_half_floats() -> None:
    base = from_numpy(np.arange(12, dtype=np.int64).reshape(3, 4), "CLANG")
    fast.realize(base)
    np.testing.assert_array_equal(to_numpy(base.permute((1, 0)).shrink(((1, 3), (0, 3)))),
                                  np.arange(12).reshape(3, 4).T[1:3])
    padded_const = base.const(-2).pad(((1, 0), (0, 1)))
    np.testing.assert_array_equal(to_numpy(padded_const), np.pad(np.full((3, 4), -2), ((1, 0), (0, 1))))
    halves = np.array([1.0, -2.5, 3.140625, 65504.0], np.float32)
    brain = from_numpy(halves, "CLANG").cast(dtypes.bfloat16)
    result = to_numpy(brain)
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, [1.0, -2.5, 3.140625, 65536.0])
    with pytest.raises(TypeError):
        to_numpy(np.zeros(3))
    with pytest.raises(TypeError):
        fast.realize("not a buffer")


def test_realize_drops_the_sources_of_realized_bases() -> None:
    x = from_numpy(np.arange(5, dtype=np.float32), "CLANG")
    out = x.e(BinaryOps.ADD, x).e(BinaryOps.MUL, x)
    assert out.srcs
    fast.realize(out)
    assert out.is_realized() and out.srcs == () and out.op is BinaryOps.MUL
    np.testing.assert_array_equal(to_numpy(out), 2 * np.arange(5) ** 2)


def test_custom_output_in_bfloat16_rounds_to_nearest_even() -> None:
    def fill(out: np.ndarray) -> None:
        out[...] = [1.00390625, 1.01171875, -0.0]
    custom = LazyBuffer.loadop(LoadOps.CUSTOM, (3,), dtypes.bfloat16, "CLANG", arg=fill)
    result = to_numpy(custom)
    np.testing.assert_array_equal(result, [1.0, 1.015625, -0.0])
    assert np.signbit(result[2])


def test_kernels_storing_zeros_of_either_sign_are_cached_apart() -> None:
    """The program cache keys constants by their bits: -0.0 == 0.0 must not reuse 0.0's kernel."""
    template = from_numpy(np.ones(3, np.float32), "CLANG")
    positive, negative = (to_numpy(template.const(zero).contiguous()) for zero in (0.0, -0.0))
    assert not np.signbit(positive).any() and np.signbit(negative).all()
    nan_bits = [to_numpy(template.const(value).contiguous()) for value in (float("nan"), float("inf"))]
    assert np.isnan(nan_bits[0]).all() and np.isinf(nan_bits[1]).all()


def test_kernels_compiled_under_other_lowering_settings_are_not_reused() -> None:
    """NOOPT and PARALLEL_MIN_WORK, changed mid-process, give kernels of their own (they change what
    lowering makes); back to the first settings, the first kernel is found again."""
    from fast.engine.realize import get_kernel
    from fast.runtime import cpu

    data = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)
    x = from_numpy(data, "CLANG")
    ast = fast.schedule(x.e(BinaryOps.MUL, x).r(ReduceOps.SUM, (1,)))[-1].ast
    optimized = get_kernel("CLANG", ast)[0]
    with config.override(noopt=True):
        plain = get_kernel("CLANG", ast)[0]
        with config.override(parallel_min_work=1):
            threaded = get_kernel("CLANG", ast)[0]
    assert plain is not optimized and threaded is not plain and not plain.program.threaded and threaded.program.threaded
    if cpu.vector_bytes() > 0:
        assert "vfloat32" in optimized.source and "vfloat32" not in plain.source
    assert get_kernel("CLANG", ast)[0] is optimized
    with config.override(noopt=True):
        np.testing.assert_allclose(to_numpy(x.e(BinaryOps.MUL, x).r(ReduceOps.SUM, (1,))).ravel(),
                                   (data * data).sum(1), rtol=1e-6)


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_symbolic_views_whose_index_numerators_can_be_negative(device: str) -> None:
    """Shrunk from a conformance failure (full profile): a flipped stride over a reshape of a
    symbolic shrink indexes with `(... // 5 - 1) % n`, whose numerator's lower bound is negative;
    lowering refused a symbolic divisor there. Now floor division and modulo by a symbolic divisor
    shift the numerator to be non-negative (codegen/lower.py `_shifted_floor`). Every binding, and
    views with `// n` too, against reference."""
    import reference

    data = np.arange(225, dtype=np.int32).reshape(5, 9, 5)
    views: list[Callable[[Any, Any], Any]] = [
        lambda x, n: x.shrink(((0, 5), (0, n), (0, 5))).reshape((25, n)).stride((1, -2)),
        lambda x, n: x.shrink(((0, 5), (0, n), (0, 5))).reshape((25, n)).stride((-3, -1)),
        lambda x, n: x.shrink(((1, 5), (0, n), (0, 5))).permute((1, 0, 2)).reshape((n, 20)).stride((-1, -3)),
    ]
    for view in views:
        for value in range(2, 8):
            results = []
            for package in (fast, reference):
                n = package.Variable("n", 2, 7).bind(value)
                results.append(package.to_numpy(view(package.from_numpy(data, device), n)))
            np.testing.assert_array_equal(results[0], results[1])


def test_realizing_buffers_that_hold_values_schedules_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """realize() of realized bases and their views returns before the replay and the scheduler
    (to_numpy asks for it twice per read), and still refuses a view whose memory an assign overwrote."""
    realize_module = importlib.import_module("fast.engine.realize")  # (the package attribute is the function)

    def refuse(*_: Any) -> Any:
        raise AssertionError("scheduled buffers that hold values")

    base = from_numpy(X, "CLANG")
    fast.realize(base)
    view = base.shrink(((0, 2), (1, 3), (0, 5)))
    with monkeypatch.context() as patch:
        patch.setattr(realize_module, "plan_schedule", refuse)
        patch.setattr(realize_module.replay, "prepare", refuse)
        fast.realize(base, view)
        np.testing.assert_array_equal(to_numpy(base), X)
    np.testing.assert_array_equal(to_numpy(view), X[:2, 1:3])
    target = from_numpy(np.arange(4, dtype=np.int32), "CLANG")
    fast.realize(target)
    stale = target.shrink(((1, 3),))
    fast.realize(target.assign(target.const(5, (4,)).contiguous()))
    with pytest.raises(RuntimeError, match="no longer exists"):
        fast.realize(stale)
    np.testing.assert_array_equal(to_numpy(target), [5, 5, 5, 5])
