"""The LLVM device: generated LLVM IR run through llvmlite against CLANG (bit for bit) and the scalar ground
truth `fast.ops.exec_alu`: every op x dtype on edge values, casts, bitcasts, half rounding, constants,
reductions, masked loads through movement ops (opts on and off), 64-bit indices; the public API on LLVM,
copies between CLANG and LLVM, the object-file cache and its counter."""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from kernel_values import edge_values, from_storage, to_storage  # noqa: E402

import fast  # noqa: E402
from fast import BinaryOps, ReduceOps, TernaryOps, UnaryOps, config, dtypes  # noqa: E402
from fast.codegen import lower, verify  # noqa: E402
from fast.codegen.builder import IRBuilder  # noqa: E402
from fast.codegen.ir import BufferInfo, IndexOps, LinearProgram, LoopKind  # noqa: E402
from fast.dtype import ALL, DType  # noqa: E402
from fast.ops import (  # noqa: E402
    BufferOps,
    ConstBuffer,
    KernelOps,
    LazyOp,
    MemBuffer,
    cast_const,
    exec_alu,
    normalize_const,
    supports,
)
from fast.runtime import clang, llvm  # noqa: E402
from fast.runtime.base import COMPILE_COUNTER  # noqa: E402
from fast.runtime.host import HostAllocator  # noqa: E402
from fast.runtime.launch import launch
from fast.shape.shapetracker import ShapeTracker  # noqa: E402
from fast.shape.symbolic import Variable  # noqa: E402
from fast.shape.view import View  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRANSCENDENTAL = (UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN)
ELEMENTWISE = [op for op in (*UnaryOps, *BinaryOps, *TernaryOps) if op not in (UnaryOps.CAST, UnaryOps.BITCAST)]
F32, I32 = dtypes.float32, dtypes.int32


@pytest.fixture(scope="module")
def devices(tmp_path_factory):
    """(LLVM, CLANG), compiling into a private cache."""
    with config.override(cache_dir=str(tmp_path_factory.mktemp("cache"))):
        yield llvm.create("LLVM"), clang.create("CLANG")


# ---------------------------------------------------------------- helpers

def close(got, want, dtype: DType, rel: float) -> bool:
    """Ground-truth equality: exact (NaNs equal) or, with `rel`, within a relative tolerance."""
    if not dtypes.is_float(dtype):
        return bool(got) == want if dtype == dtypes.bool else got == want
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    return got == want or (rel > 0 and not math.isinf(want) and abs(got - want) <= rel * abs(want) + 2.0**-24)


def nan_mask(array: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == dtypes.bfloat16:
        return ((array & 0x7F80) == 0x7F80) & ((array & 0x7F) != 0)
    return np.isnan(array.view(dtype.np)) if dtypes.is_float(dtype) else np.zeros(array.shape, bool)


def assert_bits_equal(got: np.ndarray, want: np.ndarray, dtype: DType, what: str) -> None:
    """Bit-for-bit, except that any NaN equals any NaN (payloads are unspecified)."""
    got_nan, want_nan = nan_mask(got, dtype), nan_mask(want, dtype)
    np.testing.assert_array_equal(got_nan, want_nan, err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(got[~got_nan], want[~want_nan], err_msg=what)


def run_on(device, ast: LazyOp, inputs: list[np.ndarray], vals: tuple[int, ...] = (), noopt: bool = False):
    """Lower, verify, render, compile and run `ast` (inputs after the outputs); returns (outputs, source)."""
    with config.override(noopt=noopt):
        program = lower(ast, device.renderer.options)
    verify(program)
    source = device.renderer.render(program)
    kernel = device.runtime(program.name, device.compiler.compile_cached(source))
    outputs = [np.zeros(b.size, b.dtype.storage_np) for b in program.buffers if b.is_output]
    handles = []
    for array in [*outputs, *inputs]:
        handle = device.allocator.alloc(array.nbytes)
        device.allocator.copyin(handle, np.ascontiguousarray(array).data.cast("B"))
        handles.append(handle)
    launch(kernel, handles, vals, program.threaded, 0)
    for array, handle in zip(outputs, handles, strict=False):
        device.allocator.copyout(array.data.cast("B"), handle)
    return outputs, source


def run_both(devices, ast: LazyOp, inputs: list[np.ndarray], vals=(), noopt=False, loose=()):
    """Run on LLVM and CLANG; every output must agree bit for bit (output indices in `loose`: within a
    libm tolerance). Returns LLVM's outputs."""
    llvm_device, clang_device = devices
    got, source = run_on(llvm_device, ast, inputs, vals, noopt)
    want, _ = run_on(clang_device, ast, inputs, vals, noopt)
    dtypes_out = [store.arg.dtype for store in ast.src]
    for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        dtype = dtypes_out[index]
        if index in loose:
            for a, b in zip(from_storage(mine, dtype), from_storage(theirs, dtype), strict=True):
                assert close(a, b, dtype, 2.0**-7 if dtype.itemsize == 2 else 8 * 2.0**-23), f"output {index}"
        else:
            assert_bits_equal(mine, theirs, dtype, f"output {index} ({dtype.name}) LLVM vs CLANG\n{source}")
    return got


def load(idx: int, dtype: DType, st) -> LazyOp:
    st = ShapeTracker.from_shape((st,)) if isinstance(st, int) else st
    return LazyOp(BufferOps.LOAD, (), MemBuffer(idx, dtype, st))


def sink(*stores: tuple[int, DType, object, LazyOp]) -> LazyOp:
    def tracker(st):
        return ShapeTracker.from_shape((st,)) if isinstance(st, int) else st
    return LazyOp(KernelOps.SINK, tuple(LazyOp(BufferOps.STORE, (value,), MemBuffer(idx, dtype, tracker(st)))
                                        for idx, dtype, st, value in stores))


def out_dtype(op, dtype: DType) -> DType:
    return dtypes.bool if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ) else dtype


# ---------------------------------------------------------------- every op x dtype, casts, constants

@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_every_elementwise_op_matches_clang_and_exec_alu(devices, dtype):
    values = edge_values(dtype)
    a = [x for x in values for _ in values]
    b = [y for _ in values for y in values]
    c = b[len(b) // 3:] + b[:len(b) // 3]
    cond = [i % 3 == 0 for i in range(len(a))]
    n = len(a)
    ops = [op for op in ELEMENTWISE if op is TernaryOps.WHERE or supports(op, dtype)]
    operands = [load(len(ops) + k, dtype, n) for k in range(3)]
    condition = load(len(ops) + 3, dtypes.bool, n)
    stores = []
    for idx, op in enumerate(ops):
        arity = 1 if isinstance(op, UnaryOps) else 2 if isinstance(op, BinaryOps) else 3
        srcs = (condition, *operands[:2]) if op is TernaryOps.WHERE else operands[:arity]
        stores.append((idx, out_dtype(op, dtype), n, LazyOp(op, tuple(srcs))))
    inputs = [to_storage(a, dtype), to_storage(b, dtype), to_storage(c, dtype), np.array(cond, dtype=np.bool_)]
    loose = {idx for idx, op in enumerate(ops) if op in TRANSCENDENTAL}
    outputs = run_both(devices, sink(*stores), inputs, loose=loose)
    for op, output in zip(ops, outputs, strict=True):
        result = out_dtype(op, dtype)
        rel = (2.0**-7 if dtype.itemsize == 2 else 4 * 2.0**-23) if op in TRANSCENDENTAL else 0.0
        for i, got in enumerate(from_storage(output, result)):
            arity = 1 if isinstance(op, UnaryOps) else 2 if isinstance(op, BinaryOps) else 3
            args = (cond[i], a[i], b[i]) if op is TernaryOps.WHERE else (a[i], b[i], c[i])[:arity]
            want = exec_alu(op, dtype, args)
            assert close(got, want, result, rel), f"{op.name} {dtype.name} {args}: {got} != {want}"


@pytest.mark.parametrize("source", ALL, ids=lambda d: d.name)
def test_casts_and_bitcasts_match_clang_bit_for_bit(devices, source):
    """Including the unspecified float -> int elements: both devices give 0 there."""
    values = edge_values(source)
    n = len(values)
    targets = [(UnaryOps.CAST, dt) for dt in ALL if dt != source]
    targets += [(UnaryOps.BITCAST, dt) for dt in ALL if dt != source and dt.itemsize == source.itemsize
                and dtypes.bool not in (dt, source)]
    x = load(len(targets), source, n)
    ast = sink(*[(i, dt, n, LazyOp(op, (x,), dt)) for i, (op, dt) in enumerate(targets)])
    src_bits = to_storage(values, source)
    outputs = run_both(devices, ast, [src_bits])
    for (op, dt), output in zip(targets, outputs, strict=True):
        if op is UnaryOps.BITCAST:
            np.testing.assert_array_equal(output, src_bits.view(dt.storage_np), err_msg=f"bitcast to {dt.name}")
            continue
        for value, got in zip(values, from_storage(output, dt), strict=True):
            want = cast_const(value, source, dt)
            assert close(got, 0 if want is None else want, dt, 0.0), f"cast {source.name} {value!r} -> {dt.name}"


def test_half_conversions_round_to_nearest_even(devices):
    """f32 -> f16/bf16 (RNE, subnormals, overflow, NaN) and back, against numpy and CLANG."""
    edges = [(0x33000000, 0x33000000), (0x38800000, 0x38800000), (0x477FE000, 0x477FF000), (0x7F800000, 0x7F800000)]
    pieces = [np.arange(0, 2**31, 4099, dtype=np.int64)] + [np.arange(lo - 64, hi + 65) for lo, hi in edges]
    positive = np.concatenate(pieces).astype(np.uint32)
    patterns = np.concatenate([positive, positive | np.uint32(0x80000000)])
    floats, n = patterns.view(np.float32), len(patterns)
    to_half = sink((0, dtypes.float16, n, LazyOp(UnaryOps.CAST, (load(2, F32, n),), dtypes.float16)),
                   (1, dtypes.bfloat16, n, LazyOp(UnaryOps.CAST, (load(2, F32, n),), dtypes.bfloat16)))
    f16, bf16 = run_both(devices, to_half, [floats])
    with np.errstate(all="ignore"):
        want16 = floats.astype(np.float16)
    nan = np.isnan(floats)
    np.testing.assert_array_equal(f16.view(np.uint16)[~nan], want16[~nan].view(np.uint16))
    assert np.isnan(f16.view(np.float16)[nan]).all()
    rounded = (patterns.astype(np.uint64) + 0x7FFF + ((patterns >> 16) & 1)) >> 16
    np.testing.assert_array_equal(bf16, np.where(nan, ((patterns >> 16) & 0x8000) | 0x7FC0, rounded).astype(np.uint16))
    halves = np.arange(2**16, dtype=np.uint16)
    decode = sink((0, F32, 2**16, LazyOp(UnaryOps.CAST, (load(2, dtypes.float16, 2**16),), F32)),
                  (1, F32, 2**16, LazyOp(UnaryOps.CAST, (load(3, dtypes.bfloat16, 2**16),), F32)))
    from16, from_bf16 = run_both(devices, decode, [halves.view(np.float16), halves])
    np.testing.assert_array_equal(from16.view(np.uint32), halves.view(np.float16).astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(from_bf16.view(np.uint32), halves.astype(np.uint32) << 16)


def test_constants_of_every_dtype_are_exact(devices):
    stores: list[tuple[int, DType, int, LazyOp]] = []
    expected: list[tuple[DType, object]] = []
    for dtype in ALL:
        for value in edge_values(dtype):
            const = LazyOp(BufferOps.CONST, (), ConstBuffer(value, dtype, ShapeTracker.from_shape((1,))))
            stores.append((len(stores), dtype, 1, const))
            expected.append((dtype, value))
    outputs = run_both(devices, sink(*stores), [])
    for (dtype, value), output in zip(expected, outputs, strict=True):
        got = from_storage(output, dtype)[0]
        assert close(got, value, dtype, 0.0), f"{dtype.name} {value!r} rendered as {got!r}"
        if isinstance(value, float) and value == 0:
            assert math.copysign(1, got) == math.copysign(1, value)


def test_bool_loads_normalise_any_nonzero_byte(devices):
    raw = np.array([0, 1, 2, 255], np.uint8).view(np.bool_)
    x = load(2, dtypes.bool, 4)
    true = LazyOp(BufferOps.CONST, (), ConstBuffer(True, dtypes.bool, ShapeTracker.from_shape((4,))))
    ast = sink((0, dtypes.bool, 4, LazyOp(BinaryOps.CMPEQ, (x, true))), (1, I32, 4, LazyOp(UnaryOps.CAST, (x,), I32)))
    equal, as_int = run_both(devices, ast, [raw])
    assert equal.view(np.uint8).tolist() == [0, 1, 1, 1] and as_int.tolist() == [0, 1, 1, 1]


def test_mulacc_and_mul_add_are_never_fused(devices):
    a = np.array([1 + 2.0**-12], np.float32)
    c = np.array([-(1 + 2.0**-11)], np.float32)
    x, y, z = load(2, F32, 1), load(3, F32, 1), load(4, F32, 1)
    ast = sink((0, F32, 1, LazyOp(TernaryOps.MULACC, (x, y, z))),
               (1, F32, 1, LazyOp(BinaryOps.ADD, (LazyOp(BinaryOps.MUL, (x, y)), z))))
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
    data = np.random.default_rng(len(axes)).integers(-50, 50, size=(4, 5, 8)).astype(np.float32)
    data[1, 2, 3] = np.nan
    out_shape = tuple(1 if a in axes else s for a, s in enumerate(data.shape))
    x, out = load(1, F32, ShapeTracker.from_shape(data.shape)), ShapeTracker.from_shape(out_shape)
    (sums,) = run_both(devices, sink((0, F32, out, LazyOp(ReduceOps.SUM, (x,), axes))), [data], noopt=noopt)
    (maxes,) = run_both(devices, sink((0, F32, out, LazyOp(ReduceOps.MAX, (x,), axes))), [data], noopt=noopt)
    np.testing.assert_array_equal(sums.reshape(out_shape), data.sum(axis=axes, keepdims=True))
    np.testing.assert_array_equal(maxes.reshape(out_shape), data.max(axis=axes, keepdims=True))


@pytest.mark.parametrize("dtype, values, sum_want, max_want", [
    (I32, [2**31 - 1, 1, 5], -(2**31) + 5, 2**31 - 1),
    (dtypes.uint8, [200, 100, 7], 51, 200),
    (dtypes.bool, [False, True, False], True, True),
    (dtypes.int64, [-(2**63), -(2**63), 3], 3, 3),
])
def test_integer_and_bool_reductions_wrap(devices, dtype, values, sum_want, max_want):
    st, out = ShapeTracker.from_shape((1, 3)), ShapeTracker.from_shape((1, 1))
    x, data = load(1, dtype, st), np.array([values], dtype=dtype.np)
    (sums,) = run_both(devices, sink((0, dtype, out, LazyOp(ReduceOps.SUM, (x,), (1,)))), [data])
    (maxes,) = run_both(devices, sink((0, dtype, out, LazyOp(ReduceOps.MAX, (x,), (1,)))), [data])
    assert sums[0] == sum_want and maxes[0] == max_want


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint64, F32, dtypes.float16, dtypes.bfloat16],
                         ids=str)
def test_empty_reduce_axis_gives_identity(devices, dtype):
    st, out = ShapeTracker.from_shape((3, 0)), ShapeTracker.from_shape((3, 1))
    x, data = load(1, dtype, st), np.zeros(0, dtype.storage_np)
    (sums,) = run_both(devices, sink((0, dtype, out, LazyOp(ReduceOps.SUM, (x,), (1,)))), [data])
    (maxes,) = run_both(devices, sink((0, dtype, out, LazyOp(ReduceOps.MAX, (x,), (1,)))), [data])
    assert (sums == 0).all()
    assert from_storage(maxes, dtype) == [normalize_const(dtypes.min(dtype), dtype)] * 3


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_half_sums_accumulate_in_float32_and_round_once(devices, dtype):
    values = [2048.0, 1.0, 1.0, 1.0, 1.0] if dtype == dtypes.float16 else [256.0, 0.5, 0.5, 0.5, 0.5]
    st, out = ShapeTracker.from_shape((1, 5)), ShapeTracker.from_shape((1, 1))
    (result,) = run_both(devices, sink((0, dtype, out, LazyOp(ReduceOps.SUM, (load(1, dtype, st),), (1,)))),
                         [to_storage(values, dtype)])
    assert from_storage(result, dtype)[0] == (2052.0 if dtype == dtypes.float16 else 258.0)


def apply_moves(st: ShapeTracker, array: np.ndarray, moves):
    for name, arg in moves:
        st = getattr(st, name)(arg)
        if name == "pad":
            array = np.pad(array, arg)
        elif name == "shrink":
            array = array[tuple(slice(b, e) for b, e in arg)]
        elif name == "stride":
            array = array[tuple(slice(None, None, k) for k in arg)]
        elif name == "expand":
            array = np.broadcast_to(array, arg)
        elif name == "reshape":
            array = array.reshape(arg)
        else:
            array = array.transpose(arg)
    return st, array


MOVES = {
    "pad": [("pad", ((1, 2), (2, 1)))],
    "shrink": [("shrink", ((1, 3), (1, 4)))],
    "flip": [("stride", (-1, 1))],
    "flip_stride": [("stride", (-1, -3))],
    "stride": [("stride", (2, 3))],
    "expand": [("reshape", (3, 1, 4)), ("expand", (3, 5, 4))],
    "pad_reshape": [("pad", ((1, 1), (1, 1))), ("reshape", (6, 5))],
    "pad_reshape_pad_shrink": [("pad", ((1, 1), (0, 2))), ("reshape", (10, 3)), ("pad", ((2, 0), (1, 1))),
                               ("shrink", ((1, 11), (0, 4))), ("stride", (-1, 1))],
    "permute_pad_flip": [("permute", (1, 0)), ("pad", ((0, 1), (3, 0))), ("stride", (1, -1))],
    "reshape_permute_reshape": [("reshape", (2, 6)), ("permute", (1, 0)), ("reshape", (4, 3))],
    "empty": [("shrink", ((1, 1), (0, 4)))],
}


@pytest.mark.parametrize("noopt", [False, True], ids=["opt", "noopt"])
@pytest.mark.parametrize("case", sorted(MOVES))
def test_masked_loads_through_movement_ops(devices, case, noopt):
    base = np.arange(1, 13, dtype=np.int32).reshape(3, 4)
    st, want = apply_moves(ShapeTracker.from_shape((3, 4)), base, MOVES[case])
    const_st, const_want = apply_moves(ShapeTracker.from_shape((3, 4)), np.full((3, 4), 100, np.int32), MOVES[case])
    const = LazyOp(BufferOps.CONST, (), ConstBuffer(100, I32, const_st))
    half = load(3, dtypes.float16, st)
    ast = sink((0, I32, ShapeTracker.from_shape(st.shape), LazyOp(BinaryOps.ADD, (load(2, I32, st), const))),
               (1, dtypes.float16, ShapeTracker.from_shape(st.shape), LazyOp(BinaryOps.MUL, (half, half))))
    result, squares = run_both(devices, ast, [base.reshape(-1), base.reshape(-1).astype(np.float16)], noopt=noopt)
    size = math.prod(st.shape)
    np.testing.assert_array_equal(result[:size].reshape(st.shape), want + const_want)
    np.testing.assert_array_equal(squares[:size].view(np.float16).reshape(st.shape), (want * want).astype(np.float16))


@pytest.mark.parametrize("noopt", [False, True], ids=["opt", "noopt"])
def test_elementwise_around_a_reduce_several_stores_and_diamonds(devices, noopt):
    data = np.arange(32, dtype=np.float32).reshape(4, 8)
    bias = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
    full, out = ShapeTracker.from_shape((4, 8)), ShapeTracker.from_shape((4, 1))
    total = LazyOp(ReduceOps.SUM, (LazyOp(UnaryOps.NEG, (load(2, F32, full),)),), (1,))
    first = LazyOp(BinaryOps.ADD, (total, load(3, F32, out)))
    second = LazyOp(BinaryOps.MUL, (total, load(3, F32, out.expand((4, 8)))))
    a, b = run_both(devices, sink((0, F32, out, first), (1, F32, out, second)), [data, bias], noopt=noopt)
    np.testing.assert_array_equal(a, -data.sum(1) + bias[:, 0])
    np.testing.assert_array_equal(b, -data.sum(1) * bias[:, 0])
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
    data = np.random.default_rng(0).standard_normal((6, 8, 5)).astype(np.float32)
    x = load(1, F32, ShapeTracker.from_shape((6, 8, 5)))
    ast = sink((0, F32, ShapeTracker.from_shape((6, 8, 1)), LazyOp(ReduceOps.SUM, (LazyOp(BinaryOps.MUL, (x, x)),),
                                                                    (2,))))
    (optimized,), optimized_source = run_on(devices[0], ast, [data])
    (plain,), plain_source = run_on(devices[0], ast, [data], noopt=True)
    assert optimized_source != plain_source
    np.testing.assert_array_equal(optimized.view(np.uint32), plain.view(np.uint32))
    run_both(devices, ast, [data])


def test_symbolic_shapes_and_64_bit_indices(devices):
    n = Variable("n", 1, 10)
    st, out = ShapeTracker.from_shape((4, n)), ShapeTracker.from_shape((4, 1))
    x = load(1, I32, st)
    data = np.arange(40, dtype=np.int32)
    ast = sink((0, I32, out, LazyOp(BinaryOps.ADD, (LazyOp(ReduceOps.MAX, (x,), (1,)), load(1, I32, out)))))
    (maxes,) = run_both(devices, ast, [data], vals=(3,))
    np.testing.assert_array_equal(maxes, data[:12].reshape(4, 3).max(1) + data[:4])
    flipped = View.create((2**31 + 8,), (-1,), 2**31 + 7, ((2**31 + 4, 2**31 + 8),))
    wide = ShapeTracker((flipped, View.create((2, 4), (2**31 + 1, 1), 3)))
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
GUARDED_MOVES = {
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


# ---------------------------------------------------------------- the device through the public API

def test_public_api_runs_graphs_on_llvm_like_clang():
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-4, 4, (3, 4, 5)).astype(np.float32), rng.uniform(0.5, 4, (3, 4, 5)).astype(np.float32)

    def graph(device: str):
        a, b = fast.from_numpy(x, device), fast.from_numpy(y, device)
        mixed = a.e(BinaryOps.MUL, b).e(TernaryOps.MULACC, a, b).e(BinaryOps.MAX, b.e(UnaryOps.SQRT))
        reduced = mixed.permute((2, 0, 1)).stride((-1, 1, 2)).pad(((0, 1), (1, 0), (0, 0))).r(ReduceOps.SUM, (0,))
        halves = a.cast(dtypes.float16).e(BinaryOps.DIV, b.cast(dtypes.float16)).cast(dtypes.int8)
        return fast.to_numpy(reduced), fast.to_numpy(halves)

    with np.errstate(all="ignore"):
        on_llvm, on_clang = graph("LLVM"), graph("CLANG")
    for mine, theirs in zip(on_llvm, on_clang, strict=True):
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8))
    expected = np.maximum(x * y * x + y, np.sqrt(y)).transpose(2, 0, 1)[::-1, :, ::2]
    np.testing.assert_allclose(on_llvm[0], np.pad(expected, ((0, 1), (1, 0), (0, 0))).sum(0, keepdims=True),
                               rtol=1e-5)


def test_copies_between_clang_and_llvm_devices():
    data = np.arange(24, dtype=np.int16).reshape(4, 6) - 12
    start = fast.from_numpy(data, "CLANG")
    on_llvm = start.copy_to_device("LLVM:1").e(BinaryOps.MUL, fast.from_numpy(data, "LLVM:1"))
    back = on_llvm.shrink(((1, 3), (0, 6))).copy_to_device("CLANG").e(UnaryOps.NEG)
    assert on_llvm.device == "LLVM:1" and back.device == "CLANG"
    np.testing.assert_array_equal(fast.to_numpy(back), -(data * data)[1:3])
    np.testing.assert_array_equal(fast.to_numpy(on_llvm.copy_to_device("LLVM")), data * data)
    assert fast.Device["LLVM:1"].allocator is fast.Device["LLVM"].allocator
    assert isinstance(fast.Device["LLVM"].allocator, HostAllocator)


def test_object_files_are_cached_on_disk_and_counted(tmp_path):
    device = llvm.create("LLVM")
    ast = sink((0, I32, 5, LazyOp(BinaryOps.ADD, (load(1, I32, 5), load(1, I32, 5)))))
    source = device.renderer.render(lower(ast, device.renderer.options))
    with config.override(cache_dir=str(tmp_path), disable_compile_cache=False):
        before = COMPILE_COUNTER.snapshot()
        first = llvm.LLVMCompiler().compile_cached(source)
        second = llvm.LLVMCompiler().compile_cached(source)
        after = COMPILE_COUNTER.snapshot()
        header = len(llvm.LIBRARY_MAGIC) + 16
        assert first == second and first.startswith(llvm.LIBRARY_MAGIC) and first[header:header + 4] == b"\x7fELF"
        assert tuple(b - a for a, b in zip(before, after, strict=True)) == (1, 2, 1)
        assert [path.suffix for path in (tmp_path / "llvm").iterdir()] == [".bin"]
        assert llvm.LLVMCompiler().cache_key(source) != llvm.LLVMCompiler().cache_key(source + "\n")
        with config.override(disable_compile_cache=True):
            llvm.LLVMCompiler().compile_cached(source)
        assert COMPILE_COUNTER.snapshot()[0] == after[0] + 1
    handles = [device.allocator.alloc(20), device.allocator.alloc(20)]
    device.allocator.copyin(handles[1], np.arange(5, dtype=np.int32).data.cast("B"))
    program = llvm.LLVMProgram(lower(ast, device.renderer.options).name, second)
    assert isinstance(program(*handles, wait=True), float)
    out = np.zeros(5, np.int32)
    device.allocator.copyout(out.data.cast("B"), handles[0])
    np.testing.assert_array_equal(out, np.arange(5) * 2)


def test_kernels_sharing_a_name_live_side_by_side_in_the_jit(devices):
    """Different kernels with one name (E_5) load into the one engine and each runs its own code."""
    x = np.arange(5, dtype=np.int32)
    kernels = []
    for constant in (3, 40, 500):
        const = LazyOp(BufferOps.CONST, (), ConstBuffer(constant, I32, ShapeTracker.from_shape((5,))))
        program = lower(sink((0, I32, 5, LazyOp(BinaryOps.ADD, (load(1, I32, 5), const)))), devices[0].renderer.options)
        source = devices[0].renderer.render(program)
        kernels.append((constant, devices[0].runtime(program.name, devices[0].compiler.compile_cached(source))))
    assert len({kernel.name for _, kernel in kernels}) == 1 and len({kernel.address for _, kernel in kernels}) == 3
    allocator = devices[0].allocator
    source_handle = allocator.alloc(20)
    allocator.copyin(source_handle, x.data.cast("B"))
    for constant, kernel in kernels:
        out_handle, out = allocator.alloc(20), np.zeros(5, np.int32)
        kernel(out_handle, source_handle)
        allocator.copyout(out.data.cast("B"), out_handle)
        np.testing.assert_array_equal(out, x + constant)


def test_errors_are_exceptions_naming_the_problem(tmp_path):
    with config.override(cache_dir=str(tmp_path)):
        with pytest.raises(RuntimeError, match="invalid IR"):
            llvm.LLVMCompiler().compile_cached("define void @k( {")
        lib = llvm.LLVMCompiler().compile_cached("define void @k() {\nentry:\n  ret void\n}\n")
    with pytest.raises(RuntimeError, match="no kernel named"):
        llvm.LLVMProgram("missing", lib)
    with pytest.raises(TypeError, match="LLVM"):
        llvm.LLVMProgram("k", lib)(np.zeros(4))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="not produced by LLVMCompiler"):
        llvm.LLVMProgram("k", b"\x7fELF" + bytes(64))
    for bad in ("CLANG", "LLVM:x", "llvm"):
        with pytest.raises(ValueError, match="LLVM"):
            llvm.create(bad)
