"""Captured mode: a program run as a function captured with the candidate's `jit` (fast.jit, fast's
capture: docs/architecture.md, "Capture"), called twice: first with the program's own leaves (the
trace), then with new leaves of the same shapes, dtypes and devices (the replay of the captured
kernels). Each call's results are compared with reference's replay of the program with the same
leaves (tolerances included), so a replay that reuses a stale buffer, a wrong parameter or a
kernel of another trace shows as a difference on the second call.

Capturable programs: no expected error, no variables, no ring setting, only steps a captured
function may hold (`CAPTURABLE`: no assign, copy, shard, CUSTOM, EMPTY or explicit realize) and no
DISK leaf. Inside the traced function a Leaf step takes the next argument and a Fetch collects the
value, which the function returns (reading a value inside a trace is refused by design).
New leaves (`renewed`) are drawn like the old ones (another seed, or the explicit values shuffled);
the index leaves of gathers are kept (new indices could fall out of range, an error the first call
did not have).
"""
from __future__ import annotations

import traceback
from collections.abc import Iterator, Sequence
from dataclasses import replace
from types import ModuleType
from typing import Any

import numpy as np

from conformance.analysis import analyze
from conformance.compare import Mismatch, compare
from conformance.driver import Fetched, Outcome, _Replay, _sizes, replay
from conformance.program import (
    ArrayData,
    Cast,
    ConstLike,
    Contiguous,
    Elementwise,
    Fetch,
    Gather,
    Leaf,
    LoadConst,
    Movement,
    Program,
    Reduce,
)
from conformance.vocab import is_disk

CAPTURABLE = (Leaf, LoadConst, ConstLike, Elementwise, Reduce, Movement, Gather, Cast, Contiguous, Fetch)


def capturable(program: Program) -> bool:
    """Whether `program` can run as a captured function (module docstring); zero-size results
    included (a captured call gives a new zero-size value for each)."""
    steps = program.steps
    if not (program.expect is None and not program.variables and program.ring is None
            and all(type(step) in CAPTURABLE for step in steps)
            and not any(isinstance(step, (Leaf, LoadConst)) and is_disk(step.device) for step in steps)
            and any(isinstance(step, Leaf) for step in steps) and any(isinstance(step, Fetch) for step in steps)):
        return False
    infos = analyze(program)
    return all(infos[step.item] is not None for step in steps if isinstance(step, Fetch))


def reproduction(program: Program) -> str:
    """Lines to append to a captured failure's snippet: how to run the program in captured mode."""
    return ("\n# Found in captured mode (conformance/captured.py): the program above runs as a fast.jit function\n"
            "# called twice, new leaves the second time. To run it that way:\n"
            "from conformance.captured import check_captured\n"
            "from conformance.program import *  # noqa: F403\n"
            f"print(check_captured({program!r}, reference, fast)[0])\n")


def renewed(program: Program, seed: int) -> Program:
    """`program` with new leaf data drawn like the old (gather indices kept): a seeded leaf gets
    another seed, explicit values are shuffled. The new values are then of the kinds the strategy
    chose for that leaf (edge values, zeros, small integers), which the program's checks and
    tolerances were generated for."""
    indices = {step.indices for step in program.steps if isinstance(step, Gather)}
    steps = tuple(replace(step, data=_new_data(step.data, seed + index))
                  if isinstance(step, Leaf) and index not in indices else step
                  for index, step in enumerate(program.steps))
    return replace(program, steps=steps)


def _new_data(data: ArrayData, seed: int) -> ArrayData:
    if data.seed is not None:
        return ArrayData(data.dtype, data.shape, seed=seed)
    order = np.random.default_rng(seed).permutation(len(data.values))
    return ArrayData(data.dtype, data.shape, tuple(data.values[int(i)] for i in order))


class _Traced(_Replay):
    """The program's steps as the body of the captured function: leaves from `args`, fetched values
    collected in `outputs`; the first error is raised (the call then fails)."""

    def __init__(self, pkg: ModuleType, program: Program, args: Sequence[Any]) -> None:
        super().__init__(pkg, program, tolerances=False)
        self.args: Iterator[Any] = iter(args)
        self.outputs: list[Any] = []

    def visit_leaf(self, step: Leaf) -> Any:
        return next(self.args)

    def fetch(self, index: int, step: Fetch) -> None:
        self.outputs.append(self.values[step.item])


def _body(pkg: ModuleType, program: Program) -> Any:
    def body(*args: Any) -> tuple[Any, ...]:
        traced = _Traced(pkg, program, args)
        outcome = traced.run()
        if outcome.error is not None:
            raise RuntimeError(f"step {outcome.error.step}: {outcome.error.kind}: {outcome.error.message}")
        return tuple(traced.outputs)
    return body


def _outcome(pkg: ModuleType, program: Program, values: Sequence[Any]) -> Outcome:
    fetches = [(index, step) for index, step in enumerate(program.steps) if isinstance(step, Fetch)]
    return Outcome(fetched=[Fetched(index, step.item, value.dtype.name, _sizes(value.shape), pkg.to_numpy(value))
                            for (index, step), value in zip(fetches, values, strict=True)])


def check_captured(program: Program, expected: ModuleType, candidate: ModuleType, seed: int = 7) -> \
        tuple[list[Mismatch], bool]:
    """The mismatches of the two captured calls (signatures prefixed `captured:`), and whether the
    second call replayed the first call's trace (no new trace)."""
    captured = candidate.jit(_body(candidate, program))
    found: list[Mismatch] = []
    for call, version in enumerate((program, renewed(program, seed)), 1):
        want = replay(expected, version, tolerances=True)
        if want.error is not None:
            return found, False  # new leaves made the program invalid for reference: nothing to compare
        leaves = [candidate.from_numpy(step.data.build(), step.device) for step in version.steps
                  if isinstance(step, Leaf)]
        try:
            got = _outcome(candidate, version, captured(*leaves))
        except Exception as error:  # noqa: BLE001 - a failing captured call is a finding
            detail = f"captured call {call}: {type(error).__name__}: {error}\n{traceback.format_exc(limit=4)}"
            return [*found, Mismatch(f"captured:{type(error).__name__}", detail)], False
        found += [Mismatch(f"captured:{m.signature}", f"captured call {call}: {m.detail}")
                  for m in compare(version, want, got)]
    return found, getattr(captured, "traces", 0) == 1
