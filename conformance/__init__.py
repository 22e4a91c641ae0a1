"""conformance: property-based proof that `fast` agrees with `reference` (SPEC §1, docs/semantics.md).

Modules: `program` (the neutral program form, its runnable snippets, and `StepVisitor`: one method
per step class, which the driver, analysis, tolerance and coverage subclass), `analysis` and `layout`
(static facts about each value; the SPEC §5 sharding rules), `strategies` (Hypothesis generators of
valid and deliberately invalid programs, symbolic ones replayed under several bindings, plus
focused ones for mutation tests), `tour` and
`directed` (fixed programs every run starts with: every op over every dtype's edge values, split
reductions, ring all-reduces, sharding corner cases), `driver` (replay through a package's public
API), `tolerance` (tolerance graphs built on the expected side), `compare`, `coverage`, `minimize`,
`runner` (worker processes, shrinking, de-duplicated failures), `mutation` with `mutants_fast`,
`mutants_reference` and `mutants_opt` (planted bugs the suite must catch), `optpaths` (coverage of
fast's optimization paths, from the record its lowering keeps) and `captured` (programs run as
`fast.jit` functions, called twice).

Run: `python -m conformance --profile ci` (CI, about 2,000 programs) or `--profile full` (20,000);
`python -m conformance.mutation` prints the mutation score against `fast` (`--help` for options).
"""
from conformance.program import Program

__all__ = ["Program"]
