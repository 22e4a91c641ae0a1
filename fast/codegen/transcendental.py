"""EXP2, LOG2 and SIN as branch-free code in the linear IR, so every backend computes the same bits.

`expand(b, op, x)` emits only CONST and the ordinary ALU ops (ADD SUB MUL DIV MOD MAX CMPLT CMPEQ
NEG WHERE CAST BITCAST) with the exact semantics of docs/semantics.md: no libm, no FMA (every
product and sum is rounded on its own; the one exception: `expand(..., fused=True)`, which lowering
passes for renderers with `fused_multiply_add`, evaluates EXP2's 1 + f*P(f) as six fused multiply-
adds instead of six multiplies and six adds, so CLANG and LLVM on an FMA host share those bits and a
backend without FMA keeps the unfused ones, both within the tolerance), no float -> int CAST
(integers come from BITCASTs of magic-number sums), no data-dependent branch (special values and the
two SIN reductions are computed and then selected with WHERE, as the lanes of a vector must be).
Every constant and cast target is built with `_like(dtype, scalar)`, so the same code serves
`float32.vec(n)` values.

Algorithms (float32 and float64 share them; half floats run the float32 code between two CASTs,
which is docs/semantics.md's "in float32, then rounded"):
- EXP2: clamp x to [-2 * bias, bias + 3] (NaN stays NaN), k = rint(x) by adding 1.5*2^p, f = x - k
  in [-1/2, 1/2] exactly, 2^f = 1 + f*P(f) (minimax, relative error 2.6e-9 / 1.8e-17), times 2^(k/2)
  and 2^(k - k/2) built from exponent bits: one final rounding, so subnormal results, 0 and inf come
  out right. At the low clamp (-254 for float32, -2046 for float64) both factors' exponent bits are
  0, so they are +0.0 and the lane is 0 without a product that underflows: on x86 each underflow
  costs a microcode assist, and a softmax's masked scores (-1e4, -inf) are all such lanes. (The
  clamp was at -160: those lanes ended in 2^-80 * 2^-80.) x between -253.5 and -126 still ends in a
  subnormal or underflowing product, as its true value is subnormal or rounds to 0.
- LOG2: subnormals scaled by 2^(p+2); x = 2^k * m with m in [sqrt(1/2), sqrt(2)) by integer exponent
  arithmetic; with f = m - 1, s = f/(2+f): ln(m) = f - f^2/2 + s*(f^2/2 + R(s^2)) (R minimax, error
  8e-10 / 1.2e-18). f - f^2/2 is split into hi (low mantissa bits cleared) + lo so that hi/ln 2 is
  exact with a split 1/ln 2, and k + hi/ln 2 is summed with an exact Fast2Sum: error below 1 ulp.
- SIN: x = n*pi/2 + r, |r| <= pi/4, then +-sin(r) or +-cos(r) by n mod 4 (minimax kernels; float32
  error 3.8e-9 for sin, 1.2e-10 for cos). Both reductions are computed and one is selected per lane.
  float32: the reduction runs in float64 arithmetic and is exact enough for every float32 (checked
  exhaustively):
  * |x| < 2^28: Cody-Waite with pi/2 in parts of 25, 25 and 53 bits (n*part exact), summed with TwoSum.
  * otherwise Payne-Hanek: 2/pi in eight 24-bit chunks C_j; each x*C_j is exact in float64 and is
    reduced mod 4 exactly (or is 0 mod 4 when |x*C_j| >= 2^53); the residues are summed exactly
    (TwoSum), so x*2/pi mod 4 is known to about 2^-100.
  r is rounded to float32 hi + lo and the kernels use sin(hi+lo) = sin(hi) + lo, cos(hi+lo) = cos(hi) -
  hi*lo; |x| < 2^-12 returns x (sin(x) rounds to x; keeps -0.0), inf and NaN give NaN.
  float64 (fast/codegen/sine.py): on |x|, Cody-Waite with pi/2 in parts of 33, 33, 33 and 53 bits
  below 2^20; above, Payne-Hanek over a window of 2/pi chosen by exponent (blocks of 73 exponents,
  WHERE chains), |x| cut into five 25-bit pieces, exact products summed exactly per diagonal and
  then with TwoSums, so r = x mod pi/2 keeps at least 59 correct bits even for the hardest doubles
  (|r| ~ 2^-61); then the float64 kernels, the sign of x, x itself below 2^-26, NaN for
  inf/NaN.

Measured max errors (tests/fast/test_transcendental.py and exhaustive runs over all 2^32 float32
inputs against double libm): float32 EXP2 1.29 ulp (fused: 0.99 ulp over the sweep's 13.5M inputs),
LOG2 0.83 ulp, SIN 0.98 ulp; float64 EXP2 1.31 ulp and LOG2 0.80 ulp (against long double; at most 1
ulp from numpy), SIN 0.90 ulp (against long double sin over 60M inputs: every exponent, uniform
ranges, the hardest reduction case of every exponent and neighbours of n*pi/2; against exact integer
arithmetic on 8000 of them); float16/bfloat16 within 0.5 ulp of the type plus the float32 error.
Instructions (ALU + CONST) for a scalar float32 x: EXP2 31 + 15, LOG2 50 + 20, SIN 189 + 40;
float64: EXP2 41 + 20, LOG2 58 + 24, SIN 302 + 141 (91 of the ALU ops are the WHEREs and compares
that choose the 2/pi window; on x86-64 the scalar form takes about 3x as long as glibc's sin, the
float64.vec(4) form about as long).
"""
from __future__ import annotations

import math

from fast.codegen.builder import IRBuilder
from fast.codegen.float_ir import (
    _F32,
    _F64,
    _TWO_OVER_PI,
    _TWO_OVER_PI_BITS,
    _V,
    F32,
    F64,
    MAGIC52,
    _bits,
    _cody_waite,
    _Fmt,
    _kernels,
    _poly,
    _poly_fused,
    _rint,
    _two_sum,
)
from fast.codegen.sine import sin_f64
from fast.dtype import DType, dtypes
from fast.ops import UnaryOps


def _pow2(k: _V, fm: _Fmt) -> _V:
    """2^k for integer k in the normal exponent range, from its bits."""
    return ((k + fm.bias) * (1 << fm.mant)).cast(fm.fdt, bitcast=True)


def _clamp(x: _V, low: float, high: float) -> _V:
    """x limited to [low, high]; NaN stays NaN. Two compare-and-selects (a NaN compares false, so
    its lanes keep x): cheaper than MAX, whose NaN rule costs a second compare on every backend."""
    x = x.lt(low).where(low, x)
    return _V(x.b, x._ref(high)).lt(x).where(high, x)


def _exp2(x: _V, fm: _Fmt, fused: bool = False) -> _V:
    """2^x: k = rint(x), f = x - k, 2^f by polynomial, times 2^(k/2) * 2^(k - k/2) (one rounding).
    x is clamped below at -2 * bias, where both factors' exponent bits are 0: they are +0.0 and the
    lane is 0 with no underflowing product (module docstring). `fused`: 1 + f*P(f) is evaluated
    with fused multiply-adds (module docstring)."""
    x = _clamp(x, -2 * fm.bias, fm.bias + 3)
    magic = 1.5 * 2.0**fm.mant
    t = x + magic
    f = x - (t - magic)  # exact, |f| <= 1/2
    k = t.cast(fm.idt, bitcast=True) - _bits(magic, fm.fdt)
    half = k.div(2)
    p = f.fma(_poly_fused(f, fm.exp2), 1.0) if fused else f * _poly(f, fm.exp2) + 1.0
    return p * _pow2(half, fm) * _pow2(k - half, fm)


def _log2_reduce(x: _V, fm: _Fmt) -> tuple[_V, _V]:
    """(k, m) with x = 2^k * m, m in [sqrt(1/2), sqrt(2)), k a float; for finite x > 0."""
    scale = fm.mant + 2
    tiny = x.lt(2.0 ** (1 - fm.bias))
    bits = tiny.where(x * 2.0**scale, x).cast(fm.idt, bitcast=True)
    shift = _bits(1.0, fm.fdt) - _bits(math.sqrt(0.5), fm.fdt)
    e = (bits + shift).div(1 << fm.mant)  # the biased exponent of x / m
    m = (bits - (e - fm.bias) * (1 << fm.mant)).cast(fm.fdt, bitcast=True)
    return tiny.where(e - (fm.bias + scale), e - fm.bias).cast(fm.fdt), m


def _log2(x: _V, fm: _Fmt) -> _V:
    """log2(x) = k + ln(1 + f)/ln 2 with hi/lo splits (see the module docstring)."""
    k, m = _log2_reduce(x, fm)
    f = m - 1.0
    s = f / (f + 2.0)
    z = s * s
    hfsq = f * 0.5 * f
    hi_bits = (f - hfsq).cast(fm.udt, bitcast=True)
    hi = (hi_bits - hi_bits.mod(1 << fm.hi_cut)).cast(fm.fdt, bitcast=True)
    lo = ((f - hi) - hfsq) + s * (hfsq + z * _poly(z, fm.log))
    inv_hi, inv_lo = fm.ivln2()
    low = (lo + hi) * inv_lo + lo * inv_hi
    high = hi * inv_hi
    w = k + high  # Fast2Sum: |k| >= |high| or k == 0
    res = (low + ((k - w) + high)) + w
    res = x.lt(math.inf).where(res, x)  # +inf, NaN
    res = x.lt(0.0).where(math.nan, res)
    return x.eq(0.0).where(-math.inf, res)


def _payne_hanek_f32(x: _V, ax: _V) -> tuple[_V, _V]:
    """(n mod 4, r), x = n*pi/2 + r for any float32 x (in float64): exact products with 2/pi chunks."""
    hi: _V | None = None
    lo: _V | None = None
    for j in range(8):
        chunk = math.ldexp((_TWO_OVER_PI >> (_TWO_OVER_PI_BITS - 24 * (j + 1))) & 0xFFFFFF, -24 * (j + 1))
        p = x * chunk  # exact: 24 x 24 bits
        q = ax.lt(2.0**53 / chunk).where(p - ((p * 0.25 + MAGIC52) - MAGIC52) * 4.0, 0.0)  # p mod 4, exact
        if hi is None:
            hi = q
        else:
            hi, err = _two_sum(hi, q)
            lo = err if lo is None else lo + err
    assert hi is not None and lo is not None
    nf, n = _rint(hi)
    return n, ((hi - nf) + lo) * (math.pi / 2)


def _sin_f32(x: _V) -> _V:
    """sinf(x): float64 reduction (Cody-Waite below 2^28, else Payne-Hanek), float32 kernels."""
    wide = x.cast(F64)
    ax = wide.max(-wide)
    n_small, r_hi, r_lo = _cody_waite(wide, (25, 25))
    n_big, r_big = _payne_hanek_f32(wide, ax)
    small = ax.lt(2.0**28)
    r = small.where(r_hi + r_lo, r_big)
    hi = r.cast(F32)
    res = _kernels(small.where(n_small, n_big), hi, (r - hi.cast(F64)).cast(F32), _F32)
    ax32 = x.max(-x)
    res = ax32.lt(2.0**-12).where(x, res)  # sin(x) rounds to x; keeps -0.0 and subnormals exact
    return ax32.lt(math.inf).where(res, math.nan)


def _sin_f64(x: _V) -> _V:
    """sin(x) for float64: fast/codegen/sine.py."""
    return sin_f64(x)


_EXPAND = {(UnaryOps.EXP2, F32): lambda x: _exp2(x, _F32), (UnaryOps.EXP2, F64): lambda x: _exp2(x, _F64),
           (UnaryOps.LOG2, F32): lambda x: _log2(x, _F32), (UnaryOps.LOG2, F64): lambda x: _log2(x, _F64),
           (UnaryOps.SIN, F32): _sin_f32, (UnaryOps.SIN, F64): _sin_f64}
_HALVES = (dtypes.float16, dtypes.bfloat16)


def supported(op: object, dtype: DType) -> bool:
    """Whether `expand` builds `op` on (lanes of) `dtype` in IR rather than returning the libm ALU op."""
    scalar = F32 if dtype.scalar() in _HALVES else dtype.scalar()
    return (op, scalar) in _EXPAND


def expand(b: IRBuilder, op: UnaryOps, x: int, fused: bool = False) -> int:
    """The IR value computing `op(x)` (EXP2, LOG2, SIN) from ALU ops; see the module docstring.

    Half floats compute in float32 and are rounded once at the end. For an (op, dtype) that
    `supported` rejects, this is the plain ALU op (a libm call in the renderers). `fused` (a
    renderer with `fused_multiply_add`): EXP2's polynomial uses fused multiply-adds."""
    dtype = b.dtype(x)
    if not supported(op, dtype):
        return b.alu(op, (x,))
    value = _V(b, x)
    scalar = dtype.scalar()
    compute = F32 if scalar in _HALVES else scalar
    fuse = fused and op is UnaryOps.EXP2 and b.const_value(x) is None  # a constant folds unfused
    build = (lambda v: _exp2(v, _F32 if compute == F32 else _F64, True)) if fuse else _EXPAND[(op, compute)]
    if scalar in _HALVES:
        return build(value.cast(F32)).cast(scalar).ref
    return build(value).ref
