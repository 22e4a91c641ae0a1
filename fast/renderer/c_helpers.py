"""Helper functions and literals of the C renderers (renderer/c.py): half-float conversions, floor
division of indices, range-checked float -> int casts, bitcasts through `memcpy`, exact constants.

Every helper is written as a C `static inline` function; a dialect whose helpers need other
qualifiers (CUDA C: `static __device__ __forceinline__`) rewrites that prefix (`CDialect.helper`).
Only builtins that C and CUDA C share are used (`memcpy`; `NAN` and `INFINITY`, which the CUDA
prelude defines), so one text serves both.
"""
from __future__ import annotations

import math

import numpy as np

from fast.dtype import ConstType, DType, dtypes
from fast.ops import float32_to_bfloat16_bits
from fast.renderer.c_vectors import SCALAR_CTYPES

CTYPES: dict[DType, str] = SCALAR_CTYPES
HALVES = (dtypes.float16, dtypes.bfloat16)

F16_HELPERS = """static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
  if (exponent == 0x1fu) bits = sign | 0x7f800000u | (mantissa << 13);
  else if (exponent != 0) bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  else { float value = (float)mantissa * 0x1p-24f; memcpy(&bits, &value, 4); bits |= sign; }
  float out; memcpy(&out, &bits, 4); return out;
}
static inline uint16_t f32_to_f16(float value) {
  uint32_t x; memcpy(&x, &value, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  /* NaN: keep the top payload bits, and keep it a NaN */
    uint32_t payload = (ax & 0x7fffffu) >> 13;
    return (uint16_t)(sign | 0x7c00u | (payload ? payload : 1u));
  }
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) return (uint16_t)(sign | ((ax + 0x0fffu + ((ax >> 13) & 1u) - 0x38000000u) >> 13));
  if (ax <= 0x33000000u) return (uint16_t)sign;
  uint32_t shift = 126u - (ax >> 23), mantissa = (ax & 0x7fffffu) | 0x800000u;
  uint32_t q = mantissa >> shift, rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  q += (rest > half) || (rest == half && (q & 1u));
  return (uint16_t)(sign | q);
}
"""
BF16_HELPERS = """static inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16; float out; memcpy(&out, &bits, 4); return out;
}
static inline uint16_t f32_to_bf16(float value) {
  uint32_t x; memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
"""
INDEX_HELPERS = """static inline int64_t idx_floordiv(int64_t a, int64_t b) { return a / b - ((a % b) < 0); }
static inline int64_t idx_floormod(int64_t a, int64_t b) { int64_t r = a % b; return r < 0 ? r + b : r; }
"""


def division_helpers(dtype: DType) -> str:
    """C helpers `div_T` and `mod_T` for integer dtype T: docs/semantics.md's division by 0 (0, and the
    dividend for MOD) and by -1 (two's complement wrap for the most negative value), no trap."""
    ctype, name = CTYPES[dtype], suffix(dtype)
    if dtypes.is_unsigned(dtype):
        div, mod = "b == 0 ? 0 : a / b", "b == 0 ? a : a % b"
    else:
        div = f"b == 0 ? 0 : b == -1 ? ({ctype})(0 - (uint64_t)a) : ({ctype})(a / b)"
        mod = f"b == 0 ? a : b == -1 ? 0 : ({ctype})(a % b)"
    return (f"static inline {ctype} div_{name}({ctype} a, {ctype} b) {{ return {div}; }}\n"
            f"static inline {ctype} mod_{name}({ctype} a, {ctype} b) {{ return {mod}; }}\n")


def float_max_helper(ctype: str) -> str:
    """C helper `max_T` for a float type: NaN if either operand is NaN, else the larger."""
    return (f"static inline {ctype} max_{ctype}({ctype} a, {ctype} b) "
            "{ return a != a ? a : b != b ? b : a > b ? a : b; }\n")


def suffix(dtype: DType) -> str:
    return dtype.name


def cast_bounds(dtype: DType) -> tuple[str, str]:
    """C conditions on double `x` that hold exactly when trunc(x) fits integer `dtype` (NaN fails both)."""
    bits = 8 * dtype.itemsize
    if dtypes.is_unsigned(dtype):
        return "x > -1.0", f"x < 0x1p{bits}"
    if bits == 64:  # -2^63 - 1 is not a double; nothing lies strictly between it and -2^63
        return "x >= -0x1p63", "x < 0x1p63"
    return f"x > {-(1 << (bits - 1)) - 1}.0", f"x < 0x1p{bits - 1}"


def cast_helper(dtype: DType) -> str:
    low, high = cast_bounds(dtype)
    ctype = CTYPES[dtype]
    return f"static inline {ctype} f2i_{suffix(dtype)}(double x) {{ return ({low} && {high}) ? ({ctype})x : 0; }}\n"


def bitcast_helper(source: DType, target: DType) -> str:
    return (f"static inline {CTYPES[target]} bitcast_{suffix(source)}_{suffix(target)}({CTYPES[source]} x) "
            f"{{ {CTYPES[target]} y; memcpy(&y, &x, sizeof y); return y; }}\n")


def render_const(value: ConstType, dtype: DType) -> str:
    """An exact C literal of `dtype`'s C type (half floats as their bit pattern)."""
    if dtype == dtypes.bool:
        return "1" if value else "0"
    if dtype in HALVES:
        bits = int(np.array(value, np.float16).view(np.uint16)) if dtype == dtypes.float16 \
            else float32_to_bfloat16_bits(float(value))
        return f"((uint16_t)0x{bits:04x})"
    if dtypes.is_int(dtype):
        if dtype == dtypes.int64 and value == dtypes.min(dtypes.int64):
            return "(-9223372036854775807LL - 1)"
        literal = f"{value}ULL" if dtype == dtypes.uint64 else f"{value}LL"
        return literal if dtype == dtypes.int64 else f"(({CTYPES[dtype]}){literal})"
    value = float(value)
    cast = "(float)" if dtype == dtypes.float32 else "(double)"
    if math.isnan(value):
        return f"{cast}NAN"
    if math.isinf(value):
        return f"{cast}{'-' if value < 0 else ''}INFINITY"
    # repr is the shortest decimal that reads back as this double; the value is exact in `dtype`, so
    # the compiler's correctly rounded parse of it (as float for the f suffix) gives the same value
    return repr(value) + ("f" if dtype == dtypes.float32 else "")
