"""Vector values for the LLVM renderer (fast/renderer/llvmir.py): `<N x T>` types, splat constants,
VECTORIZE/GEP and the vector ALU, each lane with exactly the scalar semantics of docs/semantics.md.

- types: a lane has the scalar value type (`i1` bool, `i16` half bit patterns, `float`, `double`,
  `iK`); a vector of N lanes is `<N x T>`. Constants are splats of the exact scalar literal.
- integers: `add/sub/mul/xor` without `nsw/nuw` wrap; NEG is `sub zeroinitializer, x`; MAX is
  `icmp sgt/ugt` + `select`. DIV/MOD divisors that are 0 (or -1 when signed) are replaced by 1
  before `sdiv/udiv/srem/urem` and the documented result is selected afterwards (the IR only gives
  CONST divisors that are neither, so LLVM folds the selects away; any divisor stays total).
- floats: `fadd/fsub/fmul/fdiv/fneg` without fast-math flags; MAX is NaN-propagating (`fcmp uno`
  on each operand, `fcmp ogt`, three selects, inline); MULACC is `fmul` then `fadd` (two
  roundings); CMPLT/CMPEQ are `fcmp olt/oeq` (false on NaN). Half-float lanes support only WHERE,
  BITCAST, memory, VECTORIZE and GEP (the builder never emits other vector ops on them).
- float -> int: lanes whose truncation does not fit the target (or NaN) are replaced by 0.0 with
  vector compares against bounds exact in the source type, then `fptosi/fptoui` (never poison).
- VECTORIZE builds on `zeroinitializer` (the renderer never writes `poison`/`undef`); GEP is
  `extractelement`.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable

import numpy as np

from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps

#: Emits `%tN = <expr>` and returns `%tN` (the kernel's `value`).
Emit = Callable[[str], str]

_HALVES = (dtypes.float16, dtypes.bfloat16)
_FLOAT_INFIX = {BinaryOps.ADD: "fadd", BinaryOps.SUB: "fsub", BinaryOps.MUL: "fmul", BinaryOps.DIV: "fdiv"}
_INT_INFIX = {BinaryOps.ADD: "add", BinaryOps.SUB: "sub", BinaryOps.MUL: "mul", BinaryOps.XOR: "xor"}
_BOOL_INFIX = {BinaryOps.ADD: "or", BinaryOps.MAX: "or", BinaryOps.MUL: "and", BinaryOps.XOR: "xor"}


def float_literal(value: float) -> str:
    """An exact LLVM float/double literal (the double's bits in hex; any NaN is the quiet NaN)."""
    value = math.nan if math.isnan(value) else value
    return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


def llvm_type(dtype: DType) -> str:
    """The LLVM value type of a scalar or vector dtype (`<N x T>` for N lanes)."""
    scalar = dtype.scalar()
    lane = "i1" if scalar == dtypes.bool else "float" if scalar == dtypes.float32 \
        else "double" if scalar == dtypes.float64 else f"i{8 * scalar.itemsize}"
    return lane if dtype.count == 1 else f"<{dtype.count} x {lane}>"


def splat(literal: str, dtype: DType) -> str:
    """The constant vector of `dtype` with the scalar `literal` in every lane."""
    lane = llvm_type(dtype.scalar())
    return "<" + ", ".join([f"{lane} {literal}"] * dtype.count) + ">"


def zero(dtype: DType) -> str:
    """The zero of `dtype`'s value type (`0` for integer scalars, `zeroinitializer` for vectors)."""
    return "0" if dtype.count == 1 else "zeroinitializer"


def _fits_exactly(value: int, dtype: DType) -> bool:
    """Whether the integer `value` is a float32/float64 value exactly."""
    return int(np.float32(value) if dtype.scalar() == dtypes.float32 else float(value)) == value


def int_bounds(source: DType, target: DType) -> tuple[tuple[str, float], tuple[str, float]]:
    """((predicate, bound), (predicate, bound)): the two ordered fcmp conditions (NaN fails both) that
    hold exactly when trunc(x) fits `target`, for x of float dtype `source`; bounds are exact there."""
    bits = 8 * target.scalar().itemsize
    if dtypes.is_unsigned(target):
        return ("ogt", -1.0), ("olt", 2.0**bits)
    below = -(2 ** (bits - 1)) - 1  # when it is not a value, nothing lies strictly between it and -2^(bits-1)
    low = ("ogt", float(below)) if _fits_exactly(below, source) else ("oge", -(2.0 ** (bits - 1)))
    return low, ("olt", 2.0 ** (bits - 1))


class VectorEmitter:
    """Vector instructions of one kernel, emitted through the kernel's `emit` (see `Emit`)."""

    def __init__(self, emit: Emit) -> None:
        self.value = emit

    # -- lanes
    def vectorize(self, dtype: DType, tokens: list[str]) -> str:
        """The vector of these scalar tokens (a splat when they are all the same token)."""
        t, lane = llvm_type(dtype), llvm_type(dtype.scalar())
        if len(set(tokens)) == 1:
            first = self.value(f"insertelement {t} zeroinitializer, {lane} {tokens[0]}, i32 0")
            return self.value(f"shufflevector {t} {first}, {t} zeroinitializer, <{dtype.count} x i32> zeroinitializer")
        vector = "zeroinitializer"
        for lane_number, token in enumerate(tokens):
            vector = self.value(f"insertelement {t} {vector}, {lane} {token}, i32 {lane_number}")
        return vector

    def shuffle(self, dtype: DType, tokens: list[str], lanes: tuple[int, ...]) -> str:
        """Lanes of two vectors of `dtype` (IROps.SHUFFLE; every mask lane is a constant)."""
        t, mask = llvm_type(dtype), ", ".join(f"i32 {lane}" for lane in lanes)
        return self.value(f"shufflevector {t} {tokens[0]}, {t} {tokens[1]}, <{len(lanes)} x i32> <{mask}>")

    def gep(self, dtype: DType, token: str, lane: int) -> str:
        return self.value(f"extractelement {llvm_type(dtype)} {token}, i32 {lane}")

    def select(self, condition: str, dtype: DType, a: str, b: str) -> str:
        cond = llvm_type(dtypes.bool.vec(dtype.count))
        return self.value(f"select {cond} {condition}, {llvm_type(dtype)} {a}, {llvm_type(dtype)} {b}")

    def invert(self, dtype: DType, token: str) -> str:
        """Logical not of a bool vector."""
        return self.value(f"xor {llvm_type(dtype)} {token}, {splat('true', dtype)}")

    # -- ALU
    def alu(self, op: object, src_types: list[DType], target: DType, a: list[str]) -> str:
        """One vector ALU instruction; `src_types` are the operand dtypes, `target` the result dtype."""
        dtype = src_types[-1]
        if op is TernaryOps.WHERE:
            return self.select(a[0], dtype, a[1], a[2])
        if op is UnaryOps.CAST:
            return self.cast(src_types[0], target, a[0])
        if op is UnaryOps.BITCAST:
            source_type, target_type = llvm_type(src_types[0]), llvm_type(target)
            return a[0] if source_type == target_type else self.value(f"bitcast {source_type} {a[0]} to {target_type}")
        if dtype.scalar() in _HALVES:
            raise ValueError(f"LLVM renderer: vector {getattr(op, 'name', op)} on {dtype.name} is not supported")
        if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ):
            return self.compare(op, dtype, a)
        if dtype.scalar() == dtypes.bool:
            return self.bool_alu(op, dtype, a)
        if dtypes.is_float(dtype):
            return self.float_alu(op, dtype, a)
        return self.int_alu(op, dtype, a)

    def compare(self, op: object, dtype: DType, a: list[str]) -> str:
        t = llvm_type(dtype)
        if dtype.scalar() == dtypes.bool and op is BinaryOps.CMPLT:  # False < True
            return self.value(f"and {t} {self.invert(dtype, a[0])}, {a[1]}")
        if dtypes.is_float(dtype):
            return self.value(f"fcmp {'olt' if op is BinaryOps.CMPLT else 'oeq'} {t} {a[0]}, {a[1]}")
        predicate = "eq" if op is BinaryOps.CMPEQ else "ult" if dtypes.is_unsigned(dtype) else "slt"
        return self.value(f"icmp {predicate} {t} {a[0]}, {a[1]}")

    def bool_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        t = llvm_type(dtype)
        if op in _BOOL_INFIX:
            return self.value(f"{_BOOL_INFIX[op]} {t} {a[0]}, {a[1]}")  # type: ignore[index]
        if op is BinaryOps.MOD:  # x and not y
            return self.value(f"and {t} {a[0]}, {self.invert(dtype, a[1])}")
        if op is TernaryOps.MULACC:
            return self.value(f"or {t} {self.value(f'and {t} {a[0]}, {a[1]}')}, {a[2]}")
        raise ValueError(f"LLVM renderer: {getattr(op, 'name', op)} is not defined for {dtype.name}")

    def int_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        t = llvm_type(dtype)
        if op in _INT_INFIX:
            return self.value(f"{_INT_INFIX[op]} {t} {a[0]}, {a[1]}")  # type: ignore[index]
        if op is UnaryOps.NEG:
            return self.value(f"sub {t} zeroinitializer, {a[0]}")
        if op is TernaryOps.MULACC:
            return self.value(f"add {t} {self.value(f'mul {t} {a[0]}, {a[1]}')}, {a[2]}")
        if op is BinaryOps.MAX:
            greater = self.value(f"icmp {'ugt' if dtypes.is_unsigned(dtype) else 'sgt'} {t} {a[0]}, {a[1]}")
            return self.select(greater, dtype, a[0], a[1])
        if op in (BinaryOps.DIV, BinaryOps.MOD):
            return self.divmod(op is BinaryOps.DIV, dtype, a[0], a[1])
        raise ValueError(f"LLVM renderer: {getattr(op, 'name', op)} is not defined for {dtype.name}")

    def divmod(self, is_div: bool, dtype: DType, a: str, b: str) -> str:
        """Total division: `x/0 = 0`, `x%0 = x`, `x/-1 = 0-x`, `x%-1 = 0` (selects fold for constants)."""
        t, signed = llvm_type(dtype), not dtypes.is_unsigned(dtype)
        is_zero = self.value(f"icmp eq {t} {b}, zeroinitializer")
        minus1 = self.value(f"icmp eq {t} {b}, {splat('-1', dtype)}") if signed else ""
        special = self.value(f"or {llvm_type(dtypes.bool.vec(dtype.count))} {is_zero}, {minus1}") if signed else is_zero
        safe = self.select(special, dtype, splat("1", dtype), b)
        instruction = ("sdiv" if signed else "udiv") if is_div else ("srem" if signed else "urem")
        result = self.value(f"{instruction} {t} {a}, {safe}")
        if signed:
            by_minus1 = self.value(f"sub {t} zeroinitializer, {a}") if is_div else "zeroinitializer"
            result = self.select(minus1, dtype, by_minus1, result)
        return self.select(is_zero, dtype, "zeroinitializer" if is_div else a, result)

    def float_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        t = llvm_type(dtype)
        if op in _FLOAT_INFIX:
            return self.value(f"{_FLOAT_INFIX[op]} {t} {a[0]}, {a[1]}")  # type: ignore[index]
        if op is UnaryOps.NEG:
            return self.value(f"fneg {t} {a[0]}")
        if op is TernaryOps.MULACC:
            return self.value(f"fadd {t} {self.value(f'fmul {t} {a[0]}, {a[1]}')}, {a[2]}")
        if op is BinaryOps.MAX:  # NaN if either is NaN, else the greater (never maxnum)
            a_nan, b_nan = self.value(f"fcmp uno {t} {a[0]}, {a[0]}"), self.value(f"fcmp uno {t} {a[1]}, {a[1]}")
            greater = self.select(self.value(f"fcmp ogt {t} {a[0]}, {a[1]}"), dtype, a[0], a[1])
            return self.select(a_nan, dtype, a[0], self.select(b_nan, dtype, a[1], greater))
        raise ValueError(f"LLVM renderer: vector {getattr(op, 'name', op)} is not supported for {dtype.name}")

    # -- casts
    def cast(self, source: DType, target: DType, token: str) -> str:
        """CAST lane by lane: bool, int and float32/float64 lanes (half-float lanes are not supported)."""
        if source.scalar() == target.scalar():
            return token
        if source.scalar() in _HALVES or target.scalar() in _HALVES:
            raise ValueError(f"LLVM renderer: vector CAST {source.name} -> {target.name} is not supported")
        s, t = llvm_type(source), llvm_type(target)
        if target.scalar() == dtypes.bool:
            compare = "fcmp une" if dtypes.is_float(source) else "icmp ne"  # NaN -> True
            return self.value(f"{compare} {s} {token}, zeroinitializer")
        if dtypes.is_float(source) and dtypes.is_float(target):
            return self.value(f"{'fpext' if target.scalar() == dtypes.float64 else 'fptrunc'} {s} {token} to {t}")
        if dtypes.is_float(source):
            return self.float_to_int(source, target, token)
        unsigned = source.scalar() == dtypes.bool or dtypes.is_unsigned(source)
        if dtypes.is_float(target):
            return self.value(f"{'uitofp' if unsigned else 'sitofp'} {s} {token} to {t}")
        if s == t:  # same width: the bits are the value
            return token
        if source.scalar().itemsize > target.scalar().itemsize:
            return self.value(f"trunc {s} {token} to {t}")
        return self.value(f"{'zext' if unsigned else 'sext'} {s} {token} to {t}")

    def float_to_int(self, source: DType, target: DType, token: str) -> str:
        """trunc(x) where it fits `target`, else 0 (NaN, ±inf, out of range): guarded, never poison."""
        s, conditions = llvm_type(source), int_bounds(source, target)
        above, below = (self.value(f"fcmp {predicate} {s} {token}, {splat(float_literal(bound), source)}")
                        for predicate, bound in conditions)
        fits = self.value(f"and {llvm_type(dtypes.bool.vec(source.count))} {above}, {below}")
        safe = self.select(fits, source, token, "zeroinitializer")
        convert = "fptoui" if dtypes.is_unsigned(target) else "fptosi"
        return self.value(f"{convert} {s} {safe} to {llvm_type(target)}")
