"""Element-wise functions without a primitive of their own, built from EXP2 LOG2 SIN SQRT and arithmetic.

Accuracy (float32; float64 alike with its own eps; half dtypes round every step): `exp` is
EXP2(x*log2 e), relative error about (|x| log2 e + 4) * eps; `log`, `log2`, `log10` within a few
eps; `expm1`, `log1p` use Kahan's tricks (relative accuracy near 0 kept); `cos` is
1 - 2 sin^2(x/2) (absolute error a few eps near its zeros); `tan` = sin/cos; `atan` is Cephes'
rational approximation after range reduction; `asin`, `acos`, `atan2` derive from it; hyperbolic
functions go through `expm1`/`log1p`; `pow` on floats computes exp2(y log2|x|) in float64 (float32
and half inputs) with the sign fixed up for negative bases and integral exponents. Rounding
(`floor ceil trunc round`) is exact: values with |x| >= 2**mantissa are already integral and kept,
the rest go through an integer cast. Floats: `floor_divide` is floor(x1/x2) and `remainder`
x1 - floor(x1/x2) x2 (numpy computes them through fmod; results can differ by one rounding).
"""
from __future__ import annotations

import math
from typing import Any

from fast.xp import _dtypes as rules
from fast.xp._array import Array
from fast.xp._backend import LB
from fast.xp._elementwise import FLOAT, ElementwiseMixin

LOG2E, LN2, LOG10_2 = 1.0 / math.log(2.0), math.log(2.0), math.log10(2.0)
ATAN_P = (-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1,
          -1.228866684490136173410e2, -6.485021904942025371773e1)
ATAN_Q = (2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
          4.853903996359136964868e2, 1.945506571482613964425e2)
TAN_3PI_8 = 2.41421356237309504880


class MathMixin(ElementwiseMixin):
    """Transcendental, rounding and integer-division functions."""

    def _float_unary(self, fname: str, x: Any) -> LB:
        lb, _ = self._unary(fname, x, FLOAT)
        return lb

    def _mul(self, a: LB, value: float | LB) -> LB:
        return a.e(self._backend.Binary.MUL, a.const(value) if isinstance(value, (int, float)) else value)

    def _add(self, a: LB, value: float | LB) -> LB:
        return a.e(self._backend.Binary.ADD, a.const(value) if isinstance(value, (int, float)) else value)

    def _sub(self, a: LB, value: float | LB) -> LB:
        return a.e(self._backend.Binary.SUB, a.const(value) if isinstance(value, (int, float)) else value)

    def _div(self, a: LB, b: LB) -> LB:
        return a.e(self._backend.Binary.DIV, b)

    def _neg(self, a: LB) -> LB:
        return a.e(self._backend.Unary.NEG)

    # ------------------------------------------------------------ exp and log

    def _exp(self, x: LB) -> LB:
        return self._mul(x, LOG2E).e(self._backend.Unary.EXP2)

    def _log(self, x: LB) -> LB:
        return self._mul(x.e(self._backend.Unary.LOG2), LN2)

    def exp(self, x: Any, /) -> Array:
        return self._wrap(self._exp(self._float_unary("exp", x)))

    def log(self, x: Any, /) -> Array:
        return self._wrap(self._log(self._float_unary("log", x)))

    def log2(self, x: Any, /) -> Array:
        return self._wrap(self._float_unary("log2", x).e(self._backend.Unary.LOG2))

    def log10(self, x: Any, /) -> Array:
        return self._wrap(self._mul(self._float_unary("log10", x).e(self._backend.Unary.LOG2), LOG10_2))

    def _expm1(self, x: LB) -> LB:
        """Kahan: u = exp(x); x where u == 1, -1 where u - 1 == -1, else (u - 1) * x / log(u)."""
        u = self._exp(x)
        um1 = self._sub(u, 1.0)
        general = self._div(self._mul(um1, x), self._log(u))
        out = self._where(self._eq(um1, x.const(-1.0)), x.const(-1.0), general)
        out = self._where(self._eq(u, self._inf(x)), u, out)
        return self._where(self._eq(u, x.const(1.0)), x, out)

    def _log1p(self, x: LB) -> LB:
        """Kahan: u = 1 + x; x where u == 1, else log(u) * x / (u - 1)."""
        u = self._add(x, 1.0)
        general = self._div(self._mul(self._log(u), x), self._sub(u, 1.0))
        out = self._where(self._eq(u, self._inf(x)), u, general)
        return self._where(self._eq(u, x.const(1.0)), x, out)

    def expm1(self, x: Any, /) -> Array:
        return self._wrap(self._expm1(self._float_unary("expm1", x)))

    def log1p(self, x: Any, /) -> Array:
        return self._wrap(self._log1p(self._float_unary("log1p", x)))

    def logaddexp(self, x1: Any, x2: Any, /) -> Array:
        """log(exp(x1) + exp(x2)) = max + log1p(exp(-|x1 - x2|)), infinities handled first."""
        (a, b), name = self._operands("logaddexp", x1, x2)
        self._check_kind("logaddexp", name, FLOAT)
        big = self._max(a, b)
        out = self._add(big, self._log1p(self._exp(self._neg(self._abs(self._sub(a, b))))))
        return self._wrap(self._where(self._eq(self._abs(big), self._inf(big)), big, out))

    def sqrt(self, x: Any, /) -> Array:
        return self._wrap(self._float_unary("sqrt", x).e(self._backend.Unary.SQRT))

    def hypot(self, x1: Any, x2: Any, /) -> Array:
        (a, b), name = self._operands("hypot", x1, x2)
        self._check_kind("hypot", name, FLOAT)
        aa, ab = self._abs(a), self._abs(b)
        big, small = self._max(aa, ab), self._min(aa, ab)
        ratio = self._div(small, big)
        out = self._mul(self._add(self._mul(ratio, ratio), 1.0).e(self._backend.Unary.SQRT), big)
        out = self._where(self._eq(big, big.const(0.0)), big, out)
        inf = self._or(self._eq(aa, self._inf(aa)), self._eq(ab, self._inf(ab)))
        return self._wrap(self._where(inf, self._inf(aa), out))

    # ------------------------------------------------------------ trigonometry

    def sin(self, x: Any, /) -> Array:
        return self._wrap(self._float_unary("sin", x).e(self._backend.Unary.SIN))

    def _cos(self, x: LB) -> LB:
        s = self._mul(x, 0.5).e(self._backend.Unary.SIN)
        return self._sub(x.const(1.0), self._mul(self._mul(s, s), 2.0))

    def cos(self, x: Any, /) -> Array:
        return self._wrap(self._cos(self._float_unary("cos", x)))

    def tan(self, x: Any, /) -> Array:
        lb = self._float_unary("tan", x)
        return self._wrap(self._div(lb.e(self._backend.Unary.SIN), self._cos(lb)))

    def _poly(self, z: LB, coefficients: tuple[float, ...], monic: bool) -> LB:
        acc = z.const(1.0) if monic else z.const(coefficients[0])
        for c in coefficients if monic else coefficients[1:]:
            acc = self._add(self._mul(acc, z), c)
        return acc

    def _atan(self, x: LB) -> LB:
        """Cephes atan: reduce |x| to [0, 0.66], rational approximation, add back pi/4 or pi/2."""
        a = self._abs(x)
        high = self._lt(a.const(TAN_3PI_8), a)
        mid = self._lt(a.const(0.66), a)
        reduced = self._where(high, self._div(a.const(-1.0), a),
                              self._where(mid, self._div(self._sub(a, 1.0), self._add(a, 1.0)), a))
        z = self._mul(reduced, reduced)
        ratio = self._div(self._mul(z, self._poly(z, ATAN_P, False)), self._poly(z, ATAN_Q, True))
        y = self._add(self._mul(reduced, ratio), reduced)
        base = self._where(high, a.const(math.pi / 2), self._where(mid, a.const(math.pi / 4), a.const(0.0)))
        out = self._add(y, base)
        return self._where(self._lt(x, x.const(0.0)), self._neg(out), out)

    def atan(self, x: Any, /) -> Array:
        return self._wrap(self._atan(self._float_unary("atan", x)))

    def asin(self, x: Any, /) -> Array:
        lb = self._float_unary("asin", x)
        root = self._mul(self._sub(lb.const(1.0), lb), self._add(lb, 1.0)).e(self._backend.Unary.SQRT)
        return self._wrap(self._atan(self._div(lb, root)))

    def acos(self, x: Any, /) -> Array:
        lb = self._float_unary("acos", x)
        ratio = self._div(self._sub(lb.const(1.0), lb), self._add(lb, 1.0))
        return self._wrap(self._mul(self._atan(ratio.e(self._backend.Unary.SQRT)), 2.0))

    def _signbit(self, lb: LB) -> LB:
        bits = lb.cast(self._dt(f"int{rules.BITS[lb.dtype.name]}"), bitcast=True)
        return self._lt(bits, bits.const(0))

    def atan2(self, x1: Any, x2: Any, /) -> Array:
        """atan(small/big) in [0, pi/4], unfolded by octant; zeros and infinities as IEEE/numpy."""
        (y, x), name = self._operands("atan2", x1, x2)
        self._check_kind("atan2", name, FLOAT)
        ay, ax = self._abs(y), self._abs(x)
        steep = self._lt(ax, ay)
        t = self._atan(self._div(self._where(steep, ax, ay), self._where(steep, ay, ax)))
        both_inf = self._and(self._eq(ay, self._inf(ay)), self._eq(ax, self._inf(ax)))
        t = self._where(both_inf, t.const(math.pi / 4), t)
        t = self._where(self._and(self._eq(ay, ay.const(0.0)), self._eq(ax, ax.const(0.0))), t.const(0.0), t)
        t = self._where(steep, self._sub(t.const(math.pi / 2), t), t)
        t = self._where(self._signbit(x), self._sub(t.const(math.pi), t), t)
        return self._wrap(self._where(self._signbit(y), self._neg(t), t))

    # ------------------------------------------------------------ hyperbolic

    def _signed(self, x: LB, magnitude: LB) -> LB:
        return self._where(self._lt(x, x.const(0.0)), self._neg(magnitude), magnitude)

    def sinh(self, x: Any, /) -> Array:
        lb = self._float_unary("sinh", x)
        e = self._expm1(self._abs(lb))
        half = self._mul(self._add(e, self._div(e, self._add(e, 1.0))), 0.5)
        return self._wrap(self._signed(lb, self._where(self._eq(e, self._inf(e)), e, half)))

    def cosh(self, x: Any, /) -> Array:
        e = self._exp(self._abs(self._float_unary("cosh", x)))
        return self._wrap(self._add(self._mul(e, 0.5), self._div(e.const(0.5), e)))

    def tanh(self, x: Any, /) -> Array:
        lb = self._float_unary("tanh", x)
        e = self._expm1(self._mul(self._abs(lb), -2.0))
        return self._wrap(self._signed(lb, self._div(self._neg(e), self._add(e, 2.0))))

    def _large(self, lb: LB) -> LB:
        """|x| above which x*x no longer matters next to 1 (and may overflow)."""
        return self._lt(lb.const(2.0 ** (rules.mantissa_bits(lb.dtype.name) // 2 + 2)), self._abs(lb))

    def asinh(self, x: Any, /) -> Array:
        lb = self._float_unary("asinh", x)
        a = self._abs(lb)
        sq = self._mul(a, a)
        small = self._log1p(self._add(a, self._div(sq, self._add(self._add(sq, 1.0).e(self._backend.Unary.SQRT), 1.0))))
        return self._wrap(self._signed(lb, self._where(self._large(lb), self._add(self._log(a), LN2), small)))

    def acosh(self, x: Any, /) -> Array:
        lb = self._float_unary("acosh", x)
        d = self._sub(lb, 1.0)
        small = self._log1p(self._add(d, self._mul(d, self._add(d, 2.0)).e(self._backend.Unary.SQRT)))
        return self._wrap(self._where(self._large(lb), self._add(self._log(lb), LN2), small))

    def atanh(self, x: Any, /) -> Array:
        lb = self._float_unary("atanh", x)
        return self._wrap(self._mul(self._log1p(self._div(self._mul(lb, 2.0), self._sub(lb.const(1.0), lb))), 0.5))
