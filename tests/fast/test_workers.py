"""The hot workers of fast/runtime/workers.py: native jobs (kernels called by the worker's own loop,
with every argument in its place), Python jobs and their errors, sleeping and waking, long shares,
and the launch path that hands kernel shares over as native calls."""
from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

from fast import config
from fast.runtime import clang, launch, workers
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


def run_alone(team: workers.Crew, first: object, jobs: list[workers.Job]) -> None:
    with team.lock:
        team.run(first, jobs)  # type: ignore[arg-type]


def test_native_job_passes_every_argument_in_order(team: workers.Crew) -> None:
    program = weighted_sum_program()
    out = np.zeros(1, dtype=np.int64)
    values = [(-1) ** k * (3 * k + 7) * 1_000_003 for k in range(ARGUMENTS)]
    call = workers.NativeCall(program.address, (out.ctypes.data, *values))
    assert team.accepts(call)
    run_alone(team, lambda: None, [call])
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
    assert not team.accepts(too_long)
    ran: list[int] = []
    with pytest.raises(ValueError, match="native job beyond the limits"):
        run_alone(team, lambda: ran.append(1), [too_long])  # refused before anything runs
    assert not ran


def test_native_job_after_the_worker_slept(team: workers.Crew) -> None:
    """With no polling window the worker sleeps between jobs; the doorbell still wakes it, every time."""
    buffer = np.zeros(4096, dtype=np.uint8)
    with config.override(worker_spin_us=0):
        for value in (1, 2, 3):
            time.sleep(0.02)
            run_alone(team, lambda: None, [workers.NativeCall(libc_address("memset"),
                                                              (buffer.ctypes.data, value, buffer.size))])
            assert (buffer == value).all()


def test_long_native_job_is_waited_for(team: workers.Crew) -> None:
    """A share that outlasts the caller's polling window: the caller naps until it ends."""
    with config.override(worker_spin_us=50):
        start = time.perf_counter()
        run_alone(team, lambda: None, [workers.NativeCall(libc_address("usleep"), (30_000,))])
        assert time.perf_counter() - start >= 0.03


def test_python_job_and_its_error(team: workers.Crew) -> None:
    seen: list[int] = []
    run_alone(team, lambda: seen.append(0), [(seen.append, (1,), {})])
    assert sorted(seen) == [0, 1]

    def fail() -> None:
        raise ValueError("share failed")

    with pytest.raises(ValueError, match="share failed"):
        run_alone(team, lambda: None, [(fail, (), {})])
    run_alone(team, lambda: seen.append(2), [(seen.append, (3,), {})])  # the crew still works
    assert sorted(seen) == [0, 1, 2, 3]


def test_error_of_the_callers_share_is_raised_after_the_workers_finish(team: workers.Crew) -> None:
    buffer = np.zeros(64, dtype=np.uint8)

    def fail() -> None:
        raise RuntimeError("caller's share")

    with pytest.raises(RuntimeError, match="caller's share"):
        run_alone(team, fail, [workers.NativeCall(libc_address("memset"), (buffer.ctypes.data, 9, buffer.size))])
    assert (buffer == 9).all()


def test_more_jobs_than_workers_is_an_error(team: workers.Crew) -> None:
    with pytest.raises(ValueError, match="2 jobs for 1 workers"):
        run_alone(team, lambda: None, [(print, (), {}), (print, (), {})])


def test_kernel_shares_go_to_the_workers_as_native_calls(team: workers.Crew) -> None:
    program = weighted_sum_program()
    out = np.zeros(1, dtype=np.int64)

    class Handle:
        address = out.ctypes.data

    job = launch._share(team, program, [HostMemory(out.view(np.uint8), 0, 8)], tuple(range(ARGUMENTS)))
    assert isinstance(job, workers.NativeCall) and job.arguments[1:] == tuple(range(ARGUMENTS))
    with pytest.raises(TypeError, match="weighted: expected CLANG buffers, got Handle"):
        launch._share(team, program, [Handle()], tuple(range(ARGUMENTS)))
    too_many = tuple(range(ARGUMENTS + 1))
    assert isinstance(launch._share(team, program, [HostMemory(out.view(np.uint8), 0, 8)], too_many), tuple)


def test_polling_budget_is_calibrated() -> None:
    assert workers.polls_per_us() > 0
    with config.override(worker_spin_us=0):
        assert workers.idle_polls() == 1
    with config.override(worker_spin_us=1000):
        assert workers.idle_polls() >= 1000 * workers.polls_per_us() - 1


def test_worker_spin_us_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="WORKER_SPIN_US=-1 must be 0 or more"):
        config.Config.from_env({"WORKER_SPIN_US": "-1"})
    assert config.Config.from_env({"WORKER_SPIN_US": "0"}).worker_spin_us == 0
