"""Step-level minimisation keeps a failure and drops what it does not need."""
from __future__ import annotations

from conformance.minimize import minimize, without
from conformance.program import ArrayData, Elementwise, Fetch, Leaf, Program, Realize, Reduce


def _leaf(value: int) -> Leaf:
    return Leaf(ArrayData("int32", (2,), (value, value)), "CLANG")


PROGRAM = Program((_leaf(1), _leaf(2), Elementwise("ADD", (0, 1)), Realize((2,)), Reduce(2, "SUM", (0,)),
                   Elementwise("MUL", (1, 1)), Fetch(5), Fetch(4)))


def test_without_renumbers_later_references() -> None:
    smaller = without(PROGRAM, 3)
    assert smaller is not None and smaller.steps[3] == Reduce(2, "SUM", (0,)) and smaller.steps[-1] == Fetch(3)
    assert without(PROGRAM, 2) is None  # read by the reduce


def test_minimize_keeps_only_what_the_failure_needs() -> None:
    def fails(program: Program) -> bool:
        return any(isinstance(s, Fetch) and isinstance(program.steps[s.item], Reduce) for s in program.steps)
    small = minimize(PROGRAM, fails)
    assert small.steps == (_leaf(1), _leaf(2), Elementwise("ADD", (0, 1)), Reduce(2, "SUM", (0,)), Fetch(3))


def test_the_invalid_last_step_stays() -> None:
    program = Program((_leaf(1), Fetch(0), Reduce(0, "SUM", (3,))), expect="ValueError")
    assert minimize(program, lambda p: True).steps == (_leaf(1), Reduce(0, "SUM", (3,)))
