"""Register tiles for dot-product reductions (codegen/opt.py `_dot_tile`): `a @ b.T` reduces along an
axis both inputs read contiguously, and each input is reused along a different output axis, so a tile
of rows x columns outputs (one vector accumulator each) loads rows + columns vectors per step. The
plans are checked directly; the values on awkward sizes, views and special values against numpy,
bit for bit across thread counts."""
from __future__ import annotations

import numpy as np
import pytest
from kernel_values import matmul_graph

import fast
from fast import config
from fast.codegen import opt
from fast.renderer.base import cpu_options

RNG = np.random.default_rng(17)
LANES = 16


def _dot_plan(m: int, n: int, k: int) -> opt.KernelPlan:
    """The plan of `a @ b.T` as (M, N, K) summed over K: a walks (K, 0, 1), b's rows (0, K, 1)."""
    return opt.plan_kernel((m, n, k), (2,), (n, 1, 0), cpu_options(LANES * 4), ((k, 0, 1), (0, k, 1)), LANES)


@pytest.mark.parametrize("m,n,tile", [(64, 64, (4, 4)), (6, 64, (2, 4)), (64, 6, (4, 2)), (6, 10, (2, 2)),
                                      (5, 7, None), (1, 64, None)])
def test_plan_tiles_both_output_axes(m, n, tile):
    plan = _dot_plan(m, n, 256)
    reduce = plan.reduce_axes[-1]
    assert reduce.vector == LANES
    unrolls = tuple(axis.unroll for axis in plan.output_axes if axis.size != 1)
    if tile is None:  # no tile divides: interleaved streams as before (several accumulators per output)
        assert reduce.unroll > 1 and len([u for u in unrolls if u > 1]) <= 1
        return
    assert unrolls == tile and reduce.unroll == 1
    assert tile[0] * tile[1] <= 16  # half of AVX-512's vector registers


def test_plans_without_two_reused_axes_are_unchanged():
    rows = opt.plan_kernel((64, 1024), (1,), (1, 0), cpu_options(64), [(1024, 1)], LANES)  # a row sum
    assert [axis.unroll for axis in rows.output_axes] == [4] and rows.reduce_axes[-1].unroll == 4
    # (a weighted row sum: b's rows reused along axis 1 only; nothing is reused along axis 0)
    one_way = opt.plan_kernel((8, 8, 256), (2,), (8, 1, 0), cpu_options(64), ((256, 0, 1), (2048, 256, 1)), LANES)
    assert one_way.reduce_axes[-1].unroll > 1 and sum(axis.unroll > 1 for axis in one_way.output_axes) <= 1


def _a_times_b_t(name: str, a_raw: np.ndarray, b_raw: np.ndarray, flip: bool = False) -> np.ndarray:
    a, b = fast.from_numpy(a_raw, name), fast.from_numpy(b_raw, name)
    fast.realize(a, b)
    rows = b.stride((-1, 1)) if flip else b
    runs = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, parallel_min_work=0):
            runs.append(fast.to_numpy(matmul_graph(a, rows.permute((1, 0)))))
    assert runs[0].tobytes() == runs[1].tobytes() == runs[2].tobytes()
    return runs[0].reshape(a_raw.shape[0], b_raw.shape[0])


@pytest.mark.parametrize("name", ["CLANG", "LLVM"])
@pytest.mark.parametrize("m,k,n", [(16, 256, 16), (6, 64, 10), (5, 48, 7), (33, 1024, 12), (8, 40, 8), (1, 32, 3)])
@pytest.mark.parametrize("flip", [False, True])
def test_a_times_b_transposed_on_awkward_sizes(name, m, k, n, flip):
    a_raw, b_raw = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((n, k)).astype(np.float32)
    got = _a_times_b_t(name, a_raw, b_raw, flip)
    rows = b_raw[::-1] if flip else b_raw
    np.testing.assert_allclose(got, a_raw.astype(np.float64) @ rows.T.astype(np.float64), rtol=1e-5,
                               atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("name", ["CLANG", "LLVM"])
def test_integers_and_special_values(name):
    a_int, b_int = RNG.integers(-50, 50, (12, 64)).astype(np.int32), RNG.integers(-50, 50, (8, 64)).astype(np.int32)
    np.testing.assert_array_equal(_a_times_b_t(name, a_int, b_int), a_int @ b_int.T)
    a_raw, b_raw = RNG.standard_normal((8, 64)).astype(np.float32), RNG.standard_normal((8, 64)).astype(np.float32)
    a_raw[1, 5], a_raw[2, 7], b_raw[3, 9] = np.inf, np.nan, 3e38
    a_raw[4, 9] = 3e38  # a product that overflows to inf in float32
    got = _a_times_b_t(name, a_raw, b_raw)
    with np.errstate(all="ignore"):
        want = (a_raw @ b_raw.T).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-3)
