"""Op enums, the kernel AST that the scheduler hands to lowering, and the exact Python evaluator.

The evaluator (`exec_alu`) computes one op on Python scalars exactly as docs/semantics.md says a
kernel computes it: integers wrap, half floats compute in float32 and round per op, integer
division and modulo are total. It is a table keyed by op (`ALU_RULES`), one pure function per
rule, used by constant folding and by tests as the scalar ground truth.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

import numpy as np

from fast.dtype import FLOATS, ConstType, DType, dtypes


class OpEnum(Enum):
    """Base of the op enums: members hash by identity (C), not by name (Enum's Python `__hash__`),
    since ops key the dicts of every stage. Members are singletons, so this agrees with equality."""

    __hash__ = object.__hash__


class UnaryOps(OpEnum):
    EXP2 = auto(); LOG2 = auto(); CAST = auto(); BITCAST = auto(); SIN = auto(); SQRT = auto(); NEG = auto()  # noqa: E702


class BinaryOps(OpEnum):
    ADD = auto(); SUB = auto(); MUL = auto(); DIV = auto(); MAX = auto(); MOD = auto(); CMPLT = auto(); CMPEQ = auto(); XOR = auto()  # noqa: E501,E702


class TernaryOps(OpEnum):
    WHERE = auto(); MULACC = auto()  # noqa: E702


class ReduceOps(OpEnum):
    SUM = auto(); MAX = auto()  # noqa: E702


class LoadOps(OpEnum):
    EMPTY = auto(); CONST = auto(); COPY = auto(); CONTIGUOUS = auto(); CUSTOM = auto(); ASSIGN = auto(); VIEW = auto()  # noqa: E501,E702


class GatherOps(OpEnum):
    """`LazyBuffer.gather(indices, axis)`: out[..., i..., ...] = x[..., indices[i...], ...] along `axis`
    (arg: the axis; srcs: (x, indices)). Negative indices in [-n, -1] count from the end; any other
    index outside [0, n) is an IndexError raised when the gather is realized (docs/semantics.md)."""

    GATHER = auto()


class BufferOps(OpEnum):
    """Leaves and roots of a kernel AST: read a buffer, read a constant, write a buffer."""

    LOAD = auto(); CONST = auto(); STORE = auto()  # noqa: E702


class KernelOps(OpEnum):
    """The root of a kernel AST: SINK groups the kernel's STOREs."""

    SINK = auto()


# The members that graph building, scheduling and replay test per node, as module-level names (the
# same objects). Python 3.11 reads an Enum class attribute through the hook of EnumType.__getattr__,
# about ten times the cost of a global read, and those paths read dozens per node.
LOAD_EMPTY, LOAD_CONST, LOAD_COPY, LOAD_CONTIGUOUS = LoadOps.EMPTY, LoadOps.CONST, LoadOps.COPY, LoadOps.CONTIGUOUS
LOAD_CUSTOM, LOAD_ASSIGN, LOAD_VIEW = LoadOps.CUSTOM, LoadOps.ASSIGN, LoadOps.VIEW
BUFFER_LOAD, BUFFER_CONST, BUFFER_STORE, KERNEL_SINK = BufferOps.LOAD, BufferOps.CONST, BufferOps.STORE, KernelOps.SINK
UNARY_CAST, UNARY_BITCAST, UNARY_NEG = UnaryOps.CAST, UnaryOps.BITCAST, UnaryOps.NEG

Op = UnaryOps | BinaryOps | TernaryOps | ReduceOps | LoadOps | GatherOps | BufferOps | KernelOps
ElementwiseOps = UnaryOps | BinaryOps | TernaryOps


def not_a(where: str, value: object, expected: str) -> str:
    """The TypeError message for `value` given to `where` in place of `expected` (an op kind, a DType). An
    op enum member or DType of another package (`reference`'s given to `fast`) is named with the package
    it belongs to: each package has its own enums and dtypes, and equal names do not make them equal."""
    owner = type(value).__module__.split(".")[0]
    is_dtype = type(value).__name__ == "DType"
    if owner == "fast" or not (isinstance(value, Enum) or is_dtype):
        return f"{where}: {value!r} is not {expected}"
    name = getattr(value, "name", "?")
    name = f"dtypes.{name}" if is_dtype else f"{type(value).__name__}.{name}"
    return (f"{where}: {name} belongs to package {owner!r}, not 'fast' (each package has its own op enums and "
            f"dtypes): use fast.{name}")


@dataclass(frozen=True)
class MemBuffer:
    """Kernel argument `idx` (0 = first output), element dtype, and the view the kernel uses."""

    idx: int
    dtype: DType
    st: Any  # fast.shape.shapetracker.ShapeTracker (kept Any so this module stays import-light)


@dataclass(frozen=True)
class ConstBuffer:
    """A constant broadcast through a (possibly masked) view: invalid positions read 0."""

    val: ConstType
    dtype: DType
    st: Any


@dataclass(frozen=True, eq=False)
class LazyOp:
    """A node of a kernel AST. Frozen: lowering never mutates what the scheduler produced.

    arg by op: BufferOps.LOAD/STORE -> MemBuffer (a LOAD with one source is a *gathered* load: its
    view has one more axis than the kernel, the last, of size n, read at the position the source's int
    value gives, wrapped once if negative and clamped into [0, n) by lowering), BufferOps.CONST ->
    ConstBuffer, ReduceOps -> tuple of reduced axes, UnaryOps.CAST/BITCAST -> DType, otherwise None.
    Equality is structural; the hash is computed once per node (ASTs share subtrees, so a
    recomputed recursive hash would be exponential in the depth of a diamond-shaped graph).
    """

    op: Op
    src: tuple[LazyOp, ...] = ()
    arg: Any = None

    def __hash__(self) -> int:
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.op, tuple(hash(child) for child in self.src), self.arg))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        """Structural equality, comparing each pair of shared subtrees once (linear, not exponential)."""
        if not isinstance(other, LazyOp):
            return False
        pending, proven = [(self, other)], set()
        while pending:
            left, right = pending.pop()
            if left is right or (id(left), id(right)) in proven:
                continue
            if hash(left) != hash(right) or left.op != right.op or left.arg != right.arg \
                    or len(left.src) != len(right.src):
                return False
            proven.add((id(left), id(right)))
            pending.extend(zip(left.src, right.src, strict=True))
        return True

    def walk(self) -> list[LazyOp]:
        """Every node once, sources before users (topological order)."""
        seen: set[int] = set()
        order: list[LazyOp] = []
        stack: list[tuple[LazyOp, bool]] = [(self, False)]
        while stack:  # iterative depth-first post-order: any depth, same order as the recursive walk
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.src) if id(child) not in seen)
        return order


# ---------------------------------------------------------------- value normalisation

def wrap_int(value: int, dtype: DType) -> int:
    """Reduce an exact integer into `dtype`'s range, two's complement."""
    bits = 8 * dtype.itemsize
    value &= (1 << bits) - 1
    if not dtypes.is_unsigned(dtype) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def float32_to_bfloat16_bits(value: float) -> int:
    """Round a float (first to float32) to bfloat16, round-to-nearest-even; NaN -> quiet NaN."""
    bits = struct.unpack("<I", struct.pack("<f", _to_float32(value)))[0]
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
        return ((bits >> 16) & 0x8000) | 0x7FC0
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16) & 0xFFFF


def bfloat16_bits_to_float(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])


_FLOAT32 = struct.Struct("<f")


def _to_float32(value: float) -> float:
    """Round to float32, nearest-even (a C double -> float conversion); overflow gives +-inf."""
    try:
        return float(_FLOAT32.unpack(_FLOAT32.pack(value))[0])
    except OverflowError:  # finite but beyond float32: struct refuses, numpy rounds to inf
        with np.errstate(all="ignore"):
            return float(np.float32(value))


def round_float(value: float, dtype: DType) -> float:
    """Round a Python float to `dtype`; float64 -> half goes through float32 (documented)."""
    if dtype == dtypes.float64:
        return float(value)
    as32 = _to_float32(value)
    if dtype == dtypes.float32:
        return as32
    if dtype == dtypes.float16:
        with np.errstate(all="ignore"):
            return float(np.float16(np.float32(as32)))
    return bfloat16_bits_to_float(float32_to_bfloat16_bits(as32))


def normalize_const(value: ConstType, dtype: DType) -> ConstType:
    """The Python value a CONST of `dtype` stores: wrapped ints, rounded floats, bools.

    A value of another kind converts as CAST would; where CAST is unspecified (a NaN, inf or
    out-of-range float for an integer dtype) the constant is 0, deterministically.
    """
    if type(value) is float and (dtype is dtypes.float32 or dtype is dtypes.float64):  # the common case, fast
        return value if dtype is dtypes.float64 else _to_float32(value)
    if dtype == dtypes.bool:
        return bool(value)
    source = dtypes.float64 if isinstance(value, float) else dtypes.int64
    if isinstance(value, bool) or (isinstance(value, int) and not dtypes.is_int(dtype)):
        if isinstance(value, int) and not -(2**63) <= value < 2**64:
            return round_float(float(value), dtype)
        source = dtypes.uint64 if value >= 2**63 else dtypes.int64
    if isinstance(value, int) and dtypes.is_int(dtype):
        return wrap_int(value, dtype)
    converted = cast_const(value, source, dtype)
    return 0 if converted is None else converted


# ---------------------------------------------------------------- the ALU rules

def _int_div(a: int, b: int) -> int:
    if b == 0:
        return 0
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _int_mod(a: int, b: int) -> int:
    return a if b == 0 else a - _int_div(a, b) * b


def _float_max(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return a if a > b else b


def _compute_float(op: Op, dtype: DType, xs: tuple[float, ...]) -> float | bool:
    """One float op in the compute precision (float64 for float64, float32 otherwise), unrounded."""
    np_type = np.float64 if dtype == dtypes.float64 else np.float32
    a = [np_type(x) for x in xs]
    with np.errstate(all="ignore"):
        rule = _FLOAT_RULES[op]
        return rule(*a)  # type: ignore[no-any-return]


_FLOAT_RULES: dict[Op, Callable[..., Any]] = {
    UnaryOps.NEG: lambda a: float(-a), UnaryOps.EXP2: lambda a: float(np.exp2(a)),
    UnaryOps.LOG2: lambda a: float(np.log2(a)), UnaryOps.SIN: lambda a: float(np.sin(a)),
    UnaryOps.SQRT: lambda a: float(np.sqrt(a)),
    BinaryOps.ADD: lambda a, b: float(a + b), BinaryOps.SUB: lambda a, b: float(a - b),
    BinaryOps.MUL: lambda a, b: float(a * b), BinaryOps.DIV: lambda a, b: float(a / b),
    BinaryOps.MAX: lambda a, b: _float_max(float(a), float(b)),
    BinaryOps.CMPLT: lambda a, b: bool(a < b), BinaryOps.CMPEQ: lambda a, b: bool(a == b),
    TernaryOps.MULACC: lambda a, b, c: float(a * b + c),
}

_INT_RULES: dict[Op, Callable[..., int | bool]] = {
    UnaryOps.NEG: lambda a: -a,
    BinaryOps.ADD: lambda a, b: a + b, BinaryOps.SUB: lambda a, b: a - b,
    BinaryOps.MUL: lambda a, b: a * b, BinaryOps.DIV: _int_div, BinaryOps.MOD: _int_mod,
    BinaryOps.MAX: max, BinaryOps.XOR: lambda a, b: a ^ b,
    BinaryOps.CMPLT: lambda a, b: a < b, BinaryOps.CMPEQ: lambda a, b: a == b,
    TernaryOps.MULACC: lambda a, b, c: a * b + c,
}

_BOOL_RULES: dict[Op, Callable[..., bool]] = {
    BinaryOps.ADD: lambda a, b: a or b, BinaryOps.MUL: lambda a, b: a and b,
    BinaryOps.MAX: lambda a, b: a or b, BinaryOps.MOD: lambda a, b: a and not b,
    BinaryOps.XOR: lambda a, b: a != b, BinaryOps.CMPLT: lambda a, b: (not a) and b,
    BinaryOps.CMPEQ: lambda a, b: a == b, TernaryOps.MULACC: lambda a, b, c: (a and b) or c,
}

COMPARE_OPS = frozenset({BinaryOps.CMPLT, BinaryOps.CMPEQ})


def supports(op: Op, dtype: DType) -> bool:
    """Whether elementwise `op` is defined on operands of `dtype` (docs/semantics.md)."""
    if op in (TernaryOps.WHERE, UnaryOps.CAST, UnaryOps.BITCAST):
        return True
    if dtype == dtypes.bool:
        return op in _BOOL_RULES
    if dtype in FLOATS:
        return op in _FLOAT_RULES
    return op in _INT_RULES


def result_dtype(op: Op, dtype: DType) -> DType:
    """The dtype an elementwise op produces from operands of `dtype`."""
    return dtypes.bool if op is BinaryOps.CMPLT or op is BinaryOps.CMPEQ else dtype


def exec_alu(op: Op, dtype: DType, operands: tuple[ConstType, ...]) -> ConstType:
    """Evaluate elementwise `op` on operands of `dtype` exactly as a kernel would.

    For WHERE the first operand is the bool condition and `dtype` is the value dtype.
    Raises TypeError when the op is not defined for the dtype.
    """
    if op is TernaryOps.WHERE:
        return operands[1] if operands[0] else operands[2]
    if not supports(op, dtype):
        raise TypeError(f"{op.name} is not defined for dtype {dtype.name}")
    if dtype == dtypes.bool:
        return bool(_BOOL_RULES[op](*[bool(x) for x in operands]))
    if dtype in FLOATS:
        if op is TernaryOps.MULACC:  # never fused: the product is rounded to the dtype first
            product = exec_alu(BinaryOps.MUL, dtype, operands[:2])
            return exec_alu(BinaryOps.ADD, dtype, (product, operands[2]))
        value = _compute_float(op, dtype, tuple(float(x) for x in operands))
        return value if isinstance(value, bool) else round_float(value, dtype)
    exact = _INT_RULES[op](*[int(x) for x in operands])
    return exact if isinstance(exact, bool) else wrap_int(exact, dtype)


def cast_const(value: ConstType, from_dtype: DType, to_dtype: DType) -> ConstType | None:
    """CAST of a constant; None when the result is unspecified (float -> int out of range)."""
    if to_dtype == dtypes.bool:
        return bool(value != 0) if not (isinstance(value, float) and math.isnan(value)) else True
    if dtypes.is_int(to_dtype):
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                return None
            truncated = int(value)
            if not dtypes.min(to_dtype) <= truncated <= dtypes.max(to_dtype):
                return None
            return truncated
        return wrap_int(int(value), to_dtype)
    if dtypes.is_int(from_dtype):  # one correct rounding to float32/float64 (not via float64)
        wide = np.float64 if to_dtype == dtypes.float64 else np.float32
        return round_float(float(np.array([int(value)], dtype=from_dtype.np).astype(wide)[0]), to_dtype)
    return round_float(float(value), to_dtype)


def bitcast_const(value: ConstType, from_dtype: DType, to_dtype: DType) -> ConstType:
    """Reinterpret the bits of a scalar constant; itemsizes must match (checked by the caller)."""
    raw = np.array([value], dtype=from_dtype.np)
    if from_dtype == dtypes.bfloat16:
        raw = np.array([float32_to_bfloat16_bits(float(value))], dtype=np.uint16)
    out = raw.view(to_dtype.storage_np)[0]
    if to_dtype == dtypes.bfloat16:
        return bfloat16_bits_to_float(int(out))
    return out.item()  # type: ignore[no-any-return]
