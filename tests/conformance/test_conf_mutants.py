"""The suite catches planted bugs: each mutant of `fast` (and of a copy of `reference`) is found by
a bounded hunt with its focused strategy, and the program found passes once the patch is undone."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import reference
from conformance.mutants_reference import reference_copy
from conformance.mutation import MUTANTS, Mutant, hunt, score


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.focus for m in MUTANTS])
def test_fast_mutant_is_caught(mutant: Mutant) -> None:
    fast = importlib.import_module("fast")
    result = hunt(mutant, fast, reference, max_examples=150, time_limit=25.0)
    print(score([result]))
    assert result.killed, f"{mutant.name}: not caught in {result.examples} programs"
    assert fast.to_numpy(fast.from_numpy(__import__("numpy").ones(2, "float32"), "CLANG")).tolist() == [1.0, 1.0]


def test_reference_copy_mutants_are_caught(tmp_path: Path) -> None:
    candidate = reference_copy(tmp_path, name=f"refcopy_{abs(hash(str(tmp_path))) % 10 ** 8}")
    results = [hunt(m, candidate, reference, reference_copy=True, max_examples=150, time_limit=10.0)
               for m in MUTANTS]
    print(score(results))
    assert all(r.killed for r in results), score(results)


def test_unmutated_fast_is_not_blamed() -> None:
    """A hunt with a patch that changes nothing finds nothing (differences must come from the patch)."""
    fast = importlib.import_module("fast")
    inert = Mutant("no bug", "sub-order", lambda pkg: (lambda: None), lambda pkg: (lambda: None))
    assert not hunt(inert, fast, reference, max_examples=15, time_limit=10.0).killed
