"""Row kernels: several reductions over the same rows, with the elementwise work between them, in one
kernel (softmax, layernorm, sum and max of one input), against numpy on awkward shapes and values."""
from __future__ import annotations

import math

import numpy as np
import pytest

import fast
from fast import BinaryOps, LazyBuffer, ReduceOps, UnaryOps, config, dtypes
from fast.ops import KernelOps

DEVICES = ["CLANG", "LLVM"]
SHAPES = [(1, 1), (1, 7), (3, 17), (8, 64), (5, 1000), (33, 48), (2, 4096)]
RNG = np.random.default_rng(5)
LOG2E = math.log2(math.e)


def kernels(out: LazyBuffer) -> int:
    return sum(item.ast.op is KernelOps.SINK for item in fast.schedule(out))


def softmax(x: LazyBuffer) -> LazyBuffer:
    rows = x.r(ReduceOps.MAX, (1,)).expand(x.shape)
    shifted = x.e(BinaryOps.SUB, rows)
    exp = shifted.e(BinaryOps.MUL, shifted.const(LOG2E)).e(UnaryOps.EXP2)
    return exp.e(BinaryOps.DIV, exp.r(ReduceOps.SUM, (1,)).expand(x.shape))


def layernorm(x: LazyBuffer) -> LazyBuffer:
    inverse = 1.0 / x.shape[1]
    mean = x.r(ReduceOps.SUM, (1,))
    mean = mean.e(BinaryOps.MUL, mean.const(inverse))
    centered = x.e(BinaryOps.SUB, mean.expand(x.shape))
    variance = centered.e(BinaryOps.MUL, centered).r(ReduceOps.SUM, (1,))
    variance = variance.e(BinaryOps.MUL, variance.const(inverse))
    scale = variance.e(BinaryOps.ADD, variance.const(1e-5)).e(UnaryOps.SQRT)
    return centered.e(BinaryOps.DIV, scale.expand(x.shape))


def np_softmax(x: np.ndarray) -> np.ndarray:
    exp = np.exp(x - x.max(1, keepdims=True))
    return exp / exp.sum(1, keepdims=True)


def np_layernorm(x: np.ndarray) -> np.ndarray:
    centered = x - x.mean(1, keepdims=True)
    return centered / np.sqrt((centered**2).mean(1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("noopt", [False, True])
def test_softmax_and_layernorm_are_one_kernel(device, shape, noopt):
    data = RNG.uniform(-3, 3, shape).astype(np.float32)
    with config.override(noopt=noopt, parallel_min_work=0):
        x = fast.from_numpy(data, device)
        for build, reference in ((softmax, np_softmax), (layernorm, np_layernorm)):
            out = build(x)
            assert kernels(out) == 1
            np.testing.assert_allclose(fast.to_numpy(out), reference(data.astype(np.float64)), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.float16])
def test_sum_and_max_of_one_input_are_one_kernel(device, dtype):
    data = RNG.integers(-50, 50, (6, 40)).astype(dtype.np)
    x = fast.from_numpy(data, device)
    both = x.r(ReduceOps.SUM, (1,)).e(BinaryOps.ADD, x.r(ReduceOps.MAX, (1,)))
    assert kernels(both) == 1
    np.testing.assert_array_equal(fast.to_numpy(both), data.sum(1, keepdims=True) + data.max(1, keepdims=True))


@pytest.mark.parametrize("device", DEVICES)
def test_special_values_flow_through_row_kernels(device):
    data = RNG.uniform(-3, 3, (6, 32)).astype(np.float32)
    data[1, 5], data[2, 7], data[3, :] = np.nan, np.inf, -np.inf
    x = fast.from_numpy(data, device)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(fast.to_numpy(softmax(x)), np_softmax(data.astype(np.float64)),
                                   rtol=2e-5, atol=2e-6, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_half_softmax_accumulates_in_float32(device):
    data = RNG.uniform(-3, 3, (4, 300)).astype(np.float16)
    x = fast.from_numpy(data, device)
    out = softmax(x)
    assert kernels(out) == 1
    np.testing.assert_allclose(fast.to_numpy(out), np_softmax(data.astype(np.float64)), rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_row_broadcast_of_a_realized_row_still_fuses_correctly(device):
    """A reduce of another axis, or a broadcast to another shape, is not a row kernel: still correct."""
    data = RNG.uniform(-3, 3, (5, 12)).astype(np.float32)
    x = fast.from_numpy(data, device)
    columns = x.r(ReduceOps.SUM, (0,)).expand(x.shape)
    mixed = x.e(BinaryOps.SUB, columns).r(ReduceOps.MAX, (1,))
    want = (data - data.sum(0, keepdims=True)).max(1, keepdims=True)
    np.testing.assert_allclose(fast.to_numpy(mixed), want, rtol=1e-5, atol=1e-5)
    wider = x.r(ReduceOps.SUM, (1,)).expand((5, 20))
    want = np.repeat(data.sum(1, keepdims=True) * 2, 20, 1)
    np.testing.assert_allclose(fast.to_numpy(wider.e(BinaryOps.ADD, wider)), want, rtol=1e-5)
