"""Vector IR on the LLVM device: hand-built LinearPrograms with vector LOAD/STORE/CONST/ALU, VECTORIZE,
GEP, masked vector loads and vector accumulators, rendered by the LLVM runtime's renderer and run through
llvmlite. Each vector op must give, lane by lane and bit for bit, what the same op built as scalar IR
gives, and what `fast.ops.exec_alu` / `cast_const` / numpy say, over edge values (NaN, ±inf, -0.0, int
MIN/MAX, out-of-range float -> int), for one lane group and for many."""
import math
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from kernel_values import assert_bits_equal, operands, result_dtype, to_storage, values_agree  # noqa: E402
from kernel_values import edge_values as shared_edge_values  # noqa: E402

from fast import BinaryOps, TernaryOps, UnaryOps, dtypes  # noqa: E402
from fast.codegen.builder import IRBuilder  # noqa: E402
from fast.codegen.ir import BufferInfo, IndexOps, IROps, LinearProgram, LoopKind  # noqa: E402
from fast.codegen.ir_verify import verify  # noqa: E402
from fast.dtype import DType  # noqa: E402
from fast.ops import cast_const, exec_alu, float32_to_bfloat16_bits, normalize_const  # noqa: E402
from fast.renderer.base import CPU_VECTOR_CASTS, CPU_VECTOR_OPS, VECTOR_FLOATS, VECTOR_INTS, cpu_options  # noqa: E402
from fast.renderer.llvmir import LLVMIRRenderer  # noqa: E402
from fast.runtime import cpu, llvm  # noqa: E402
from fast.runtime.host import HostAllocator  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
I64, F32, F64, I32, BOOL = dtypes.int64, dtypes.float32, dtypes.float64, dtypes.int32, dtypes.bool
HOST = cpu_options(cpu.vector_bytes())
ALLOCATOR = HostAllocator()
VECTOR_DTYPES = (*VECTOR_FLOATS, *VECTOR_INTS, BOOL)
FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 1.5, -2.5, 0.1, 1e-40, 3.3e38, -3.3e38, 1e300, math.inf, -math.inf, math.nan,
               -0.5, -0.99, 127.9, -128.9, 2147483647.5, 2.0**31, -(2.0**31), -(2.0**31) - 1, -2147483648.5,
               4294967295.0, 4294967296.0, 2.0**63, -(2.0**63), 2.0**63 - 1024, 2.0**64, 2.0**64 - 2048, -1e20]
Body = Callable[[IRBuilder, list[int], int], list[int]]


def host_lanes(dtype: DType) -> int:
    """Lanes of one SIMD register of this host (at least 2, so a vector exists even with NOOPT)."""
    return max(2, HOST.lanes(dtype) if dtype != BOOL else HOST.vector_bytes // 4)


def edge_values(dtype: DType) -> list:
    return shared_edge_values(dtype, FLOAT_EDGES, (2**24 + 1, 2**53 + 1))


def padded(values: list, lanes: int) -> list:
    """`values` repeated up to a multiple of `lanes` (at least one group)."""
    size = max(lanes, -(-len(values) // lanes) * lanes)
    return [values[k % len(values)] for k in range(size)]


def builder() -> IRBuilder:
    return IRBuilder(vector_ops=CPU_VECTOR_OPS, vector_casts=CPU_VECTOR_CASTS)


def build(name: str, lanes: int, n: int, inputs: list[DType], outputs: int, body: Body) -> LinearProgram:
    """for g in [0, n/lanes): x_k = data[outputs+k][g*lanes : +lanes]; out_j[g*lanes : +lanes] = body(...)[j].
    With lanes == 1 the same body builds the scalar program."""
    b = builder()
    group = b.loop(b.const(0, I64), b.const(n // lanes, I64), LoopKind.GLOBAL)
    index = b.index(IndexOps.MUL, group, b.const(lanes, I64))
    values = body(b, [b.load(outputs + k, dt.vec(lanes), index) for k, dt in enumerate(inputs)], lanes)
    assert len(values) == outputs
    for k, value in enumerate(values):
        b.store(k, index, value)
    b.end_loop()
    buffers = [BufferInfo(k, b.dtype(value).scalar(), True, n) for k, value in enumerate(values)]
    buffers += [BufferInfo(outputs + k, dt, False, n) for k, dt in enumerate(inputs)]
    return LinearProgram(name, tuple(b.instrs), tuple(buffers))


def run(program: LinearProgram, inputs: list[np.ndarray], offset: int = 0, vals: tuple[int, ...] = ()) -> list:
    """Verify, render with the LLVM device's renderer, compile, run; every buffer starts `offset` bytes
    into its allocation (so vectors sit misaligned). Returns the outputs and the source."""
    verify(program)
    source = llvm.create("LLVM").renderer.render(program)
    kernel = llvm.LLVMProgram(program.name, llvm.LLVMCompiler().compile(source))
    outputs = [np.zeros(b.size, b.dtype.storage_np) for b in program.buffers if b.is_output]
    handles = []
    for array in [*outputs, *inputs]:
        handle = ALLOCATOR.offset(ALLOCATOR.alloc(array.nbytes + offset), offset, array.nbytes)
        ALLOCATOR.copyin(handle, np.ascontiguousarray(array).data.cast("B"))
        handles.append(handle)
    kernel(*handles, vals=vals)
    for array, handle in zip(outputs, handles, strict=False):
        ALLOCATOR.copyout(array.data.cast("B"), handle)
    return [outputs, source]


def vector_alus(program: LinearProgram) -> set[tuple[object, DType]]:
    """(op, scalar result dtype) of the vector ALU instructions of `program`."""
    return {(i.arg, i.dtype.scalar()) for i in program.instrs
            if i.op is IROps.ALU and i.dtype is not None and i.dtype.count > 1}


def run_vector_and_scalar(name: str, lanes: int, inputs: list[tuple[DType, list]], outputs: int, body: Body,
                          offset: int = 0) -> tuple[LinearProgram, list[np.ndarray], str]:
    """Run `body` as vector IR and as scalar IR on the same data; the outputs must agree bit for bit."""
    n = len(inputs[0][1])
    arrays = [to_storage(values, dtype) for dtype, values in inputs]
    vector = build(name, lanes, n, [dt for dt, _ in inputs], outputs, body)
    scalar = build(name, 1, n, [dt for dt, _ in inputs], outputs, body)
    assert not vector_alus(scalar)
    (got, source), (want, _) = run(vector, arrays, offset), run(scalar, arrays)
    for k, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert_bits_equal(mine, theirs, f"{name} output {k}: vector vs scalar IR", exact_bytes=True)
    return vector, got, source


# ---------------------------------------------------------------- every vector op

def op_cases(dtype: DType) -> list[tuple[object, object]]:
    """(op, constant second operand or None) for every vector op of `dtype` (int DIV/MOD: constants)."""
    ops = sorted((op for op, dt in CPU_VECTOR_OPS if dt == dtype), key=lambda op: op.name)
    cases: list[tuple[object, object]] = []
    for op in ops:
        if op in (BinaryOps.DIV, BinaryOps.MOD) and dtypes.is_int(dtype):
            low, high = dtypes.min(dtype), dtypes.max(dtype)
            cases += [(op, normalize_const(d, dtype)) for d in (3, -7, 2, 1, low, high) if d not in (0, -1)]
        else:
            cases.append((op, None))
    if dtypes.is_float(dtype):
        cases += [(BinaryOps.MAX, math.nan), (BinaryOps.ADD, -0.0), (BinaryOps.MUL, math.inf)]
    elif dtypes.is_int(dtype):
        cases += [(BinaryOps.ADD, dtypes.min(dtype)), (BinaryOps.MAX, dtypes.max(dtype))]
    return cases


def apply_case(b: IRBuilder, op: object, constant: object, dtype: DType, xs: list[int], lanes: int) -> int:
    """op on loaded operands a, b, c (cond for WHERE); a constant replaces the second operand."""
    a, second, c, cond = xs
    if constant is not None:
        second = b.const(constant, dtype.vec(lanes))  # type: ignore[arg-type]
    return b.alu(op, operands(op, cond, a, second, c))


def expected(op: Any, constant: Any, dtype: DType, args: tuple) -> Any:
    a, second, c, cond = args
    second = second if constant is None else constant
    return exec_alu(op, dtype, operands(op, cond, a, second, c))


@pytest.mark.parametrize("groups", ["one", "many", "narrow"])
@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=lambda d: d.name)
def test_every_vector_op_matches_scalar_ir_and_exec_alu(dtype, groups):
    """one: a single group of host-register lanes; many: every edge pair in such groups; narrow: 4 lanes."""
    lanes = 4 if groups == "narrow" else host_lanes(dtype)
    values = edge_values(dtype)
    pairs = padded([(x, y) for x in values for y in values], lanes)
    if groups == "one":
        pairs = pairs[::max(1, len(pairs) // lanes)][:lanes]
    a, second = [p[0] for p in pairs], [p[1] for p in pairs]
    c, cond = second[len(second) // 3:] + second[:len(second) // 3], [k % 3 == 0 for k in range(len(pairs))]
    cases = op_cases(dtype)
    program, outputs, source = run_vector_and_scalar(
        f"ops_{dtype.name}", lanes, [(dtype, a), (dtype, second), (dtype, c), (BOOL, cond)], len(cases),
        lambda b, xs, n: [apply_case(b, op, constant, dtype, xs, n) for op, constant in cases])
    assert {op for op, _ in cases} <= {op for op, _ in vector_alus(program)}
    assert f"<{lanes} x " in source  # MAX and DIV/MOD inline: no helper calls, only LLVM's own intrinsics (sqrt)
    assert all("@llvm." in line for line in source.splitlines() if "call " in line)
    for (op, constant), output in zip(cases, outputs, strict=True):
        for k, got in enumerate(output.tolist()):
            want = expected(op, constant, dtype, (a[k], second[k], c[k], cond[k]))
            where = f"{getattr(op, 'name', op)} {dtype.name} {a[k]!r} {second[k]!r} const={constant!r}"
            assert values_agree(got, want, result_dtype(op, dtype), signed_zero=True), f"{where}: {got!r}"


def test_every_vector_op_is_emitted_as_one_vector_instruction():
    """The builder keeps each (op, dtype) of CPU_VECTOR_OPS as a vector ALU (nothing is split into lanes)."""
    for dtype in VECTOR_DTYPES:
        body = lambda b, xs, n, dtype=dtype: [apply_case(b, op, k, dtype, xs, n) for op, k in op_cases(dtype)]  # noqa: E731
        program = build("ops", 4, 8, [dtype, dtype, dtype, BOOL], len(op_cases(dtype)), body)
        emitted = {op for op, _ in vector_alus(program)}
        assert {op for op, _ in op_cases(dtype)} <= emitted, dtype
        assert not any(i.op in (IROps.GEP, IROps.VECTORIZE) for i in program.instrs), dtype


# ---------------------------------------------------------------- casts and bitcasts

CAST_SOURCES = sorted({source for _, source, _ in CPU_VECTOR_CASTS}, key=lambda d: d.priority)


@pytest.mark.parametrize("source", CAST_SOURCES, ids=lambda d: d.name)
def test_vector_casts_and_bitcasts_match_scalar_ir(source):
    """Out-of-range / NaN float -> int lanes give 0 exactly as the scalar code does."""
    targets = sorted(((op, target) for op, src, target in CPU_VECTOR_CASTS if src == source),
                     key=lambda case: (case[0].name, case[1].priority))
    lanes = host_lanes(source)
    values = padded(edge_values(source), lanes)
    program, outputs, source_text = run_vector_and_scalar(
        f"casts_{source.name}", lanes, [(source, values)], len(targets),
        lambda b, xs, n: [b.alu(op, (xs[0],), target.vec(n)) for op, target in targets], offset=3)
    assert {(op, target) for op, target in targets} <= vector_alus(program)
    if dtypes.is_float(source) and any(dtypes.is_int(t) for _, t in targets):
        assert "fcmp olt" in source_text and "call" not in source_text
    bits = to_storage(values, source)
    for (op, target), output in zip(targets, outputs, strict=True):
        if op is UnaryOps.BITCAST:
            np.testing.assert_array_equal(output, bits.view(target.storage_np), err_msg=f"bitcast to {target.name}")
            continue
        for value, got in zip(values, output.tolist(), strict=True):
            want = cast_const(value, source, target)
            assert values_agree(got, 0 if want is None else want, target, signed_zero=True), \
                f"cast {source.name} {value!r} -> {target.name}: {got}"


# ---------------------------------------------------------------- constants, VECTORIZE and GEP

@pytest.mark.parametrize("dtype", [*VECTOR_DTYPES, dtypes.int8, dtypes.uint16, dtypes.float16, dtypes.bfloat16],
                         ids=lambda d: d.name)
def test_vector_constants_are_exact_splats(dtype):
    values, lanes = edge_values(dtype), host_lanes(dtype)
    program = build(f"consts_{dtype.name}", lanes, 2 * lanes, [], len(values),
                    lambda b, xs, n: [b.const(v, dtype.vec(n)) for v in values])
    stored = [program.instrs[i.srcs[1]] for i in program.instrs if i.op is IROps.STORE]
    assert all(value.op is IROps.CONST and value.dtype == dtype.vec(lanes) for value in stored)
    outputs, _ = run(program, [])
    for value, output in zip(values, outputs, strict=True):
        want = np.array([float32_to_bfloat16_bits(value)] * 2 * lanes, np.uint16) if dtype == dtypes.bfloat16 \
            else np.full(2 * lanes, value, dtype.storage_np)
        assert_bits_equal(output, want, f"{dtype.name} splat of {value!r}", exact_bytes=True)


def gather_body(dtype: DType) -> Body:
    """VECTORIZE of scalar loads in reverse lane order, vector ops on it (with a broadcast scalar and a
    vector of bools), then GEP of every lane to a scalar store."""
    def body(b: IRBuilder, xs: list[int], lanes: int) -> list[int]:
        x, flags = xs
        lanes_x = [b.gep(x, k) for k in range(lanes)]
        reversed_x = b.vectorize(lanes_x[::-1])
        first = b.broadcast(lanes_x[0], lanes)
        condition = b.vectorize([b.gep(flags, k) for k in range(lanes)][::-1])
        mixed = b.alu(TernaryOps.WHERE, (condition, reversed_x, b.alu(BinaryOps.ADD, (x, first))))
        return [b.vectorize([b.gep(mixed, k) for k in range(lanes)][::-1])]
    return body


@pytest.mark.parametrize("dtype", [F32, I32, dtypes.uint64], ids=lambda d: d.name)
def test_vectorize_and_gep(dtype):
    lanes, groups = host_lanes(dtype), 3
    n = lanes * groups
    x = np.arange(n).astype(dtype.np) * 3 + 1
    flags = np.array([k % 3 != 1 for k in range(n)])
    b = builder()
    group = b.loop(b.const(0, I64), b.const(groups, I64), LoopKind.GLOBAL)
    index = b.index(IndexOps.MUL, group, b.const(lanes, I64))
    scalars = [b.load(1, dtype, b.index(IndexOps.ADD, index, b.const(k, I64))) for k in range(lanes)]
    bools = [b.load(2, BOOL, b.index(IndexOps.ADD, index, b.const(k, I64))) for k in range(lanes)]
    (result,) = gather_body(dtype)(b, [b.vectorize(scalars), b.vectorize(bools)], lanes)
    for k in range(lanes):
        b.store(0, b.index(IndexOps.ADD, index, b.const(k, I64)), b.gep(result, k))
    b.end_loop()
    program = LinearProgram("gather", tuple(b.instrs), (BufferInfo(0, dtype, True, n), BufferInfo(1, dtype, False, n),
                                                        BufferInfo(2, BOOL, False, n)))
    assert {IROps.VECTORIZE, IROps.GEP} <= {i.op for i in program.instrs}
    assert {op for op, _ in vector_alus(program)} == {BinaryOps.ADD, TernaryOps.WHERE}
    (out,), source = run(program, [x, flags])
    assert "insertelement" in source and "extractelement" in source and "shufflevector" in source
    rows, keep = x.reshape(groups, lanes), flags.reshape(groups, lanes)
    want = np.where(keep, rows, rows[:, ::-1] + rows[:, :1]).reshape(-1)
    np.testing.assert_array_equal(out, want)


# ---------------------------------------------------------------- masked vector loads and stores

def masked_program(lanes: int, groups: int, valid_groups: int) -> LinearProgram:
    """out0[g] = valid ? x[g] : 0 (masked vector load); out1[g] = x[g] + 1 only where valid (masked store)."""
    b, n = builder(), lanes * groups
    group = b.loop(b.const(0, I64), b.const(groups, I64), LoopKind.GLOBAL)
    index = b.index(IndexOps.MUL, group, b.const(lanes, I64))
    valid = b.index(IndexOps.CMPLT, group, b.define_var("valid_groups"))
    loaded = b.load(2, F32.vec(lanes), index, valid)
    b.store(0, index, loaded)
    b.store(1, index, b.alu(BinaryOps.ADD, (loaded, b.const(1.0, F32.vec(lanes)))), valid)
    b.end_loop()
    buffers = (BufferInfo(0, F32, True, n), BufferInfo(1, F32, True, n),
               BufferInfo(2, F32, False, valid_groups * lanes))
    return LinearProgram("masked", tuple(b.instrs), buffers, ("valid_groups",))


@pytest.mark.parametrize("valid_groups", [0, 1, 3])
def test_masked_vector_loads_give_zero_and_masked_stores_skip(valid_groups):
    lanes, groups = host_lanes(F32), 4
    x = np.array([-0.0, math.nan, math.inf, 2.5] * (lanes * groups // 4), np.float32)
    (loaded, stored), source = run(masked_program(lanes, groups, groups), [x], offset=1, vals=(valid_groups,))
    assert f"phi <{lanes} x float>" in source
    cut = valid_groups * lanes
    zeros = np.zeros(len(x) - cut, np.float32)
    assert_bits_equal(loaded, np.concatenate([x[:cut], zeros]), "masked load", exact_bytes=True)
    assert_bits_equal(stored, np.concatenate([x[:cut] + 1, zeros]), "masked store", exact_bytes=True)


GUARD_SCRIPT = """
import ctypes, mmap, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import test_llvm_vectors as t
from fast.runtime import llvm
from fast.runtime.host import HostAllocator, HostMemory
lanes, groups, valid = t.host_lanes(t.F32), 4, 2
page, size = mmap.PAGESIZE, valid * lanes * 4
region = mmap.mmap(-1, 2 * page)
owner = np.frombuffer(region, dtype=np.uint8)
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(owner.ctypes.data + page, page, 0) == 0  # the second page faults on any access
owner[page - size:page] = np.arange(1, valid * lanes + 1, dtype=np.float32).view(np.uint8)
program = t.masked_program(lanes, groups, valid)
kernel = llvm.LLVMProgram(program.name, llvm.LLVMCompiler().compile(llvm.create("LLVM").renderer.render(program)))
outs = [HostAllocator().alloc(4 * lanes * groups) for _ in range(2)]
kernel(*outs, HostMemory(owner, page - size, size), vals=(valid,))
result = np.zeros(lanes * groups, np.float32)
HostAllocator().copyout(result.data.cast("B"), outs[0])
print(result.tolist())
"""


def test_masked_vector_loads_never_touch_memory_past_the_valid_groups():
    """The valid elements end where a PROT_NONE page begins; an invalid group's vector load would fault."""
    result = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, str(Path(__file__).parent)], capture_output=True,
                            text=True, cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    lanes = host_lanes(F32)
    assert result.stdout.strip() == str([float(k) for k in range(1, 2 * lanes + 1)] + [0.0] * 2 * lanes)


# ---------------------------------------------------------------- vector accumulators

def reduce_program(op: object, dtype: DType, init: object, rows: int, cols: int, lanes: int) -> LinearProgram:
    """out[r] = op-reduce of x[r, :] through a vector accumulator of `lanes` lanes (REDUCE loop over
    cols/lanes groups), then its lanes combined in order with scalar ops."""
    b = builder()
    row = b.loop(b.const(0, I64), b.const(rows, I64), LoopKind.GLOBAL)
    acc = b.define_acc(init, dtype.vec(lanes))  # type: ignore[arg-type]
    group = b.loop(b.const(0, I64), b.const(cols // lanes, I64), LoopKind.REDUCE)
    index = b.index(IndexOps.ADD, b.index(IndexOps.MUL, row, b.const(cols, I64)),
                    b.index(IndexOps.MUL, group, b.const(lanes, I64)))
    b.assign(acc, b.alu(op, (acc, b.load(1, dtype.vec(lanes), index))))
    b.end_loop()
    total = b.gep(acc, 0)
    for k in range(1, lanes):
        total = b.alu(op, (total, b.gep(acc, k)))
    b.store(0, row, total)
    b.end_loop()
    return LinearProgram("reduce", tuple(b.instrs), (BufferInfo(0, dtype, True, rows),
                                                     BufferInfo(1, dtype, False, rows * cols)))


@pytest.mark.parametrize("op, dtype, init", [(BinaryOps.ADD, F32, 0.0), (BinaryOps.MAX, F32, -math.inf),
                                             (BinaryOps.ADD, I32, 0), (BinaryOps.MAX, dtypes.int64, -(2**63)),
                                             (BinaryOps.MAX, F64, -math.inf)], ids=str)
def test_vector_accumulator_reductions(op, dtype, init):
    lanes, rows = host_lanes(dtype), 5
    cols = 3 * lanes
    rng = np.random.default_rng(lanes)
    if dtypes.is_float(dtype):
        x = rng.integers(-1000, 1000, size=(rows, cols)).astype(dtype.np)  # integer values: every order is exact
        x[1, 2], x[2, cols - 1], x[3, :] = np.nan, -np.inf, -np.inf
    else:
        low, high = int(dtypes.min(dtype)), int(dtypes.max(dtype))
        x = rng.integers(low, high, size=(rows, cols), dtype=dtype.np, endpoint=True)
        x[4, :] = dtypes.max(dtype)
    program = reduce_program(op, dtype, init, rows, cols, lanes)
    assert any(i.op is IROps.DEFINE_ACC and i.dtype == dtype.vec(lanes) for i in program.instrs)
    (out,), source = run(program, [x.reshape(-1)], offset=5)
    assert f"alloca <{lanes} x " in source
    with np.errstate(over="ignore"):
        want = x.sum(axis=1, dtype=dtype.np) if op is BinaryOps.ADD else x.max(axis=1)
    assert_bits_equal(out, want.astype(dtype.np), f"{op.name} reduce of {dtype.name}", exact_bytes=True)


# ---------------------------------------------------------------- renderer options and the source

def test_llvm_device_renders_with_the_host_cpu_options():
    want = cpu_options(cpu.vector_bytes(), stream_min_bytes=cpu.stream_min_bytes(),
                       fused_multiply_add=cpu.fused_multiply_add(), prefetch=True,
                       min_max=platform.machine().lower() in ("x86_64", "amd64"), cache_bytes=cpu.core_cache_bytes(),
                       matrix_tiles=cpu.matrix_tiles())
    assert llvm.create("LLVM").renderer.options == want == cpu.renderer_options()
    assert llvm.create("LLVM").renderer.options.supports_threads
    plain = LLVMIRRenderer().options
    assert plain.vector_bytes == 0 and not plain.vector_ops and not plain.supports_threads
    assert LLVMIRRenderer(cpu_options(32)).options.lanes(F32) == 8


def test_vector_source_avoids_poison_fusion_and_helpers():
    lanes = host_lanes(F32)
    body: Body = lambda b, xs, n: [b.alu(TernaryOps.MULACC, (xs[0], xs[0], xs[0])),  # noqa: E731
                                   b.alu(BinaryOps.MAX, (xs[0], xs[0])),
                                   b.alu(UnaryOps.CAST, (xs[0],), I32.vec(n)),
                                   b.alu(BinaryOps.DIV, (b.alu(UnaryOps.CAST, (xs[0],), I32.vec(n)),
                                                         b.const(7, I32.vec(n))))]
    program = build("hygiene", lanes, 2 * lanes, [F32], 4, body)
    source = llvm.create("LLVM").renderer.render(program)
    for banned in ("inbounds", "nsw", "nuw", "fma", "fast", "contract", "nnan", "ninf", "reassoc", "maxnum",
                   "noalias", "poison", "undef", "call"):
        assert banned not in source, banned
    for wanted in (f"fmul <{lanes} x float>", f"fcmp uno <{lanes} x float>", f"fptosi <{lanes} x float>",
                   f"sdiv <{lanes} x i32>", "align 1"):
        assert wanted in source, wanted
    a = np.array([1 + 2.0**-12, -(1 + 2.0**-11)] * lanes, np.float32)
    (mulacc, *_), _ = run(program, [a])
    np.testing.assert_array_equal(mulacc, (a * a).astype(np.float32) + a)

