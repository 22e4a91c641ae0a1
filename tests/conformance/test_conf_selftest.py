"""reference against itself: the strategies build programs reference accepts (or rejects exactly as
planned) and the drivers, tolerances and comparison find nothing to report."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import reference
from conformance.directed import directed_programs
from conformance.profiles import GenConfig
from conformance.program import Program
from conformance.runner import check
from conformance.strategies import programs


def _assert_clean(program: Program) -> None:
    mismatches = check(program, reference, reference).mismatches
    if mismatches:
        pytest.fail("\n".join(m.signature + ": " + m.detail for m in mismatches) + "\n" + program.render("reference"))


SETTINGS = settings(deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))


@settings(SETTINGS, max_examples=40)
@given(st.data())
def test_random_programs_replay_cleanly(data: st.DataObject) -> None:
    for _ in range(4):
        _assert_clean(data.draw(programs(GenConfig())))


@settings(SETTINGS, max_examples=60)
@given(programs(replace(GenConfig(), p_invalid=1.0, p_multi=0.5)))
def test_invalid_programs_raise_the_planned_error(program: Program) -> None:
    _assert_clean(program)


def test_directed_programs_replay_cleanly() -> None:
    for program in directed_programs(GenConfig(disk_dir="/nonexistent-dir-unused")):
        _assert_clean(program)
