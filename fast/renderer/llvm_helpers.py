"""The LLVM IR helper functions a kernel module may need (fast/renderer/llvmir.py adds each one once,
on first use): half-float decode/encode with round-to-nearest-even in integer code, integer division
and modulo without undefined behaviour, NaN-propagating float MAX, and saturating-to-zero float ->
int conversion. They implement docs/semantics.md exactly as the C helpers do (fast/renderer/c_helpers.py),
so LLVM and CLANG agree bit for bit. Every helper is `internal` and carries attribute group `#0`.
"""
from __future__ import annotations

from fast.dtype import ALL, DType, dtypes
from fast.renderer.llvm_vectors import float_literal, int_bounds, llvm_type

#: The LLVM value type of each scalar dtype (vectors: `llvm_type`).
VALUE_TYPES: dict[DType, str] = {dt: llvm_type(dt) for dt in ALL}

F16_HELPERS = """define internal float @f16_to_f32(i16 %h) #0 {
  %x = zext i16 %h to i32
  %s0 = and i32 %x, 32768
  %sign = shl i32 %s0, 16
  %e0 = lshr i32 %x, 10
  %exponent = and i32 %e0, 31
  %mantissa = and i32 %x, 1023
  %m13 = shl i32 %mantissa, 13
  %i0 = or i32 %sign, 2139095040
  %special = or i32 %i0, %m13
  %e1 = add i32 %exponent, 112
  %e2 = shl i32 %e1, 23
  %n0 = or i32 %sign, %e2
  %normal = or i32 %n0, %m13
  %mf = uitofp i32 %mantissa to float
  %sv = fmul float %mf, 0x3E70000000000000
  %sb = bitcast float %sv to i32
  %subnormal = or i32 %sb, %sign
  %is_special = icmp eq i32 %exponent, 31
  %is_subnormal = icmp eq i32 %exponent, 0
  %r0 = select i1 %is_subnormal, i32 %subnormal, i32 %normal
  %r = select i1 %is_special, i32 %special, i32 %r0
  %f = bitcast i32 %r to float
  ret float %f
}
define internal i16 @f32_to_f16(float %value) #0 {
  %x = bitcast float %value to i32
  %top = lshr i32 %x, 16
  %sign = and i32 %top, 32768
  %ax = and i32 %x, 2147483647
  %is_nan = icmp ugt i32 %ax, 2139095040
  %frac = and i32 %ax, 8388607
  %p0 = lshr i32 %frac, 13
  %p_zero = icmp eq i32 %p0, 0
  %payload = select i1 %p_zero, i32 1, i32 %p0
  %sign_inf = or i32 %sign, 31744
  %nan = or i32 %sign_inf, %payload
  %is_inf = icmp uge i32 %ax, 1199566848
  %is_normal = icmp uge i32 %ax, 947912704
  %o0 = lshr i32 %ax, 13
  %odd = and i32 %o0, 1
  %n1 = add i32 %ax, 4095
  %n2 = add i32 %n1, %odd
  %n3 = sub i32 %n2, 939524096
  %n4 = lshr i32 %n3, 13
  %normal = or i32 %sign, %n4
  %is_zero = icmp ule i32 %ax, 855638016
  %exponent = lshr i32 %ax, 23
  %lo = icmp ult i32 %exponent, 102
  %c0 = select i1 %lo, i32 102, i32 %exponent
  %hi = icmp ugt i32 %c0, 112
  %c1 = select i1 %hi, i32 112, i32 %c0
  %shift = sub i32 126, %c1
  %mant = or i32 %frac, 8388608
  %q0 = lshr i32 %mant, %shift
  %unit = shl i32 1, %shift
  %mask = sub i32 %unit, 1
  %rest = and i32 %mant, %mask
  %shift1 = sub i32 %shift, 1
  %half = shl i32 1, %shift1
  %gt = icmp ugt i32 %rest, %half
  %tie = icmp eq i32 %rest, %half
  %q_odd = trunc i32 %q0 to i1
  %tie_up = and i1 %tie, %q_odd
  %up = or i1 %gt, %tie_up
  %up32 = zext i1 %up to i32
  %q = add i32 %q0, %up32
  %subnormal = or i32 %sign, %q
  %r3 = select i1 %is_zero, i32 %sign, i32 %subnormal
  %r2 = select i1 %is_normal, i32 %normal, i32 %r3
  %r1 = select i1 %is_inf, i32 %sign_inf, i32 %r2
  %r0 = select i1 %is_nan, i32 %nan, i32 %r1
  %r = trunc i32 %r0 to i16
  ret i16 %r
}
"""
BF16_HELPERS = """define internal float @bf16_to_f32(i16 %h) #0 {
  %x = zext i16 %h to i32
  %b = shl i32 %x, 16
  %f = bitcast i32 %b to float
  ret float %f
}
define internal i16 @f32_to_bf16(float %value) #0 {
  %x = bitcast float %value to i32
  %ax = and i32 %x, 2147483647
  %is_nan = icmp ugt i32 %ax, 2139095040
  %top = lshr i32 %x, 16
  %sign = and i32 %top, 32768
  %nan = or i32 %sign, 32704
  %odd = and i32 %top, 1
  %r0 = add i32 %x, 32767
  %r1 = add i32 %r0, %odd
  %r2 = lshr i32 %r1, 16
  %r = select i1 %is_nan, i32 %nan, i32 %r2
  %t = trunc i32 %r to i16
  ret i16 %t
}
"""


def divmod_helpers(dtype: DType) -> str:
    """`@div_T`/`@mod_T`: a divisor of 0 (and -1 when signed) is replaced by 1 before dividing."""
    t, name, signed = VALUE_TYPES[dtype], dtype.name, not dtypes.is_unsigned(dtype)
    special = f"  %minus1 = icmp eq {t} %b, -1\n  %special = or i1 %zero, %minus1\n" if signed else ""
    substitute = "%special" if signed else "%zero"
    head = f"  %zero = icmp eq {t} %b, 0\n{special}  %safe = select i1 {substitute}, {t} 1, {t} %b\n"
    if signed:
        div = (f"  %q = sdiv {t} %a, %safe\n  %neg = sub {t} 0, %a\n  %q1 = select i1 %minus1, {t} %neg, {t} %q\n"
               f"  %r = select i1 %zero, {t} 0, {t} %q1\n")
        mod = f"  %m = srem {t} %a, %safe\n  %m1 = select i1 %minus1, {t} 0, {t} %m\n" \
              f"  %r = select i1 %zero, {t} %a, {t} %m1\n"
    else:
        div = f"  %q = udiv {t} %a, %safe\n  %r = select i1 %zero, {t} 0, {t} %q\n"
        mod = f"  %m = urem {t} %a, %safe\n  %r = select i1 %zero, {t} %a, {t} %m\n"
    return (f"define internal {t} @div_{name}({t} %a, {t} %b) #0 {{\n{head}{div}  ret {t} %r\n}}\n"
            f"define internal {t} @mod_{name}({t} %a, {t} %b) #0 {{\n{head}{mod}  ret {t} %r\n}}\n")


def float_max_helper(t: str) -> str:
    return (f"define internal {t} @max_{t}({t} %a, {t} %b) #0 {{\n  %a_nan = fcmp uno {t} %a, %a\n"
            f"  %b_nan = fcmp uno {t} %b, %b\n  %gt = fcmp ogt {t} %a, %b\n  %m0 = select i1 %gt, {t} %a, {t} %b\n"
            f"  %m1 = select i1 %b_nan, {t} %b, {t} %m0\n  %m = select i1 %a_nan, {t} %a, {t} %m1\n  ret {t} %m\n}}\n")


def cast_helper(dtype: DType) -> str:
    """`@f2i_T(double)`: trunc(x) when it fits `dtype` (ordered compares: NaN fails), else 0."""
    t, convert = VALUE_TYPES[dtype], "fptoui" if dtypes.is_unsigned(dtype) else "fptosi"
    (low, low_bound), (high, high_bound) = int_bounds(dtypes.float64, dtype)
    return (f"define internal {t} @f2i_{dtype.name}(double %x) #0 {{\n"
            f"  %low = fcmp {low} double %x, {float_literal(low_bound)}\n"
            f"  %high = fcmp {high} double %x, {float_literal(high_bound)}\n  %ok = and i1 %low, %high\n"
            f"  %safe = select i1 %ok, double %x, double {float_literal(0.0)}\n"
            f"  %r = {convert} double %safe to {t}\n  ret {t} %r\n}}\n")
