"""fast/codegen/transcendental.py and sine.py: EXP2, LOG2, SIN built from ALU ops, rendered to C (CLANG)
and LLVM IR.

Each kernel is a hand-built LinearProgram (a GLOBAL loop: load data1[i], expand, store data0[i]) that
must pass `verify`. Checks: >= 10M float32 inputs per function (every exponent and sign with random
mantissas, a dense grid over the interesting range, the worst SIN reduction cases and special
values) against float64 numpy, in ulps of the float32 result (subnormal ulp 2^-149) and within 4;
CLANG and LLVM agree bit for bit; special values exactly; every float16/bfloat16 input (computed in
float32, then rounded); >= 10M float64 inputs per function (EXP2/LOG2 within 4 ulp of numpy's
float64 libm; SIN within 1 ulp of long double sin, with the hardest reduction case of every exponent
from continued fractions of 2/pi and neighbours of n*pi/2, and 8000 of them against sin computed
with integers); the 1408 bits of 2/pi against Machin's formula; constant folding of an expansion
gives the kernel's bits; float32.vec(8) and float64.vec(4) expansions (CPU vector options) give
every lane the scalar bits. The whole file takes about 20 s.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from fast.codegen import sine, transcendental
from fast.codegen.builder import IRBuilder
from fast.codegen.ir import BufferInfo, FusedOps, IndexOps, IROps, LinearProgram, LoopKind
from fast.codegen.ir_verify import verify
from fast.dtype import DType, dtypes
from fast.ops import UnaryOps
from fast.renderer.base import RendererOptions, cpu_options
from fast.renderer.c import CRenderer
from fast.runtime import cpu
from fast.runtime.clang import ClangCompiler, ClangProgram
from fast.runtime.host import HostAllocator

EXP2, LOG2, SIN = UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN
F16, BF16, F32, F64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64
NUMPY = {EXP2: np.exp2, LOG2: np.log2, SIN: np.sin}
ALLOCATOR = HostAllocator()
RNG = np.random.default_rng(1234)
ERRORS: dict[str, float] = {}  # measured max ulp errors (printed with pytest -s)


def build(op: UnaryOps, dtype: DType, options: RendererOptions | None = None, lanes: int = 1,
          fused: bool = False) -> LinearProgram:
    """for i in [0, n): data0[i] = op(data1[i]) (`lanes` elements per iteration, as one vector value when
    lanes > 1), with the expansion in IR (`fused`: with fused multiply-adds where it uses them); verified."""
    b, i64 = IRBuilder(*((options.vector_ops, options.vector_casts) if options else ())), dtypes.int64
    loop = b.loop(b.const(0, i64), b.define_var("n"), LoopKind.GLOBAL)
    index = b.index(IndexOps.MUL, loop, b.const(lanes, i64))
    b.store(0, index, transcendental.expand(b, op, b.load(1, dtype.vec(lanes), index), fused))
    b.end_loop()
    size = 1 << 26
    program = LinearProgram(f"t_{op.name.lower()}_{dtype.name}_{lanes}{'_fma' if fused else ''}", tuple(b.instrs),
                            (BufferInfo(0, dtype, True, size), BufferInfo(1, dtype, False, size)), ("n",))
    verify(program)
    return program


@functools.cache
def kernel(op: UnaryOps, dtype: DType, backend: str = "CLANG", fused: bool = False):
    program = build(op, dtype, fused=fused)
    if backend == "CLANG":
        return ClangProgram(program.name, ClangCompiler().compile(CRenderer().render(program)))
    llvm = pytest.importorskip("fast.runtime.llvm")
    from fast.renderer.llvmir import LLVMIRRenderer
    return llvm.LLVMProgram(program.name, llvm.LLVMCompiler().compile(LLVMIRRenderer().render(program)))


def execute(compiled: Any, inputs: np.ndarray, lanes: int = 1, iterations: int | None = None) -> np.ndarray:
    """A compiled kernel's outputs for `inputs` (storage arrays: bfloat16 as uint16 bit patterns),
    run for `iterations` (default: all of `inputs`, `lanes` elements per iteration)."""
    inputs = np.ascontiguousarray(inputs)
    source, target = ALLOCATOR.alloc(inputs.nbytes), ALLOCATOR.alloc(inputs.nbytes)
    ALLOCATOR.copyin(source, memoryview(inputs).cast("B"))
    compiled(target, source, vals=(len(inputs) // lanes if iterations is None else iterations,))
    out = np.empty_like(inputs)
    ALLOCATOR.copyout(memoryview(out).cast("B"), target)
    return out


def run(op: UnaryOps, dtype: DType, inputs: np.ndarray, backend: str = "CLANG", fused: bool = False) -> np.ndarray:
    return execute(kernel(op, dtype, backend, fused), inputs)


def ulp_errors(got: np.ndarray, ref: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """|got - ref| in ulps of ref rounded to `dtype` (the subnormal ulp below the normal range);
    0 where both are NaN or both the same infinity, inf for any other NaN/inf mismatch."""
    finfo = np.finfo(dtype)
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
        _, exponent = np.frexp(np.abs(rounded).astype(np.float64))
        ulp = np.ldexp(1.0, np.maximum(exponent - finfo.nmant - 1, finfo.minexp - finfo.nmant))
        err = np.abs(got.astype(np.float64) - ref) / ulp
        special = ~np.isfinite(rounded) | ~np.isfinite(got)
        same = (np.isnan(got) & np.isnan(ref)) | (got.astype(np.float64) == rounded.astype(np.float64))
    err[special] = np.where(same[special], 0.0, np.inf)
    return err  # type: ignore[no-any-return]


def reference(op: UnaryOps, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return NUMPY[op](x.astype(np.float64))  # type: ignore[no-any-return]


def float32_inputs(op: UnaryOps) -> np.ndarray:
    """Every sign and exponent with 16384 random mantissas, a dense grid, worst cases, specials."""
    mantissas = RNG.integers(0, 1 << 23, size=(512, 1 << 14), dtype=np.uint32)
    bits = (np.arange(512, dtype=np.uint32)[:, None] << 23) | mantissas
    grids = {EXP2: np.linspace(-152, 130, 2_000_000), LOG2: np.linspace(0.25, 4, 2_000_000),
             SIN: np.linspace(-1000, 1000, 2_000_000)}
    return np.concatenate([bits.view(np.float32).ravel(), grids[op].astype(np.float32), sin_worst_cases(),
                           specials(np.float32)])


def sin_worst_cases() -> np.ndarray:
    """float32 values next to multiples of pi/2 (n up to 2^20 and a few huge ones): most cancellation."""
    multiples = np.arange(1, 1 << 20, dtype=np.float64) * (np.pi / 2)
    near = multiples.astype(np.float32)
    huge = np.array([1.0082300e+37, 4.2166e38 / 4, 1.6909629e+38, -2.2540307e+21, 7.0e20], np.float32)
    return np.concatenate([near, np.nextafter(near, np.float32(0)), np.nextafter(near, np.float32(np.inf)), huge])


def specials(dtype: type) -> np.ndarray:
    finfo = np.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, np.inf, -np.inf, np.nan, -np.nan, finfo.max, -finfo.max,
              finfo.tiny, -finfo.tiny, finfo.smallest_subnormal, -finfo.smallest_subnormal, finfo.eps]
    return np.array(values, dtype)


SWEPT = [(EXP2, False), (EXP2, True), (LOG2, False), (SIN, False)]  # (op, fused multiply-adds)


@pytest.mark.parametrize(("op", "fused"), SWEPT)
def test_float32_sweep(op: UnaryOps, fused: bool) -> None:
    """>= 10M float32 inputs within 4 ulp of float64 numpy; LLVM gives CLANG's bits on 1M of them."""
    x = float32_inputs(op)
    assert len(x) >= 10_000_000
    got = run(op, F32, x, fused=fused)
    err = ulp_errors(got, reference(op, x), np.float32)
    worst = int(np.argmax(err))
    ERRORS[f"{op.name}{' fused' if fused else ''} float32"] = float(err[worst])
    print(f"\n{op.name} float32: max {err[worst]:.3f} ulp at x={x[worst]!r} over {len(x)} inputs")
    assert err[worst] <= 4.0, (x[worst], got[worst])
    subset = np.concatenate([x[::10][:1_000_000], specials(np.float32)])
    np.testing.assert_array_equal(run(op, F32, subset, "LLVM", fused).view(np.uint32),
                                  run(op, F32, subset, fused=fused).view(np.uint32))


SPECIAL_CASES = {
    EXP2: [(0.0, 1.0), (-0.0, 1.0), (1.0, 2.0), (-1.0, 0.5), (10.0, 1024.0), (-149.0, 2.0**-149), (-150.0, 0.0),
           (-126.0, 2.0**-126), (-130.0, 2.0**-130), (127.0, 2.0**127), (128.0, math.inf), (1e30, math.inf),
           (-1e30, 0.0), (math.inf, math.inf), (-math.inf, 0.0), (math.nan, math.nan), (1e-30, 1.0)],
    LOG2: [(1.0, 0.0), (2.0, 1.0), (0.5, -1.0), (1024.0, 10.0), (2.0**-149, -149.0), (2.0**-130, -130.0),
           (2.0**127, 127.0), (0.0, -math.inf), (-0.0, -math.inf), (-1.0, math.nan), (-1e-40, math.nan),
           (math.inf, math.inf), (-math.inf, math.nan), (math.nan, math.nan)],
    SIN: [(0.0, 0.0), (-0.0, -0.0), (1e-40, 1e-40), (-1e-40, -1e-40), (2.0**-20, 2.0**-20),
          (math.inf, math.nan), (-math.inf, math.nan), (math.nan, math.nan)],
}


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("op", [EXP2, LOG2, SIN])
def test_special_values(op: UnaryOps, dtype: DType) -> None:
    """Exact results (sign of zero included) for zeros, infinities, NaN, powers of two, extremes."""
    if not transcendental.supported(op, dtype):
        pytest.skip(f"{op.name} {dtype.name} is the libm op")
    cases = SPECIAL_CASES[op]
    if dtype == F64 and op is EXP2:
        wide = {-150.0: 2.0**-150, 128.0: 2.0**128, 1023.0: 2.0**1023, 1024.0: math.inf, -1074.0: 5e-324,
                -1075.0: 0.0, -1022.5: 2.0**-1022.5}
        cases = [(x, want) for x, want in cases if x not in wide] + list(wide.items())
    if dtype == F64 and op is SIN:
        tiny = [5e-324, -5e-324, 2.0**-1022, -1e-300, 2.0**-27, -1.0e-9]  # sin(x) rounds to x
        cases = [c for c in cases if c[0] != 2.0**-20] + [(v, v) for v in tiny]
    x, want = np.array([c[0] for c in cases], dtype.np), np.array([c[1] for c in cases], dtype.np)
    for backend in ("CLANG", "LLVM"):
        got = run(op, dtype, x, backend)
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all(), (x, got)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round to nearest even (fast.ops.float32_to_bfloat16_bits, vectorised); NaN -> quiet NaN."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0) | ((bits >> 16) & 0x8000).astype(np.uint16), rounded)


@pytest.mark.parametrize("op", [EXP2, LOG2, SIN])
def test_half_floats_exhaustive(op: UnaryOps) -> None:
    """Every float16 and bfloat16 input: the float32 algorithm, then rounded; within 1 ulp of the type."""
    patterns = np.arange(1 << 16, dtype=np.uint16)
    got16 = run(op, F16, patterns.view(np.float16))
    err16 = ulp_errors(got16, reference(op, patterns.view(np.float16)), np.float16)
    got_bf = run(op, BF16, patterns)
    x_bf = bf16_to_f32(patterns)
    err_bf = ulp_errors(bf16_to_f32(got_bf), reference(op, x_bf), np.float32) / 65536.0  # bf16 ulp = 2^16 f32 ulps
    ERRORS[f"{op.name} float16"], ERRORS[f"{op.name} bfloat16"] = float(err16.max()), float(err_bf.max())
    assert err16.max() <= 1.0 and err_bf.max() <= 1.0, (err16.max(), err_bf.max())
    for backend in ("LLVM",):
        np.testing.assert_array_equal(run(op, F16, patterns.view(np.float16), backend).view(np.uint16),
                                      got16.view(np.uint16))
        np.testing.assert_array_equal(run(op, BF16, patterns, backend), got_bf)
    expected_bf = f32_to_bf16(run(op, F32, x_bf))  # exactly: the float32 result, rounded once
    np.testing.assert_array_equal(got_bf, expected_bf)


def float64_inputs(op: UnaryOps) -> np.ndarray:
    """Every sign and exponent with random mantissas, a dense uniform range, specials (>= 10M); for SIN
    also doubles next to multiples of pi/2 and the hardest reduction cases of every exponent."""
    mantissas = RNG.integers(0, 1 << 52, size=(4096, 2048), dtype=np.uint64)
    bits = (np.arange(4096, dtype=np.uint64)[:, None] << np.uint64(52)) | mantissas
    dense = {EXP2: RNG.uniform(-1080, 1030, 2_000_000), LOG2: RNG.uniform(0.25, 4, 2_000_000),
             SIN: RNG.uniform(-1e6, 1e6, 2_000_000)}
    extra = [sin_worst_cases_f64()] if op is SIN else []
    return np.concatenate([bits.view(np.float64).ravel(), dense[op], *extra, specials(np.float64)])


def _continued_fraction_denominators(num: int, den: int, limit: int) -> list[int]:
    """Denominators q_k < limit of the convergents of num/den (best approximations of it)."""
    out, q0, q1 = [], 0, 1  # q_{-1}, q_0 (a_0 = num // den plays no part)
    num %= den
    while num:
        a, (den, num) = den // num, (num, den % num)
        q0, q1 = q1, a * q1 + q0
        if q1 >= limit:
            break
        out.append(q1)
    return out


@functools.cache
def sin_worst_cases_f64() -> np.ndarray:
    """For each exponent e in [-5, 1023], the doubles x = m * 2^(e-52) (m in [2^52, 2^53)) with
    m * 2^(e-52) * 2/pi closest to an integer, from the continued fraction of 2^(e-52) * 2/pi mod 1
    (|x mod pi/2| down to about 2^-60), their neighbours and negations; and doubles next to n * pi/2."""
    out = []
    for e in range(-5, 1024):
        shift = sine._WIDE_BITS - (e - 52)  # 2^(e-52) * 2/pi = TWO_OVER_PI_WIDE / 2^shift
        for q in _continued_fraction_denominators(sine._TWO_OVER_PI_WIDE, 1 << shift, 1 << 53)[-3:]:
            for t in (-(-(1 << 52) // q), -(-(1 << 52) // q) + 1):
                if (1 << 52) <= t * q < (1 << 53):
                    out.append(math.ldexp(t * q, e - 52))
    near = np.arange(1, 1 << 19, dtype=np.float64) * (np.pi / 2)
    hard = np.array(out)
    x = np.concatenate([hard, np.nextafter(hard, 0), np.nextafter(hard, np.inf), near,
                        np.nextafter(near, 0), np.nextafter(near, np.inf),
                        [6381956970095103 * 2.0**797, 2.0**1023, 1e300, 1e22, 2.0**20, np.nextafter(2.0**20, 0)]])
    return np.concatenate([x, -x])


def sin_exact(x: float) -> Fraction:
    """sin(x) to about 2^-250 relative, from integers: x * 2/pi with 1408 bits of 2/pi, Taylor series."""
    mant, exp = math.frexp(x)
    m, e = int(math.ldexp(mant, 53)), exp - 53  # x = m * 2^e
    y = Fraction(m * sine._TWO_OVER_PI_WIDE) * Fraction(2) ** (e - sine._WIDE_BITS)
    n = round(y)
    theta = (y - n) * PI_FRACTION / 2  # |theta| <= pi/4
    prec = 300 + max(0, theta.denominator.bit_length() - abs(theta.numerator).bit_length())
    t = int(theta * (1 << prec))  # fixed point, 300 bits more than theta's leading bit
    sin_t, cos_t, term, k = 0, 0, 1 << prec, 0
    while term:  # term = t^k / k!
        if k % 2:
            sin_t += term if k % 4 == 1 else -term
        else:
            cos_t += term if k % 4 == 0 else -term
        k += 1
        term = term * t // (k << prec)
    value = (sin_t, cos_t, -sin_t, -cos_t)[n % 4]
    return Fraction(value, 1 << prec)


def _machin_pi(bits: int) -> int:
    """pi * 2^bits (to a few units), by Machin's formula."""
    def atan_inv(n: int) -> int:
        term = total = (1 << (bits + 16)) // n
        k = 1
        while term:
            term //= n * n
            k += 2
            total += -(term // k) if k % 4 == 3 else term // k
        return total
    return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 16


PI_FRACTION = Fraction(_machin_pi(1600), 1 << 1600)


def test_two_over_pi_bits() -> None:
    """The 1408 bits of 2/pi in fast/codegen/sine.py (and the 768 the float32 reduction uses)."""
    want = (1 << (1408 + 1601)) // _machin_pi(1600)
    assert abs(want - sine._TWO_OVER_PI_WIDE) <= 1
    assert sine._TWO_OVER_PI_WIDE >> (1408 - transcendental._TWO_OVER_PI_BITS) == transcendental._TWO_OVER_PI


def float64_reference(op: UnaryOps, x: np.ndarray) -> np.ndarray:
    """SIN: long double sin (80-bit on x86: 11 bits beyond float64); the others: float64 numpy."""
    if op is SIN and np.finfo(np.longdouble).nmant >= 63:
        with np.errstate(all="ignore"):
            return np.sin(x.astype(np.longdouble))  # type: ignore[no-any-return]
    return reference(op, x)


@pytest.mark.parametrize(("op", "fused"), SWEPT)
def test_float64_sweep(op: UnaryOps, fused: bool) -> None:
    """>= 10M float64 inputs within 4 ulp of numpy's float64 functions (SIN: within 1 ulp of long
    double sin); LLVM gives CLANG's bits on a twentieth of them."""
    x = float64_inputs(op)
    assert len(x) >= 10_000_000
    got = run(op, F64, x, fused=fused)
    err = ulp_errors(got, float64_reference(op, x), np.float64)
    worst = int(np.argmax(err))
    ERRORS[f"{op.name}{' fused' if fused else ''} float64"] = float(err[worst])
    print(f"\n{op.name} float64: max {err[worst]:.3f} ulp at x={x[worst]!r} over {len(x)} inputs")
    assert err[worst] <= (1.0 if op is SIN else 4.0), (x[worst], got[worst])
    subset = x[::20]
    np.testing.assert_array_equal(run(op, F64, subset, "LLVM", fused).view(np.uint64),
                                  run(op, F64, subset, fused=fused).view(np.uint64))


def test_float64_sin_exact_reference() -> None:
    """The hardest reduction cases (and a sample of all doubles) against sin computed from integers:
    within 1 ulp, and long double sin (the sweep's reference) within 2^-9 ulp of it."""
    hard = sin_worst_cases_f64()
    finite = RNG.integers(0, 0x7FF0 << 48, 2000, dtype=np.uint64).view(np.float64)
    x = np.concatenate([hard[: len(hard) // 2 : 4][:6000], finite])
    got, long_double = run(SIN, F64, x), float64_reference(SIN, x)
    worst = 0.0
    for value, result, ld in zip(x.tolist(), got.tolist(), long_double, strict=True):
        exact = sin_exact(value)
        ulp = math.ulp(float(exact)) if exact else 5e-324
        err = abs(Fraction(result) - exact) / Fraction(ulp)
        worst = max(worst, float(err))
        assert err <= 1, (value, result, float(exact))
        if np.finfo(np.longdouble).nmant >= 63:
            assert abs(Fraction(*ld.as_integer_ratio()) - exact) <= Fraction(ulp) / 512, (value, ld, float(exact))
    ERRORS["SIN float64 exact reference"] = worst


def test_supported_and_fallback() -> None:
    """supported() names the IR pairs (all three functions on every float dtype); other pairs get the
    plain ALU op."""
    for op in (EXP2, LOG2, SIN):
        for dtype in (F16, BF16, F32, F64):
            assert transcendental.supported(op, dtype) and transcendental.supported(op, dtype.vec(4))
    assert not transcendental.supported(UnaryOps.SQRT, F32) and not transcendental.supported(EXP2, dtypes.int32)
    b = IRBuilder()
    x = b.load(0, F64, b.const(0, dtypes.int64))
    ref = transcendental.expand(b, UnaryOps.SQRT, x)
    assert b.instrs[ref].op is IROps.ALU and b.instrs[ref].arg is UnaryOps.SQRT and b.instrs[ref].srcs == (x,)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("op", [EXP2, LOG2, SIN])
def test_constant_folding_matches_kernel(op: UnaryOps, dtype: DType) -> None:
    """An expansion of a CONST folds (fast.ops.exec_alu) to exactly the kernel's result."""
    if not transcendental.supported(op, dtype):
        pytest.skip("libm op")
    values = np.array([0.3, 2.75, 100.5, 1e-3, 7.0e20, 1e-40 if dtype == F32 else 1e-310, 0.0, math.inf], dtype.np)
    if op is not LOG2:
        values = -values
    got = run(op, dtype, values)
    for value, want in zip(values, got, strict=True):
        b = IRBuilder()
        folded = b.const_value(transcendental.expand(b, op, b.const(float(value), dtype)))
        assert folded is not None, "expansion of a constant did not fold"
        same = np.array(folded, dtype.np).tobytes() == np.array(want).tobytes()
        assert same or (math.isnan(folded) and np.isnan(want)), (value, folded, want)


@pytest.mark.parametrize(("op", "dtype", "lanes", "fused"), [(EXP2, F32, 8, False), (LOG2, F32, 8, False),
                                                        (SIN, F32, 8, False), (SIN, F64, 4, False),
                                                        (EXP2, F32, 0, True), (EXP2, F64, 0, True)])
def test_vector_lanes_match_scalar(op: UnaryOps, dtype: DType, lanes: int, fused: bool) -> None:
    """On float32.vec(8) / float64.vec(4) values (vector ALU ops only, nothing split into lanes) every
    lane has the scalar kernel's bits, in C and in LLVM IR; so do EXP2's fused multiply-adds (at the
    host's vector width: x86 FMA intrinsics in C, llvm.fma in LLVM IR) and libm's fmaf/fma."""
    from fast.renderer.llvmir import LLVMIRRenderer
    from fast.runtime.llvm import LLVMCompiler, LLVMProgram
    if fused:  # the host's own vector width: the FMA intrinsic of that size needs its instructions
        if not cpu.fused_multiply_add():
            pytest.skip("the host has no FMA instructions (its renderers never fuse)")
        lanes = cpu.vector_bytes() // dtype.itemsize
    options = cpu_options(lanes * dtype.itemsize, threads=False, fused_multiply_add=fused)
    program = build(op, dtype, options, lanes, fused)
    assert all(instr.dtype.count == lanes for instr in program.instrs if instr.op is IROps.ALU)  # type: ignore
    assert any(instr.arg is FusedOps.FMA for instr in program.instrs) == fused
    inputs = float32_inputs(op) if dtype == F32 else float64_inputs(op)
    x = np.ascontiguousarray(inputs[::16][: 1 << 18])
    want = run(op, dtype, x, fused=fused).view(f"u{dtype.itemsize}")
    for compiled in (ClangProgram(program.name, ClangCompiler().compile(CRenderer(options).render(program))),
                     LLVMProgram(program.name, LLVMCompiler().compile(LLVMIRRenderer(options).render(program)))):
        np.testing.assert_array_equal(execute(compiled, x, lanes).view(f"u{dtype.itemsize}"), want)


def test_instruction_counts() -> None:
    """The scalar expansions stay small (instructions including CONSTs and the loop scaffold)."""
    counts = {(op, dtype): len(build(op, dtype).instrs) for op in (EXP2, LOG2, SIN) for dtype in (F32, F64)}
    print("\ninstructions:", {f"{op.name} {dtype.name}": n for (op, dtype), n in counts.items()}, "errors:", ERRORS)
    assert counts[(EXP2, F32)] < 80 and counts[(LOG2, F32)] < 120 and counts[(SIN, F32)] < 300
    assert counts[(EXP2, F64)] < 100 and counts[(LOG2, F64)] < 140 and counts[(SIN, F64)] < 500


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_exp2_at_and_below_the_low_clamp_is_zero_without_an_underflow(dtype: DType) -> None:
    """Inputs at or below -2 * bias (a softmax's masked scores: -1e4, -inf) give 0 without a product
    that underflows (each underflow costs a microcode assist). The harness reads the C floating-point
    underflow flag around the kernel, run on vectors of 4 lanes whose every lane is such an input (a
    scalar kernel lets the compiler fold a clamped lane's whole computation to a constant); inputs
    whose true value is subnormal, or rounds to 0 from above the clamp, still raise it."""
    lanes = 4
    options = cpu_options(lanes * dtype.itemsize, threads=False)
    program = build(EXP2, dtype, options, lanes)
    c_type = "float" if dtype == F32 else "double"
    probe = (f"\n#include <fenv.h>\nvoid probe_underflow({c_type}* restrict out, {c_type}* restrict in, int64_t n) {{\n"
             f"  feclearexcept(FE_ALL_EXCEPT);\n  {program.name}(out, in, n);\n"
             f"  out[n * {lanes}] = fetestexcept(FE_UNDERFLOW) ? 1 : 0;\n}}\n")
    compiled = ClangProgram("probe_underflow", ClangCompiler().compile(CRenderer(options).render(program) + probe))
    np_type = np.float32 if dtype == F32 else np.float64
    clamp = -254.0 if dtype == F32 else -2046.0
    subnormal = -140.3 if dtype == F32 else -1065.3
    for values, underflows in (([-1e4, clamp, clamp - 0.4, clamp - 3.0, -np.inf, -1e30, -1e4, clamp], False),
                               ([subnormal] * lanes, True), ([clamp + 20.0] * lanes, True)):
        inputs = np.array([*values, 0.0, 0.0, 0.0, 0.0], dtype=np_type)  # the flag lands after the values
        out = execute(compiled, inputs, lanes, len(values) // lanes)
        expected = np.exp2(np.array(values, dtype=np.float64)).astype(np_type)
        assert np.array_equal(out[:len(values)], expected)
        assert out[len(values)] == float(underflows), (values, out)
