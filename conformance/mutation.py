"""Mutation harness: plant a realistic bug in a package, hunt for a program that exposes it.

A `Mutant` is a name, a patch function per target package (`fast`, or a copy of `reference`) that
returns an undo callable, and the focused strategy to hunt with. `hunt` runs at most `max_examples`
programs (or `time_limit` seconds) against the patched package and reports the first program whose
outcome differs from reference *and* agrees again once the patch is undone (so a real bug of the
candidate is never credited to the mutant). Patches of `fast` name its actual internals (renderer
helpers, the scalar evaluator's rule tables, `View.pad`, `ring_chunks` wherever it is bound,
`from_sharded`,
`LazyBuffer.is_unrealized_unmasked_const`, the scheduler's `KernelBuilder._unbind`); reference patches
plant the same observable bug.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from conformance import mutants_fast, mutants_reference
from conformance.profiles import GenConfig
from conformance.program import Program
from conformance.runner import check
from conformance.strategies.focused import focused

Undo = Callable[[], None]


@dataclass(frozen=True)
class Mutant:
    name: str
    focus: str
    patch_fast: Callable[[ModuleType], Undo]
    patch_reference: Callable[[ModuleType], Undo]

    def apply(self, pkg: ModuleType, reference_copy: bool = False) -> Undo:
        return (self.patch_reference if reference_copy else self.patch_fast)(pkg)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("MAX drops NaN", "nan-max", mutants_fast.max_drops_nan, mutants_reference.max_drops_nan),
    Mutant("SUB with swapped operands", "sub-order", mutants_fast.sub_swapped, mutants_reference.sub_swapped),
    Mutant("pad mask off by one", "pad-mask", mutants_fast.pad_mask_off_by_one, mutants_reference.pad_mask_off_by_one),
    Mutant("integer MOD with the divisor's sign", "int-mod", mutants_fast.mod_divisor_sign,
           mutants_reference.mod_divisor_sign),
    Mutant("ring all-reduce skips the last chunk", "ring", mutants_fast.ring_skips_last_chunk,
           mutants_reference.allreduce_skips_last_part),
    Mutant("uneven shard boundary off by one", "uneven-shard", mutants_fast.uneven_shard_floor,
           mutants_reference.uneven_shard_floor),
    Mutant("constant fold of a masked constant", "masked-const", mutants_fast.fold_masked_const,
           mutants_reference.fold_masked_const),
    Mutant("bound variables read at their maximum", "symbolic", mutants_fast.variables_at_max,
           mutants_reference.variables_at_max),
)


@dataclass
class Hunt:
    mutant: str
    killed: bool
    examples: int
    seconds: float
    snippet: str = ""
    detail: str = ""


class _FoundError(Exception):
    pass


def hunt(mutant: Mutant, candidate: ModuleType, expected: ModuleType, reference_copy: bool = False,
         max_examples: int = 200, time_limit: float = 25.0, seed: int = 0,
         cfg: GenConfig = GenConfig(), strategy: st.SearchStrategy[Program] | None = None) -> Hunt:  # noqa: B008
    """Search for a program exposing `mutant` planted in `candidate` (compared with `expected`), with
    the mutant's focused strategy unless another `strategy` is given."""
    start, state = time.time(), {"examples": 0}
    found: dict[str, Any] = {}

    def attempt(program: Program) -> None:
        if time.time() - start > time_limit:
            return
        state["examples"] += 1
        undo = mutant.apply(candidate, reference_copy)
        try:
            mismatches = check(program, expected, candidate).mismatches
        finally:
            undo()
        if not mismatches or check(program, expected, candidate).mismatches:
            return  # no difference, or a difference the unpatched candidate shows too
        found.update(program=program, detail=mismatches[0].detail)
        raise _FoundError

    @hypothesis_seed(seed)
    @settings(max_examples=max_examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(strategy if strategy is not None else focused(mutant.focus, cfg))
    def search(program: Program) -> None:
        attempt(program)

    try:
        search()
    except _FoundError:
        pass
    elapsed = time.time() - start
    if "program" not in found:
        return Hunt(mutant.name, False, state["examples"], elapsed)
    return Hunt(mutant.name, True, state["examples"], elapsed, found["program"].render(candidate.__name__),
                found["detail"])


def score(hunts: list[Hunt]) -> str:
    """A one-line mutation score plus one line per mutant."""
    killed = sum(h.killed for h in hunts)
    lines = [f"mutation score: {killed}/{len(hunts)} planted bugs caught"]
    lines += [f"  {'caught' if h.killed else 'MISSED'}: {h.mutant} ({h.examples} programs, {h.seconds:.1f}s)"
              for h in hunts]
    return "\n".join(lines)


def main() -> int:
    """`python -m conformance.mutation`: hunt every mutant in fast and print the score."""
    import importlib

    fast, reference = importlib.import_module("fast"), importlib.import_module("reference")
    hunts = [hunt(mutant, fast, reference) for mutant in MUTANTS]
    print(score(hunts))
    for h in hunts:
        if h.killed:
            print(f"\n{h.mutant}: {h.detail}\n{h.snippet}")
    return 0 if all(h.killed for h in hunts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
