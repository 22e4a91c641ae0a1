"""Element-wise functions that map onto one or a few primitives: arithmetic, comparisons, logic, bits.

Every function promotes and broadcasts its operands (`_operands`), checks the dtype kinds the
standard allows (TypeError otherwise) and builds elementwise nodes only, so a chain of them is one
kernel. Integer results wrap (two's complement); bitwise AND/OR, which have no primitive, are
built from ADD, SUB, XOR and an unsigned halving (exact; see `_bit_and`). Values follow
docs/semantics.md: integer division by zero gives 0 (numpy gives 0 too, with a warning).
"""
from __future__ import annotations

from typing import Any

from fast.xp import _dtypes as rules
from fast.xp._array import Array
from fast.xp._backend import LB
from fast.xp._base import NamespaceBase

NUMERIC, INTEGRAL, FLOAT, ANY = "iuf", "iu", "f", "biuf"


class ElementwiseMixin(NamespaceBase):
    """Arithmetic, comparison, logical and bitwise functions."""

    def _binary(self, fname: str, x1: Any, x2: Any, op: Any, kinds: str) -> Array:
        (a, b), name = self._operands(fname, x1, x2)
        self._check_kind(fname, name, kinds)
        return self._wrap(a.e(op, b))

    def _unary(self, fname: str, x: Any, kinds: str) -> tuple[LB, str]:
        arr = self._array(fname, x)
        self._check_kind(fname, arr.dtype.name, kinds)
        return arr._lb, arr.dtype.name

    # ------------------------------------------------------------ arithmetic

    def add(self, x1: Any, x2: Any, /) -> Array:
        """x1 + x2 (bool: logical or, as numpy's add on bool)."""
        return self._binary("add", x1, x2, self._backend.Binary.ADD, ANY)

    def subtract(self, x1: Any, x2: Any, /) -> Array:
        return self._binary("subtract", x1, x2, self._backend.Binary.SUB, NUMERIC)

    def multiply(self, x1: Any, x2: Any, /) -> Array:
        return self._binary("multiply", x1, x2, self._backend.Binary.MUL, ANY)

    def divide(self, x1: Any, x2: Any, /) -> Array:
        """True division; integer operands are converted to the default float dtype first."""
        (a, b), name = self._operands("divide", x1, x2)
        self._check_kind("divide", name, NUMERIC)
        if rules.kind(name) != "f":
            a, b = self._cast(a, rules.DEFAULT_FLOAT), self._cast(b, rules.DEFAULT_FLOAT)
        return self._wrap(a.e(self._backend.Binary.DIV, b))

    def negative(self, x: Any, /) -> Array:
        lb, _ = self._unary("negative", x, NUMERIC)
        return self._wrap(lb.e(self._backend.Unary.NEG))

    def positive(self, x: Any, /) -> Array:
        lb, _ = self._unary("positive", x, NUMERIC)
        return self._wrap(lb)

    def square(self, x: Any, /) -> Array:
        lb, _ = self._unary("square", x, NUMERIC)
        return self._wrap(lb.e(self._backend.Binary.MUL, lb))

    def _abs(self, lb: LB) -> LB:
        if rules.kind(lb.dtype.name) == "u":
            return lb
        return self._where(self._lt(lb, lb.const(0)), lb.e(self._backend.Unary.NEG), lb)

    def abs(self, x: Any, /) -> Array:
        """|x|; the most negative integer stays itself (wraps, as numpy)."""
        lb, _ = self._unary("abs", x, NUMERIC)
        return self._wrap(self._abs(lb))

    def sign(self, x: Any, /) -> Array:
        """-1, 0 or 1 (floats: signed zero and NaN kept)."""
        lb, name = self._unary("sign", x, NUMERIC)
        one, zero = lb.const(1), lb.const(0)
        positive = self._where(self._lt(zero, lb), one, lb if rules.kind(name) == "f" else zero)
        if rules.kind(name) == "u":
            return self._wrap(positive)
        return self._wrap(self._where(self._lt(lb, zero), lb.const(-1), positive))

    def _max(self, a: LB, b: LB) -> LB:
        return a.e(self._backend.Binary.MAX, b)

    def _min(self, a: LB, b: LB) -> LB:
        """Elementwise minimum: through NEG for floats (NaN kept), through bitwise not for integers."""
        k = rules.kind(a.dtype.name)
        if k == "f":
            neg = self._backend.Unary.NEG
            return self._max(a.e(neg), b.e(neg)).e(neg)
        if k == "b":
            return self._and(a, b)
        return self._invert(self._max(self._invert(a), self._invert(b)))

    def maximum(self, x1: Any, x2: Any, /) -> Array:
        """The larger value; NaN if either is NaN."""
        (a, b), name = self._operands("maximum", x1, x2)
        self._check_kind("maximum", name, NUMERIC)
        return self._wrap(self._max(a, b))

    def minimum(self, x1: Any, x2: Any, /) -> Array:
        (a, b), name = self._operands("minimum", x1, x2)
        self._check_kind("minimum", name, NUMERIC)
        return self._wrap(self._min(a, b))

    def clip(self, x: Any, /, min: Any = None, max: Any = None) -> Array:  # noqa: A002
        """x limited to [min, max]; the result keeps x's dtype (NaN in x stays NaN)."""
        arr = self._array("clip", x)
        self._check_kind("clip", arr.dtype.name, NUMERIC)
        out = arr
        if min is not None:
            out = self._wrap(self._cast(self.maximum(out, min)._lb, arr.dtype.name))
        if max is not None:
            out = self._wrap(self._cast(self.minimum(out, max)._lb, arr.dtype.name))
        return out

    # ------------------------------------------------------------ comparisons and logic

    def equal(self, x1: Any, x2: Any, /) -> Array:
        return self._binary("equal", x1, x2, self._backend.Binary.CMPEQ, ANY)

    def not_equal(self, x1: Any, x2: Any, /) -> Array:
        (a, b), _ = self._operands("not_equal", x1, x2)
        return self._wrap(self._not(self._eq(a, b)))

    def less(self, x1: Any, x2: Any, /) -> Array:
        return self._binary("less", x1, x2, self._backend.Binary.CMPLT, NUMERIC)

    def greater(self, x1: Any, x2: Any, /) -> Array:
        return self._binary("greater", x2, x1, self._backend.Binary.CMPLT, NUMERIC)

    def less_equal(self, x1: Any, x2: Any, /) -> Array:
        (a, b), name = self._operands("less_equal", x1, x2)
        self._check_kind("less_equal", name, NUMERIC)
        return self._wrap(self._or(self._lt(a, b), self._eq(a, b)))

    def greater_equal(self, x1: Any, x2: Any, /) -> Array:
        return self.less_equal(x2, x1)

    def _logical(self, fname: str, x1: Any, x2: Any) -> tuple[LB, LB]:
        (a, b), _ = self._operands(fname, x1, x2)
        to_bool = [lb if lb.dtype.name == "bool" else self._not(self._eq(lb, lb.const(0))) for lb in (a, b)]
        return to_bool[0], to_bool[1]

    def logical_and(self, x1: Any, x2: Any, /) -> Array:
        return self._wrap(self._and(*self._logical("logical_and", x1, x2)))

    def logical_or(self, x1: Any, x2: Any, /) -> Array:
        return self._wrap(self._or(*self._logical("logical_or", x1, x2)))

    def logical_xor(self, x1: Any, x2: Any, /) -> Array:
        a, b = self._logical("logical_xor", x1, x2)
        return self._wrap(a.e(self._backend.Binary.XOR, b))

    def logical_not(self, x: Any, /) -> Array:
        lb = self._array("logical_not", x)._lb
        return self._wrap(self._eq(lb, lb.const(0)) if lb.dtype.name != "bool" else self._not(lb))

    def isnan(self, x: Any, /) -> Array:
        lb = self._array("isnan", x)._lb
        return self._wrap(self._isnan(lb) if rules.kind(lb.dtype.name) == "f" else self._false(lb))

    def _false(self, lb: LB) -> LB:
        return self._eq(lb, lb).const(False)

    def isinf(self, x: Any, /) -> Array:
        lb = self._array("isinf", x)._lb
        if rules.kind(lb.dtype.name) != "f":
            return self._wrap(self._false(lb))
        return self._wrap(self._eq(self._abs(lb), self._inf(lb)))

    def isfinite(self, x: Any, /) -> Array:
        lb = self._array("isfinite", x)._lb
        if rules.kind(lb.dtype.name) != "f":
            return self._wrap(self._not(self._false(lb)))
        return self._wrap(self._lt(self._abs(lb), self._inf(lb)))

    def signbit(self, x: Any, /) -> Array:
        """The sign bit (floats: read through a bitcast, so -0.0 and negative NaNs are True)."""
        lb, name = self._unary("signbit", x, NUMERIC)
        if rules.kind(name) == "f":
            lb = lb.cast(self._dt(f"int{rules.BITS[name]}"), bitcast=True)
        return self._wrap(self._lt(lb, lb.const(0)))

    def copysign(self, x1: Any, x2: Any, /) -> Array:
        (a, b), name = self._operands("copysign", x1, x2)
        self._check_kind("copysign", name, FLOAT)
        bits = self._dt(f"int{rules.BITS[name]}")
        sa, sb = (self._lt(v.cast(bits, bitcast=True), v.cast(bits, bitcast=True).const(0)) for v in (a, b))
        return self._wrap(self._where(sa.e(self._backend.Binary.XOR, sb), a.e(self._backend.Unary.NEG), a))

    # ------------------------------------------------------------ bitwise

    def _invert(self, lb: LB) -> LB:
        if lb.dtype.name == "bool":
            return self._not(lb)
        return lb.e(self._backend.Binary.XOR, lb.const(-1 if rules.kind(lb.dtype.name) == "i" else
                                                        rules.int_range(lb.dtype.name)[1]))

    def _bit_and(self, a: LB, b: LB) -> LB:
        """a & b without an AND primitive: a + b == (a ^ b) + 2*(a & b) exactly, so modulo 2**bits
        (a + b - (a ^ b)) / 2, as unsigned, is a & b without its top bit; the top bit is added back
        when both operands have it."""
        name = a.dtype.name
        if name == "bool":
            return self._and(a, b)
        unsigned = "u" + name.lstrip("u")
        ua, ub = self._cast(a, unsigned), self._cast(b, unsigned)
        binary = self._backend.Binary
        twice = ua.e(binary.ADD, ub).e(binary.SUB, ua.e(binary.XOR, ub))
        low = twice.e(binary.DIV, twice.const(2))
        top_value = 1 << (rules.BITS[name] - 1)
        tops = [self._lt(v.const(top_value - 1), v) for v in (ua, ub)]
        result = self._where(self._and(*tops), low.e(binary.ADD, low.const(top_value)), low)
        return self._cast(result, name)

    def bitwise_and(self, x1: Any, x2: Any, /) -> Array:
        (a, b), name = self._operands("bitwise_and", x1, x2)
        self._check_kind("bitwise_and", name, "biu")
        return self._wrap(self._bit_and(a, b))

    def bitwise_or(self, x1: Any, x2: Any, /) -> Array:
        """a | b == (a ^ b) ^ (a & b) (the two parts share no bit)."""
        (a, b), name = self._operands("bitwise_or", x1, x2)
        self._check_kind("bitwise_or", name, "biu")
        if name == "bool":
            return self._wrap(self._or(a, b))
        xor = self._backend.Binary.XOR
        return self._wrap(a.e(xor, b).e(xor, self._bit_and(a, b)))

    def bitwise_xor(self, x1: Any, x2: Any, /) -> Array:
        return self._binary("bitwise_xor", x1, x2, self._backend.Binary.XOR, "biu")

    def bitwise_invert(self, x: Any, /) -> Array:
        lb, _ = self._unary("bitwise_invert", x, "biu")
        return self._wrap(self._invert(lb))
