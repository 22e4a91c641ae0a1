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

`OPT_MUTANTS` are bugs in fast's optimization layer (conformance/mutants_opt.py: tails, chunks, thread
shares, GEMM tile edges, accumulators, constant slots, the FMA guard, the replay key, vector MAX and
polynomials). They have no reference twin and no focused strategy: each is hunted with the random
programs of the ci profile (`programs(PROFILES["ci"].gen)`), the programs CI runs, so a kill shows
that CI itself would catch the bug.

Command line: `python -m conformance.mutation [--set semantic|optimization|all] [--only NAME]
[--examples N] [--time-limit S] [--seed S]`; exit 0 when every hunted mutant is caught, 1 otherwise.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from conformance import mutants_fast, mutants_opt, mutants_reference
from conformance.profiles import PROFILES, GenConfig
from conformance.program import Program
from conformance.runner import check
from conformance.strategies import programs
from conformance.strategies.focused import focused

Undo = Callable[[], None]


@dataclass(frozen=True)
class Mutant:
    """A planted bug: `focus` names its focused strategy ("" for the ci profile's random programs);
    `patch_reference` is None for a bug reference cannot have (the optimization layer's)."""

    name: str
    focus: str
    patch_fast: Callable[[ModuleType], Undo]
    patch_reference: Callable[[ModuleType], Undo] | None = None

    def apply(self, pkg: ModuleType, reference_copy: bool = False) -> Undo:
        if reference_copy and self.patch_reference is None:
            raise ValueError(f"mutation: {self.name!r} has no reference twin (an optimization-layer bug)")
        return (self.patch_reference if reference_copy and self.patch_reference else self.patch_fast)(pkg)


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


OPT_MUTANTS: tuple[Mutant, ...] = (
    Mutant("vector tail starts one late", "", mutants_opt.tail_off_by_one),
    Mutant("chunked column reduction drops its last chunk", "", mutants_opt.last_chunk_dropped),
    Mutant("thread shares drop the remainder", "", mutants_opt.thread_remainder_dropped),
    Mutant("GEMM drops the edge columns", "", mutants_opt.gemm_column_edge_dropped),
    Mutant("GEMM drops the edge rows", "", mutants_opt.gemm_row_edge_dropped),
    Mutant("GEMM reads B in place with its vectors swapped", "", mutants_opt.gemm_b_in_place_vectors_swapped),
    Mutant("unrolled outputs share accumulators", "", mutants_opt.shared_accumulators),
    Mutant("constant parameters swapped", "", mutants_opt.swapped_const_slots),
    Mutant("FMA guard checks one bound", "", mutants_opt.guard_one_bound),
    Mutant("replay key ignores input views", "", mutants_opt.replay_key_ignores_views),
    Mutant("vector MAX drops NaN", "", mutants_opt.vector_max_drops_nan),
    Mutant("vector polynomial coefficient off", "", mutants_opt.vector_polynomial_coefficient),
)
SETS = {"semantic": MUTANTS, "optimization": OPT_MUTANTS, "all": MUTANTS + OPT_MUTANTS}


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
    the mutant's focused strategy (the ci profile's random programs for one without a focus)
    unless another `strategy` is given."""
    start, state = time.time(), {"examples": 0}
    found: dict[str, Any] = {}

    def attempt(program: Program) -> None:
        if "program" in found:  # Hypothesis runs a failing example again: fail again, whatever the clock
            raise _FoundError
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

    if strategy is None:
        strategy = focused(mutant.focus, cfg) if mutant.focus else programs(PROFILES["ci"].gen)

    @hypothesis_seed(seed)
    @settings(max_examples=max_examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(strategy)
    def search(program: Program) -> None:
        attempt(program)

    try:
        with _poisoned(candidate):
            search()
    except _FoundError:
        pass
    elapsed = time.time() - start
    if "program" not in found:
        return Hunt(mutant.name, False, state["examples"], elapsed)
    return Hunt(mutant.name, True, state["examples"], elapsed, found["program"].render(candidate.__name__),
                found["detail"])


@contextlib.contextmanager
def _poisoned(candidate: ModuleType) -> Iterator[None]:
    """Memory handed out unzeroed is filled with 0xFF bytes while hunting (as CI runs the ci profile:
    ALLOC_POISON=1), so outputs a planted bug leaves unwritten never show a stale right answer."""
    settings = getattr(candidate, "config", None)
    if settings is None or not hasattr(settings, "override"):
        yield
        return
    with settings.override(alloc_poison=True):
        yield


def score(hunts: list[Hunt]) -> str:
    """A one-line mutation score plus one line per mutant."""
    killed = sum(h.killed for h in hunts)
    lines = [f"mutation score: {killed}/{len(hunts)} planted bugs caught"]
    lines += [f"  {'caught' if h.killed else 'MISSED'}: {h.mutant} ({h.examples} programs, {h.seconds:.1f}s)"
              for h in hunts]
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (module docstring); unknown arguments are refused by argparse (exit 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.mutation",
        description="Plant realistic bugs in fast one at a time and hunt each with conformance programs: "
                    "semantic bugs with focused strategies, optimization-layer bugs with the ci profile's "
                    "random programs. Prints the mutation score and, per caught bug, the program that exposed it.")
    parser.add_argument("--set", choices=sorted(SETS), default="all", help="which planted bugs (default: all)")
    parser.add_argument("--only", metavar="NAME", help="hunt only the bug whose name contains NAME")
    parser.add_argument("--examples", type=int, help="programs per hunt (default: 200 focused; the ci "
                        "profile's 2000 random)")
    parser.add_argument("--time-limit", type=float, help="seconds per hunt (default: 25 focused, 300 random)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """`python -m conformance.mutation`: hunt the chosen mutants in fast and print the score."""
    import importlib

    args = parse(argv)
    chosen = [m for m in SETS[args.set] if args.only is None or args.only.lower() in m.name.lower()]
    if not chosen:
        print(f"python -m conformance.mutation: no planted bug in set {args.set!r} matches --only {args.only!r}",
              file=sys.stderr)
        return 2
    fast, reference = importlib.import_module("fast"), importlib.import_module("reference")
    hunts = []
    for mutant in chosen:
        examples = args.examples or (200 if mutant.focus else PROFILES["ci"].examples)
        limit = args.time_limit or (25.0 if mutant.focus else 300.0)
        hunts.append(hunt(mutant, fast, reference, max_examples=examples, time_limit=limit, seed=args.seed))
        print(f"{'caught' if hunts[-1].killed else 'MISSED'}: {mutant.name} ({hunts[-1].examples} programs, "
              f"{hunts[-1].seconds:.1f}s)", file=sys.stderr, flush=True)
    print(score(hunts))
    for h in hunts:
        if h.killed:
            print(f"\n{h.mutant}: {h.detail}\n{h.snippet}")
    return 0 if all(h.killed for h in hunts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
