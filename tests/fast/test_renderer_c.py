"""Generated C against the scalar ground truth `fast.ops.exec_alu`: every op x every dtype on edge
values, casts and bitcasts, half conversions, constants, the FMA trap.

Also run under UBSAN (tests/fast/test_ubsan.py runs this file with UBSAN=1)."""
import math

import numpy as np
import pytest
from kernel_values import (
    TRANSCENDENTAL,
    ElementwiseCase,
    assert_from_half,
    assert_to_half,
    bool_normalise_sink,
    cast_sink,
    cast_targets,
    const,
    constant_stores,
    edge_values,
    fma_trap_case,
    from_half_sink,
    from_storage,
    half_conversion_patterns,
    load,
    private_cache,
    result_dtype,
    run_ast,
    sink,
    to_half_sink,
    to_storage,
    values_agree,
)

from fast.codegen import format_program, lower
from fast.codegen.ir import IROps
from fast.dtype import ALL, dtypes
from fast.ops import BinaryOps, LazyOp, TernaryOps, UnaryOps, bitcast_const, cast_const, exec_alu
from fast.runtime.clang import compile_flags, compiler_path, create


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    with private_cache(tmp_path_factory):
        yield create("CLANG")


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_every_elementwise_op_matches_exec_alu(device, dtype):
    case = ElementwiseCase(dtype)
    outputs = [np.zeros(case.n, result_dtype(op, dtype).storage_np) for op in case.ops]
    run_ast(device, case.ast(), case.inputs(), noopt=None, outputs=outputs)
    for op, output in zip(case.ops, outputs, strict=True):
        out_dtype = result_dtype(op, dtype)
        got = from_storage(output, out_dtype)
        for i in range(case.n):
            operand_values = case.args(op, i)
            want = exec_alu(op, dtype, operand_values)
            rel = 4 * 2.0**-23 if op in TRANSCENDENTAL else 0.0
            if op in TRANSCENDENTAL and dtype in (dtypes.float16, dtypes.bfloat16):
                rel = 2.0**-7
            assert values_agree(got[i], want, out_dtype, rel, check_type=True), \
                f"{op.name} {dtype.name} {operand_values}: {got[i]} != {want}"


@pytest.mark.parametrize("source", ALL, ids=lambda d: d.name)
def test_casts_and_bitcasts_match_ground_truth(device, source):
    values = edge_values(source)
    n = len(values)
    targets = cast_targets(source)
    outputs = [np.zeros(n, dt.storage_np) for _, dt in targets]
    src_bits = to_storage(values, source)
    run_ast(device, cast_sink(source, targets, n), [src_bits], noopt=None, outputs=outputs)
    for (op, dt), output in zip(targets, outputs, strict=True):
        if op is UnaryOps.BITCAST:
            np.testing.assert_array_equal(output, src_bits.view(dt.storage_np), err_msg=f"bitcast to {dt.name}")
            continue
        for value, got in zip(values, from_storage(output, dt), strict=True):
            want = cast_const(value, source, dt)
            if want is not None:
                assert values_agree(got, want, dt, check_type=True), \
                    f"cast {source.name} {value!r} -> {dt.name}: {got!r} != {want!r}"


def test_float_to_half_conversion_sweep(device):
    """f32 -> f16/bf16 (RNE, subnormals, overflow, NaN) and f16/bf16 -> f32 against numpy / ops."""
    patterns = half_conversion_patterns()
    floats = patterns.view(np.float32)
    n = len(floats)
    halves = np.arange(2**16, dtype=np.uint16)
    f16, bf16 = np.zeros(n, np.uint16), np.zeros(n, np.uint16)
    run_ast(device, to_half_sink(n), [floats], noopt=None, outputs=[f16, bf16])
    assert_to_half(patterns, f16, bf16)
    from16, from_bf16 = np.zeros(2**16, np.float32), np.zeros(2**16, np.float32)
    run_ast(device, from_half_sink(), [halves, halves], noopt=None, outputs=[from16, from_bf16])
    assert_from_half(halves, from16, from_bf16)


def test_constants_of_every_dtype_render_exactly(device):
    """CONST leaves (literals in C) round-trip every edge value, including NaN, inf, -0.0, MIN, MAX."""
    stores, expected = constant_stores()
    outputs = [np.zeros(1, dtype.storage_np) for dtype, _ in expected]
    run_ast(device, sink(*stores), [], noopt=None, outputs=outputs)
    for (dtype, value), output in zip(expected, outputs, strict=True):
        got = from_storage(output, dtype)[0]
        assert values_agree(got, value, dtype, check_type=True), f"{dtype.name} {value!r} rendered as {got!r}"
        if isinstance(value, float) and value == 0:
            assert math.copysign(1, got) == math.copysign(1, value)


def test_constant_operands_are_folded_exactly():
    """An op on constants becomes one CONST whose value is exec_alu's."""
    divide = LazyOp(BinaryOps.DIV, (const(-128, dtypes.int8, 1), const(-1, dtypes.int8, 1)))
    ast = sink((0, dtypes.int8, 1, divide))
    program = lower(ast, create("CLANG").renderer.options)
    assert not any(instr.op is IROps.ALU for instr in program.instrs), format_program(program)
    stored = [program.instrs[i.srcs[1]] for i in program.instrs if i.op is IROps.STORE]
    assert stored[0].op is IROps.CONST and stored[0].arg == -128


def test_bool_loads_normalise_any_nonzero_byte(device):
    raw = np.array([0, 1, 2, 255], np.uint8)
    equal, as_int = np.zeros(4, np.bool_), np.zeros(4, np.int32)
    run_ast(device, bool_normalise_sink(), [raw.view(np.bool_)], noopt=None, outputs=[equal, as_int])
    assert equal.view(np.uint8).tolist() == [0, 1, 1, 1] and as_int.tolist() == [0, 1, 1, 1]


def test_fma_trap_products_are_rounded(device):
    """a*b+c where a fused multiply-add would differ: MULACC and MUL then ADD both give the unfused value."""
    assert "-ffp-contract=off" in compile_flags(compiler_path())
    assert not any("fast-math" in flag for flag in compile_flags(compiler_path()))
    ast, a, c = fma_trap_case()
    out_mulacc, out_mul_add = np.ones(1, np.float32), np.ones(1, np.float32)
    run_ast(device, ast, [a, a, c], noopt=None, outputs=[out_mulacc, out_mul_add])
    fused = float(np.float64(a[0]) * np.float64(a[0]) + np.float64(c[0]))
    assert fused != 0.0 and out_mulacc[0] == 0.0 and out_mul_add[0] == 0.0
    assert exec_alu(TernaryOps.MULACC, dtypes.float32, (float(a[0]), float(a[0]), float(c[0]))) == 0.0


def test_kernel_signature_and_index_types(device):
    n = 8
    less = LazyOp(BinaryOps.CMPLT, (load(1, dtypes.bfloat16, n), load(2, dtypes.bfloat16, n)))
    ast = sink((0, dtypes.bool, n, less))
    program = lower(ast, device.renderer.options)
    source = device.renderer.render(program)
    assert f"void {program.name}(unsigned char* restrict data0, uint16_t* restrict data1, " \
           "uint16_t* restrict data2)" in source
    body = source[source.index(f"void {program.name}("):]
    assert "int64_t" in body and "int32_t" not in body and " int " not in body
    assert bitcast_const(1.0, dtypes.float32, dtypes.int32) == 0x3F800000
