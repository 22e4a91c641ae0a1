"""Rounding, floor division, remainder, power and shifts (see fast/xp/_math.py for accuracy).

Integer semantics follow numpy where the standard leaves them open: a zero divisor gives 0 for
`floor_divide` and `remainder`; shifts by a negative amount or by at least the bit width give 0
(left) or the sign fill (right); an integer `pow` with a negative exponent gives 0 (numpy raises,
which a lazy library cannot do per element).
"""
from __future__ import annotations

from typing import Any

from fast.xp import _dtypes as rules
from fast.xp._array import Array
from fast.xp._backend import LB
from fast.xp._elementwise import INTEGRAL, NUMERIC
from fast.xp._math import MathMixin


class RoundingMixin(MathMixin):
    """floor, ceil, trunc, round, floor_divide, remainder, pow, bitwise shifts."""

    def _trunc(self, x: LB) -> LB:
        """Exact truncation toward zero: integral magnitudes (and inf, NaN) are kept."""
        name = x.dtype.name
        a = self._abs(x)
        through = "int64" if name == "float64" else "int32"
        whole = self._cast(self._cast(a, through), name)
        signed = self._where(self._lt(x, x.const(0.0)), self._neg(whole), whole)
        small = self._lt(a, a.const(rules.max_exact_int(name)))
        return self._where(small, signed, x)

    def _floor(self, x: LB) -> LB:
        t = self._trunc(x)
        return self._where(self._lt(x, t), self._sub(t, 1.0), t)

    def _rounding(self, fname: str, x: Any) -> tuple[LB, bool]:
        lb, name = self._unary(fname, x, NUMERIC)
        return lb, rules.kind(name) == "f"

    def floor(self, x: Any, /) -> Array:
        lb, is_float = self._rounding("floor", x)
        return self._wrap(self._floor(lb) if is_float else lb)

    def ceil(self, x: Any, /) -> Array:
        lb, is_float = self._rounding("ceil", x)
        if not is_float:
            return self._wrap(lb)
        t = self._trunc(lb)
        return self._wrap(self._where(self._lt(t, lb), self._add(t, 1.0), t))

    def trunc(self, x: Any, /) -> Array:
        lb, is_float = self._rounding("trunc", x)
        return self._wrap(self._trunc(lb) if is_float else lb)

    def round(self, x: Any, /) -> Array:
        """Round half to even (numpy's `round`)."""
        lb, is_float = self._rounding("round", x)
        if not is_float:
            return self._wrap(lb)
        f = self._floor(lb)
        d = self._sub(lb, f)
        odd = self._not(self._eq(self._mul(self._floor(self._mul(f, 0.5)), 2.0), f))
        up = self._or(self._lt(d.const(0.5), d), self._and(self._eq(d, d.const(0.5)), odd))
        return self._wrap(self._where(up, self._add(f, 1.0), f))

    # ------------------------------------------------------------ division

    def _int_fix(self, a: LB, b: LB) -> tuple[LB, LB, LB]:
        """(truncated quotient, remainder, mask where floor semantics differ) for integers."""
        binary = self._backend.Binary
        q, r = a.e(binary.DIV, b), a.e(binary.MOD, b)
        if rules.kind(a.dtype.name) == "u":
            return q, r, self._false(a)
        zero = a.const(0)
        differ = self._not(self._eq(self._lt(r, zero), self._lt(b, zero)))
        nonzero = self._and(self._not(self._eq(r, zero)), self._not(self._eq(b, zero)))
        return q, r, self._and(nonzero, differ)

    def floor_divide(self, x1: Any, x2: Any, /) -> Array:
        (a, b), name = self._operands("floor_divide", x1, x2)
        self._check_kind("floor_divide", name, NUMERIC)
        if rules.kind(name) == "f":
            return self._wrap(self._floor(self._div(a, b)))
        q, _, fix = self._int_fix(a, b)
        return self._wrap(self._where(fix, self._sub(q, 1), q))

    def remainder(self, x1: Any, x2: Any, /) -> Array:
        """Remainder with the sign of the divisor (Python's %)."""
        (a, b), name = self._operands("remainder", x1, x2)
        self._check_kind("remainder", name, NUMERIC)
        if rules.kind(name) == "f":
            return self._wrap(self._sub(a, self._mul(self._floor(self._div(a, b)), b)))
        _, r, fix = self._int_fix(a, b)
        r = self._where(fix, self._add(r, b), r)
        return self._wrap(self._where(self._eq(b, b.const(0)), b, r))

    # ------------------------------------------------------------ power

    def pow(self, x1: Any, x2: Any, /) -> Array:
        """x1 ** x2. Python scalar exponents 0.5, 1 and 2 are exact (sqrt, x, x*x)."""
        (a, b), name = self._operands("pow", x1, x2)
        self._check_kind("pow", name, NUMERIC)
        if isinstance(x2, (int, float)) and not isinstance(x2, bool) and not isinstance(x1, (int, float)):
            if x2 == 2:
                return self._wrap(self._mul(a, a))
            if x2 == 1:
                return self._wrap(a)
            if x2 == 0.5 and rules.kind(name) == "f":
                return self._wrap(a.e(self._backend.Unary.SQRT))
        return self._wrap(self._float_pow(a, b) if rules.kind(name) == "f" else self._int_pow(a, b))

    def _int_pow(self, a: LB, b: LB) -> LB:
        """Square and multiply over the exponent's bits (wrapping as integer multiplication does)."""
        acc, base, e = a.const(1), a, b
        for _ in range(rules.BITS[a.dtype.name]):
            odd = self._not(self._eq(e.e(self._backend.Binary.MOD, e.const(2)), e.const(0)))
            acc = self._where(odd, self._mul(acc, base), acc)
            base, e = self._mul(base, base), e.e(self._backend.Binary.DIV, e.const(2))
        return self._where(self._lt(b, b.const(0)), a.const(0), acc)

    def _float_pow(self, a: LB, b: LB) -> LB:
        name = a.dtype.name
        a64, b64 = self._cast(a, "float64"), self._cast(b, "float64")
        unary = self._backend.Unary
        r = self._mul(b64, self._abs(a64).e(unary.LOG2)).e(unary.EXP2)
        integral = self._eq(self._floor(b64), b64)
        odd = self._and(integral, self._not(self._eq(self._mul(self._floor(self._mul(b64, 0.5)), 2.0), b64)))
        negative = self._lt(a64, a64.const(0.0))
        r = self._where(negative, self._where(integral, self._where(odd, self._neg(r), r), r.const(float("nan"))), r)
        one = self._or(self._eq(b64, b64.const(0.0)), self._eq(a64, a64.const(1.0)))
        return self._cast(self._where(one, r.const(1.0), r), name)

    # ------------------------------------------------------------ shifts

    def _pow2(self, k: LB) -> LB:
        """2**k for 0 <= k < bits, in k's dtype (wrapping at the top bit, which multiplication keeps)."""
        acc = k.const(1)
        for j in range(rules.BITS[k.dtype.name].bit_length() - 1):
            bit = k.e(self._backend.Binary.DIV, k.const(1 << j)).e(self._backend.Binary.MOD, k.const(2))
            acc = self._where(self._eq(bit, bit.const(1)), self._mul(acc, k.const(1 << (1 << j))), acc)
        return acc

    def _shift_operands(self, fname: str, x1: Any, x2: Any) -> tuple[LB, LB, LB]:
        (a, k), name = self._operands(fname, x1, x2)
        self._check_kind(fname, name, INTEGRAL)
        bits = rules.BITS[name]
        outside = self._or(self._lt(k, k.const(0)), self._not(self._lt(k, k.const(bits))))
        return a, k, outside

    def bitwise_left_shift(self, x1: Any, x2: Any, /) -> Array:
        a, k, outside = self._shift_operands("bitwise_left_shift", x1, x2)
        safe = self._where(outside, k.const(0), k)
        return self._wrap(self._where(outside, a.const(0), self._mul(a, self._pow2(safe))))

    def bitwise_right_shift(self, x1: Any, x2: Any, /) -> Array:
        """Arithmetic shift for signed integers (x >> k == ~(~x >> k) for negative x)."""
        a, k, outside = self._shift_operands("bitwise_right_shift", x1, x2)
        name = a.dtype.name
        bits = rules.BITS[name]
        unsigned = "u" + name.lstrip("u")
        negative = self._lt(a, a.const(0)) if rules.kind(name) == "i" else self._false(a)
        u = self._cast(self._where(negative, self._invert(a), a), unsigned)
        uk = self._cast(self._where(outside, k.const(bits - 1), k), unsigned)
        shifted = self._cast(u.e(self._backend.Binary.DIV, self._pow2(uk)), name)
        if rules.kind(name) == "u":
            shifted = self._where(outside, a.const(0), shifted)
        return self._wrap(self._where(negative, self._invert(shifted), shifted))
