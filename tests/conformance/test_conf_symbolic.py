"""Symbolic programs: generation puts bound Variables in shapes and arguments, every binding is
replayed and compared, and the reuse check catches a candidate that compiles a kernel per binding."""
from __future__ import annotations

import contextlib
import importlib
import io
from dataclasses import fields, replace

from hypothesis import HealthCheck, Phase, given, settings

import reference
from conformance import coverage, mutants_fast
from conformance.analysis import analyze
from conformance.compare import compare_reuse
from conformance.directed import directed_programs
from conformance.driver import Outcome, Raised, replay
from conformance.mutation import Mutant, hunt
from conformance.profiles import GenConfig
from conformance.program import ArrayData, Fetch, Leaf, Movement, Program, Reduce, Var, has_vars
from conformance.runner import check
from conformance.strategies import programs
from conformance.strategies.focused import focused

SETTINGS = settings(deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
SYMBOLIC = replace(GenConfig(), p_symbolic=1.0)


def _fast():  # type: ignore[no-untyped-def]
    return importlib.import_module("fast")


@settings(SETTINGS, max_examples=60)
@given(programs(SYMBOLIC))
def test_generated_programs_hold_variables_and_several_bindings(program: Program) -> None:
    assert program.variables and 2 <= program.runs <= 3 and program.expect in (None, "ValueError")
    for column, var in enumerate(program.variables):
        values = [binding[column] for binding in program.bindings]
        assert len(set(values)) == len(values) and all(var.low <= x <= var.high for x in values)
        assert var.low < values[0] < var.high  # the first binding is interior: every size positive
    assert any(has_vars(getattr(step, f.name)) for step in program.steps for f in fields(step))
    first, last = analyze(program, 0), analyze(program, program.runs - 1)
    assert any(a is not None and b is not None and a.shape != b.shape for a, b in zip(first, last, strict=True))
    for run in range(program.runs):  # valid for every binding (or invalid at the last step in every one)
        error = replay(reference, program, run=run).error
        planned = None if program.expect is None else (program.expect, len(program.steps) - 1)
        assert (error and (error.kind, error.step)) == planned, (error, program.render("reference"))


@settings(SETTINGS, max_examples=25)
@given(programs(SYMBOLIC))
def test_generated_programs_agree_and_reuse_kernels(program: Program) -> None:
    mismatches = check(program, reference, _fast()).mismatches
    assert not mismatches, "\n".join(m.detail for m in mismatches) + "\n" + program.render()


def test_the_ci_profile_mixes_in_symbolic_programs() -> None:
    assert 0.03 <= GenConfig().p_symbolic <= 0.2
    kinds = ("CLANG", "LLVM")
    directed = [p for p in directed_programs(GenConfig(kinds=kinds)) if p.variables]
    assert len(directed) >= 5 * len(kinds) and all(p.runs == 3 for p in directed)
    keys = coverage.merge(coverage.program_keys(p) for p in directed)
    assert all(keys[f"feature:{k}"] for k in ("symbolic", "symbolic-shape", "symbolic-reduce"))


def test_directed_symbolic_programs_agree_on_every_kind() -> None:
    fast = _fast()
    for program in (p for p in directed_programs(GenConfig(kinds=("CLANG", "LLVM"))) if p.variables):
        mismatches = check(program, reference, fast).mismatches
        assert not mismatches, "\n".join(m.detail for m in mismatches) + "\n" + program.render()
        later = [replay(fast, program, run=run).kernels_built for run in range(1, program.runs)]
        assert later == [0] * (program.runs - 1)


def _window_program() -> Program:
    n = Var("n", 1, 6)
    steps = (Leaf(ArrayData("float32", (6, 3), seed=3), "CLANG"), Movement(0, "shrink", ((0, n), (0, 3))),
             Reduce(1, "SUM", (0,)), Fetch(2), Fetch(1))
    return Program(steps, variables=(n,), bindings=((4,), (1,), (6,)))


def test_instantiate_binds_each_run_and_the_snippet_runs_every_binding() -> None:
    program = _window_program()
    assert program.instantiate(1).steps[1] == Movement(0, "shrink", ((0, 1), (0, 3)))
    assert program.instantiate(2).variables == () and program.values(2) == {program.variables[0]: 6}
    assert [replay(reference, program, run=r).fetched[1].shape for r in range(3)] == [(4, 3), (1, 3), (6, 3)]
    text = program.render(candidate="reference")
    assert "n = T.Variable('n', 1, 6).bind(binding['n'])" in text and "shrink(((0, n), (0, 3)))" in text
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(text, {})  # noqa: S102 - our own rendered snippet
    assert printed.getvalue().count("reference:") == 6  # expected and "candidate" lines, three bindings


def test_reuse_is_checked_after_the_first_binding_only() -> None:
    program = _window_program()
    built, clean = Outcome(kernels_built=2), Outcome(kernels_built=0)
    assert compare_reuse(program, 0, built, built) is None
    assert compare_reuse(program, 1, clean, clean) is None
    mismatch = compare_reuse(program, 2, clean, built)
    assert mismatch is not None and mismatch.signature.startswith("reuse:") and "n=4" in mismatch.detail
    assert compare_reuse(program, 1, Outcome(error=Raised(2, "ValueError", "")), built) is None


def test_a_kernel_per_binding_is_caught() -> None:
    """A planted bug that leaves bound values in the kernels (right values, a compile per binding)
    is caught by the reuse check alone."""
    fast = _fast()
    bake = Mutant("bound values baked into kernels", "symbolic", mutants_fast.bake_bound_variables,
                  lambda pkg: (lambda: None))
    result = hunt(bake, fast, reference, max_examples=100, time_limit=25.0, strategy=focused("symbolic"))
    assert result.killed and "kernel(s) built after binding" in result.detail, result.detail
    undo = mutants_fast.bake_bound_variables(fast)
    try:
        mismatches = check(_window_program(), reference, fast).mismatches
    finally:
        undo()
    assert {m.signature for m in mismatches} == {"reuse:kernels-built-after-first-binding"}

