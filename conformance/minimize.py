"""Step-level minimisation of a failing program, after Hypothesis has shrunk its draws.

`minimize(program, fails)` repeatedly deletes one step that no later step reads (a Fetch, a
Realize, or a dead value), renumbering the references after it, and keeps the deletion when
`fails` still holds. The result fails too and has no step whose removal alone keeps it failing
(within the time budget).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import fields, replace

from conformance.program import Program, Step


def _renumber(step: Step, removed: int) -> Step:
    changes = {}
    for f in fields(step):  # type: ignore[arg-type]
        if not f.metadata.get("ref"):
            continue
        value = getattr(step, f.name)
        if isinstance(value, tuple):
            changes[f.name] = tuple(v - (v > removed) for v in value)
        else:
            changes[f.name] = value - (value > removed)
    return replace(step, **changes)  # type: ignore[type-var]


def without(program: Program, index: int) -> Program | None:
    """The program minus step `index`, or None when a later step reads it (or it is the last step
    of a program that expects an error)."""
    if program.expect is not None and index == len(program.steps) - 1:
        return None
    if any(index in step.refs() for step in program.steps[index + 1:]):
        return None
    steps = program.steps[:index] + tuple(_renumber(s, index) for s in program.steps[index + 1:])
    return replace(program, steps=steps)


def minimize(program: Program, fails: Callable[[Program], bool], seconds: float = 10.0) -> Program:
    """Delete removable steps (latest first) while `fails` keeps holding."""
    deadline = time.time() + seconds
    changed = True
    while changed and time.time() < deadline:
        changed = False
        for index in reversed(range(len(program.steps))):
            if time.time() > deadline:
                break
            smaller = without(program, index) if index < len(program.steps) else None
            if smaller is not None and smaller.steps and fails(smaller):
                program, changed = smaller, True
    return program
