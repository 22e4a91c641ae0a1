"""The hot workers of fast/runtime/workers.py: native batches (kernels called by the worker's own loop,
with every argument in its place), Python jobs, sleeping and waking, long tasks, the limits of the
board, and the launch path that hands kernel chunks over as native calls. Claiming itself (late
workers, workers that never start, errors, bits across thread counts): tests/fast/test_thread_claiming.py."""
from __future__ import annotations

import ctypes
import threading
import time
import types
from collections.abc import Callable

import numpy as np
import pytest

from fast import config
from fast.runtime import clang, launch, workers
from fast.runtime.claims import Claims
from fast.runtime.host import HostMemory

pytestmark = pytest.mark.skipif(workers.natives() is None, reason="needs llvmlite (the polling loops are JIT-compiled)")
ARGUMENTS = workers.MAX_NATIVE_ARGS - 1  # the output pointer plus these int64s: the longest native call

WEIGHTED_SUM = "#include <stdint.h>\nvoid weighted(int64_t* out, {params}) {{ out[0] = {terms}; }}\n"


def weighted_sum_program() -> clang.ClangProgram:
    """A C function `weighted(out, a0, ..., aN)` storing sum((k + 1) * a_k): every argument counts."""
    params = ", ".join(f"int64_t a{k}" for k in range(ARGUMENTS))
    terms = " + ".join(f"{k + 1}LL * a{k}" for k in range(ARGUMENTS))
    library = clang.ClangCompiler().compile(WEIGHTED_SUM.format(params=params, terms=terms))
    return clang.ClangProgram("weighted", library)


def libc_address(name: str) -> int:
    """The address of a C library function of this process."""
    return ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value or 0


@pytest.fixture(scope="module")
def team() -> workers.Crew:
    crew = workers.crew(1)
    assert crew is not None
    return crew


def run_alone(team: workers.Crew, first: object, batches: list[workers.NativeBatch]) -> None:
    with team.lock:
        team.batches(first, batches)  # type: ignore[arg-type]


def one(call: workers.NativeCall) -> workers.NativeBatch:
    return workers.NativeBatch((call,))


def test_native_job_passes_every_argument_in_order(team: workers.Crew) -> None:
    program = weighted_sum_program()
    out = np.zeros(1, dtype=np.int64)
    values = [(-1) ** k * (3 * k + 7) * 1_000_003 for k in range(ARGUMENTS)]
    batch = one(workers.NativeCall(program.address, (out.ctypes.data, *values)))
    assert team.accepts(batch)
    run_alone(team, lambda: None, [batch])
    assert int(out[0]) == sum((k + 1) * value for k, value in enumerate(values))


def test_native_batch_runs_its_calls_in_order(team: workers.Crew) -> None:
    """Three calls of different lengths in one job, the later ones over what the earlier wrote."""
    program = weighted_sum_program()
    out = np.zeros(3, dtype=np.int64)
    buffer = np.zeros(8, dtype=np.uint8)
    values = tuple(range(1, ARGUMENTS + 1))
    batch = workers.NativeBatch((
        workers.NativeCall(libc_address("memset"), (buffer.ctypes.data, 5, buffer.size)),
        workers.NativeCall(program.address, (out.ctypes.data + 8, *values)),
        workers.NativeCall(libc_address("memcpy"), (out.ctypes.data, out.ctypes.data + 8, 8)),
    ))
    assert team.accepts(batch)
    run_alone(team, lambda: None, [batch])
    expected = sum((k + 1) * value for k, value in enumerate(values))
    assert (buffer == 5).all() and out.tolist() == [expected, expected, 0]


def test_native_batches_beyond_the_job_words_are_not_accepted(team: workers.Crew) -> None:
    call = workers.NativeCall(1, tuple(range(workers.MAX_NATIVE_ARGS)))
    fitting = workers.JOB_WORDS // (2 + workers.MAX_NATIVE_ARGS)
    assert team.accepts(workers.NativeBatch((call,) * fitting))
    assert not team.accepts(workers.NativeBatch((call,) * (fitting + 1)))
    assert not team.accepts(workers.NativeBatch(()))


def test_native_calls_beyond_the_limit_are_not_accepted(team: workers.Crew) -> None:
    too_long = workers.NativeCall(1, tuple(range(workers.MAX_NATIVE_ARGS + 1)))
    assert not team.accepts(one(too_long))
    assert not team.accepts(workers.NativeCall(1, tuple(range(workers.MAX_NATIVE_ARGS - 1))))  # + core, cores
    ran: list[int] = []
    with pytest.raises(ValueError, match="native job beyond the limits"):
        run_alone(team, lambda: ran.append(1), [one(too_long)])  # refused before anything runs
    with pytest.raises(ValueError, match="native job beyond the limits"), team.lock:
        team.chunks(workers.NativeCall(1, tuple(range(workers.MAX_NATIVE_ARGS - 1))), 4)
    assert not ran


def test_a_sleeping_worker_is_woken_for_a_batch(team: workers.Crew) -> None:
    """With no polling window the worker sleeps between jobs; the doorbell wakes it: the batch is done
    while the caller is still busy with its own part."""
    buffer = np.zeros(4096, dtype=np.uint8)
    with config.override(worker_spin_us=0):
        for value in (1, 2, 3):
            time.sleep(0.02)

            def first(value: int = value) -> None:
                deadline = time.perf_counter() + 10
                while buffer[-1] != value and time.perf_counter() < deadline:
                    time.sleep(0.001)
                assert buffer[-1] == value, "the worker did not wake"
            run_alone(team, first, [one(workers.NativeCall(libc_address("memset"),
                                                           (buffer.ctypes.data, value, buffer.size)))])
            assert (buffer == value).all()


def test_long_native_job_is_waited_for(team: workers.Crew) -> None:
    """A task that outlasts the caller's polling window: the caller naps until it ends."""
    start = time.perf_counter()
    run_alone(team, lambda: time.sleep(0.001), [one(workers.NativeCall(libc_address("usleep"), (30_000,)))])
    assert time.perf_counter() - start >= 0.03


def test_python_jobs_go_to_idle_workers_only(team: workers.Crew) -> None:
    release = threading.Event()
    seen: list[str] = []
    with team.lock:
        assert team.python(lambda: release.wait(10) and seen.append("first"), 1) == 1  # type: ignore[func-returns-value]
        time.sleep(0.01)
        assert team.python(lambda: seen.append("second"), 1) == 0  # busy: skipped, not queued
    release.set()
    deadline = time.perf_counter() + 10
    while not team.workers[0].idle() and time.perf_counter() < deadline:
        time.sleep(0.001)
    assert seen == ["first"] and team.workers[0].idle()


def test_python_claims_on_the_crew_raise_the_first_error(team: workers.Crew) -> None:
    ran: list[int] = []

    def task(number: int) -> None:
        ran.append(number)
        if number in (2, 4):
            raise ValueError(f"task {number} failed")
    claims = Claims([lambda n=n: task(n) for n in range(6)])  # type: ignore[misc]
    with team.lock:
        team.python(claims.help, 1)
    with pytest.raises(ValueError, match="task 2 failed"):
        claims.finish()
    assert sorted(ran) == list(range(6))  # a failure stops nothing: every task ran once


def test_error_of_the_callers_part_is_raised_after_the_batches_ran(team: workers.Crew) -> None:
    buffer = np.zeros(64, dtype=np.uint8)

    def fail() -> None:
        raise RuntimeError("caller's part")

    with pytest.raises(RuntimeError, match="caller's part"):
        run_alone(team, fail, [one(workers.NativeCall(libc_address("memset"), (buffer.ctypes.data, 9, buffer.size)))])
    assert (buffer == 9).all()


def test_batches_beyond_the_board_are_an_error(team: workers.Crew) -> None:
    call = workers.NativeCall(1, tuple(range(workers.MAX_NATIVE_ARGS)))
    fitting = workers.NativeBatch((call,) * (workers.JOB_WORDS // (2 + workers.MAX_NATIVE_ARGS)))
    too_many = workers.BOARD_WORDS // fitting.words() + 1
    with pytest.raises(ValueError, match="do not fit the board"):
        run_alone(team, lambda: None, [fitting] * too_many)


def test_kernel_chunks_go_to_the_workers_as_native_calls(team: workers.Crew) -> None:
    program = weighted_sum_program()
    out = np.zeros(1, dtype=np.int64)

    class Handle:
        address = out.ctypes.data

    call = program.native_call([HostMemory(out.view(np.uint8), 0, 8)], tuple(range(ARGUMENTS - 2)))
    assert isinstance(call, workers.NativeCall) and team.accepts(call)
    with team.lock:
        team.chunks(call, 1)  # core 0, cores 1 appended: the last two weighted arguments
    assert int(out[0]) == sum((k + 1) * k for k in range(ARGUMENTS - 2)) + (ARGUMENTS - 1) * 0 + ARGUMENTS * 1
    with pytest.raises(TypeError, match="weighted: expected CLANG buffers, got Handle"):
        launch.run_chunks(program, [Handle()], tuple(range(ARGUMENTS - 2)), 2, 4)


@pytest.mark.parametrize("idle_us, base_us, most_us, expected", [
    (float("inf"), 2000, 20000, 2000),  # no idle spell yet, or woken by the timeout: the base
    (500, 2000, 20000, 2000),  # a short spell: never below the base
    (8000, 2000, 20000, 12000),  # 1.5 times the spell: the next one of that length is caught
    (19000, 2000, 20000, 20000),  # ... at most the cap
    (20001, 2000, 20000, 2000),  # a spell longer than the cap: polling could not have caught it
    (8000, 0, 20000, 0),  # WORKER_SPIN_US=0: sleep at once, whatever the spells
    (8000, 30000, 20000, 30000),  # a base above the cap wins
])
def test_adapted_spin(idle_us: float, base_us: int, most_us: int, expected: float) -> None:
    assert workers.adapted_spin_us(idle_us, base_us, most_us) == expected


def test_a_worker_polls_longer_after_a_short_idle_spell(team: workers.Crew, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs 20 ms apart with a 0.5 ms base window: the worker sleeps through the first gap, is rung
    after a gap (the caller's, CrewState.gap_us) longer than the base and within the 1 s cap, so it
    then polls longer than the base after a job (1.5 times the gap: 30 ms on a quiet host; a loaded
    host may wake it late or early, so only "longer than the base" is asserted, the rule itself is
    `test_adapted_spin`); with the cap at the base it never polls longer than the base. What the
    threads ask `polls` for is recorded (the caller's 50 us waits included). Each run starts with
    the worker asleep (an earlier test may have left it polling for up to the default cap)."""
    asked: list[float] = []
    real = workers.polls

    def recording(microseconds: float) -> int:
        asked.append(microseconds)
        return real(microseconds)
    monkeypatch.setattr(workers, "polls", recording)
    buffer = np.zeros(64, dtype=np.uint8)

    def run(most_us: int) -> list[float]:
        with config.override(worker_spin_us=500, worker_spin_max_us=most_us):
            _eventually(lambda: all(worker.asleep for worker in team.workers), "the worker never slept")
            asked.clear()
            for value in range(6):
                time.sleep(0.02)
                run_alone(team, lambda: None, [one(workers.NativeCall(libc_address("memset"),
                                                                      (buffer.ctypes.data, value, buffer.size)))])
            time.sleep(0.01)
        return list(asked)
    assert max(run(500)) == 500
    assert max(run(1_000_000)) > 500


class _IdleLoops:
    """Stands in for the native loops of one worker: every polling window ends with nothing to do
    (`serve` returns the generation it was given); counts the windows; once `parked`, it blocks the
    thread for good."""

    def __init__(self) -> None:
        self.windows = 0
        self.parked = False

    def serve(self, address: int, board: int, seen: int, first: int, limit: int) -> int:
        while self.parked:
            threading.Event().wait()  # the test is over: the daemon thread stays here
        self.windows += 1
        time.sleep(0.0005)
        return seen


def _eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait up to 10 s for `condition` (a state another thread reaches), then assert it."""
    deadline = time.perf_counter() + 10
    while not condition() and time.perf_counter() < deadline:
        time.sleep(0.001)
    assert condition(), what


def test_workers_keep_polling_while_a_kernel_sequence_runs() -> None:
    """The native sequence posts each kernel's chunks with no doorbell, so a worker must not fall
    asleep while the crew's `in_sequence` is set (it would stay asleep until its doorbell's timeout,
    and the caller would run every chunk alone); once the sequence ends it sleeps as before."""
    loops = _IdleLoops()
    state = workers.CrewState()
    state.in_sequence = True
    worker = workers._Worker(loops, np.zeros(workers.BOARD_WORDS, dtype=np.int64), state)  # type: ignore[arg-type]
    try:
        _eventually(lambda: loops.windows >= 20, "the worker stopped polling during the sequence")
        assert not worker.asleep
        state.in_sequence = False
        _eventually(lambda: worker.asleep, "the worker did not sleep after the sequence")
    finally:
        loops.parked = True
        worker.doorbell.set()


def test_a_sequence_sets_and_clears_the_crews_state(team: workers.Crew, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Crew.sequence` marks the crew as in a sequence exactly while the native program runs."""
    seen: list[bool] = []

    def program(board: int, words: int, steps: int, wait_polls: int) -> int:
        seen.append(team.state.in_sequence)
        return team.generation
    monkeypatch.setattr(team, "loops", types.SimpleNamespace(program=program))  # (Natives is frozen)
    with team.lock:
        team.sequence(0, 0)
    assert seen == [True] and not team.state.in_sequence


def test_the_caller_measures_the_gap_between_jobs(team: workers.Crew) -> None:
    """CrewState.gap_us: from the return of one native job until the post of the next, as the caller
    saw it, holding the GIL in C code meanwhile (as a garbage collection does: a worker whose polling
    ended could not note its own idle time until the post)."""
    buffer = np.zeros(64, dtype=np.uint8)
    job = [one(workers.NativeCall(libc_address("memset"), (buffer.ctypes.data, 1, buffer.size)))]
    run_alone(team, lambda: None, job)
    start = time.perf_counter()
    sum(range(2_000_000))  # C code: keeps the GIL throughout
    held = time.perf_counter() - start
    run_alone(team, lambda: None, job)
    assert held * 1e6 <= team.state.gap_us < held * 1e6 + 50_000


class _RecordingLoops(_IdleLoops):
    """`_IdleLoops` that records the first polling window each `serve` was given."""

    def __init__(self) -> None:
        super().__init__()
        self.firsts: list[int] = []

    def serve(self, address: int, board: int, seen: int, first: int, limit: int) -> int:
        self.firsts.append(first)
        return super().serve(address, board, seen, first, limit)


def test_a_rung_worker_polls_after_the_callers_gap() -> None:
    """A worker rung after the caller's gap of 30 ms polls 45 ms after its next job (1.5 times the
    gap, `adapted_spin_us`), whatever its own clock says; with no gap measured yet it uses its own."""
    loops = _RecordingLoops()
    state = workers.CrewState()
    with config.override(worker_spin_us=500, worker_spin_max_us=1_000_000):
        worker = workers._Worker(loops, np.zeros(workers.BOARD_WORDS, dtype=np.int64), state)  # type: ignore[arg-type]
        try:
            _eventually(lambda: worker.asleep, "the worker did not sleep")
            state.gap_us = 30_000
            worker.doorbell.set()
            _eventually(lambda: workers.polls(45_000) in loops.firsts, f"windows {loops.firsts}")
        finally:
            loops.parked = True
            worker.doorbell.set()
