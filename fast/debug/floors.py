"""Lower bounds of tolerances, from reference's values with numpy: a cheap way to accept a value.

Building a tolerance through the whole graph (tolerances.py `full`) evaluates conformance's tolerance
graph on `reference` for every ancestor, and for a transformer that means float64 graphs over each
matmul's product (16 x 1536 x 384 elements): most of compare's time. Yet most fused values differ from
reference's by far less than their tolerance. `Floors.of(record)` is an array L with L <= the built
tolerance T wherever T is finite (where T is NaN or infinite nothing is compared anyway), so
|reference - fast| <= L means conformance accepts the value and T need not be built; otherwise it is.

Why L <= T (conformance/tolerance.py): every rule adds non-negative terms, and none decreases when an
input's tolerance grows; so dropping terms, or taking an input's tolerance as its lower bound (0 for
records without a rule here), gives a lower bound. Rules kept:
- float SUM over `count` elements: T >= EPS * (count + 2) * max(1, sum|inputs|) + the sum of the
  inputs' tolerances, and where reference's sum is finite, sum|inputs| >= 0.9 |sum| (tolerances.py
  `surely_within_alone`);
- elementwise ops of approximate values: the rule's terms with each input's tolerance at its bound,
  plus the rounding EPS * |value| (ADD, SUB: T_a + T_b; MUL: |a| T_b + |b| T_a; DIV: T_a / |b| + T_b;
  SQRT: sqrt(T_a); EXP2, LOG2, SIN: T_a + 4 EPS |value| + EPS), of exact ones: the inputs' sum;
  NEG, MAX, a float CAST, CONTIGUOUS, a copy: as their input's;
- movement ops move the bound as they move the value (padding with 0);
- anything else, and values of more than `LARGEST` elements: 0. The result is scaled by 0.99 for the
  float64 roundings of both computations.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from conformance.program import Cast, Contiguous, Copy, Elementwise, Movement, Reduce
from conformance.vocab import EPS, FLOATS
from fast.debug.records import Record
from fast.debug.tolerances import Tolerances
from fast.debug.values import Value

SAFETY = 0.99
LARGEST = 1 << 20  # values with more elements (a matmul's product) get no bound: it would cost a full pass


class Floors:
    """Lower bounds of `tolerances.full` per record (module docstring), each computed once."""

    def __init__(self, tolerances: Tolerances) -> None:
        self.tolerances = tolerances
        self.found: dict[Record, np.ndarray | None] = {}

    def surely_within(self, record: Record, expected: Value, actual: Value) -> bool:
        """True when every element of `actual` is within the lower bound of `expected`'s tolerance."""
        if expected.shards is not None or expected.dtype not in FLOATS or expected.shape != actual.shape:
            return False
        floor = self.of(record)
        if floor is None or floor.shape != expected.shape:
            return False
        with np.errstate(invalid="ignore", over="ignore"):
            want, got = expected.array.astype(np.float64), actual.array.astype(np.float64)
            return bool(np.all(np.isfinite(want) & (np.abs(want - got) <= SAFETY * floor)))

    def of(self, record: Record) -> np.ndarray | None:
        """The lower bound of `record`'s full tolerance (None: 0), its inputs' first (iteratively)."""
        stack = [record]
        while stack:
            current = stack[-1]
            if current in self.found:
                stack.pop()
                continue
            missing = [source for source in self.tolerances.inputs[current] if source not in self.found]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self.found[current] = self._one(current)
        return self.found[record]

    def _one(self, record: Record) -> np.ndarray | None:
        step, info = self.tolerances.steps.get(record), self.tolerances.info(record)
        if step is None or info is None or not info.aux or info.dtype not in FLOATS:
            return None
        sources = [self.found.get(source) for source in self.tolerances.inputs[record]]
        try:
            return _rule(step, sources, self.tolerances, record)
        except (ValueError, TypeError, IndexError):  # a shape this module does not follow: no bound
            return None


def _rule(step: Any, sources: list[np.ndarray | None], tolerances: Tolerances, record: Record) -> np.ndarray | None:
    if isinstance(step, Reduce):
        if step.op != "SUM":
            return None
        own = _sum_floor(step, tolerances, record)
        if own is None or sources[0] is None:
            return own
        return own + np.sum(np.broadcast_to(sources[0], tolerances.shape(tolerances.inputs[record][0])),
                            axis=tuple(step.axes), keepdims=True)
    if isinstance(step, (Cast, Contiguous, Copy)):
        return sources[0] if not isinstance(step, Cast) or (not step.bitcast and step.dtype in FLOATS) else None
    if isinstance(step, Movement):
        return None if sources[0] is None else _move(sources[0], step.kind, step.arg)
    if isinstance(step, Elementwise):
        return _elementwise(step, sources, tolerances, record)
    return None


def _value(tolerances: Tolerances, record: Record) -> np.ndarray | None:
    """|reference's value| in float64, for values of at most `LARGEST` elements (else None)."""
    if math.prod(tolerances.shape(record)) > LARGEST:
        return None
    value = tolerances.values.get(record)
    return None if value is None or value.shards is not None else np.abs(value.array.astype(np.float64))


def _elementwise(step: Elementwise, sources: list[np.ndarray | None], tolerances: Tolerances,
                 record: Record) -> np.ndarray | None:
    """The rules of conformance/tolerance.py `_elementwise`, each term that is dropped being >= 0."""
    info = tolerances.info(record)
    if info is None or not info.approx:  # the sum of the inputs' tolerances
        present = [source for source in sources if source is not None]
        return None if not present or step.op == "WHERE" else sum(present[1:], present[0])
    out = _value(tolerances, record)
    if out is None:
        return None
    rounding = EPS[info.dtype] * out  # one rounding of the result (its smallest subnormal dropped)
    zero = [np.zeros(()) if source is None else source for source in sources]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if step.op in ("ADD", "SUB"):
            return zero[0] + zero[1] + rounding
        if step.op == "SQRT":
            return np.sqrt(zero[0]) + rounding
        if step.op in ("EXP2", "LOG2", "SIN"):
            return zero[0] + 4 * rounding + EPS[info.dtype]
        if step.op in ("MUL", "DIV"):
            a, b = (_value(tolerances, source) for source in tolerances.inputs[record][:2])
            if a is None or b is None:
                return None
            if step.op == "MUL":
                return a * zero[1] + b * zero[0] + rounding
            return np.where(b > 0, zero[0] / b, 0.0) + zero[1] + rounding
        if step.op == "NEG":
            return sources[0]
        if step.op == "MAX":
            return np.maximum(zero[0], zero[1])
    return None


def _sum_floor(step: Reduce, tolerances: Tolerances, record: Record) -> np.ndarray | None:
    """EPS * (count + 2) * max(1, 0.9 |sum|) where reference's sum is finite, else 0."""
    value = tolerances.values.get(record)
    source_shape = tolerances.shape(tolerances.inputs[record][0])
    if value is None or value.shards is not None:
        return None
    count = math.prod(source_shape[axis] for axis in step.axes)
    if count > 2 ** 20:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.abs(value.array.astype(np.float64))
        floor = np.maximum(1.0, 0.9 * total) * (EPS[value.dtype] * (count + 2))
    return np.where(np.isfinite(total), floor, 0.0)


def _move(bound: np.ndarray, kind: str, arg: Any) -> np.ndarray | None:
    """`bound` moved as a movement op moves the value (padding with 0)."""
    if kind == "reshape":
        return bound.reshape(tuple(arg))
    if kind == "expand":
        return np.broadcast_to(bound, tuple(arg))
    if kind == "permute":
        return np.transpose(bound, tuple(arg))
    if kind == "shrink":
        return bound[tuple(slice(start, end) for start, end in arg)]
    if kind == "pad":
        return np.pad(bound, tuple(tuple(pair) for pair in arg))
    if kind == "stride" and all(step in (1, -1) for step in arg):
        return bound[tuple(slice(None, None, step) for step in arg)]
    return None
