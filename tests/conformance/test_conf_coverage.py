"""The CI profile exercises every op, dtype, movement op and sharding feature (coverage.REQUIRED)."""
from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from conformance import coverage
from conformance.directed import directed_programs
from conformance.profiles import PROFILES
from conformance.program import Program
from conformance.strategies import programs

PER_WORKER = 200  # coverage only grows with more programs: if these cover everything, the profile does


def test_ci_profile_covers_every_required_item() -> None:
    """The fixed programs (op tour and directed ones) every run starts with exercise every required
    item; the first random programs of each of two CI workers (--seed 0) reach most on their own."""
    profile = PROFILES["ci"]
    assert profile.examples >= 2 * PER_WORKER
    counts: Counter[str] = Counter()
    fixed: Counter[str] = Counter()
    for program in directed_programs(profile.gen):
        fixed.update(coverage.program_keys(program))
    counts.update(fixed)
    for worker in range(2):
        @hypothesis_seed(worker * 1000)  # the runner's seed for worker `worker`, round 0, --seed 0
        @settings(max_examples=PER_WORKER, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(programs(profile.gen))
        def collect(program: Program) -> None:
            counts.update(coverage.program_keys(program))
        collect()
    # the `opt:` items are what fast's kernels did when they ran (conformance/optpaths.py), counted from
    # random programs in the workers: tests/conformance/test_conf_optpaths.py and --require-coverage
    static = [key for key in coverage.REQUIRED if not key.startswith("opt:")]
    assert coverage.missing(counts, optimizations=False) == []
    assert coverage.missing(fixed, optimizations=False) == [], "the fixed programs alone must reach every item"
    reached = len(static) - len(coverage.missing(counts - fixed, optimizations=False))
    assert reached >= 0.9 * len(static), "random generation alone should reach most items"
    table = coverage.table(counts)
    for key in static:
        assert f"{key.split(':', 1)[1]}=" in table
    assert "!" not in table.split("     opt:")[0]


def test_table_flags_what_was_missed() -> None:
    table = coverage.table(Counter({"op:ADD": 3}))
    assert "ADD=3" in table and "SUB=0!" in table and "ring-env=0!" in table
    assert "op:SUB" in coverage.missing(Counter({"op:ADD": 3}))
