"""Column reductions in short chunks (codegen/opt.py `_chunk_strided_reduce`): a reduction over a
strided axis that stores its result walks that axis a few rows at a time (8, else 4), one vector of
each row per step, adding each chunk into the output; a register tile (matmul) keeps its long
chunks. The plans are checked directly; the values on awkward sizes and views against numpy, with a
poisoned output buffer (the first chunk must not read it), and bit for bit across thread counts."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from kernel_values import apply_moves, const, load, matmul_graph, private_cache, reduce_sink, run_ast, sink

import fast
from fast import BinaryOps, LazyBuffer, TernaryOps, UnaryOps, config
from fast.codegen import opt
from fast.codegen.analyze import analyze
from fast.codegen.lower import _chunkable
from fast.dtype import DType, dtypes
from fast.ops import LazyOp, ReduceOps
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
def test_other_dtypes_sum_exactly(device, dtype):
    raw = RNG.integers(-100, 100, (72, 96))
    st = ShapeTracker.from_shape((72, 96))
    got = _column_reduce(device, ReduceOps.SUM, dtype, st, raw, 2)
    np.testing.assert_array_equal(got, raw.astype(dtype.np).sum(0, dtype=dtype.np))


# ---------------------------------------------------------------- elementwise work over a chunked reduce

def _realized(array: np.ndarray, device: str) -> LazyBuffer:
    buffer = fast.from_numpy(array, device)
    fast.realize(buffer)
    return buffer


def _by_threads(build: Callable[[], LazyBuffer]) -> np.ndarray:
    runs = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, parallel_min_work=0):
            runs.append(fast.to_numpy(build()))
    assert runs[0].tobytes() == runs[1].tobytes() == runs[2].tobytes()
    return runs[0]


EPILOGUES: dict[str, Callable[[LazyBuffer, LazyBuffer], LazyBuffer]] = {
    "mean": lambda total, bias: total.e(BinaryOps.MUL, total.const(0.125)),
    "bias_relu": lambda total, bias: total.e(BinaryOps.ADD, bias).e(BinaryOps.MAX, total.const(0.0)),
    "exp2": lambda total, bias: total.e(BinaryOps.MUL, total.const(0.01)).e(UnaryOps.EXP2),
    "where": lambda total, bias: total.e(BinaryOps.CMPLT, bias).e(TernaryOps.WHERE, bias, total),
}
NUMPY_EPILOGUES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "mean": lambda total, bias: total * np.float32(0.125),
    "bias_relu": lambda total, bias: np.maximum(total + bias, np.float32(0.0)),
    "exp2": lambda total, bias: np.exp2(total * np.float32(0.01)),
    "where": lambda total, bias: np.where(total < bias, bias, total),
}


@pytest.mark.parametrize("epilogue", list(EPILOGUES))
@pytest.mark.parametrize("op", [ReduceOps.SUM, ReduceOps.MAX])
@pytest.mark.parametrize("rows,cols,view", [(64, 48, "plain"), (36, 257, "plain"), (72, 80, "flip_both"),
                                            (80, 64, "every_second_row"), (40, 32, "pad_rows"), (37, 48, "plain")])
@pytest.mark.parametrize("name", ["CLANG", "LLVM"])
def test_work_over_a_chunked_reduce_applies_to_the_whole_total(name, epilogue, op, rows, cols, view):
    raw = RNG.standard_normal((rows, cols)).astype(np.float32)
    bias_raw = RNG.standard_normal((1, cols)).astype(np.float32)
    x, bias = _realized(raw, name), _realized(bias_raw, name)
    moved = x
    for kind, arg in VIEWS[view]:
        moved = getattr(moved, kind)(arg)
    _, viewed = apply_moves(ShapeTracker.from_shape((rows, cols)), raw, VIEWS[view])
    wide = viewed.astype(np.float64)
    want_total = wide.sum(0, keepdims=True) if op is ReduceOps.SUM else wide.max(0, keepdims=True)
    want = NUMPY_EPILOGUES[epilogue](want_total.astype(np.float32), bias_raw)
    got = _by_threads(lambda: EPILOGUES[epilogue](moved.r(op, (0,)), bias))
    if op is ReduceOps.MAX and epilogue in ("mean", "bias_relu", "where"):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * rows)


@pytest.mark.parametrize("m,k,n", [(24, 256, 48), (9, 72, 33), (16, 4096, 16)])
@pytest.mark.parametrize("name", ["CLANG", "LLVM"])
def test_matmul_with_bias_and_relu_in_chunks(name, m, k, n):
    a_raw, b_raw = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    bias_raw = RNG.standard_normal((1, n)).astype(np.float32)
    a, b, bias = _realized(a_raw, name), _realized(b_raw, name), _realized(bias_raw, name)

    def build() -> LazyBuffer:
        out = matmul_graph(a, b)
        return out.e(BinaryOps.ADD, bias.expand(out.shape)).e(BinaryOps.MAX, out.const(0.0))
    want = np.maximum(a_raw.astype(np.float64) @ b_raw + bias_raw, 0.0)
    np.testing.assert_allclose(_by_threads(build).reshape(m, n), want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_which_kernels_may_keep_partial_results_in_their_output():
    st, out_st = ShapeTracker.from_shape((64, 32)), ShapeTracker.from_shape((1, 32))
    total = LazyOp(ReduceOps.SUM, (load(1, dtypes.float32, st),), (0,))
    scaled = LazyOp(BinaryOps.MUL, (total, const(0.5, dtypes.float32, out_st)))
    reads_output = LazyOp(BinaryOps.ADD, (total, load(0, dtypes.float32, out_st)))
    to_int = LazyOp(UnaryOps.CAST, (total,), dtypes.int32)
    two_reduces = LazyOp(BinaryOps.ADD, (total, LazyOp(ReduceOps.MAX, (load(1, dtypes.float32, st),), (0,))))
    assert _chunkable(analyze(sink((0, dtypes.float32, out_st, scaled))))
    for value, dtype in ((reads_output, dtypes.float32), (to_int, dtypes.int32), (two_reduces, dtypes.float32)):
        ast = sink((0, dtype, out_st, value))
        assert not _chunkable(analyze(ast))


def test_an_output_the_kernel_reads_is_not_used_for_partial_results(device):
    rows, cols = 64, 48
    raw = RNG.standard_normal((rows, cols)).astype(np.float32)
    start = RNG.standard_normal(cols).astype(np.float32)
    st, out_st = ShapeTracker.from_shape((rows, cols)), ShapeTracker.from_shape((1, cols))
    total = LazyOp(ReduceOps.SUM, (load(1, dtypes.float32, st),), (0,))
    ast = sink((0, dtypes.float32, out_st, LazyOp(BinaryOps.ADD, (total, load(0, dtypes.float32, out_st)))))
    with config.override(threads=2, parallel_min_work=0):
        (got,), _ = run_ast(device, ast, [raw.reshape(-1)], outputs=[start.copy()])
    np.testing.assert_allclose(got, raw.astype(np.float64).sum(0) + start, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["CLANG", "LLVM"])
@pytest.mark.parametrize("rows,cols", [(64, 48), (40, 257), (6, 40)])
def test_a_column_sum_and_max_in_one_kernel_write_every_output(name, rows, cols):
    """Two reduces share one kernel: never chunked (lowering walks them per output, whole)."""
    raw = RNG.standard_normal((rows, cols)).astype(np.float32)
    x = _realized(raw, name)
    with config.override(alloc_poison=True):
        got = _by_threads(lambda: x.r(ReduceOps.SUM, (0,)).e(BinaryOps.ADD, x.r(ReduceOps.MAX, (0,))))
    want = raw.astype(np.float64).sum(0, keepdims=True) + raw.max(0, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * rows)
