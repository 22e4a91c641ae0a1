"""Column reductions in short chunks (codegen/opt.py `_chunk_strided_reduce`): a reduction over a
strided axis that stores its result walks that axis a few rows at a time (8, else 4), one vector of
each row per step, adding each chunk into the output; a register tile (matmul) keeps its long
chunks. The plans are checked directly; the values on awkward sizes and views against numpy, with a
poisoned output buffer (the first chunk must not read it), and bit for bit across thread counts."""
from __future__ import annotations

import numpy as np
import pytest
from kernel_values import apply_moves, private_cache, reduce_sink, run_ast

from fast import config
from fast.codegen import opt
from fast.dtype import DType, dtypes
from fast.ops import ReduceOps
from fast.renderer.base import cpu_options
from fast.runtime import clang, llvm
from fast.shape.shapetracker import ShapeTracker

RNG = np.random.default_rng(11)
LANES = 16
VIEWS = {
    "plain": [],
    "flip_rows": [("stride", (-1, 1))],
    "flip_both": [("stride", (-1, -1))],
    "every_second_row": [("stride", (2, 1))],
    "pad_rows": [("pad", ((3, 5), (0, 0)))],
    "pad_columns": [("pad", ((0, 0), (16, 16)))],
    "shrink": [("shrink", ((1, 37), (0, 64)))],
}


@pytest.fixture(scope="module", params=["CLANG", "LLVM"])
def device(request, tmp_path_factory):
    with private_cache(tmp_path_factory):
        yield (clang if request.param == "CLANG" else llvm).create(request.param)


def _column_plan(rows: int, cols: int) -> opt.KernelPlan:
    return opt.plan_kernel((rows, cols), (0,), (0, 1), cpu_options(LANES * 4), [(cols, 1)], LANES, chunkable=True)


@pytest.mark.parametrize("rows,chunk_rows", [(4096, 8), (64, 8), (32, 8), (36, 4), (16, 4), (37, 0), (12, 0)])
def test_column_sum_plan_takes_short_chunks_of_one_vector(rows, chunk_rows):
    plan = _column_plan(rows, 256)
    vector = next(axis for axis in plan.output_axes if axis.vector > 1)
    if not chunk_rows:  # no divisor, or fewer than four chunks: the whole axis, several vectors per step
        assert plan.chunk is None and plan.reduce_axes[0].size == rows and vector.unroll > 1
        return
    assert plan.chunk == (0, rows // chunk_rows)
    assert plan.reduce_axes == (opt.AxisPlan(0, chunk_rows, unroll=chunk_rows),)  # unrolled: the chunk's streams
    assert vector == opt.AxisPlan(1, 256, unroll=1, vector=LANES)


def test_tailed_columns_and_register_tiles_keep_their_copies():
    tailed = _column_plan(64, 257)
    assert tailed.tail is not None and tailed.chunk == (0, 8)
    assert next(axis for axis in tailed.output_axes if axis.vector > 1).unroll > 1
    n = 512  # matmul as (M, N, K) summed over K with B walked along N: a register tile, long chunks
    matmul = opt.plan_kernel((64, n, n), (2,), (n, 1, 0), cpu_options(LANES * 4), ((n, 0, 1), (0, 1, n)),
                             LANES, chunkable=True)
    assert any(axis.unroll > 1 and axis.vector == 1 for axis in matmul.output_axes)
    assert matmul.chunk is not None and matmul.reduce_axes[0].size in opt.CHUNK_ROWS


def _column_reduce(device, op: ReduceOps, dtype: DType, st: ShapeTracker, raw: np.ndarray,
                   threads: int) -> np.ndarray:
    cols = st.shape[1]
    ast = reduce_sink(op, dtype, st, ShapeTracker.from_shape((1, cols)), (0,))
    poisoned = np.full(cols, np.nan if dtypes.is_float(dtype) else -7, dtype.np)
    with config.override(threads=threads, parallel_min_work=0):
        (out,), _ = run_ast(device, ast, [raw.astype(dtype.np).reshape(-1)], outputs=[poisoned])
    return out


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("rows,cols", [(40, 64), (36, 80), (64, 257), (37, 48), (1, 16), (8, 1)])
def test_column_sums_and_maxes_on_awkward_sizes_and_views(device, view, rows, cols):
    if view == "shrink" and (rows < 37 or cols < 64):
        return
    raw = RNG.standard_normal((rows, cols)).astype(np.float32)
    st, want = apply_moves(ShapeTracker.from_shape((rows, cols)), raw, VIEWS[view])
    for op, expect in ((ReduceOps.SUM, want.astype(np.float64).sum(0)), (ReduceOps.MAX, want.max(0))):
        runs = [_column_reduce(device, op, dtypes.float32, st, raw, threads) for threads in (1, 2, 3)]
        assert runs[0].tobytes() == runs[1].tobytes() == runs[2].tobytes(), (view, op)
        if op is ReduceOps.MAX:
            np.testing.assert_array_equal(runs[0], expect)
        else:
            np.testing.assert_allclose(runs[0], expect, rtol=1e-5, atol=1e-5 * want.shape[0])


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.float64, dtypes.int8])
def test_other_dtypes_in_chunks_are_exact_or_close(device, dtype):
    raw = RNG.integers(-100, 100, (72, 96))
    st = ShapeTracker.from_shape((72, 96))
    got = _column_reduce(device, ReduceOps.SUM, dtype, st, raw, 2)
    np.testing.assert_array_equal(got, raw.astype(dtype.np).sum(0, dtype=dtype.np))
