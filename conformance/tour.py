"""The op tour: deterministic programs that sweep every op over every dtype's edge values.

For each dtype, one program crosses its value palette (`value_pool`: NaN, ±inf, -0.0, MIN/MAX,
0 divisors, small and spread-out values) with itself, a (n, 1) leaf expanded against a (1, n) leaf,
and applies every unary, binary and ternary op the dtype supports, a cast to every dtype, every
bitcast partner and both reductions. Further programs take one tour of the movement ops, the
constant-folding identities, CUSTOM/EMPTY/assign, copies, and one misuse per error type. Together
with directed.py they make every required coverage item deterministic in every run.
"""
from __future__ import annotations

import math

from conformance.layout import movement_shape
from conformance.program import (
    ArrayData,
    Assign,
    Cast,
    ConstLike,
    Copy,
    Custom,
    Elementwise,
    Fetch,
    Leaf,
    LoadConst,
    LoadEmpty,
    Movement,
    Program,
    Realize,
    Reduce,
    Step,
)
from conformance.strategies.data import value_pool
from conformance.vocab import BINARY, DTYPES, UNARY, bitcast_partners, supports


class _Steps:
    """A growing step list; `add` returns the new step's index."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def add(self, step: Step, fetch: bool = False) -> int:
        self.steps.append(step)
        index = len(self.steps) - 1
        if fetch:
            self.steps.append(Fetch(index))
        return index

    def leaf(self, dtype: str, shape: tuple[int, ...], values: tuple[object, ...], device: str) -> int:
        if dtype != "bfloat16":
            return self.add(Leaf(ArrayData(dtype, shape, values), device))  # type: ignore[arg-type]
        raw = self.add(Leaf(ArrayData("float32", shape, values), device))  # type: ignore[arg-type]
        return self.add(Cast(raw, "bfloat16"))


def dtype_sweep(dtype: str, device: str) -> Program:
    """Every supported op of `dtype` on the cross product of its palette."""
    values = value_pool(dtype)
    n = len(values)
    s = _Steps()
    column = s.leaf(dtype, (n, 1), values, device)
    row = s.leaf(dtype, (1, n), values, device)
    a, b = s.add(Movement(column, "expand", (n, n))), s.add(Movement(row, "expand", (n, n)))
    for op in UNARY:
        if supports(op, dtype):
            s.add(Elementwise(op, (column,)), fetch=True)
    for op in BINARY:
        if supports(op, dtype):
            s.add(Elementwise(op, (a, b)), fetch=True)
    less = s.add(Elementwise("CMPLT", (a, b)))
    s.add(Elementwise("WHERE", (less, a, b)), fetch=True)
    s.add(Elementwise("MULACC", (a, b, a)), fetch=True)
    for target in DTYPES:
        if target != dtype:
            s.add(Cast(column, target), fetch=True)
    for target in bitcast_partners(dtype):
        if target != dtype:
            s.add(Cast(row, target, bitcast=True), fetch=True)
    s.add(Reduce(b, "SUM", (1,)), fetch=True)
    s.add(Reduce(a, "MAX", (0, 1)), fetch=True)
    return Program(tuple(s.steps))


def movement_tour(device: str) -> Program:
    s = _Steps()
    x = s.leaf("int16", (2, 3, 4), tuple(range(24)), device)
    moves: list[tuple[str, tuple]] = [  # type: ignore[type-arg]
        ("permute", (2, 0, 1)), ("pad", ((1, 0), (0, 2), (1, 1))), ("shrink", ((1, 2), (0, 2), (1, 4))),
        ("stride", (-1, 2, -3)), ("reshape", (4, 6))]
    for kind, arg in moves:
        moved = s.add(Movement(x, kind, arg), fetch=True)
        if kind in ("permute", "pad", "stride"):  # a reshape that cannot merge into the view
            size = math.prod(movement_shape((2, 3, 4), kind, arg))
            s.add(Movement(moved, "reshape", (size,)), fetch=True)
    corner = s.add(Movement(x, "shrink", ((0, 1), (0, 1), (0, 4))))
    s.add(Movement(corner, "expand", (3, 2, 4)), fetch=True)
    return Program(tuple(s.steps))


def constants_tour(device: str) -> Program:
    s = _Steps()
    x = s.leaf("int32", (3,), (7, -7, 0), device)
    for op, value in (("ADD", 0), ("SUB", 0), ("MUL", 1), ("MUL", -1), ("MUL", 0)):
        s.add(Elementwise(op, (x, s.add(ConstLike(x, value)))), fetch=True)
    c = s.add(LoadConst((4, 2), "int8", device, 100))
    s.add(Reduce(c, "SUM", (0,)), fetch=True)
    s.add(Cast(s.add(LoadConst((3,), "int32", device, -1)), "uint16"), fetch=True)
    masked = s.add(Movement(c, "pad", ((1, 0), (0, 1))))
    s.add(Elementwise("CMPEQ", (masked, s.add(ConstLike(masked, 0)))), fetch=True)
    neg = s.add(Elementwise("NEG", (x,)))
    s.add(Elementwise("NEG", (s.add(Movement(neg, "reshape", (3, 1))),)), fetch=True)
    return Program(tuple(s.steps))


def loads_tour(device: str, other: str) -> Program:
    """CUSTOM, EMPTY then assign, copies (plain and forced), a 0-d and a zero-size leaf."""
    s = _Steps()
    made = s.add(Custom("arange", (), (2, 3), "float16", device), fetch=True)
    flipped = s.add(Custom("flip", (made,), (2, 3), "float16", device), fetch=True)
    empty = s.add(LoadEmpty((2, 3), "float16", device))
    s.add(Realize((empty,)))
    s.add(Assign(empty, flipped), fetch=True)
    s.add(Copy(made, other), fetch=True)
    s.add(Copy(made, device, force=True), fetch=True)
    scalar = s.leaf("float64", (), (2.5,), device)
    s.add(Elementwise("MUL", (scalar, scalar)), fetch=True)
    nothing = s.leaf("uint32", (0, 4), (), device)
    s.add(Reduce(nothing, "MAX", (0,)), fetch=True)
    return Program(tuple(s.steps))


def misuse_tour(device: str) -> list[Program]:
    x = Leaf(ArrayData("float32", (2, 3), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)), device)
    return [Program((x, Elementwise("XOR", (0, 0))), expect="TypeError"),
            Program((x, Movement(0, "reshape", (4, 2))), expect="ValueError"),
            Program((x, Elementwise("ADD", (0, 0)), Assign(1, 0)), expect="RuntimeError")]


def tour_programs(kind: str, other: str) -> list[Program]:
    """The tour on device `kind`; its copies go to `other` (another device the run may use)."""
    return [*(dtype_sweep(d, kind) for d in DTYPES), movement_tour(kind), constants_tour(kind),
            loads_tour(kind, other), *misuse_tour(kind)]
