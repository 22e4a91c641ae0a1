"""Comparison of two outcomes per docs/semantics.md "What conformance compares".

Per element of a fetched array, with tolerance t from the expected side (0 when none):
- t == 0: exact. Integers and bools bit-equal; floats equal by value, all NaNs equal, -0.0 == 0.0.
- t > 0 and finite: |expected - actual| <= t, or both equal as above, or one side is infinite and
  the other is finite within t of the largest finite value (an overflow that order may decide).
- t NaN or inf: unspecified, skipped.
Also compared: error type (and the step raising it), every step's shape and dtype, fetched dtypes
and shapes. Each mismatch carries a `signature` so one bug reported many times is counted once.
A symbolic program is compared once per binding, and its later bindings must build no kernel
(`compare_reuse`): fast compiles code for symbolic shapes once and serves every binding with it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.driver import Fetched, Outcome, Raised
from conformance.program import Elementwise, Program, Reduce, Step
from conformance.vocab import FLOATS, MAX_FINITE


@dataclass(frozen=True)
class Mismatch:
    signature: str
    detail: str


def describe(step: Step) -> str:
    """Short name of a step for signatures: `Elementwise.MAX`, `Movement.pad`, `Copy`."""
    name = type(step).__name__
    if isinstance(step, (Elementwise, Reduce)):
        return f"{name}.{step.op}"
    kind = getattr(step, "kind", None)
    return f"{name}.{kind}" if kind else name


def bad_elements(expected: np.ndarray, actual: np.ndarray, tolerance: np.ndarray | None, dtype: str) -> np.ndarray:
    """Boolean mask of the elements that disagree."""
    if dtype not in FLOATS:
        bad = expected != actual
        return bad & ~np.isnan(tolerance) if tolerance is not None else bad
    with np.errstate(invalid="ignore"):  # a signaling NaN (from a BITCAST) raises "invalid" as it widens
        e, a = expected.astype(np.float64), actual.astype(np.float64)
    equal = (e == a) | (np.isnan(e) & np.isnan(a))
    if tolerance is None:
        return ~equal
    with np.errstate(invalid="ignore"):
        checked = np.isfinite(tolerance)
        within = np.abs(e - a) <= tolerance
        one_inf = np.isinf(e) != np.isinf(a)
        finite_side = np.where(np.isinf(e), np.abs(a), np.abs(e))
        overflow = one_inf & (finite_side + tolerance >= MAX_FINITE[dtype] * (1 - 2.0 ** -20))
    return checked & ~(equal | within | overflow)


def _show(array: np.ndarray, index: tuple[int, ...]) -> str:
    return repr(array[index].item()) if array.ndim else repr(array.item())


def compare_fetched(step: Step, exp: Fetched, act: Fetched) -> Mismatch | None:
    """Mismatch of one fetched value (dtype, shape, numpy dtype, elements), or None."""
    where = f"step {exp.step} (to_numpy of v{exp.item}, from {describe(step)})"
    if (exp.dtype, exp.shape) != (act.dtype, act.shape):
        return Mismatch(f"meta:{describe(step)}",
                        f"{where}: expected {exp.dtype}{exp.shape}, got {act.dtype}{act.shape}")
    if exp.array.shape != act.array.shape or exp.array.dtype != act.array.dtype:
        return Mismatch(f"array-meta:{describe(step)}:{exp.dtype}",
                        f"{where}: to_numpy gave {act.array.dtype}{act.array.shape}, expected "
                        f"{exp.array.dtype}{exp.array.shape}")
    bad = bad_elements(exp.array, act.array, exp.tolerance, exp.dtype)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    tol = "" if exp.tolerance is None else f" (tolerance {_show(exp.tolerance, first)})"
    return Mismatch(f"value:{describe(step)}:{exp.dtype}",
                    f"{where}: {int(bad.sum())} of {bad.size} elements differ; first at {first}: expected "
                    f"{_show(exp.array, first)}, got {_show(act.array, first)}{tol}")


def _errors(program: Program, expected: Outcome, actual: Outcome) -> list[Mismatch]:
    out: list[Mismatch] = []
    exp, act = expected.error, actual.error
    last = len(program.steps) - 1
    if program.expect is not None and (exp is None or exp.kind != program.expect or exp.step != last):
        got = "nothing" if exp is None else f"{exp.kind} at step {exp.step}"
        out.append(Mismatch(f"expect:{program.expect}:{describe(program.steps[last])}",
                            f"the expected side should raise {program.expect} at step {last}, raised {got}"))
    elif program.expect is None and exp is not None:
        out.append(Mismatch(f"expect:none:{describe(program.steps[exp.step])}:{exp.kind}",
                            f"the expected side raised {exp.kind} at step {exp.step} on a valid program: "
                            f"{exp.message}"))
    if (exp is None) != (act is None) or (exp and act and (exp.kind, exp.step) != (act.kind, act.step)):
        out.append(_error_mismatch(program, exp, act))
    return out


def _error_mismatch(program: Program, exp: Raised | None, act: Raised | None) -> Mismatch:
    """Signed by the first step where the two sides part: who raised what there."""
    def text(r: Raised | None) -> str:
        return "no error" if r is None else f"{r.kind} at step {r.step}: {r.message}"
    first = min((r for r in (exp, act) if r is not None), key=lambda r: r.step)
    mine = exp if exp is not None and exp.step == first.step else None
    theirs = act if act is not None and act.step == first.step else None
    where = describe(program.steps[first.step])
    return Mismatch(f"error:{mine.kind if mine else 'ok'}->{theirs.kind if theirs else 'ok'}:{where}",
                    f"expected {text(exp)}; got {text(act)}")


def compare(program: Program, expected: Outcome, actual: Outcome) -> list[Mismatch]:
    """Every disagreement between the expected outcome and the actual one (empty when they agree)."""
    out = _errors(program, expected, actual)
    for index, shape in expected.shapes.items():
        other = actual.shapes.get(index)
        if other is not None and other != shape:
            name = describe(program.steps[index])
            out.append(Mismatch(f"meta:{name}",
                                f"step {index} ({name}): expected shape/dtype/device {shape}, got {other}"))
    for exp, act in zip(expected.fetched, actual.fetched, strict=False):
        mismatch = compare_fetched(program.steps[exp.item], exp, act)
        if mismatch is not None:
            out.append(mismatch)
    return out


def binding_text(program: Program, run: int) -> str:
    """`n=3, m=5`: the values of binding `run`."""
    return ", ".join(f"{var.name}={value}" for var, value in program.values(run).items())


def compare_reuse(program: Program, run: int, first: Outcome, actual: Outcome) -> Mismatch | None:
    """A mismatch when the candidate built kernels (compiled, or loaded from its disk cache) while
    replaying binding `run` > 0 of a symbolic program whose first binding ran without an error."""
    if run == 0 or first.error is not None or not actual.kernels_built:
        return None
    return Mismatch("reuse:kernels-built-after-first-binding",
                    f"{actual.kernels_built} kernel(s) built after binding {binding_text(program, 0)} ran the same "
                    f"program; the kernels of a symbolic program must serve every binding")
