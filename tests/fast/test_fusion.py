"""Fusion: how many kernels `fast.schedule` makes for typical graphs, and that fused values are right."""
from __future__ import annotations

import numpy as np
import pytest

import fast
from fast import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps, dtypes, from_numpy, to_numpy
from fast.engine import fusion
from fast.ops import KernelOps, LazyOp

LOG2E = 1.4426950408889634


def kernels(*buffers: object) -> list[LazyOp]:
    return [item.ast for item in fast.schedule(*buffers) if item.ast.op is KernelOps.SINK]


def ops_in(ast: LazyOp) -> list[object]:
    return [node.op for node in ast.walk()]


def rng_array(shape: tuple[int, ...], seed: int = 0, low: float = -3, high: float = 3) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


@pytest.fixture
def abc() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return rng_array((4, 5), 1), rng_array((4, 5), 2), rng_array((4, 5), 3, 1, 2)


def test_ten_elementwise_ops_over_three_inputs_are_one_kernel(abc: tuple[np.ndarray, ...]) -> None:
    a, b, c = (from_numpy(x, "CLANG") for x in abc)
    na, nb, nc = abc
    out, expect = a, na
    steps = [(BinaryOps.ADD, b, nb), (BinaryOps.MUL, c, nc), (BinaryOps.SUB, a, na), (BinaryOps.MAX, b, nb),
             (BinaryOps.DIV, c, nc), (BinaryOps.ADD, a, na), (BinaryOps.MUL, b, nb), (BinaryOps.SUB, c, nc),
             (BinaryOps.MAX, a, na)]
    for op, operand, array in steps:
        out = out.e(op, operand)
        expect = {BinaryOps.ADD: np.add, BinaryOps.MUL: np.multiply, BinaryOps.SUB: np.subtract,
                  BinaryOps.MAX: np.maximum, BinaryOps.DIV: np.divide}[op](expect, array)
    out, expect = out.e(UnaryOps.NEG), -expect
    found = kernels(out)
    assert len(found) == 1
    assert sum(op in (*BinaryOps, *UnaryOps) for op in ops_in(found[0])) == 10
    np.testing.assert_allclose(to_numpy(out), expect, rtol=1e-6)


def test_product_sum_is_one_kernel(abc: tuple[np.ndarray, ...]) -> None:
    a, b = from_numpy(abc[0], "CLANG"), from_numpy(abc[1], "CLANG")
    out = a.e(BinaryOps.MUL, b).r(ReduceOps.SUM, (1,))
    assert len(kernels(out)) == 1
    np.testing.assert_allclose(to_numpy(out), (abc[0] * abc[1]).sum(axis=1, keepdims=True), rtol=1e-5)


def test_relu_sum_times_two_is_one_kernel(abc: tuple[np.ndarray, ...]) -> None:
    x = from_numpy(abc[0], "CLANG")
    out = x.e(BinaryOps.MAX, x.const(0.0)).r(ReduceOps.SUM, (0, 1)).e(BinaryOps.MUL, x.const(2.0, (1, 1)))
    found = kernels(out)
    assert len(found) == 1 and ReduceOps.SUM in ops_in(found[0]) and BinaryOps.MUL in ops_in(found[0])
    np.testing.assert_allclose(to_numpy(out), [[2 * np.maximum(abc[0], 0).sum()]], rtol=1e-5)


def test_constants_only_is_zero_kernels() -> None:
    x = from_numpy(np.zeros(3, np.int32), "CLANG")
    out = x.const(7, (2, 3)).e(BinaryOps.MUL, x.const(6, (2, 3))).e(BinaryOps.ADD, x.const(1, (2, 3)))
    assert fast.schedule(out) == []
    np.testing.assert_array_equal(to_numpy(out), np.full((2, 3), 43, np.int32))


def test_row_softmax_is_at_most_three_kernels(abc: tuple[np.ndarray, ...]) -> None:
    x = from_numpy(abc[0], "CLANG")
    shape = x.shape
    biggest = x.r(ReduceOps.MAX, (1,)).expand(shape)
    exps = x.e(BinaryOps.SUB, biggest).e(BinaryOps.MUL, x.const(LOG2E)).e(UnaryOps.EXP2)
    out = exps.e(BinaryOps.DIV, exps.r(ReduceOps.SUM, (1,)).expand(shape))
    assert len(kernels(out)) <= 3
    expect = np.exp(abc[0] - abc[0].max(1, keepdims=True))
    np.testing.assert_allclose(to_numpy(out), expect / expect.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("unsafe", [UnaryOps.LOG2, BinaryOps.DIV, UnaryOps.EXP2])
def test_unsafe_pad_behind_reshape_is_not_fused(unsafe: object) -> None:
    data = np.arange(1, 7, dtype=np.float32)
    x = from_numpy(data, "CLANG")
    inner = x.e(unsafe) if isinstance(unsafe, UnaryOps) else x.e(unsafe, x)  # type: ignore[arg-type]
    padded = inner.pad(((1, 1),)).reshape((2, 4))
    out = padded.e(BinaryOps.ADD, padded)
    assert len(kernels(out)) == 2
    with np.errstate(all="ignore"):
        core = {UnaryOps.LOG2: np.log2, UnaryOps.EXP2: np.exp2}.get(unsafe, lambda v: v / v)(data)  # type: ignore[call-overload]
    expect = 2 * np.concatenate([[0.0], core, [0.0]]).reshape(2, 4)
    result = to_numpy(out)
    assert not np.isnan(result).any()
    np.testing.assert_allclose(result, expect, rtol=1e-6)


def test_unsafe_pad_behind_expand_is_not_fused() -> None:
    data = np.arange(1, 7, dtype=np.float32)
    x = from_numpy(data, "CLANG")
    view = x.e(UnaryOps.LOG2).reshape((6, 1)).pad(((0, 0), (0, 1))).reshape((1, 6, 2)).expand((3, 6, 2))
    out = view.e(BinaryOps.ADD, view)
    assert len(kernels(out)) == 2
    row = np.stack([2 * np.log2(data), np.zeros(6, np.float32)], axis=1)
    np.testing.assert_allclose(to_numpy(out), np.broadcast_to(row, (3, 6, 2)), rtol=1e-6)


def test_unsafe_pad_check_sees_masks_in_every_view() -> None:
    x = from_numpy(np.arange(1, 7, dtype=np.float32), "CLANG")
    view = x.e(UnaryOps.EXP2).pad(((1, 1),)).reshape((2, 4)).permute((1, 0)).reshape((8,))
    assert view.st.views[0].mask is not None and view.st.views[-1].mask is None  # the mask hides behind views
    assert fusion.has_pad_mask(view.st)
    out = view.e(BinaryOps.MUL, view)
    assert len(kernels(out)) == 2
    result = to_numpy(out).reshape(4, 2).T.reshape(-1)
    np.testing.assert_allclose(result, np.concatenate([[0], np.exp2(np.arange(1, 7)) ** 2, [0]]), rtol=1e-6)


def test_pad_through_safe_ops_is_fused() -> None:
    data = np.arange(6, dtype=np.float32) - 2
    x = from_numpy(data, "CLANG")
    inner = x.e(BinaryOps.MUL, x).e(BinaryOps.ADD, x.const(1.0)).e(UnaryOps.SQRT).e(BinaryOps.MAX, x)
    out = inner.pad(((2, 1),)).e(BinaryOps.SUB, x.pad(((1, 2),)))
    assert len(kernels(out)) == 1
    fused = np.maximum(np.sqrt(data * data + 1), data)
    np.testing.assert_allclose(to_numpy(out), np.pad(fused, (2, 1)) - np.pad(data, (1, 2)), rtol=1e-6)


ZERO_RULES = [  # (op, operand dtype, keeps zero): the unsafe set, justified by docs/semantics.md
    (UnaryOps.EXP2, dtypes.float32, False), (UnaryOps.LOG2, dtypes.float32, False),
    (BinaryOps.DIV, dtypes.float32, False), (BinaryOps.DIV, dtypes.int32, True),
    (BinaryOps.CMPEQ, dtypes.int32, False), (BinaryOps.CMPLT, dtypes.float32, True),
    (UnaryOps.NEG, dtypes.float32, False), (UnaryOps.NEG, dtypes.int8, True),
    (UnaryOps.SQRT, dtypes.float16, True), (UnaryOps.SIN, dtypes.float64, True),
    (BinaryOps.MOD, dtypes.uint8, True), (BinaryOps.XOR, dtypes.bool, True), (BinaryOps.MAX, dtypes.bfloat16, True),
    (TernaryOps.WHERE, dtypes.float32, True), (TernaryOps.MULACC, dtypes.int64, True),
]


@pytest.mark.parametrize(("op", "dtype", "keeps"), ZERO_RULES)
def test_op_keeps_zero_matches_semantics(op: UnaryOps | BinaryOps | TernaryOps, dtype: fast.DType, keeps: bool) -> None:
    x = fast.LazyBuffer.loadop(LoadOps.EMPTY, (2,), dtype, "CLANG")
    operands = 1 if isinstance(op, UnaryOps) else 2 if isinstance(op, BinaryOps) else 3
    if op is TernaryOps.WHERE:
        node = x.e(BinaryOps.CMPLT, x).e(op, x, x)  # type: ignore[arg-type]
    else:
        node = x.e(op, *([x] * (operands - 1)))  # type: ignore[arg-type]
    assert fusion.op_keeps_zero(node.base) is keeps


def test_casts_keep_zero() -> None:
    x = fast.LazyBuffer.loadop(LoadOps.EMPTY, (2,), dtypes.float32, "CLANG")
    assert fusion.op_keeps_zero(x.cast(dtypes.bool).base)
    assert fusion.op_keeps_zero(x.cast(dtypes.int32, bitcast=True).base)


def test_expanded_unrealized_base_is_realized(abc: tuple[np.ndarray, ...]) -> None:
    a, b = from_numpy(abc[0], "CLANG"), from_numpy(abc[1], "CLANG")
    column = a.e(BinaryOps.ADD, b).shrink(((0, 4), (0, 1))).e(UnaryOps.SIN)
    out = column.expand((4, 5)).e(BinaryOps.MUL, b)
    assert len(kernels(out)) == 2
    np.testing.assert_allclose(to_numpy(out), np.sin(abc[0][:, :1] + abc[1][:, :1]) * abc[1], rtol=1e-6)


def test_reduce_read_through_permute_is_realized(abc: tuple[np.ndarray, ...]) -> None:
    a = from_numpy(abc[0], "CLANG")
    total = a.r(ReduceOps.SUM, (1,)).reshape((2, 2)).permute((1, 0))
    out = total.e(BinaryOps.ADD, total.const(1.0))
    assert len(kernels(out)) == 2
    np.testing.assert_allclose(to_numpy(out), abc[0].sum(1).reshape(2, 2).T + 1, rtol=1e-5)


def test_two_reduces_of_the_same_rows_into_one_output_are_one_kernel(abc: tuple[np.ndarray, ...]) -> None:
    a, b = from_numpy(abc[0], "CLANG"), from_numpy(abc[1], "CLANG")
    out = a.r(ReduceOps.SUM, (1,)).e(BinaryOps.ADD, b.r(ReduceOps.MAX, (1,)))
    (found,) = kernels(out)
    assert sum(isinstance(op, ReduceOps) for op in ops_in(found)) == 2
    np.testing.assert_allclose(to_numpy(out), abc[0].sum(1, keepdims=True) + abc[1].max(1, keepdims=True), rtol=1e-5)


def test_reduce_of_reduce_is_two_kernels(abc: tuple[np.ndarray, ...]) -> None:
    a = from_numpy(abc[0], "CLANG")
    out = a.r(ReduceOps.MAX, (1,)).e(BinaryOps.MUL, a.const(3.0, (4, 1))).r(ReduceOps.SUM, (0,))
    assert len(kernels(out)) == 2
    np.testing.assert_allclose(to_numpy(out), [[3 * abc[0].max(1).sum()]], rtol=1e-5)


def test_shared_reduce_is_chased_to_its_last_single_consumer(abc: tuple[np.ndarray, ...]) -> None:
    a = from_numpy(abc[0], "CLANG")
    scaled = a.r(ReduceOps.SUM, (1,)).e(BinaryOps.MUL, a.const(2.0, (4, 1)))
    first, second = scaled.e(BinaryOps.ADD, a.const(1.0, (4, 1))), scaled.e(BinaryOps.SUB, a.const(1.0, (4, 1)))
    found = kernels(first, second)
    assert len(found) == 3
    with_reduce = [ast for ast in found if ReduceOps.SUM in ops_in(ast)]
    assert len(with_reduce) == 1 and BinaryOps.MUL in ops_in(with_reduce[0])
    fast.realize(first, second)
    np.testing.assert_allclose(to_numpy(first), 2 * abc[0].sum(1, keepdims=True) + 1, rtol=1e-5)
    np.testing.assert_allclose(to_numpy(second), 2 * abc[0].sum(1, keepdims=True) - 1, rtol=1e-5)


def test_reduce_read_through_two_views_is_realized() -> None:
    data = np.arange(12, dtype=np.float32).reshape(6, 2)
    a = from_numpy(data, "CLANG")
    total = a.r(ReduceOps.SUM, (1,))
    out = total.e(BinaryOps.SUB, total.stride((-1, 1)))
    assert len(kernels(out)) == 2
    sums = data.sum(1, keepdims=True)
    np.testing.assert_allclose(to_numpy(out), sums - sums[::-1])
