"""Float arithmetic built as IR values: the pieces that the transcendental expansions share
(fast/codegen/transcendental.py: EXP2, LOG2, float32 SIN; fast/codegen/sine.py: float64 SIN).

`_V` wraps an IR value so expansions read as arithmetic; `_Fmt` holds one float format's bit layout
and polynomial coefficients; `_two_sum`, `_rint`, `_cody_waite` and `_kernels` are the exact sums, the
rounding, the Cody-Waite reduction and the sin/cos kernels of transcendental.py's docstring.

Invariants:
- Only CONST and the ordinary ALU ops are emitted, each product and sum rounded on its own (no FMA),
  except through `_V.fma` and `_poly_fused`, used only where the renderer fuses multiply-adds.
- Every constant and cast target has the lanes of the value it meets (`_like`), so the same code
  serves scalars and vectors.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from fast.codegen.builder import IRBuilder
from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps

Num = int | float
F32, F64, I64 = dtypes.float32, dtypes.float64, dtypes.int64
_TWO_OVER_PI = int(
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea09d1921c"
    "fe1deb1cb129a73ee88235f52ebb4484e99c7026b45f7e413991d639835339f49c845f8bbdf9283b1ff897ffde05980f", 16)
_TWO_OVER_PI_BITS = 768  # 2/pi = _TWO_OVER_PI * 2^-768 (truncated)
_PI_OVER_2 = int("6487ed5110b4611a62633145c06e0e68948127044533e63a0105df531d89cd91", 16)  # * 2^-254
_INV_LN2 = int("5c551d94ae0bf85ddf43ff68348e9f44", 16)  # 1/ln(2) * 2^126 (truncated)
MAGIC52 = 1.5 * 2.0**52  # x + MAGIC52 - MAGIC52 == rint(x) for |x| < 2^51


def _like(dt: DType, scalar: DType) -> DType:
    """`scalar` with as many lanes as `dt`."""
    return scalar.vec(dt.count)


def _bits(value: float, scalar: DType) -> int:
    """The IEEE bit pattern of `value` in float32/float64."""
    fmt = "<f" if scalar == F32 else "<d"
    return int.from_bytes(struct.pack(fmt, value), "little")


def _parts(value: int, scale: int, widths: tuple[int, ...]) -> list[float]:
    """value * 2^-scale as floats of `widths` significant bits each (truncated), then the rest rounded."""
    out, rest = [], value
    for width in widths:
        drop = max(rest.bit_length() - width, 0)
        head = (rest >> drop) << drop
        out.append(math.ldexp(head, -scale))
        rest -= head
    return [*out, math.ldexp(rest, -scale)]


class _V:
    """A value being built; arithmetic with a Python number makes a constant of the value's dtype."""

    __slots__ = ("b", "ref")

    def __init__(self, b: IRBuilder, ref: int) -> None:
        self.b, self.ref = b, ref

    @property
    def dtype(self) -> DType:
        return self.b.dtype(self.ref)

    def _ref(self, other: _V | Num) -> int:
        return other.ref if isinstance(other, _V) else self.b.const(other, self.dtype)

    def op(self, op: BinaryOps | UnaryOps, *others: _V | Num) -> _V:
        return _V(self.b, self.b.alu(op, (self.ref, *(self._ref(o) for o in others))))

    def __add__(self, o: _V | Num) -> _V: return self.op(BinaryOps.ADD, o)  # noqa: E704
    def __radd__(self, o: Num) -> _V: return self.op(BinaryOps.ADD, o)  # noqa: E704
    def __sub__(self, o: _V | Num) -> _V: return self.op(BinaryOps.SUB, o)  # noqa: E704
    def __rsub__(self, o: Num) -> _V: return _V(self.b, self._ref(o)).op(BinaryOps.SUB, self)  # noqa: E704
    def __mul__(self, o: _V | Num) -> _V: return self.op(BinaryOps.MUL, o)  # noqa: E704
    def __rmul__(self, o: Num) -> _V: return self.op(BinaryOps.MUL, o)  # noqa: E704
    def __neg__(self) -> _V: return self.op(UnaryOps.NEG)  # noqa: E704
    def __truediv__(self, o: _V | Num) -> _V: return self.op(BinaryOps.DIV, o)  # noqa: E704
    def div(self, o: _V | Num) -> _V: return self.op(BinaryOps.DIV, o)  # noqa: E704
    def mod(self, o: _V | Num) -> _V: return self.op(BinaryOps.MOD, o)  # noqa: E704
    def max(self, o: _V | Num) -> _V: return self.op(BinaryOps.MAX, o)  # noqa: E704
    def lt(self, o: _V | Num) -> _V: return self.op(BinaryOps.CMPLT, o)  # noqa: E704
    def eq(self, o: _V | Num) -> _V: return self.op(BinaryOps.CMPEQ, o)  # noqa: E704

    def cast(self, scalar: DType, bitcast: bool = False) -> _V:
        op = UnaryOps.BITCAST if bitcast else UnaryOps.CAST
        return _V(self.b, self.b.alu(op, (self.ref,), _like(self.dtype, scalar)))

    def fma(self, a: _V | Num, b: _V | Num) -> _V:
        """self*a + b rounded once (only where the renderer has fused multiply-add)."""
        return _V(self.b, self.b.fma(self.ref, self._ref(a), self._ref(b)))

    def where(self, a: _V | Num, b: _V | Num) -> _V:
        """self ? a : b (self is bool; one of a, b must be a value)."""
        like = a if isinstance(a, _V) else b
        assert isinstance(like, _V)
        return _V(self.b, self.b.alu(TernaryOps.WHERE, (self.ref, like._ref(a), like._ref(b))))


def _poly(x: _V, coefs: tuple[float, ...]) -> _V:
    """coefs[0] + coefs[1]*x + ... by Horner's rule (each step rounded twice)."""
    acc = x * coefs[-1]
    for index, coef in enumerate(reversed(coefs[:-1])):
        acc = acc + coef if index == len(coefs) - 2 else (acc + coef) * x
    return acc


def _poly_fused(x: _V, coefs: tuple[float, ...]) -> _V:
    """The same polynomial by Horner's rule with one rounding per step (fused multiply-adds)."""
    acc = x.fma(coefs[-1], coefs[-2])
    for coef in reversed(coefs[:-2]):
        acc = acc.fma(x, coef)
    return acc


def _two_sum(a: _V, b: _V) -> tuple[_V, _V]:
    """Knuth's TwoSum: s + e == a + b exactly, s = fl(a + b)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@dataclass(frozen=True)
class _Fmt:
    """One binary float format: its dtypes, bit layout and polynomial coefficients."""

    fdt: DType
    idt: DType
    udt: DType
    mant: int  # explicit mantissa bits
    bias: int
    hi_cut: int  # LOG2: low mantissa bits cleared in hi, so hi * IVLN2_HI is exact
    exp2: tuple[float, ...]  # 2^f - 1 = f*(c0 + c1 f + ...), |f| <= 1/2
    log: tuple[float, ...]  # R(z) = z*(c0 + c1 z + ...), z = s^2 <= 0.0295
    sin: tuple[float, ...]  # sin r = r + r^3 (c0 + c1 z + ...), z = r^2, |r| <= pi/4
    cos: tuple[float, ...]  # cos r = 1 - z/2 + z^2 (c0 + c1 z + ...)

    def ivln2(self) -> tuple[float, float]:
        """1/ln 2 as hi (mant + 1 - significant bits of LOG2's hi) + lo."""
        hi, lo = _parts(_INV_LN2, 126, (self.hi_cut,))
        return hi, lo


_F32 = _Fmt(F32, dtypes.int32, dtypes.uint32, 23, 127, 12,
            exp2=(0.6931472149680303, 0.24022652782875437, 0.0555031055100945, 0.009617692975201408,
                  0.0013406643900838548, 0.00015594677424896907),
            log=(0.6666677652678388, 0.3997752166403923, 0.298723104021928),
            sin=(-0.16666654609479786, 0.008332160757395563, -0.00019515282572766949),
            cos=(0.041666645682857356, -0.0013887316248460066, 2.4433156367816137e-05))
_F64 = _Fmt(F64, I64, dtypes.uint64, 52, 1023, 32,
            exp2=(0.6931471805599457, 0.24022650695910097, 0.05550410866479039, 0.009618129107607003,
                  0.0013333558153440024, 0.0001540353044157231, 1.525272738514155e-05, 1.3215442675226286e-06,
                  1.0180647679305334e-07, 7.0725704316002774e-09, 4.0780691131926105e-10),
            log=(0.6666666666666735, 0.3999999999941313, 0.28571428742766136, 0.22222198531128903,
                 0.1818356666915628, 0.1531398678066789, 0.14796624383219917),
            sin=(-0.1666666666666663, 0.008333333333322118, -0.00019841269829589455, 2.7557313621355077e-06,
                 -2.505074775787929e-08, 1.5896229859133824e-10),
            cos=(0.041666666666666595, -0.0013888888888873056, 2.480158728885162e-05, -2.7557314179271604e-07,
                 2.0875700838454965e-09, -1.1358536333902049e-11))


def _kernels(n: _V, hi: _V, lo: _V, fm: _Fmt) -> _V:
    """sin(n*pi/2 + hi + lo) for integer n in [0, 4) and |hi + lo| <= pi/4 (lo tiny)."""
    z = hi * hi
    sin = hi + ((z * hi) * _poly(z, fm.sin) + lo)
    hz = z * 0.5
    w = 1.0 - hz
    cos = w + (((1.0 - w) - hz) + ((z * z) * _poly(z, fm.cos) - hi * lo))
    res = n.mod(2).eq(1).where(cos, sin)
    return n.lt(2).where(res, -res)


def _rint(x: _V) -> tuple[_V, _V]:
    """(rint(x), rint(x) mod 4 as int64 in [0, 4)) for float64 |x| < 2^51."""
    t = x + MAGIC52
    return t - MAGIC52, t.cast(I64, bitcast=True).mod(4)


def _cody_waite(x: _V, widths: tuple[int, ...]) -> tuple[_V, _V, _V]:
    """(n mod 4, r_hi, r_lo), x = n*pi/2 + r, for float64 |x| < 2^(53 - widths[0]); pi/2 in parts."""
    nf, n = _rint(x * (2 / math.pi))
    head, *parts = _parts(_PI_OVER_2, 254, widths)
    hi, lo = x - nf * head, None  # exact: n*head is exact and close to x
    for part in parts[:-1]:
        hi, err = _two_sum(hi, -(nf * part))
        lo = err if lo is None else lo + err
    tail = -(nf * parts[-1])
    hi, err = _two_sum(hi, tail if lo is None else lo + tail)
    return n, hi, err
