"""Conformance reaches fast's optimization layer: the lowering's path record, the coverage it feeds
(random programs only), the strategies aimed at it, and the planted optimization-layer bugs, each
shown to change a program's values (and to be gone once undone)."""
from __future__ import annotations

import importlib
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

import reference
from conformance import coverage, optpaths
from conformance.mutation import OPT_MUTANTS, Mutant, hunt
from conformance.profiles import GenConfig
from conformance.program import ArrayData, ConstLike, Elementwise, Fetch, Leaf, Movement, Program, Reduce, Step
from conformance.runner import Worker, check
from conformance.strategies import optimized
from conformance.strategies.builder import Builder

ROOT = Path(__file__).resolve().parents[2]
fast = importlib.import_module("fast")
FLOAT32_LANES = fast.runtime.cpu.renderer_options().lanes(fast.dtypes.float32)


@pytest.fixture
def observer() -> Iterator[optpaths.PathObserver]:
    watcher = optpaths.PathObserver()
    undo = watcher.install(fast)
    try:
        yield watcher
    finally:
        undo()


def _seeded(dtype: str, shape: tuple[int, ...], seed: int) -> Leaf:
    return Leaf(ArrayData(dtype, shape, seed=seed), "CLANG")


def _matmul(m: int, k: int, n: int, a: Step | None = None, b: Step | None = None) -> list[Step]:
    """(m, k) @ (k, n) as steps 0..8 (step 8: the (m, n) result, fetched)."""
    return [a or _seeded("float32", (m, k), 1), b or _seeded("float32", (k, n), 2),
            Movement(0, "reshape", (m, k, 1)), Movement(2, "expand", (m, k, n)),
            Movement(1, "reshape", (1, k, n)), Movement(4, "expand", (m, k, n)),
            Elementwise("MUL", (3, 5)), Reduce(6, "SUM", (1,)), Movement(7, "reshape", (m, n)), Fetch(8)]


def _structure_twice(second: tuple[float, float] = (3.0, -4.0)) -> Program:
    """x * 2 + 0.5 realized, then the same structure over a new leaf with the constants `second`."""
    steps: list[Step] = [_seeded("float32", (5, 7), 3), ConstLike(0, 2.0), Elementwise("MUL", (0, 1)),
                         ConstLike(0, 0.5), Elementwise("ADD", (2, 3)), Fetch(4),
                         _seeded("float32", (5, 7), 4), ConstLike(6, second[0]), Elementwise("MUL", (6, 7)),
                         ConstLike(6, second[1]), Elementwise("ADD", (8, 9)), Fetch(10)]
    return Program(tuple(steps))


def _flipped_replay() -> Program:
    """x * 2 + 0.5 realized, then the same over a flipped view of a new leaf of the same shape."""
    steps: list[Step] = [_seeded("float32", (5, 7), 3), ConstLike(0, 2.0), Elementwise("MUL", (0, 1)),
                         ConstLike(0, 0.5), Elementwise("ADD", (2, 3)), Fetch(4),
                         _seeded("float32", (5, 7), 4), Movement(6, "stride", (-1, 1)), ConstLike(7, 2.0),
                         Elementwise("MUL", (7, 8)), ConstLike(7, 0.5), Elementwise("ADD", (9, 10)), Fetch(11)]
    return Program(tuple(steps))


def _guard_matmul() -> Program:
    """A GEMM whose fused products would differ: each output adds -inf * 2 and (-2e19)^2 (above the
    largest float32: the unfused sum is -inf + inf = NaN, a fused one -inf). -2e19 is beyond the FMA
    bound, so the tiles must run unfused."""
    m, k, n = 32, 4, 8
    a = ArrayData("float32", (m, k), (-math.inf, -2e19, 0.0, 0.0) * m)
    b = ArrayData("float32", (k, n), (2.0,) * n + (-2e19,) * n + (0.0,) * (2 * n))
    return Program(tuple(_matmul(m, k, n, Leaf(a, "CLANG"), Leaf(b, "CLANG"))))


def _nan_max() -> Program:
    values = tuple(math.nan if i % 3 == 0 else float(i) for i in range(16))
    return Program((Leaf(ArrayData("float32", (16,), values), "CLANG"), _seeded("float32", (16,), 5),
                    Elementwise("MAX", (0, 1)), Fetch(2)))


def _exp2() -> Program:
    values = tuple(0.3 + i / 7 for i in range(16))
    return Program((Leaf(ArrayData("float32", (16,), values), "CLANG"), Elementwise("EXP2", (0,)), Fetch(1)))


def _pair(op: str, shape: tuple[int, ...]) -> Program:
    return Program((_seeded("float32", shape, 6), _seeded("float32", shape, 7), Elementwise(op, (0, 1)), Fetch(2)))


#: For each optimization-layer mutant, a program whose values it changes.
EXPOSED_BY: dict[str, Program] = {
    "vector tail starts one late": _pair("ADD", (37,)),
    "chunked column reduction drops its last chunk": Program((_seeded("int32", (64, 16), 8), Reduce(0, "SUM", (0,)),
                                                              Fetch(1))),
    "thread shares drop the remainder": _pair("ADD", (1021, 1031)),
    "GEMM drops the edge columns": Program(tuple(_matmul(33, 5, 35))),  # N: full micro-panels and an edge
    "GEMM drops the edge rows": Program(tuple(_matmul(37, 16, 16))),
    # N = NR, B contiguous: read in place (two vectors of this host's float32 lanes)
    "GEMM reads B in place with its vectors swapped": Program(tuple(_matmul(37, 16, 2 * FLOAT32_LANES))),
    "unrolled outputs share accumulators": Program(tuple(_matmul(8, 16, 8))),
    "constant parameters swapped": _structure_twice(),
    "FMA guard checks one bound": _guard_matmul(),
    "replay key ignores input views": _flipped_replay(),
    "vector MAX drops NaN": _nan_max(),
    "vector polynomial coefficient off": _exp2(),
}


def test_every_optimization_mutant_has_an_exposing_program() -> None:
    assert len(OPT_MUTANTS) >= 10
    assert sorted(EXPOSED_BY) == sorted(m.name for m in OPT_MUTANTS)


@pytest.mark.parametrize("mutant", OPT_MUTANTS, ids=[m.name for m in OPT_MUTANTS])
def test_mutant_changes_values_and_undo_restores_them(mutant: Mutant) -> None:
    program = EXPOSED_BY[mutant.name]
    assert not check(program, reference, fast).mismatches
    undo = mutant.apply(fast)
    try:
        with fast.config.override(alloc_poison=True):  # unwritten outputs never hold a stale right answer
            broken = check(program, reference, fast).mismatches
    finally:
        undo()
    assert broken, f"{mutant.name}: the program's values did not change"
    assert not check(program, reference, fast).mismatches


def _guard_rows_matmul(n: int) -> Program:
    """A GEMM whose B is within the FMA bound and whose A is not, on the negative side only: each output
    adds -3e38 * 4 and -3e38 * -4 (unfused: -inf + inf = NaN; fused: -inf). Only A's rows' flags
    can send the tiles unfused: with n = 8 (one micro-panel) the tiles' own checks
    (codegen/gemm_checked.py), with n = 5 lanes (three micro-panels of 2 vectors: 40 with AVX2, 80
    with AVX-512) the pass over each block's rows (gemm_loops.py)."""
    m, k = 32, 4
    a = ArrayData("float32", (m, k), (-3e38, -3e38, 0.0, 0.0) * m)
    b = ArrayData("float32", (k, n), (4.0,) * n + (-4.0,) * n + (0.0,) * (2 * n))
    return Program(tuple(_matmul(m, k, n, Leaf(a, "CLANG"), Leaf(b, "CLANG"))))


@pytest.mark.parametrize("checked_in_tiles", [True, False])
def test_guard_mutant_is_exposed_on_both_gemm_paths(checked_in_tiles: bool) -> None:
    mutant = next(m for m in OPT_MUTANTS if m.name == "FMA guard checks one bound")
    lanes = fast.runtime.cpu.renderer_options().lanes(fast.dtypes.float32)
    program = _guard_rows_matmul(8 if checked_in_tiles else 5 * lanes)
    assert not check(program, reference, fast).mismatches
    undo = mutant.apply(fast)
    try:
        broken = check(program, reference, fast).mismatches
    finally:
        undo()
    assert broken


def test_optimization_mutants_have_no_reference_twin() -> None:
    with pytest.raises(ValueError, match="no reference twin"):
        OPT_MUTANTS[0].apply(reference, reference_copy=True)


def test_random_ci_programs_catch_a_planted_tail_bug() -> None:
    """The hunt of an optimization mutant runs the ci profile's random programs (no focus)."""
    tail = next(m for m in OPT_MUTANTS if "tail" in m.name)
    assert tail.focus == ""
    found = hunt(tail, fast, reference, max_examples=200, time_limit=15.0)
    assert found.killed, f"not caught in {found.examples} random programs"


def test_lowering_records_the_paths_kernels_take(observer: optpaths.PathObserver) -> None:
    cases = {
        "tail": (_pair("ADD", (37,)), {"opt:vector-tail"}),
        "gemm": (Program(tuple(_matmul(33, 5, 7))), {"opt:gemm", "opt:gemm-column-edge"}),
        "tile": (Program(tuple(_matmul(8, 16, 8))), {"opt:register-tile", "opt:unrolled-outputs"}),
        "chunks": (EXPOSED_BY["chunked column reduction drops its last chunk"], {"opt:column-chunks"}),
        "threads": (_pair("ADD", (1021, 1031)), {"opt:threaded"}),
        "params": (_structure_twice((5.5, -6.25)), {"opt:const-params"}),  # constants no other test uses
    }
    for name, (program, expected) in cases.items():
        observer.take()
        assert not check(program, reference, fast).mismatches
        seen = observer.take()
        assert expected <= seen, f"{name}: {sorted(seen)}"


def test_thread_split_keys_follow_the_launch_chunk_count() -> None:
    launch = SimpleNamespace(threads_for=lambda work: 2, chunk_count=lambda work, threads, per: 8)
    program = SimpleNamespace(mem_bytes=1, flops=1, chunks_per_thread=0, split_counts=(1021, 1024, 3))
    assert optpaths.split_keys(program, launch) == {  # type: ignore[arg-type]
        "opt:thread-split-remainder", "opt:thread-split-even", "opt:thread-split-short"}
    single = SimpleNamespace(threads_for=lambda work: 1, chunk_count=lambda work, threads, per: 8)
    assert optpaths.split_keys(program, single) == {"opt:thread-split-even"}  # type: ignore[arg-type]


def test_directed_programs_add_no_optimization_coverage() -> None:
    worker = Worker(GenConfig(), "fast", 1.0, float("inf"))
    worker.record(_pair("ADD", (37,)), directed=True)
    assert not [key for key in worker.state.result.coverage if key.startswith("opt:")]
    worker.record(_pair("ADD", (37,)))
    assert worker.state.result.coverage["opt:vector-tail"] == 1


def test_required_optimization_items_show_in_the_table() -> None:
    counts = Counter({key: 1 for key in coverage.REQUIRED if not key.startswith("opt:")})
    assert coverage.missing(counts) == list(optpaths.REQUIRED_OPT)
    assert coverage.missing(counts, optimizations=False) == []
    table = coverage.table(counts)
    assert "opt:" in table and "gemm-row-edge=0!" in table


@pytest.mark.parametrize("action", ["act_matmul", "act_row_reduces", "act_replay", "act_gather", "act_large"])
def test_optimization_strategies_agree_with_reference(action: str) -> None:
    """A few programs of each action run on both packages without a disagreement."""
    @st.composite
    def made(draw: st.DrawFn) -> Program:
        builder = Builder(draw, GenConfig())
        getattr(optimized, action)(builder)
        return builder.finish()

    @hypothesis_seed(7)
    @settings(max_examples=3 if action == "act_large" else 8, deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(made())
    def run(program: Program) -> None:
        found = check(program, reference, fast).mismatches
        assert not found, found[0].detail

    run()


def test_stress_values_are_large_of_both_signs_or_negative_only() -> None:
    mixed = optimized.stress_values("float32", 2000, 1)
    negative = optimized.stress_values("float32", 2000, 1, negative=True)
    assert max(mixed) == math.inf and min(mixed) == -math.inf and any(0 < abs(v) < 1e-38 for v in mixed)
    assert min(negative) == -math.inf and max(negative) < 2.0 ** 64


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_mutation_cli_answers_help_and_refuses_unknown_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from conformance import mutation
    helped = _cli("-m", "conformance.mutation", "--help")  # as users run it: nothing is hunted
    assert helped.returncode == 0 and "usage: python -m conformance.mutation" in helped.stdout
    assert "programs," not in helped.stdout and not helped.stderr
    with pytest.raises(SystemExit) as refused:
        mutation.main(["--frobnicate"])
    assert refused.value.code == 2 and "unrecognized arguments: --frobnicate" in capsys.readouterr().err
    assert mutation.main(["--only", "no such bug"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_conformance_cli_refuses_bad_devices_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from conformance.__main__ import main
    for devices, words in (("FOO", "unknown device kind 'FOO'"), ("CLANG=x", "CLANG=x is not a device count")):
        assert main(["--devices", devices]) == 2
        out, err = capsys.readouterr()
        assert words in err and err.count("\n") == 1 and not out, err


def test_conformance_cli_refuses_a_device_the_machine_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    from conformance.__main__ import main, unusable_device
    if unusable_device("fast", ("CUDA",)) is None:
        pytest.skip("this machine runs CUDA: there is no unusable device to refuse")
    assert main(["--devices", "CUDA=1,CLANG", "--examples", "5"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "device CUDA cannot run on this machine" in err and not out


def test_tolerance_summary_says_what_it_means() -> None:
    from conformance.__main__ import tolerance_line
    assert "compared within its tolerance" in tolerance_line(0)
    assert tolerance_line(3).startswith("3 approximate values were not compared")


def test_captured_mode_compares_both_calls_and_sees_the_replay() -> None:
    from conformance.captured import capturable, check_captured, renewed
    program = Program(tuple(_matmul(8, 16, 8)))
    assert capturable(program) and not capturable(_replace_expect(program))
    empty = Program((Leaf(ArrayData("bool", (0,), ()), "CLANG"), Elementwise("ADD", (0, 0)), Fetch(1)))
    assert capturable(empty)  # a zero-size result replays as a new zero-size value each call
    assert not check_captured(empty, reference, fast)[0]
    fresh = renewed(program, 7)
    assert [s.data.seed for s in fresh.steps if isinstance(s, Leaf)] == [7, 8]
    found, replayed = check_captured(program, reference, fast)
    assert not found and replayed


def _replace_expect(program: Program) -> Program:
    from dataclasses import replace
    return replace(program, expect="ValueError")


class _StaleJit:
    """A broken capture: every call returns the first call's results."""

    def __init__(self, fn: object) -> None:
        self.fn, self.first, self.traces = fn, None, 0

    def __call__(self, *args: object) -> object:
        if self.first is None:
            self.first, self.traces = self.fn(*args), 1  # type: ignore[operator]
        return self.first


def test_captured_mode_catches_a_replay_with_stale_results() -> None:
    import types

    from conformance.captured import check_captured
    stale = types.ModuleType("stale_fast")
    stale.__dict__.update({k: v for k, v in vars(fast).items() if not k.startswith("__")})
    stale.jit = _StaleJit  # type: ignore[attr-defined]
    found, _ = check_captured(Program(tuple(_matmul(8, 16, 8))), reference, stale)
    assert found and found[0].signature.startswith("captured:") and "captured call 2" in found[0].detail


def test_sqrt_of_an_approximate_value_has_a_tolerance() -> None:
    """A layernorm's sqrt(sum(...)) is compared within a tolerance, not skipped."""
    from conformance.driver import replay
    program = Program((_seeded("float32", (4, 9), 9), Reduce(0, "SUM", (1,)), Elementwise("MUL", (1, 1)),
                       Elementwise("SQRT", (2,)), Fetch(3)))
    outcome = replay(reference, program, tolerances=True)
    tolerance = outcome.fetched[0].tolerance
    assert outcome.tolerance_failures == 0 and tolerance is not None
    assert (tolerance > 0).all() and (tolerance < 0.05).all()  # sqrt of the sum's tolerance: loose, finite
    assert not check(program, reference, fast).mismatches
