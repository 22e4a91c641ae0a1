"""Dtype kinds, the type-promotion lattice and finfo/iinfo, by dtype *name* (backend-free).

The promotion table is the Array API standard's (2023.12) for the dtypes it defines, extended to
`float16`/`bfloat16` (a half float promotes to the wider float; `float16` with `bfloat16` gives
`float32`). Mixed kinds (bool with a number, an integer with a float) and `uint64` with a signed
integer have no entry: `promote` raises TypeError for them, as the standard leaves them undefined.
Invariant: `promote(a, b) == promote(b, a)` and `promote(a, a) == a`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
BITS = {"bool": 8, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64,
        "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
DEFAULT_FLOAT, DEFAULT_INT, DEFAULT_INDEX = "float32", "int32", "int32"


def kind(name: str) -> str:
    """'b' bool, 'i' signed, 'u' unsigned, 'f' float."""
    if name == "bool":
        return "b"
    return "i" if name in SIGNED else "u" if name in UNSIGNED else "f"


def _promote_ints(a: str, b: str) -> str | None:
    if kind(a) == kind(b):
        return a if BITS[a] >= BITS[b] else b
    signed, unsigned = (a, b) if kind(a) == "i" else (b, a)
    if BITS[unsigned] == 64:
        return None
    wide = max(BITS[signed], 2 * BITS[unsigned])
    return f"int{wide}"


def promote(a: str, b: str) -> str:
    """The result dtype name of a binary operation on arrays of dtypes `a` and `b`."""
    if a == b:
        return a
    ka, kb = kind(a), kind(b)
    result: str | None = None
    if ka in "iu" and kb in "iu":
        result = _promote_ints(a, b)
    elif ka == "f" and kb == "f":
        result = "float32" if {a, b} == {"float16", "bfloat16"} else (a if BITS[a] >= BITS[b] else b)
    if result is None:
        raise TypeError(f"result_type: no promotion between {a} and {b} (mixed kinds are undefined in the "
                        "Array API standard; convert one operand with astype)")
    return result


def can_cast(a: str, b: str) -> bool:
    """Whether `a` casts to `b` by promotion (the standard's can_cast): promote(a, b) == b."""
    try:
        return promote(a, b) == b
    except TypeError:
        return False


def scalar_fits(value: bool | int | float, name: str) -> bool:
    """Whether a Python scalar may join an array of dtype `name` (the standard's scalar rules):
    bool with bool only; int with integer or float arrays; float with float arrays."""
    k = kind(name)
    if isinstance(value, bool):
        return k == "b"
    if isinstance(value, int):
        return k in "iuf"
    return k == "f"


def int_range(name: str) -> tuple[int, int]:
    bits = BITS[name]
    return (0, (1 << bits) - 1) if kind(name) == "u" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


@dataclass(frozen=True)
class FInfo:
    """Machine limits of a float dtype (the standard's finfo object)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: object


@dataclass(frozen=True)
class IInfo:
    """Range of an integer dtype (the standard's iinfo object)."""

    bits: int
    max: int
    min: int
    dtype: object


_MANTISSA = {"float16": (10, 15), "bfloat16": (7, 127), "float32": (23, 127), "float64": (52, 1023)}


def finfo(name: str, dtype: object) -> FInfo:
    mant, emax = _MANTISSA[name]
    biggest = (2.0 - 2.0 ** -mant) * 2.0 ** emax
    return FInfo(BITS[name], 2.0 ** -mant, biggest, -biggest, 2.0 ** (1 - emax), dtype)


def iinfo(name: str, dtype: object) -> IInfo:
    low, high = int_range(name)
    return IInfo(BITS[name], high, low, dtype)


KINDS = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu", "real floating": "f",
         "complex floating": "", "numeric": "iuf"}


def mantissa_bits(name: str) -> int:
    """Bits of a float dtype's significand (without the implicit one): above 2**this, every value is whole."""
    return _MANTISSA[name][0]


def max_exact_int(name: str) -> float:
    """2**(mantissa+1): every float of `name` with this magnitude or more is an integer."""
    return math.ldexp(1.0, _MANTISSA[name][0])
