"""Generated C against the scalar ground truth `fast.ops.exec_alu`: every op x every dtype on edge
values, casts and bitcasts, half conversions, constants, the FMA trap.

Also run under UBSAN (tests/fast/test_ubsan.py runs this file with UBSAN=1)."""
import math

import numpy as np
import pytest
from kernel_values import edge_values, from_storage, to_storage

from fast import config
from fast.codegen import format_program, lower, verify
from fast.codegen.ir import IROps
from fast.dtype import ALL, DType, dtypes
from fast.ops import (
    BinaryOps,
    BufferOps,
    ConstBuffer,
    KernelOps,
    LazyOp,
    MemBuffer,
    TernaryOps,
    UnaryOps,
    bitcast_const,
    cast_const,
    exec_alu,
    supports,
)
from fast.runtime.clang import compile_flags, compiler_path, create
from fast.runtime.launch import launch
from fast.shape.shapetracker import ShapeTracker


def same(got, want, dtype: DType, rel: float = 0.0) -> bool:
    """Conformance equality: NaNs equal, -0.0 == 0.0; floats within `rel` (plus eps near zero)."""
    if dtype == dtypes.bool:
        return isinstance(want, bool) and bool(got) == want
    if dtypes.is_int(dtype):
        return isinstance(want, int) and got == want
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if rel == 0.0 or math.isinf(want):
        return got == want
    eps = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7, dtypes.float32: 2.0**-23}.get(dtype, 2.0**-52)
    return abs(got - want) <= rel * abs(want) + eps


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    with config.override(cache_dir=str(tmp_path_factory.mktemp("cache"))):
        yield create("CLANG")


def run(device, ast: LazyOp, arrays: list[np.ndarray]) -> str:
    """Lower, verify, render, compile and run `ast` on `arrays` (storage dtype, kernel order); outputs are
    written back into their arrays. Returns the C source."""
    program = lower(ast, device.renderer.options)
    verify(program)
    source = device.renderer.render(program)
    kernel = device.runtime(program.name, device.compiler.compile_cached(source))
    handles = []
    for array in arrays:
        handle = device.allocator.alloc(array.nbytes)
        device.allocator.copyin(handle, np.ascontiguousarray(array).data.cast("B"))
        handles.append(handle)
    launch(kernel, handles, (), program.threaded, 0)
    for info in program.buffers:
        if info.is_output:
            device.allocator.copyout(arrays[info.idx].data.cast("B"), handles[info.idx])
    return source


def load(idx: int, dtype: DType, n: int) -> LazyOp:
    return LazyOp(BufferOps.LOAD, (), MemBuffer(idx, dtype, ShapeTracker.from_shape((n,))))


def store(idx: int, dtype: DType, n: int, value: LazyOp) -> LazyOp:
    return LazyOp(BufferOps.STORE, (value,), MemBuffer(idx, dtype, ShapeTracker.from_shape((n,))))


def result_dtype(op, dtype: DType) -> DType:
    return dtypes.bool if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ) else dtype


def arity(op) -> int:
    return 1 if isinstance(op, UnaryOps) else 2 if isinstance(op, BinaryOps) else 3


ELEMENTWISE = [op for op in (*UnaryOps, *BinaryOps, *TernaryOps) if op not in (UnaryOps.CAST, UnaryOps.BITCAST)]
TRANSCENDENTAL = (UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_every_elementwise_op_matches_exec_alu(device, dtype):
    values = edge_values(dtype)
    a = [x for x in values for _ in values]
    b = [y for _ in values for y in values]
    c = b[len(b) // 3:] + b[:len(b) // 3]
    cond = [i % 3 == 0 for i in range(len(a))]
    n = len(a)
    ops = [op for op in ELEMENTWISE if op is TernaryOps.WHERE or supports(op, dtype)]
    first_input = len(ops)
    operands = [load(first_input + k, dtype, n) for k in range(3)]
    condition = load(first_input + 3, dtypes.bool, n)
    stores = []
    for idx, op in enumerate(ops):
        srcs = (condition, *operands[:2]) if op is TernaryOps.WHERE else operands[:arity(op)]
        stores.append(store(idx, result_dtype(op, dtype), n, LazyOp(op, tuple(srcs))))
    outputs = [np.zeros(n, result_dtype(op, dtype).storage_np) for op in ops]
    inputs = [to_storage(a, dtype), to_storage(b, dtype), to_storage(c, dtype), np.array(cond, dtype=np.bool_)]
    run(device, LazyOp(KernelOps.SINK, tuple(stores)), outputs + inputs)
    for op, output in zip(ops, outputs, strict=True):
        out_dtype = result_dtype(op, dtype)
        got = from_storage(output, out_dtype)
        for i in range(n):
            operand_values = (cond[i], a[i], b[i]) if op is TernaryOps.WHERE else (a[i], b[i], c[i])[:arity(op)]
            want = exec_alu(op, dtype, operand_values)
            rel = 4 * 2.0**-23 if op in TRANSCENDENTAL else 0.0
            if op in TRANSCENDENTAL and dtype in (dtypes.float16, dtypes.bfloat16):
                rel = 2.0**-7
            assert same(got[i], want, out_dtype, rel), f"{op.name} {dtype.name} {operand_values}: {got[i]} != {want}"


@pytest.mark.parametrize("source", ALL, ids=lambda d: d.name)
def test_casts_and_bitcasts_match_ground_truth(device, source):
    values = edge_values(source)
    n = len(values)
    casts = [dt for dt in ALL if dt != source]
    bitcasts = [dt for dt in ALL if dt != source and dt.itemsize == source.itemsize and dtypes.bool not in (dt, source)]
    targets = [(UnaryOps.CAST, dt) for dt in casts] + [(UnaryOps.BITCAST, dt) for dt in bitcasts]
    x = load(len(targets), source, n)
    stores = [store(i, dt, n, LazyOp(op, (x,), dt)) for i, (op, dt) in enumerate(targets)]
    outputs = [np.zeros(n, dt.storage_np) for _, dt in targets]
    src_bits = to_storage(values, source)
    run(device, LazyOp(KernelOps.SINK, tuple(stores)), [*outputs, src_bits])
    for (op, dt), output in zip(targets, outputs, strict=True):
        if op is UnaryOps.BITCAST:
            np.testing.assert_array_equal(output, src_bits.view(dt.storage_np), err_msg=f"bitcast to {dt.name}")
            continue
        for value, got in zip(values, from_storage(output, dt), strict=True):
            want = cast_const(value, source, dt)
            if want is not None:
                assert same(got, want, dt), f"cast {source.name} {value!r} -> {dt.name}: {got!r} != {want!r}"


def test_float_to_half_conversion_sweep(device):
    """f32 -> f16/bf16 (RNE, subnormals, overflow, NaN) and f16/bf16 -> f32 against numpy / ops."""
    edges = [(0x33000000, 0x33000000), (0x38800000, 0x38800000), (0x477fe000, 0x477ff000), (0x7f800000, 0x7f800000)]
    pieces = [np.arange(0, 2**31, 4099, dtype=np.int64)] + [np.arange(lo - 64, hi + 65) for lo, hi in edges]
    positive = np.concatenate(pieces).astype(np.uint32)
    patterns = np.concatenate([positive, positive | np.uint32(0x80000000)])
    floats = patterns.view(np.float32)
    n = len(floats)
    halves = np.arange(2**16, dtype=np.uint16)
    ast = LazyOp(KernelOps.SINK, (
        store(0, dtypes.float16, n, LazyOp(UnaryOps.CAST, (load(2, dtypes.float32, n),), dtypes.float16)),
        store(1, dtypes.bfloat16, n, LazyOp(UnaryOps.CAST, (load(2, dtypes.float32, n),), dtypes.bfloat16)),
    ))
    f16, bf16 = np.zeros(n, np.uint16), np.zeros(n, np.uint16)
    run(device, ast, [f16, bf16, floats])
    with np.errstate(all="ignore"):
        want16 = floats.astype(np.float16)
    nan = np.isnan(floats)
    np.testing.assert_array_equal(f16.view(np.float16)[~nan].view(np.uint16), want16[~nan].view(np.uint16))
    assert np.isnan(f16.view(np.float16)[nan]).all()
    rounded = (patterns.astype(np.uint64) + 0x7FFF + ((patterns >> 16) & 1)) >> 16
    want_bf16 = np.where(nan, ((patterns >> 16) & 0x8000) | 0x7FC0, rounded).astype(np.uint16)
    np.testing.assert_array_equal(bf16, want_bf16)
    decode = LazyOp(KernelOps.SINK, (
        store(0, dtypes.float32, 2**16, LazyOp(UnaryOps.CAST, (load(2, dtypes.float16, 2**16),), dtypes.float32)),
        store(1, dtypes.float32, 2**16, LazyOp(UnaryOps.CAST, (load(3, dtypes.bfloat16, 2**16),), dtypes.float32)),
    ))
    from16, from_bf16 = np.zeros(2**16, np.float32), np.zeros(2**16, np.float32)
    run(device, decode, [from16, from_bf16, halves, halves])
    np.testing.assert_array_equal(from16.view(np.uint32), halves.view(np.float16).astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(from_bf16.view(np.uint32), halves.astype(np.uint32) << 16)


def test_constants_of_every_dtype_render_exactly(device):
    """CONST leaves (literals in C) round-trip every edge value, including NaN, inf, -0.0, MIN, MAX."""
    stores: list[LazyOp] = []
    expected: list[tuple[DType, object]] = []
    for dtype in ALL:
        for value in edge_values(dtype):
            const = LazyOp(BufferOps.CONST, (), ConstBuffer(value, dtype, ShapeTracker.from_shape((1,))))
            stores.append(store(len(stores), dtype, 1, const))
            expected.append((dtype, value))
    outputs = [np.zeros(1, dtype.storage_np) for dtype, _ in expected]
    run(device, LazyOp(KernelOps.SINK, tuple(stores)), outputs)
    for (dtype, value), output in zip(expected, outputs, strict=True):
        got = from_storage(output, dtype)[0]
        assert same(got, value, dtype), f"{dtype.name} {value!r} rendered as {got!r}"
        if isinstance(value, float) and value == 0:
            assert math.copysign(1, got) == math.copysign(1, value)


def test_constant_operands_are_folded_exactly():
    """An op on constants becomes one CONST whose value is exec_alu's."""
    st = ShapeTracker.from_shape((1,))
    def const(value):
        return LazyOp(BufferOps.CONST, (), ConstBuffer(value, dtypes.int8, st))
    ast = LazyOp(KernelOps.SINK, (store(0, dtypes.int8, 1, LazyOp(BinaryOps.DIV, (const(-128), const(-1)))),))
    program = lower(ast, create("CLANG").renderer.options)
    assert not any(instr.op is IROps.ALU for instr in program.instrs), format_program(program)
    stored = [program.instrs[i.srcs[1]] for i in program.instrs if i.op is IROps.STORE]
    assert stored[0].op is IROps.CONST and stored[0].arg == -128


def test_bool_loads_normalise_any_nonzero_byte(device):
    raw = np.array([0, 1, 2, 255], np.uint8)
    x = load(2, dtypes.bool, 4)
    true = LazyOp(BufferOps.CONST, (), ConstBuffer(True, dtypes.bool, ShapeTracker.from_shape((4,))))
    ast = LazyOp(KernelOps.SINK, (store(0, dtypes.bool, 4, LazyOp(BinaryOps.CMPEQ, (x, true))),
                                  store(1, dtypes.int32, 4, LazyOp(UnaryOps.CAST, (x,), dtypes.int32))))
    equal, as_int = np.zeros(4, np.bool_), np.zeros(4, np.int32)
    run(device, ast, [equal, as_int, raw.view(np.bool_)])
    assert equal.view(np.uint8).tolist() == [0, 1, 1, 1] and as_int.tolist() == [0, 1, 1, 1]


def test_fma_trap_products_are_rounded(device):
    """a*b+c where a fused multiply-add would differ: MULACC and MUL then ADD both give the unfused value."""
    assert "-ffp-contract=off" in compile_flags(compiler_path())
    assert not any("fast-math" in flag for flag in compile_flags(compiler_path()))
    a = np.array([1 + 2.0**-12], np.float32)
    c = np.array([-(1 + 2.0**-11)], np.float32)
    x, y, z = load(2, dtypes.float32, 1), load(3, dtypes.float32, 1), load(4, dtypes.float32, 1)
    ast = LazyOp(KernelOps.SINK, (store(0, dtypes.float32, 1, LazyOp(TernaryOps.MULACC, (x, y, z))),
                                  store(1, dtypes.float32, 1, LazyOp(BinaryOps.ADD, (LazyOp(BinaryOps.MUL, (x, y)),
                                                                                      z)))))
    out_mulacc, out_mul_add = np.ones(1, np.float32), np.ones(1, np.float32)
    run(device, ast, [out_mulacc, out_mul_add, a, a, c])
    fused = float(np.float64(a[0]) * np.float64(a[0]) + np.float64(c[0]))
    assert fused != 0.0 and out_mulacc[0] == 0.0 and out_mul_add[0] == 0.0
    assert exec_alu(TernaryOps.MULACC, dtypes.float32, (float(a[0]), float(a[0]), float(c[0]))) == 0.0


def test_kernel_signature_and_index_types(device):
    n = 8
    ast = LazyOp(KernelOps.SINK, (store(0, dtypes.bool, n, LazyOp(BinaryOps.CMPLT, (load(1, dtypes.bfloat16, n),
                                                                                     load(2, dtypes.bfloat16, n)))),))
    program = lower(ast, device.renderer.options)
    source = device.renderer.render(program)
    assert f"void {program.name}(unsigned char* restrict data0, uint16_t* restrict data1, " \
           "uint16_t* restrict data2)" in source
    body = source[source.index(f"void {program.name}("):]
    assert "int64_t" in body and "int32_t" not in body and " int " not in body
    assert bitcast_const(1.0, dtypes.float32, dtypes.int32) == 0x3F800000
