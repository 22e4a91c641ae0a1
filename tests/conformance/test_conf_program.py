"""The program form: snippets reproduce the driver's results; data builds and renders exactly."""
from __future__ import annotations

import contextlib
import io
import math

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings

import reference
from conformance.directed import directed_programs
from conformance.driver import replay
from conformance.profiles import GenConfig
from conformance.program import ArrayData, Elementwise, Fetch, Leaf, Program, Reduce
from conformance.strategies import programs


def _snippet_results(program: Program) -> object:
    namespace: dict[str, object] = {}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(program.render(candidate="reference"), namespace)  # noqa: S102 - our own rendered snippet
    assert printed.getvalue().startswith("reference:")
    return namespace["attempt"](reference)  # type: ignore[operator]


def _same_arrays(ours: list[np.ndarray], theirs: list[np.ndarray]) -> bool:
    return len(ours) == len(theirs) and all(
        a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        for a, b in zip(ours, theirs, strict=True))


@settings(max_examples=40, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(programs(GenConfig(max_ops=4)))
def test_snippet_reproduces_the_replay(program: Program) -> None:
    outcome = replay(reference, program)
    result = _snippet_results(program)
    if outcome.error is not None:
        assert isinstance(result, str) and result.startswith(outcome.error.kind)
    else:
        assert _same_arrays([f.array for f in outcome.fetched], result)  # type: ignore[arg-type]


def test_directed_programs_render_and_replay() -> None:
    for program in directed_programs(GenConfig())[:6]:
        outcome = replay(reference, program)
        assert outcome.error is None and _same_arrays([f.array for f in outcome.fetched],
                                                      _snippet_results(program))  # type: ignore[arg-type]


def test_array_data_round_trips_edges_and_random_data() -> None:
    edges = ArrayData("float16", (2, 2), (math.nan, -0.0, math.inf, 65504.0))
    built = edges.build()
    assert built.dtype == np.float16 and built.shape == (2, 2) and np.isnan(built[0, 0])
    assert np.signbit(built[0, 1]) and built[1, 0] == np.inf and "nan" in edges.render()
    ints = ArrayData("uint64", (2,), (0, 2 ** 64 - 1)).build()
    assert ints.tolist() == [0, 2 ** 64 - 1]
    big = ArrayData("int32", (3, 5), seed=4)
    assert np.array_equal(big.build(), big.build()) and big.build().shape == (3, 5)


def test_steps_refer_to_earlier_steps_only() -> None:
    program = Program((Leaf(ArrayData("int8", (2,), (1, 2)), "CLANG"), Elementwise("ADD", (0, 0)),
                       Reduce(1, "SUM", (0,)), Fetch(2)))
    assert [step.refs() for step in program.steps] == [(), (0, 0), (1,), (2,)]
    assert "v1 = v0.e(T.BinaryOps.ADD, v0)" in program.render()


def _named_devices(program: Program) -> set[str]:
    """Every device a program's steps name (a step's `device`, a shard's `devices`)."""
    named: set[str] = set()
    for step in program.steps:
        device = getattr(step, "device", None)
        if isinstance(device, str) and device:
            named.add(device)
        named.update(getattr(step, "devices", None) or ())
    return named


def test_directed_programs_stay_within_the_devices_the_run_allows() -> None:
    # `--devices CUDA=1,CLANG` on a one-GPU machine: the tour's copy went to CUDA:1 (an H200 run)
    cfg = GenConfig(kinds=("CUDA", "CLANG"), kind_limits=(("CUDA", 1),))
    allowed = set(cfg.single_devices()) | {cfg.device("CLANG", i) for i in range(cfg.max_devices)}
    named = set().union(*(_named_devices(program) for program in directed_programs(cfg)))
    assert "CUDA" in named and "CUDA:1" not in named and named <= allowed
    # with two devices of the kind the tour copies between them
    two = GenConfig(kinds=("CLANG",), max_devices=2)
    assert "CLANG:1" in set().union(*(_named_devices(program) for program in directed_programs(two)))
