"""The 13 scalar dtypes, their numpy twins, value ranges and vector dtypes for code generation.

Invariants: every `DType` is frozen and hashable; two dtypes are equal exactly when all fields are
equal, so `float32.vec(4) != float32`. `count == 1` for scalars. `bfloat16` has no numpy dtype:
its buffers hold uint16 bit patterns and `to_numpy` widens them to float32.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy import dtype as NumpyDType  # noqa: N812  (DType.np shadows the module name)


@dataclass(frozen=True, order=True)
class DType:
    """A scalar (count == 1) or vector element type. `fmt` is the struct/numpy format character."""

    priority: int
    itemsize: int
    name: str
    fmt: str | None
    count: int = 1

    def __eq__(self, other: object) -> bool:
        """Field equality, with the identity of the shared dtype objects as a fast path."""
        if self is other:
            return True
        if not isinstance(other, DType):
            return NotImplemented
        return self.name == other.name and self.priority == other.priority and self.itemsize == other.itemsize \
            and self.fmt == other.fmt and self.count == other.count

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.priority, self.itemsize, self.name, self.fmt, self.count)))

    def __reduce__(self) -> tuple[type[DType], tuple[int, int, str, str | None, int]]:
        """Pickled by its fields: the cached hash of a str differs from process to process."""
        return (DType, (self.priority, self.itemsize, self.name, self.fmt, self.count))

    def __hash__(self) -> int:
        """Computed at creation (dtypes key many dicts and sets on hot paths); equal dtypes hash equal."""
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def vec(self, count: int) -> DType:
        """The vector dtype of `count` lanes of this scalar dtype."""
        if self.count != 1:
            raise TypeError(f"vec: {self.name} is already a vector dtype")
        if count == 1:
            return self
        return DType(self.priority, self.itemsize * count, f"{self.name}{count}", None, count)

    def scalar(self) -> DType:
        """The scalar dtype of one lane."""
        return self if self.count == 1 else _BY_NAME[self.name[: -len(str(self.count))]]

    @property
    def np(self) -> NumpyDType:
        """The numpy dtype `to_numpy` returns for this dtype (float32 for bfloat16)."""
        return np.dtype(np.float32 if self.name == "bfloat16" else self.fmt or "")

    @property
    def storage_np(self) -> NumpyDType:
        """The numpy dtype whose bytes equal this dtype's storage (uint16 for bfloat16)."""
        return np.dtype(np.uint16 if self.name == "bfloat16" else self.fmt or "")

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"


class dtypes:  # noqa: N801  (namespace mirrors the public API name)
    """Namespace of the scalar dtypes and helpers about them."""

    bool: Final = DType(0, 1, "bool", "?")
    int8: Final = DType(1, 1, "int8", "b")
    uint8: Final = DType(2, 1, "uint8", "B")
    int16: Final = DType(3, 2, "int16", "h")
    uint16: Final = DType(4, 2, "uint16", "H")
    int32: Final = DType(5, 4, "int32", "i")
    uint32: Final = DType(6, 4, "uint32", "I")
    int64: Final = DType(7, 8, "int64", "q")
    uint64: Final = DType(8, 8, "uint64", "Q")
    float16: Final = DType(9, 2, "float16", "e")
    bfloat16: Final = DType(10, 2, "bfloat16", None)
    float32: Final = DType(11, 4, "float32", "f")
    float64: Final = DType(12, 8, "float64", "d")
    default_float: Final = float32
    default_int: Final = int32

    @staticmethod
    def is_float(dt: DType) -> builtins.bool:
        return dt.scalar() in FLOATS

    @staticmethod
    def is_int(dt: DType) -> builtins.bool:
        return dt.scalar() in INTS

    @staticmethod
    def is_unsigned(dt: DType) -> builtins.bool:
        return dt.scalar() in UNSIGNED

    @staticmethod
    def is_bool(dt: DType) -> builtins.bool:
        return dt.scalar() == dtypes.bool

    @staticmethod
    def min(dt: DType) -> int | float | builtins.bool:
        """The lowest value of `dt` (-inf for floats, False for bool)."""
        if dtypes.is_float(dt):
            return -math.inf
        if dt == dtypes.bool:
            return False
        return 0 if dtypes.is_unsigned(dt) else -(1 << (8 * dt.itemsize - 1))

    @staticmethod
    def max(dt: DType) -> int | float | builtins.bool:
        """The highest value of `dt` (inf for floats, True for bool)."""
        if dtypes.is_float(dt):
            return math.inf
        if dt == dtypes.bool:
            return True
        bits = 8 * dt.itemsize
        return (1 << bits) - 1 if dtypes.is_unsigned(dt) else (1 << (bits - 1)) - 1

    @staticmethod
    def from_numpy(np_dtype: NumpyDType | type) -> DType:
        """The dtype matching a numpy dtype; TypeError for numpy dtypes we do not support."""
        name = np.dtype(np_dtype).name
        if name not in _BY_NAME or name == "bfloat16":
            raise TypeError(f"from_numpy: unsupported numpy dtype {name!r}")
        return _BY_NAME[name]

    @staticmethod
    def from_name(name: str) -> DType:
        if name not in _BY_NAME:
            raise TypeError(f"unknown dtype name {name!r}")
        return _BY_NAME[name]


ALL: Final[tuple[DType, ...]] = (
    dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
    dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
)
FLOATS: Final = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64})
UNSIGNED: Final = frozenset({dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
INTS: Final = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64}) | UNSIGNED
_BY_NAME: Final[dict[str, DType]] = {dt.name: dt for dt in ALL}
dtypes.all = ALL  # type: ignore[attr-defined]

ConstType = bool | int | float
