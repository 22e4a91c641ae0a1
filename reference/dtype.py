"""Dtypes, bit-exact bfloat16 emulation and constant normalisation.

Every buffer stores its values in a numpy array of the dtype's *storage* type: the numpy type of the
same name, except ``bfloat16``, which is stored as ``uint16`` bit patterns.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]
ConstType = bool | int | float
NpDType = np.dtype[Any]


@dataclass(frozen=True)
class DType:
    """A dtype: ``name``, ``itemsize`` in bytes and ``kind`` ('b' bool, 'i' signed, 'u' unsigned, 'f' float)."""

    name: str
    itemsize: int
    kind: str

    @property
    def np(self) -> NpDType:
        """The numpy dtype of ``to_numpy`` results (float32 for bfloat16)."""
        return np.dtype("float32" if self.name == "bfloat16" else self.name)

    @property
    def storage(self) -> NpDType:
        """The numpy dtype of the stored array (uint16 bit patterns for bfloat16)."""
        return np.dtype("uint16" if self.name == "bfloat16" else self.name)

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"


class dtypes:  # noqa: N801 (the public name)
    """Namespace of the 13 dtypes and helpers about them."""

    bool = DType("bool", 1, "b")
    int8, int16, int32, int64 = (DType(f"int{8 * n}", n, "i") for n in (1, 2, 4, 8))
    uint8, uint16, uint32, uint64 = (DType(f"uint{8 * n}", n, "u") for n in (1, 2, 4, 8))
    float16 = DType("float16", 2, "f")
    bfloat16 = DType("bfloat16", 2, "f")
    float32 = DType("float32", 4, "f")
    float64 = DType("float64", 8, "f")
    default_float = float32
    default_int = int32
    all: tuple[DType, ...] = (bool, int8, uint8, int16, uint16, int32, uint32, int64, uint64,
                              float16, bfloat16, float32, float64)

    @staticmethod
    def is_float(dt: DType) -> builtins.bool:
        """True for the four float dtypes."""
        return dt.kind == "f"

    @staticmethod
    def is_int(dt: DType) -> builtins.bool:
        """True for signed and unsigned integers (not bool)."""
        return dt.kind in "iu"

    @staticmethod
    def is_unsigned(dt: DType) -> builtins.bool:
        """True for the unsigned integers."""
        return dt.kind == "u"

    @staticmethod
    def min(dt: DType) -> ConstType:
        """Lowest value: False, the integer minimum, or -inf."""
        return False if dt.kind == "b" else -math.inf if dt.kind == "f" else int(np.iinfo(dt.storage).min)

    @staticmethod
    def max(dt: DType) -> ConstType:
        """Highest value: True, the integer maximum, or inf."""
        return True if dt.kind == "b" else math.inf if dt.kind == "f" else int(np.iinfo(dt.storage).max)

    @staticmethod
    def from_numpy(np_dtype: Any) -> DType:
        """The DType of a numpy dtype; TypeError for unsupported ones (complex, object, ...)."""
        name = np.dtype(np_dtype).name
        for dt in dtypes.all:
            if dt.name == name and dt is not dtypes.bfloat16:
                return dt
        raise TypeError(f"from_numpy: unsupported numpy dtype {name!r}")


def bf16_to_f32(bits: Array) -> Array:
    """bfloat16 bit patterns (uint16) to float32, exactly (shift left by 16)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x: Array) -> Array:
    """float32 to bfloat16 bit patterns: round to nearest even; NaN becomes 0x7fc0 with its sign."""
    u = np.uint64  # explicit uint64 constants keep every step in uint64 (numpy 1.x casting rules)
    bits = np.array(x, dtype=np.float32, order="C").view(np.uint32).astype(u)
    rounded = (bits + u(0x7FFF) + ((bits >> u(16)) & u(1))) >> u(16)
    quiet_nan = ((bits >> u(16)) & u(0x8000)) | u(0x7FC0)
    return np.where(np.isnan(x), quiet_nan, rounded).astype(np.uint16)


def to_compute(arr: Array, dt: DType) -> Array:
    """Stored values in the precision ops compute in: float32 for half dtypes, else unchanged."""
    if dt == dtypes.bfloat16:
        return bf16_to_f32(arr)
    return arr.astype(np.float32) if dt == dtypes.float16 else arr


def from_float(x: Array, dt: DType) -> Array:
    """Round a float32/float64 array to float dtype ``dt`` (RNE); float64 reaches half via float32."""
    with np.errstate(all="ignore"):
        if dt == dtypes.float64:
            return x.astype(np.float64, copy=False)  # (no copy of a value already of the dtype)
        x32 = x.astype(np.float32, copy=False)
        if dt == dtypes.bfloat16:
            return f32_to_bf16(x32)
        return x32.astype(dt.storage, copy=False)


def wrap_int(v: int, dt: DType) -> int:
    """Reduce a Python int modulo 2**bits into ``dt``'s range (two's complement)."""
    bits = 8 * dt.itemsize
    v &= (1 << bits) - 1
    return v - (1 << bits) if dt.kind == "i" and v >> (bits - 1) else v


def int_to_float(v: int, dt: DType) -> float:
    """A Python int rounded to float dtype ``dt`` the way an int->float CAST rounds it (RNE)."""
    if not -(1 << 63) <= v < (1 << 64):  # beyond 64 bits: via float64 (double rounding)
        try:
            return float_const(float(v), dt)
        except OverflowError:
            return float_const(math.inf if v > 0 else -math.inf, dt)
    src = np.array([v], dtype=np.int64 if v < (1 << 63) else np.uint64)
    x = src.astype(np.float64 if dt == dtypes.float64 else np.float32)
    return float(to_compute(from_float(x, dt), dt)[0])


def float_const(v: float, dt: DType) -> float:
    """A Python float rounded to float dtype ``dt`` (float64 -> float32 -> half for halves)."""
    return float(to_compute(from_float(np.array([v], dtype=np.float64), dt), dt)[0])


def as_const(val: Any, dt: DType) -> ConstType:
    """Normalise a Python constant to ``dt``'s Python value (ints wrapped, floats rounded).

    Other kinds convert as CAST does (a float for an integer dtype truncates toward zero).
    """
    if isinstance(val, np.generic):
        val = val.item()
    if not isinstance(val, (bool, int, float)):
        raise TypeError(f"const: value {val!r} is not a bool, int or float")
    if dt.kind == "b":
        return bool(val)
    if dt.kind == "f":
        return int_to_float(val, dt) if isinstance(val, int) else float_const(val, dt)
    if isinstance(val, float):  # like CAST: truncate; NaN, inf and out of range give 0 (unspecified)
        val = int(val) if math.isfinite(val) and dtypes.min(dt) <= int(val) <= dtypes.max(dt) else 0
    return wrap_int(int(val), dt)
