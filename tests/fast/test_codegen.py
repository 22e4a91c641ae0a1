"""Lowering (fast/codegen): the IR verifier/printer/builder, reductions, masked loads through every
movement op, optimizations on and off, symbolic shapes and 64-bit indexing, run on CLANG."""
import math
from dataclasses import replace

import numpy as np
import pytest
from kernel_values import (
    MOVES,
    WRAPPING_REDUCTIONS,
    apply_moves,
    bias_around_reduce,
    const,
    half_sum_case,
    load,
    nan_cube,
    private_cache,
    run_ast,
    sink,
    sum_and_max_sinks,
    sum_of_squares_case,
    symbolic_rows_case,
    to_storage,
    wide_flipped_tracker,
    without_fma,
)

from fast import config
from fast.codegen import format_program, lower, verify
from fast.codegen.builder import IRBuilder
from fast.codegen.ir import BufferInfo, IndexOps, Instr, IRError, IROps, LinearProgram, LoopKind
from fast.codegen.opt import AxisPlan, KernelPlan, plan_kernel
from fast.dtype import dtypes
from fast.ops import BinaryOps, LazyOp, ReduceOps
from fast.renderer.base import cpu_options
from fast.runtime.clang import create
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Variable

F32, I32 = dtypes.float32, dtypes.int32


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    with private_cache(tmp_path_factory):
        yield create("CLANG")


# ---------------------------------------------------------------- IR: builder, printer, verifier

def program_of(builder: IRBuilder) -> LinearProgram:
    return LinearProgram("k", tuple(builder.instrs), (BufferInfo(0, F32, True, 4),))


def test_builder_folds_simplifies_and_reuses_within_scope():
    b = IRBuilder()
    two, three = b.const(2, I32), b.const(3, I32)
    assert b.const_value(b.alu(BinaryOps.ADD, (two, three))) == 5
    assert b.const_value(b.alu(BinaryOps.DIV, (two, b.const(0, I32)))) == 0
    assert b.const(2, I32) == two
    loop = b.loop(b.const(0, dtypes.int64), b.const(4, dtypes.int64), LoopKind.GLOBAL)
    assert b.index(IndexOps.ADD, loop, b.const(0, dtypes.int64)) == loop
    assert b.index(IndexOps.MUL, loop, b.const(1, dtypes.int64)) == loop
    assert b.const_value(b.index(IndexOps.MUL, loop, b.const(0, dtypes.int64))) == 0
    inner = b.const(7.5, F32)
    b.end_loop()
    assert b.const(7.5, F32) != inner  # the first one is out of scope after ENDLOOP
    acc = b.define_acc(0.0, F32)
    first = b.alu(BinaryOps.ADD, (acc, b.const(7.5, F32)))
    b.assign(acc, first)
    second = b.alu(BinaryOps.ADD, (acc, b.const(7.5, F32)))
    assert second != first  # reads the accumulator again: never reused
    verify(program_of(b))


@pytest.mark.parametrize("case", ["use_before_def", "out_of_scope", "unclosed", "type", "store_input", "const",
                                  "divisor", "buffers"])
def test_verifier_rejects_malformed_programs(case):
    i64, buffers = dtypes.int64, (BufferInfo(0, F32, True, 4), BufferInfo(1, F32, False, 4))
    zero = Instr(IROps.CONST, i64, (), 0)
    four = Instr(IROps.CONST, i64, (), 4)
    loop = Instr(IROps.LOOP, i64, (0, 1), LoopKind.GLOBAL)
    instrs = {
        "use_before_def": [Instr(IROps.LOAD, F32, (1,), 1), zero],
        "out_of_scope": [zero, four, loop, Instr(IROps.ENDLOOP, None, (2,)), Instr(IROps.LOAD, F32, (2,), 1)],
        "unclosed": [zero, four, loop],
        "type": [zero, Instr(IROps.CONST, I32, (), 1), Instr(IROps.ALU, F32, (1, 1), BinaryOps.ADD)],
        "store_input": [zero, Instr(IROps.LOAD, F32, (0,), 1), Instr(IROps.STORE, None, (0, 1), 1)],
        "const": [Instr(IROps.CONST, dtypes.int8, (), 300)],
        "divisor": [zero, four, loop, Instr(IROps.INDEX, i64, (1, 2), IndexOps.FLOORDIV), Instr(IROps.ENDLOOP, None,
                                                                                                 (2,))],
        "buffers": [zero],
    }[case]
    program = LinearProgram("k", tuple(instrs), buffers if case != "buffers" else (BufferInfo(1, F32, True, 4),))
    with pytest.raises(IRError):
        verify(program)


def test_printer_and_program_metadata():
    st = ShapeTracker.from_shape((4, 16))
    x = load(1, F32, st)
    ast = sink((0, F32, ShapeTracker.from_shape((4, 1)), LazyOp(ReduceOps.SUM, (LazyOp(BinaryOps.MUL, (x, x)),), (1,))))
    with config.override(noopt=True):
        program = lower(ast, create("CLANG").renderer.options)
    assert program.name == "r_4_16"
    assert program.buffers == (BufferInfo(0, F32, True, 4), BufferInfo(1, F32, False, 64))
    assert (program.flops, program.mem_bytes) == (2 * 64, (4 + 64) * 4)
    text = format_program(program)
    for expected in ("kernel r_4_16(data0:float32[4] out, data1:float32[64])", "loop int64 GLOBAL",
                     "loop int64 REDUCE", "define_acc float32 0.0", "alu float32 MUL", "load float32 data1",
                     "endloop", "store data0"):
        assert expected in text, text


def test_optimization_plan_decisions():
    options = create("CLANG").renderer.options
    with config.override(noopt=True):
        plain = plan_kernel((6, 8, 5), (2,), (8, 1, 0), options)
    assert plain == KernelPlan((AxisPlan(0, 6), AxisPlan(1, 8)), (AxisPlan(2, 5),))
    with config.override(noopt=False):
        plan = plan_kernel((6, 8, 5), (2,), (8, 1, 0), options)
        assert plan == KernelPlan((AxisPlan(0, 6), AxisPlan(1, 8, 4)), (AxisPlan(2, 5, 5),)) and plan.bodies == 20
        assert plan_kernel((4, 6), (), (1, 4), options).output_axes == (AxisPlan(1, 6), AxisPlan(0, 4, 4))
        assert plan_kernel((6, 9), (), (9, 1), options).output_axes == (AxisPlan(0, 6), AxisPlan(1, 9))
        assert plan_kernel((4, 16), (1,), (1, 0), options).reduce_axes == (AxisPlan(1, 16),)
        assert plan_kernel((8, 8), (1,), (1, 0), options).bodies == 32
        n = Variable("n", 1, 64)
        assert plan_kernel((n, 4), (0,), (0, 1), options).reduce_axes == (AxisPlan(0, n),)
    assert not AxisPlan(0, 4, 4).has_loop and AxisPlan(0, 8, 4).has_loop and not AxisPlan(0, 1).has_loop


@pytest.mark.parametrize("registers,n,tile", [(16, 512, (4, 2)), (32, 512, (4, 4)), (32, 96, (8, 2)),
                                              (16, 99, (4, 2)), (32, 99, (8, 2)), (32, 67, (4, 4))])
def test_matmul_register_tile_follows_the_vector_registers(registers, n, tile):
    """Rows x vectors of a matmul's accumulator tile: half the registers (8 or 16 accumulators); on a
    tailed column axis the copies that leave the shortest scalar tail (99 = 96 + 3, not 64 + 35)."""
    options = replace(cpu_options(64), vector_registers=registers)
    with config.override(noopt=False):  # (M, N, K) = (16, n, 32): A's rows reuse B's vector loads
        plan = plan_kernel((16, n, 32), (2,), (n, 1, 0), options, ((32, 0, 1), (0, 1, n)), lanes=16)
    rows, columns = plan.output_axes
    assert (rows.unroll, columns.unroll) == tile and columns.vector == 16
    assert columns.size == n - n % (16 * tile[1])


# ---------------------------------------------------------------- lowering errors

def test_lowering_rejects_bad_asts():
    options = create("CLANG").renderer.options
    st, out = ShapeTracker.from_shape((4, 6)), ShapeTracker.from_shape((4, 1))
    x = load(1, F32, st)
    with pytest.raises(ValueError, match="SINK"):
        lower(x, options)
    across = LazyOp(BinaryOps.ADD, (LazyOp(ReduceOps.SUM, (x,), (1,)), LazyOp(ReduceOps.MAX, (x,), (0,))))
    with pytest.raises(ValueError, match="different rows"):
        lower(sink((0, F32, out, across)), options)
    with pytest.raises(ValueError, match="STORE"):
        lower(sink((0, F32, ShapeTracker.from_shape((4, 3)), LazyOp(ReduceOps.SUM, (x,), (1,)))), options)
    with pytest.raises(ValueError, match="shape"):
        lower(sink((0, F32, st, LazyOp(BinaryOps.ADD, (x, load(2, F32, out))))), options)
    with pytest.raises(ValueError, match="buffer indices"):
        lower(sink((0, F32, st, load(2, F32, st))), options)


# ---------------------------------------------------------------- reductions

@pytest.mark.parametrize("noopt", [False, True], ids=["opt", "noopt"])
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
def test_sum_and_max_over_axes(device, axes, noopt):
    data = nan_cube(len(axes))
    full = ShapeTracker.from_shape(data.shape)
    out_shape = tuple(1 if a in axes else s for a, s in enumerate(data.shape))
    out = ShapeTracker.from_shape(out_shape)
    sums, maxes = (run_ast(device, ast, [data], noopt=noopt)[0][0] for ast in sum_and_max_sinks(F32, full, out, axes))
    np.testing.assert_array_equal(sums.reshape(out_shape), data.sum(axis=axes, keepdims=True))
    np.testing.assert_array_equal(maxes.reshape(out_shape), data.max(axis=axes, keepdims=True))


@pytest.mark.parametrize("dtype, values, sum_want, max_want", WRAPPING_REDUCTIONS)
def test_integer_and_bool_reductions_wrap(device, dtype, values, sum_want, max_want):
    st, out = ShapeTracker.from_shape((1, 3)), ShapeTracker.from_shape((1, 1))
    data = np.array([values], dtype=dtype.np)
    sums, maxes = (run_ast(device, ast, [data])[0][0] for ast in sum_and_max_sinks(dtype, st, out, (1,)))
    assert sums[0] == sum_want and maxes[0] == max_want


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint64, F32, dtypes.float16], ids=str)
def test_empty_reduce_axis_gives_identity(device, dtype):
    st, out = ShapeTracker.from_shape((3, 0)), ShapeTracker.from_shape((3, 1))
    data = np.zeros(0, dtype.storage_np)
    sums, maxes = (run_ast(device, ast, [data])[0][0] for ast in sum_and_max_sinks(dtype, st, out, (1,)))
    assert (sums == 0).all()
    lowest = dtypes.min(dtype)
    want = np.array([lowest] * 3, dtype=dtype.np)
    np.testing.assert_array_equal(maxes.view(dtype.np) if dtype != dtypes.float16 else maxes.view(np.float16), want)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_half_sums_accumulate_in_float32_and_round_once(device, dtype):
    """2048 + 1 + 1 + 1 + 1: per-op half rounding would stay at 2048; one rounding at the end gives 2052."""
    ast, values, want = half_sum_case(dtype)
    (result,), _ = run_ast(device, ast, [to_storage(values, dtype)])
    got = float(result.view(np.float16)[0]) if dtype == dtypes.float16 else \
        float(np.array([int(result[0]) << 16], np.uint32).view(np.float32)[0])
    assert got == want


@pytest.mark.parametrize("noopt", [False, True], ids=["opt", "noopt"])
def test_elementwise_around_a_reduce_and_several_stores(device, noopt):
    ast, data, bias = bias_around_reduce()
    (a, b), _ = run_ast(device, ast, [data, bias], noopt=noopt)
    np.testing.assert_array_equal(a, (-data.sum(1) + bias[:, 0]))
    np.testing.assert_array_equal(b, (-data.sum(1) * bias[:, 0]))


def test_repeated_equal_reduces_are_one_reduction_and_diamonds_lower_in_linear_time(device):
    full, out = ShapeTracker.from_shape((3, 4)), ShapeTracker.from_shape((3, 1))
    def total():  # a fresh but equal subtree each call
        return LazyOp(ReduceOps.SUM, (load(1, I32, full),), (1,))
    value = LazyOp(BinaryOps.ADD, (total(), total()))
    for _ in range(64):  # 2**64 paths: anything that walks paths instead of nodes never finishes
        value = LazyOp(BinaryOps.MAX, (value, value))
    data = np.arange(12, dtype=np.int32)
    (result,), source = run_ast(device, sink((0, I32, out, value)), [data])
    np.testing.assert_array_equal(result, data.reshape(3, 4).sum(1) * 2)
    assert source.count("acc") < 12


# ---------------------------------------------------------------- masked loads through movement ops

@pytest.mark.parametrize("noopt", [False, True], ids=["opt", "noopt"])
@pytest.mark.parametrize("case", sorted(MOVES))
def test_masked_loads_through_movement_ops(device, case, noopt):
    base = np.arange(1, 13, dtype=np.int32).reshape(3, 4)
    st, want = apply_moves(ShapeTracker.from_shape((3, 4)), base, MOVES[case])
    const_st, const_want = apply_moves(ShapeTracker.from_shape((3, 4)), np.full((3, 4), 100, np.int32), MOVES[case])
    if case == "pad_reshape":
        assert len(st.views) == 2
    out = ShapeTracker.from_shape(st.shape)
    ast = sink((0, I32, out, LazyOp(BinaryOps.ADD, (load(1, I32, st), const(100, I32, const_st)))))
    (result,), _ = run_ast(device, ast, [base.reshape(-1)], noopt=noopt)
    np.testing.assert_array_equal(result[:math.prod(st.shape)].reshape(st.shape), want + const_want)


def test_opts_change_the_code_but_not_a_bit_of_the_result(device):
    ast, data = sum_of_squares_case()
    (fast_result,), optimized = run_ast(without_fma(device), ast, [data])  # FMA: tests/fast/test_fma.py
    (plain_result,), plain = run_ast(device, ast, [data], noopt=True)
    assert optimized != plain and optimized.count("for (") < plain.count("for (")
    np.testing.assert_array_equal(fast_result.view(np.uint32), plain_result.view(np.uint32))


def test_innermost_loop_walks_the_fastest_output_stride(device):
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    transposed_out = ShapeTracker.from_shape((6, 4)).permute((1, 0))
    ast = sink((0, F32, transposed_out, load(1, F32, ShapeTracker.from_shape((4, 6)))))
    program = lower(ast, device.renderer.options)
    loops = [program.instrs[i.srcs[1]].arg for i in program.instrs if i.op is IROps.LOOP]
    assert loops == [6]  # axis 1 (stride 4) outside; axis 0 (stride 1, size 4) upcast into the body
    (result,), _ = run_ast(device, ast, [data])
    np.testing.assert_array_equal(result, data.T.reshape(-1))


# ---------------------------------------------------------------- symbolic shapes, 64-bit indices

def test_symbolic_shapes_become_int64_parameters(device):
    ast, n, st = symbolic_rows_case()
    x = load(1, I32, st)
    program = lower(ast, device.renderer.options)
    assert program.var_names == ("n",) and program.variables == (n,) and program.buffers[1].size == 40
    data = np.arange(40, dtype=np.int32)
    (maxes,), source = run_ast(device, ast, [data], vals=(3,))
    assert "int64_t var0" in source
    window = data[:12].reshape(4, 3)
    np.testing.assert_array_equal(maxes, window.max(1) + data[:4])
    elementwise = sink((0, I32, st, LazyOp(BinaryOps.MUL, (x, x))))
    (squares,), _ = run_ast(device, elementwise, [data], vals=(7,))
    np.testing.assert_array_equal(squares[:28], data[:28] ** 2)
    assert not squares[28:].any()


def test_index_arithmetic_beyond_2_pow_31_is_int64(device):
    """A view of 2**31 + 8 elements whose index needs 64 bits: flat = 3 + i0*(2**31 + 1) + i1, read
    through a flipped, masked view of a 4-element buffer (only i0 = 1 is valid)."""
    ast = sink((0, F32, ShapeTracker.from_shape((2, 4)), load(1, F32, wide_flipped_tracker())))
    assert lower(ast, device.renderer.options).buffers[1].size == 4
    for noopt in (False, True):
        (result,), source = run_ast(device, ast, [np.array([1, 2, 3, 4], np.float32)], noopt=noopt)
        np.testing.assert_array_equal(result, [0, 0, 0, 0, 4, 3, 2, 1])
        assert "2147483649" in source and "int32_t" not in source[source.index("void "):]
    near_end = ShapeTracker.from_shape((1,)).expand((2**31 + 8,)).shrink(((2**31 + 4, 2**31 + 8),))
    (result,), _ = run_ast(device, sink((0, F32, ShapeTracker.from_shape((4,)), load(1, F32, near_end))),
                           [np.array([7], np.float32)])
    np.testing.assert_array_equal(result, [7, 7, 7, 7])
