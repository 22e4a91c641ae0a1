"""The CI profile exercises every op, dtype, movement op and sharding feature (coverage.REQUIRED)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from conformance import coverage
from conformance.directed import directed_programs
from conformance.profiles import PROFILES
from conformance.program import Program
from conformance.strategies import programs

PER_WORKER = 200  # coverage only grows with more programs: if these cover everything, the profile does


def _ci_coverage() -> tuple[Counter[str], Counter[str]]:
    """(counts of every program, counts of the fixed programs alone) for the CI profile's fixed
    programs and the first random programs of each of two CI workers (--seed 0)."""
    profile = PROFILES["ci"]
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
    return counts, fixed


def _ci_coverage_in_a_new_process() -> tuple[Counter[str], Counter[str]]:
    """`_ci_coverage` in a new interpreter, as `python -m conformance` starts: the random programs
    drawn after the fixed ones depend on what the process imported and built before (in this
    test's process, after other test modules: 82 to 90 of the 92 items, where a new process
    reaches 89), so only a new process measures what a CI run generates."""
    code = ("import json, sys\nfrom tests.conformance.test_conf_coverage import _ci_coverage\n"
            "counts, fixed = _ci_coverage()\njson.dump([counts, fixed], sys.stdout)\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True,
                          env={**os.environ, "PYTHONPATH": str(root)})
    counts, fixed = json.loads(done.stdout)
    return Counter(counts), Counter(fixed)


def test_ci_profile_covers_every_required_item() -> None:
    """The fixed programs (op tour and directed ones) every run starts with exercise every required
    item; the first random programs of each of two CI workers (--seed 0) reach most on their own."""
    assert PROFILES["ci"].examples >= 2 * PER_WORKER
    counts, fixed = _ci_coverage_in_a_new_process()
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
