"""The LLVM device's kernels: generated LLVM IR run through llvmlite against CLANG (bit for bit) and the
scalar ground truth `fast.ops.exec_alu`: every op x dtype on edge values, casts, bitcasts, half rounding,
constants, reductions, masked loads through movement ops (opts on and off), 64-bit indices. The device
itself (public API, copies, the object-file cache, the JIT, errors): tests/fast/test_llvm_device.py."""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from kernel_values import (  # noqa: E402
    MOVES,
    TRANSCENDENTAL,
    WRAPPING_REDUCTIONS,
    ElementwiseCase,
    Moves,
    apply_moves,
    assert_bits_equal,
    assert_from_half,
    assert_to_half,
    bias_around_reduce,
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
    half_sum_case,
    load,
    nan_cube,
    private_cache,
    result_dtype,
    run_ast,
    sink,
    sum_and_max_sinks,
    sum_of_squares_case,
    symbolic_rows_case,
    to_half_sink,
    to_storage,
    values_agree,
    wide_flipped_tracker,
    without_fma,
)

from fast import BinaryOps, ReduceOps, TernaryOps, UnaryOps, dtypes  # noqa: E402
from fast.codegen import lower, verify  # noqa: E402
from fast.codegen.builder import IRBuilder  # noqa: E402
from fast.codegen.ir import BufferInfo, IndexOps, LinearProgram, LoopKind  # noqa: E402
from fast.dtype import ALL  # noqa: E402
from fast.ops import LazyOp, cast_const, exec_alu, normalize_const  # noqa: E402
from fast.runtime import clang, llvm  # noqa: E402
from fast.runtime.launch import launch  # noqa: E402
from fast.shape.shapetracker import ShapeTracker  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
F32, I32 = dtypes.float32, dtypes.int32
NEAR_ZERO = 2.0**-24  # the absolute slack of a tolerant comparison with CLANG or exec_alu


@pytest.fixture(scope="module")
def devices(tmp_path_factory):
    """(LLVM, CLANG), compiling into a private cache."""
    with private_cache(tmp_path_factory):
        yield llvm.create("LLVM"), clang.create("CLANG")


def run_both(devices, ast: LazyOp, inputs: list[np.ndarray], vals=(), noopt=False, loose=()):
    """Run on LLVM and CLANG; every output must agree bit for bit (output indices in `loose`: within a
    libm tolerance). Returns LLVM's outputs."""
    llvm_device, clang_device = devices
    got, source = run_ast(llvm_device, ast, inputs, vals, noopt)
    want, _ = run_ast(clang_device, ast, inputs, vals, noopt)
    dtypes_out = [store.arg.dtype for store in ast.src]
    for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        dtype = dtypes_out[index]
        if index in loose:
            rel = 2.0**-7 if dtype.itemsize == 2 else 8 * 2.0**-23
            for a, b in zip(from_storage(mine, dtype), from_storage(theirs, dtype), strict=True):
                assert values_agree(a, b, dtype, rel, near_zero=NEAR_ZERO), f"output {index}"
        else:
            assert_bits_equal(mine, theirs, f"output {index} ({dtype.name}) LLVM vs CLANG\n{source}", dtype=dtype)
    return got


# ---------------------------------------------------------------- every op x dtype, casts, constants

@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_every_elementwise_op_matches_clang_and_exec_alu(devices, dtype):
    case = ElementwiseCase(dtype)
    loose = {idx for idx, op in enumerate(case.ops) if op in TRANSCENDENTAL}
    outputs = run_both(devices, case.ast(), case.inputs(), loose=loose)
    for op, output in zip(case.ops, outputs, strict=True):
        result = result_dtype(op, dtype)
        rel = (2.0**-7 if dtype.itemsize == 2 else 4 * 2.0**-23) if op in TRANSCENDENTAL else 0.0
        for i, got in enumerate(from_storage(output, result)):
            args = case.args(op, i)
            want = exec_alu(op, dtype, args)
            assert values_agree(got, want, result, rel, near_zero=NEAR_ZERO), \
                f"{op.name} {dtype.name} {args}: {got} != {want}"


@pytest.mark.parametrize("source", ALL, ids=lambda d: d.name)
def test_casts_and_bitcasts_match_clang_bit_for_bit(devices, source):
    """Including the unspecified float -> int elements: both devices give 0 there."""
    values = edge_values(source)
    targets = cast_targets(source)
    src_bits = to_storage(values, source)
    outputs = run_both(devices, cast_sink(source, targets, len(values)), [src_bits])
    for (op, dt), output in zip(targets, outputs, strict=True):
        if op is UnaryOps.BITCAST:
            np.testing.assert_array_equal(output, src_bits.view(dt.storage_np), err_msg=f"bitcast to {dt.name}")
            continue
        for value, got in zip(values, from_storage(output, dt), strict=True):
            want = cast_const(value, source, dt)
            assert values_agree(got, 0 if want is None else want, dt), f"cast {source.name} {value!r} -> {dt.name}"


def test_half_conversions_round_to_nearest_even(devices):
    """f32 -> f16/bf16 (RNE, subnormals, overflow, NaN) and back, against numpy and CLANG."""
    patterns = half_conversion_patterns()
    f16, bf16 = run_both(devices, to_half_sink(len(patterns)), [patterns.view(np.float32)])
    assert_to_half(patterns, f16, bf16)
    halves = np.arange(2**16, dtype=np.uint16)
    from16, from_bf16 = run_both(devices, from_half_sink(), [halves.view(np.float16), halves])
    assert_from_half(halves, from16, from_bf16)


def test_constants_of_every_dtype_are_exact(devices):
    stores, expected = constant_stores()
    outputs = run_both(devices, sink(*stores), [])
    for (dtype, value), output in zip(expected, outputs, strict=True):
        got = from_storage(output, dtype)[0]
        assert values_agree(got, value, dtype), f"{dtype.name} {value!r} rendered as {got!r}"
        if isinstance(value, float) and value == 0:
            assert math.copysign(1, got) == math.copysign(1, value)


def test_bool_loads_normalise_any_nonzero_byte(devices):
    raw = np.array([0, 1, 2, 255], np.uint8).view(np.bool_)
    equal, as_int = run_both(devices, bool_normalise_sink(), [raw])
    assert equal.view(np.uint8).tolist() == [0, 1, 1, 1] and as_int.tolist() == [0, 1, 1, 1]


def test_mulacc_and_mul_add_are_never_fused(devices):
    ast, a, c = fma_trap_case()
    mulacc, mul_add = run_both(devices, ast, [a, a, c])
    assert float(np.float64(a[0]) * np.float64(a[0]) + np.float64(c[0])) != 0.0
    assert mulacc[0] == 0.0 and mul_add[0] == 0.0


def test_generated_ir_avoids_poison_and_fusion(devices):
    n = 8
    st = ShapeTracker.from_shape((n,)).pad(((2, 2),))
    x = load(2, dtypes.int32, st)
    ast = sink((0, I32, 12, LazyOp(BinaryOps.DIV, (x, LazyOp(BinaryOps.MOD, (x, x))))),
               (1, F32, 12, LazyOp(TernaryOps.MULACC, (LazyOp(UnaryOps.CAST, (x,), F32),) * 3)))
    program = lower(ast, devices[0].renderer.options)
    source = devices[0].renderer.render(program)
    assert f"define void @{program.name}(ptr %data0, ptr %data1, ptr %data2)" in source
    for banned in ("inbounds", "nsw", "nuw", "fma", "fast", "contract", "nnan", "ninf", "reassoc", "maxnum",
                   "noalias", "poison", "undef"):
        assert banned not in source, banned
    assert "sdiv i32 %a, %safe" in source and "br i1" in source and "fptosi" not in source


# ---------------------------------------------------------------- reductions, views, indices

@pytest.mark.parametrize("noopt", [False, True], ids=["opt", "noopt"])
@pytest.mark.parametrize("axes", [(0,), (2,), (0, 2), (0, 1, 2)])
def test_sum_and_max_with_nan(devices, axes, noopt):
    data = nan_cube(len(axes))
    out_shape = tuple(1 if a in axes else s for a, s in enumerate(data.shape))
    full, out = ShapeTracker.from_shape(data.shape), ShapeTracker.from_shape(out_shape)
    sums, maxes = (run_both(devices, ast, [data], noopt=noopt)[0] for ast in sum_and_max_sinks(F32, full, out, axes))
    np.testing.assert_array_equal(sums.reshape(out_shape), data.sum(axis=axes, keepdims=True))
    np.testing.assert_array_equal(maxes.reshape(out_shape), data.max(axis=axes, keepdims=True))


@pytest.mark.parametrize("dtype, values, sum_want, max_want", WRAPPING_REDUCTIONS)
def test_integer_and_bool_reductions_wrap(devices, dtype, values, sum_want, max_want):
    st, out = ShapeTracker.from_shape((1, 3)), ShapeTracker.from_shape((1, 1))
    data = np.array([values], dtype=dtype.np)
    sums, maxes = (run_both(devices, ast, [data])[0] for ast in sum_and_max_sinks(dtype, st, out, (1,)))
    assert sums[0] == sum_want and maxes[0] == max_want


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint64, F32, dtypes.float16, dtypes.bfloat16],
                         ids=str)
def test_empty_reduce_axis_gives_identity(devices, dtype):
    st, out = ShapeTracker.from_shape((3, 0)), ShapeTracker.from_shape((3, 1))
    data = np.zeros(0, dtype.storage_np)
    sums, maxes = (run_both(devices, ast, [data])[0] for ast in sum_and_max_sinks(dtype, st, out, (1,)))
    assert (sums == 0).all()
    assert from_storage(maxes, dtype) == [normalize_const(dtypes.min(dtype), dtype)] * 3


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_half_sums_accumulate_in_float32_and_round_once(devices, dtype):
    ast, values, want = half_sum_case(dtype)
    (result,) = run_both(devices, ast, [to_storage(values, dtype)])
    assert from_storage(result, dtype)[0] == want


@pytest.mark.parametrize("noopt", [False, True], ids=["opt", "noopt"])
@pytest.mark.parametrize("case", sorted(MOVES))
def test_masked_loads_through_movement_ops(devices, case, noopt):
    base = np.arange(1, 13, dtype=np.int32).reshape(3, 4)
    st, want = apply_moves(ShapeTracker.from_shape((3, 4)), base, MOVES[case])
    const_st, const_want = apply_moves(ShapeTracker.from_shape((3, 4)), np.full((3, 4), 100, np.int32), MOVES[case])
    half = load(3, dtypes.float16, st)
    ast = sink((0, I32, ShapeTracker.from_shape(st.shape), LazyOp(BinaryOps.ADD, (load(2, I32, st),
                                                                                   const(100, I32, const_st)))),
               (1, dtypes.float16, ShapeTracker.from_shape(st.shape), LazyOp(BinaryOps.MUL, (half, half))))
    result, squares = run_both(devices, ast, [base.reshape(-1), base.reshape(-1).astype(np.float16)], noopt=noopt)
    size = math.prod(st.shape)
    np.testing.assert_array_equal(result[:size].reshape(st.shape), want + const_want)
    np.testing.assert_array_equal(squares[:size].view(np.float16).reshape(st.shape), (want * want).astype(np.float16))


@pytest.mark.parametrize("noopt", [False, True], ids=["opt", "noopt"])
def test_elementwise_around_a_reduce_several_stores_and_diamonds(devices, noopt):
    ast, data, bias = bias_around_reduce()
    a, b = run_both(devices, ast, [data, bias], noopt=noopt)
    np.testing.assert_array_equal(a, -data.sum(1) + bias[:, 0])
    np.testing.assert_array_equal(b, -data.sum(1) * bias[:, 0])
    full, out = ShapeTracker.from_shape((4, 8)), ShapeTracker.from_shape((4, 1))
    value = LazyOp(BinaryOps.ADD, (LazyOp(ReduceOps.MAX, (load(1, I32, full),), (1,)),
                                   LazyOp(ReduceOps.MAX, (load(1, I32, full),), (1,))))
    for _ in range(64):  # 2**64 paths: anything that walks paths instead of nodes never finishes
        value = LazyOp(BinaryOps.MAX, (value, value))
    (result,) = run_both(devices, sink((0, I32, out, value)), [data.astype(np.int32)], noopt=noopt)
    np.testing.assert_array_equal(result, data.max(1).astype(np.int32) * 2)


@pytest.mark.parametrize("shape, steps", [((4, 6), (1, -1)), ((3, 8), (-1, -1)), ((5, 5), (1, -2)), ((2, 16), (1, 3)),
                                          ((6, 4), (-1, 1))])
def test_float_reductions_over_flipped_and_strided_axes(devices, shape, steps):
    """In-order float sums whose unrolled loads run backwards or strided (the pattern of GCC bug 110381):
    integer-valued data makes every order exact, so any double-counted or dropped element shows."""
    data = np.random.default_rng(sum(shape)).integers(-50, 50, size=shape).astype(np.float32)
    st, view = apply_moves(ShapeTracker.from_shape(shape), data, [("stride", steps)])
    for axis in (0, 1):
        out_shape = tuple(1 if a == axis else size for a, size in enumerate(st.shape))
        ast = sink((0, F32, ShapeTracker.from_shape(out_shape), LazyOp(ReduceOps.SUM, (load(1, F32, st),), (axis,))))
        for noopt in (False, True):
            (sums,) = run_both(devices, ast, [data.reshape(-1)], noopt=noopt)
            np.testing.assert_array_equal(sums.reshape(out_shape), view.sum(axis, keepdims=True))


def test_opts_change_the_code_but_not_a_bit_of_the_result(devices):
    ast, data = sum_of_squares_case()
    (optimized,), optimized_source = run_ast(without_fma(devices[0]), ast, [data])  # FMA: test_fma.py
    (plain,), plain_source = run_ast(devices[0], ast, [data], noopt=True)
    assert optimized_source != plain_source
    np.testing.assert_array_equal(optimized.view(np.uint32), plain.view(np.uint32))
    run_both(devices, ast, [data])


def test_symbolic_shapes_and_64_bit_indices(devices):
    ast, _, _ = symbolic_rows_case()
    data = np.arange(40, dtype=np.int32)
    (maxes,) = run_both(devices, ast, [data], vals=(3,))
    np.testing.assert_array_equal(maxes, data[:12].reshape(4, 3).max(1) + data[:4])
    wide = wide_flipped_tracker()
    for noopt in (False, True):
        (result,) = run_both(devices, sink((0, F32, ShapeTracker.from_shape((2, 4)), load(1, F32, wide))),
                             [np.array([1, 2, 3, 4], np.float32)], noopt=noopt)
        np.testing.assert_array_equal(result, [0, 0, 0, 0, 4, 3, 2, 1])


def run_program(device, program: LinearProgram, vals: tuple[int, ...]) -> list[np.ndarray]:
    kernel = device.runtime(program.name, device.compiler.compile_cached(device.renderer.render(program)))
    outputs = [np.zeros(b.size, b.dtype.storage_np) for b in program.buffers]
    handles = [device.allocator.alloc(array.nbytes) for array in outputs]
    launch(kernel, handles, vals, program.threaded, 0)
    for array, handle in zip(outputs, handles, strict=True):
        device.allocator.copyout(array.data.cast("B"), handle)
    return outputs


def test_index_floor_division_and_symbolic_divisors(devices):
    """FLOORDIV/FLOORMOD round toward -inf for negative numerators; NONNEG_DIV/MOD by a kernel variable."""
    i64, b = dtypes.int64, IRBuilder()
    divisor = b.define_var("d")
    loop = b.loop(b.const(0, i64), b.const(16, i64), LoopKind.GLOBAL)
    shifted = b.index(IndexOps.ADD, loop, b.const(-9, i64))
    four = b.const(4, i64)
    results = [b.index(IndexOps.FLOORDIV, shifted, four), b.index(IndexOps.FLOORMOD, shifted, four),
               b.index(IndexOps.NONNEG_DIV, loop, divisor), b.index(IndexOps.NONNEG_MOD, loop, divisor)]
    for buffer, value in enumerate(results):
        b.store(buffer, loop, value)
    b.end_loop()
    program = LinearProgram("index_ops", tuple(b.instrs), tuple(BufferInfo(k, i64, True, 16) for k in range(4)), ("d",))
    verify(program)
    got = run_program(devices[0], program, (5,))
    for mine, theirs in zip(got, run_program(devices[1], program, (5,)), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    counter = np.arange(16)
    for mine, want in zip(got, [(counter - 9) // 4, (counter - 9) % 4, counter // 5, counter % 5], strict=True):
        np.testing.assert_array_equal(mine, want)
    by_zero = run_program(devices[0], program, (0,))  # out of the variable's range: divides by 1, never traps
    np.testing.assert_array_equal(by_zero[2], counter)
    np.testing.assert_array_equal(by_zero[3], 0 * counter)


GUARD_SCRIPT = """
import ctypes, mmap, sys
import numpy as np
from fast import config
from fast.codegen import lower
from fast.dtype import dtypes
from fast.ops import BinaryOps, BufferOps, KernelOps, LazyOp, MemBuffer
from fast.runtime.host import HostMemory
from fast.runtime.llvm import create
from fast.shape.shapetracker import ShapeTracker
page = mmap.PAGESIZE
region = mmap.mmap(-1, 2 * page)
owner = np.frombuffer(region, dtype=np.uint8)
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(owner.ctypes.data + page, page, 0) == 0  # the second page faults on any access
owner[page - 1024:page] = np.arange(1, 257, dtype=np.int32).view(np.uint8)
device = create("LLVM")
for case, moves, noopt in %s:
    print(case, noopt, "...", end=" ", flush=True)
    st = ShapeTracker.from_shape((256,))
    for name, arg in moves:
        st = getattr(st, name)(arg)
    x = LazyOp(BufferOps.LOAD, (), MemBuffer(1, dtypes.int32, st))
    store = LazyOp(BufferOps.STORE, (LazyOp(BinaryOps.ADD, (x, x)),),
                   MemBuffer(0, dtypes.int32, ShapeTracker.from_shape(st.shape)))
    with config.override(cache_dir=sys.argv[1], noopt=noopt):
        program = lower(LazyOp(KernelOps.SINK, (store,)), device.renderer.options)
        kernel = device.runtime(program.name, device.compiler.compile_cached(device.renderer.render(program)))
    out = device.allocator.alloc(4 * program.buffers[0].size)
    kernel(out, HostMemory(owner, page - 1024, 1024), vals=(0, 1) if program.threaded else ())
    result = np.zeros(program.buffers[0].size, np.int32)
    device.allocator.copyout(result.data, out)
    print(result.tolist(), flush=True)
"""
GUARDED_MOVES: dict[str, Moves] = {
    "pad": [("pad", ((1, 3),))],
    "pad_reshape": [("reshape", (16, 16)), ("pad", ((0, 1), (0, 1))), ("reshape", (289,))],
    "flip_pad": [("stride", (-1,)), ("pad", ((2, 3),))],
}


def test_masked_loads_never_touch_memory_outside_the_buffer(tmp_path):
    """The input's 256 elements end where a PROT_NONE page begins: any read of a padded position after
    them, even a speculative one, faults (the kernels run in a subprocess so a fault fails only this test;
    its output names the case that faulted)."""
    cases = [(case, moves, noopt) for case, moves in GUARDED_MOVES.items() for noopt in (False, True)]
    result = subprocess.run([sys.executable, "-c", GUARD_SCRIPT % (cases,), str(tmp_path)], capture_output=True,
                            text=True, cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, f"{result.stdout[-500:]}\n{result.stderr[-2000:]}"
    lines = result.stdout.strip().split("\n")
    assert len(lines) == len(cases)
    for line, (case, moves, noopt) in zip(lines, cases, strict=True):
        _, want = apply_moves(ShapeTracker.from_shape((256,)), np.arange(1, 257, dtype=np.int32), moves)
        assert line == f"{case} {noopt} ... {(want * 2).reshape(-1).tolist()}"
