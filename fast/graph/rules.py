"""Pure rewrite rules of the graph layer: constant folding, algebraic identities, reduce folding and
the split-reduce plan. No LazyBuffer in here: every rule takes plain values and returns a decision,
so each is testable alone; `fast/graph/node.py` applies the decisions to the graph.

Conventions: an operand's "constant" is its value when it is an unmasked, unrealized CONST, else None
(a constant's value is never None). Values are already normalised to the operand dtype
(`ops.normalize_const`), so `-1` of an unsigned dtype never appears as -1.

Invariants of every rule: the rewritten graph computes bit-for-bit what the kernel would compute for
the original graph (docs/semantics.md), except the sign of a zero (-0.0 vs 0.0, which conformance
treats as equal); no rule ever raises for a value (division by zero, sin(inf), ...).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from fast.dtype import ConstType, DType, dtypes
from fast.ops import BinaryOps, Op, ReduceOps, bitcast_const, cast_const, exec_alu, round_float, wrap_int

Consts = tuple[ConstType | None, ...]


@dataclass(frozen=True)
class Fold:
    """A rewrite decision for an elementwise op.

    kind: "const" (the result is the constant `value`, of the op's result dtype), "operand" (the
    result is operand `index` itself), "neg" (NEG of operand `index`), "mul_const" (operand `index`
    times the constant `value`).
    """

    kind: str
    index: int = 0
    value: ConstType = 0


def _is(value: ConstType | None, target: int) -> bool:
    """True when the constant equals `target` (bools compare as 0/1, -0.0 equals 0)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value == target


def fold_all_constants(op: Op, dtype: DType, consts: Consts) -> Fold | None:
    """Every operand a constant: the constant the kernel would compute (exec_alu wraps/rounds)."""
    if not consts or None in consts:
        return None
    return Fold("const", value=exec_alu(op, dtype, consts))  # type: ignore[arg-type]


def _fold_add(dtype: DType, consts: Consts) -> Fold | None:
    if _is(consts[1], 0):
        return Fold("operand", 0)
    if _is(consts[0], 0):
        return Fold("operand", 1)
    return None


def _fold_sub(dtype: DType, consts: Consts) -> Fold | None:
    return Fold("operand", 0) if _is(consts[1], 0) else None


def _fold_mul(dtype: DType, consts: Consts) -> Fold | None:
    for const_index, other in ((1, 0), (0, 1)):
        value = consts[const_index]
        if _is(value, 1):
            return Fold("operand", other)
        if _is(value, -1) and dtype != dtypes.bool:
            return Fold("neg", other)
        if _is(value, 0) and not dtypes.is_float(dtype):  # floats: NaN*0 and inf*0 are NaN
            return Fold("const", value=False if dtype == dtypes.bool else 0)
    return None


def exact_reciprocal(value: ConstType, dtype: DType) -> float | None:
    """1/value when value is a (positive or negative) power of two whose reciprocal is exactly
    representable in `dtype` (finite, and not lost to overflow); None otherwise."""
    if not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return None
    mantissa, _ = math.frexp(value)
    if abs(mantissa) != 0.5:
        return None
    try:
        reciprocal = 1.0 / value
    except OverflowError:  # pragma: no cover  (1/subnormal float64 stays finite in Python)
        return None
    if not math.isfinite(reciprocal) or round_float(reciprocal, dtype) != reciprocal:
        return None
    return reciprocal


def _fold_div(dtype: DType, consts: Consts) -> Fold | None:
    if not dtypes.is_float(dtype) or consts[1] is None:
        return None
    reciprocal = exact_reciprocal(consts[1], dtype)
    return None if reciprocal is None else Fold("mul_const", 0, reciprocal)


FOLD_RULES: dict[Op, Callable[[DType, Consts], Fold | None]] = {
    BinaryOps.ADD: _fold_add,
    BinaryOps.SUB: _fold_sub,
    BinaryOps.MUL: _fold_mul,
    BinaryOps.DIV: _fold_div,
}
"""Identity rules by op; consulted when not every operand is a constant."""


def fold_elementwise(op: Op, dtype: DType, consts: Consts) -> Fold | None:
    """The rewrite for elementwise `op` on operands of `dtype` (for WHERE: the value dtype)."""
    folded = fold_all_constants(op, dtype, consts)
    if folded is not None:
        return folded
    rule = FOLD_RULES.get(op)
    return None if rule is None else rule(dtype, consts)


def fold_reduce(op: ReduceOps, dtype: DType, value: ConstType, count: int) -> ConstType:
    """The reduce of `count` (>= 1) copies of the constant `value`.

    SUM: integers wrap value*count; bool is the value (or); floats round the exact product once
    (what a kernel's sum approximates, within the documented tolerance). MAX: the value.
    """
    if op is ReduceOps.MAX or dtype == dtypes.bool:
        return value
    if dtypes.is_int(dtype):
        return wrap_int(int(value) * count, dtype)
    return round_float(float(value) * count, dtype)


def empty_reduce_value(op: ReduceOps, dtype: DType) -> ConstType:
    """The result of reducing an empty axis: 0 for SUM, the dtype's lowest value for MAX."""
    if op is ReduceOps.SUM:
        return False if dtype == dtypes.bool else 0.0 if dtypes.is_float(dtype) else 0
    return dtypes.min(dtype)


def fold_cast(value: ConstType, from_dtype: DType, to_dtype: DType, bitcast: bool) -> ConstType | None:
    """The constant a cast of `value` gives, or None when it must not be folded (unspecified cast,
    or a bitcast whose result is a NaN: its payload would not survive a Python float)."""
    if not bitcast:
        return cast_const(value, from_dtype, to_dtype)
    if from_dtype.itemsize != to_dtype.itemsize:
        return None
    result = bitcast_const(value, from_dtype, to_dtype)
    if isinstance(result, float) and math.isnan(result):
        return None
    if dtypes.is_float(from_dtype) and isinstance(value, float) and math.isnan(value):
        return None  # the NaN's bits are not known exactly
    return result


def split_factor(axis_size: int, output_size: int, threshold: int, size_log2: int) -> int | None:
    """The split factor for reducing one axis of `axis_size` into `output_size` outputs, or None.

    Split only when at least `threshold` inputs fold into each output. The factor is the largest
    value in [8, 256] that divides `axis_size` and keeps the first stage's output
    (`output_size * factor`) at most 2**size_log2 elements.
    """
    if axis_size < threshold or output_size <= 0:
        return None
    highest = min(256, (2 ** size_log2) // output_size)
    for factor in range(highest, 7, -1):
        if axis_size % factor == 0:
            return factor
    return None

