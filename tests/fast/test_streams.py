"""Interleaved streams (codegen/opt.py `_interleave_streams`): a vectorized reduction computes several
outputs at once, each reading its own part of memory. The plan is checked directly, and every value is
compared bit for bit with the same kernel lowered without the interleaving (each output's sequence of
additions is meant to be unchanged) and across thread counts, on awkward shapes and views."""
from __future__ import annotations

from dataclasses import replace

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

RNG = np.random.default_rng(5)
VIEWS = {
    "plain": [],
    "flip_rows": [("stride", (-1, 1))],
    "every_second_row": [("stride", (2, 1))],
    "flip_both": [("stride", (-1, -1))],
    "pad_rows": [("pad", ((3, 2), (0, 0)))],
    "pad_both": [("pad", ((1, 2), (16, 16)))],
    "shrink": [("shrink", ((1, 7), (0, 64)))],
}


@pytest.fixture(scope="module", params=["CLANG", "LLVM"])
def device(request, tmp_path_factory):
    with private_cache(tmp_path_factory):
        yield (clang if request.param == "CLANG" else llvm).create(request.param)


def _row_plan(rows: int, cols: int, registers: int, lanes: int = 16) -> opt.KernelPlan:
    options = replace(cpu_options(lanes * 4), vector_registers=registers)
    return opt.plan_kernel((rows, cols), (1,), (1, 0), options, [(cols, 1)], lanes)


@pytest.mark.parametrize("rows,registers,streams", [(256, 32, 4), (256, 16, 2), (6, 32, 2), (13, 32, 1),
                                                    (1, 32, 1), (4096, 32, 4)])
def test_plan_unrolls_the_output_axis_into_streams(rows, registers, streams):
    plan = _row_plan(rows, 1024, registers)
    assert plan.reduce_vector and plan.reduce_axes[-1].unroll == 4
    unrolled = [axis.unroll for axis in plan.output_axes if axis.size != 1]
    assert unrolled == ([streams] if rows > 1 else [])
    assert plan.bodies * 2 <= registers or streams == 1


def test_streams_are_at_most_four_when_fewer_accumulators_leave_room():
    for cols, copies in ((32, 2), (16, 1)):
        plan = _row_plan(256, cols, 32)
        assert plan.reduce_axes[-1].unroll == copies
        assert [axis.unroll for axis in plan.output_axes if axis.size != 1] == [4]


def test_no_streams_where_outputs_share_their_memory():
    options = cpu_options(64)
    # a column sum (reduce axis strided) and a row sum of a broadcast row (stride 0 along the rows)
    column = opt.plan_kernel((64, 256), (0,), (0, 1), options, [(256, 1)], 16)
    broadcast = opt.plan_kernel((64, 256), (1,), (1, 0), options, [(0, 1)], 16)
    assert all(axis.unroll == 1 or axis.vector > 1 for axis in column.output_axes)
    assert broadcast.reduce_vector and all(axis.unroll == 1 for axis in broadcast.output_axes)


def _run(device, op: ReduceOps, dtype: DType, st: ShapeTracker, data: np.ndarray, threads: int) -> bytes:
    return _run_with_source(device, op, dtype, st, data, threads)[0]


def _run_with_source(device, op: ReduceOps, dtype: DType, st: ShapeTracker, data: np.ndarray,
                     threads: int) -> tuple[bytes, str]:
    rows = st.shape[0]
    ast = reduce_sink(op, dtype, st, ShapeTracker.from_shape((rows, 1)), (1,))
    with config.override(threads=threads, parallel_min_work=0):
        (out,), source = run_ast(device, ast, [data.astype(dtype.np).reshape(-1)])
    return out.tobytes(), source


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("rows,cols", [(10, 64), (12, 128), (8, 4096), (16, 80)])
def test_values_equal_the_plan_without_streams_bit_for_bit(device, monkeypatch, view, rows, cols):
    raw = RNG.standard_normal((rows, cols)).astype(np.float32)
    st, want = apply_moves(ShapeTracker.from_shape((rows, cols)), raw, VIEWS[view])
    for op in (ReduceOps.SUM, ReduceOps.MAX):
        streamed = [_run(device, op, dtypes.float32, st, raw, threads) for threads in (1, 2, 3)]
        with monkeypatch.context() as patch:
            patch.setattr(opt, "_interleave_streams", lambda plan, *_: plan)
            plain, plain_source = _run_with_source(device, op, dtypes.float32, st, raw, 1)
        assert streamed[0] == streamed[1] == streamed[2] == plain, (view, op)
        if view == "plain":  # the streams really are another kernel there
            assert _run_with_source(device, op, dtypes.float32, st, raw, 1)[1] != plain_source
        got = np.frombuffer(streamed[0], np.float32)
        expect = want.sum(1) if op is ReduceOps.SUM else want.max(1)
        np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-4 * cols)


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.float64, dtypes.float16])
def test_other_dtypes_stream_alike(device, monkeypatch, dtype):
    raw = RNG.uniform(-8, 8, (12, 96))
    st = ShapeTracker.from_shape((12, 96))
    streamed = _run(device, ReduceOps.SUM, dtype, st, raw, 2)
    with monkeypatch.context() as patch:
        patch.setattr(opt, "_interleave_streams", lambda plan, *_: plan)
        plain = _run(device, ReduceOps.SUM, dtype, st, raw, 2)
    assert streamed == plain
