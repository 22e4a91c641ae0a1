"""fast.debug.compare on correct graphs: every program the conformance CI profile starts with agrees.

The subset (kept under a minute on two cores with a cold kernel cache): the directed programs of the
CI profile, except seven of the op tour's thirteen dtype sweeps (each sweep runs every op over one
dtype's edge values and costs ~30 kernel compiles; kept: bool, int8, uint64, float16, bfloat16,
float64), so also the movement, constants and loads tours, misuse, split reductions, ring
all-reduces, uneven and partly-real sharding, assign ordering and stale reads, row kernels; and the
first 40 random programs the CI profile's generator draws with a fixed seed. Each is replayed on
`fast` through the conformance driver under `fast.debug.trace()` (so its realizes, fetches and
assigns happen as in a conformance run), and `compare` of the values it fetched (or its last value)
must find no difference. A crash of compare fails the test too."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

import fast
from conformance.directed import directed_programs
from conformance.driver import _Replay, _ring
from conformance.profiles import PROFILES
from conformance.program import Fetch, Program
from conformance.strategies import programs
from conformance.vocab import DTYPES

CI = PROFILES["ci"].gen
RANDOM = 40


def random_programs() -> list[Program]:
    found: list[Program] = []

    @seed(12)
    @settings(max_examples=RANDOM, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs(CI))
    def draw(program: Program) -> None:
        found.append(program)
    draw()
    return found


def fetched_buffers(program: Program) -> list[Any]:
    """The program run on fast under trace; the buffers it fetched (else its last value)."""
    with fast.debug.trace(), _ring(fast, program.ring):  # RING as conformance runs the program
        replay = _Replay(fast, program, False)
        replay.run()
    values = replay.values
    wanted = list(dict.fromkeys(s.item for s in program.steps if isinstance(s, Fetch) and s.item in values))
    return [values[i] for i in wanted] or ([values[max(values)]] if values else [])


SWEEPS = ("bool", "int8", "uint64", "float16", "bfloat16", "float64")  # directed_programs starts with one per dtype
PROGRAMS = [("directed", index, program) for index, program in enumerate(directed_programs(CI))
            if index >= len(DTYPES) or DTYPES[index] in SWEEPS]


@pytest.mark.parametrize("kind, index, program", PROGRAMS, ids=[f"directed-{i}" for _, i, _ in PROGRAMS])
def test_directed_programs_agree(kind: str, index: int, program: Program) -> None:
    buffers = fetched_buffers(program)
    if buffers:
        report = fast.debug.compare(*buffers)
        assert report.first is None, f"{report}\n{program.render()}"


def test_random_programs_agree() -> None:
    drawn = random_programs()
    assert len(drawn) == RANDOM
    checked = 0
    for program in drawn:
        buffers = fetched_buffers(program)
        if buffers:
            report = fast.debug.compare(*buffers)
            assert report.first is None, f"{report}\n{program.render()}"
            checked += 1
    assert checked >= RANDOM // 2
