"""Hot worker threads that claim work: no caller ever waits for a thread that has not started.

A thread pool hands work over through a condition variable: on virtual machines a sleeping thread
takes 100-500 µs to wake. A `Crew` keeps its workers polling in native code (runtime/native_loops.py,
GIL released) for `config.worker_spin_us` (WORKER_SPIN_US, 2 ms) after each job, then sleeping on
an Event that posting sets (the words stay the source of truth, the Event is only a doorbell). A
worker whose last idle spell was short polls longer next time, up to WORKER_SPIN_MAX_US (100 ms:
`adapted_spin_us`), so a caller that does other work between kernels finds it awake, a full
garbage collection included (OpenBLAS's threads poll about 100 ms, Intel OpenMP's 200 ms). A
worker woken by its doorbell's timeout, with nothing to do, sleeps again at once: an idle process
does not poll, and polling yields the core every `YIELD_EVERY` polls. While the crew runs a kernel
sequence (`Crew.sequence`, whose native program posts chunks with no doorbell), workers do not sleep.

Claiming (`Crew.chunks`, `Crew.batches`). Native work is posted on the crew's claim board as tasks
that any thread may claim with an atomic compare-and-swap: the chunks of one threaded kernel
(`core = i, cores = chunks`), or the native batches of a replay's lanes. The caller claims too, in
one native call (`fast_claim`), once it has nothing else to do; it then waits only for the tasks a
worker has already claimed (polling `CLAIM_WAIT_US`, then napping). A worker that does not get a
core therefore strands nothing: what it has not claimed when the caller runs out is done by the
caller. Kernel shares cannot raise (they are native calls); refused jobs raise ValueError before
anything runs.

Python jobs (`Crew.python`): a callable posted to each idle worker and not waited for (the callable
does its own claiming, fast/runtime/claims.py, and whoever posted it waits only for claimed work).
A worker still running an earlier job is skipped. While a worker runs a Python job it does not
watch the board; it joins afterwards (or finds nothing left).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fast import config
from fast.runtime import cpu
from fast.runtime.native_loops import (
    ARGS,
    BATCHES,
    CALL,
    CHUNKS,
    CLAIM,
    COUNT,
    DONE,
    FINISHED,
    MAX_NATIVE_ARGS,
    MAX_TASKS,
    MODE,
    POSTED,
    TABLE,
    Natives,
    natives,
    polls,
    polls_per_us,
    spin_function,
)

__all__ = ["MAX_NATIVE_ARGS", "JOB_WORDS", "NativeCall", "NativeBatch", "Crew", "CrewState", "crew", "natives",
           "polls_per_us", "spin_function"]

JOB_WORDS = 512  # room for one batch: two words per call plus its arguments
BOARD_WORDS = 1 << 14  # the claim board: header, task table and the batches' calls
CLAIM_WAIT_US = 50  # a caller waiting for claimed tasks polls this long, then naps
SEQUENCE_POLL_US = 1000  # during a kernel sequence a worker looks at its crew's state this often, at least
MAX_NAP_S = 2.5e-4  # ... at most this long between looks


@dataclass(frozen=True)
class NativeCall:
    """A call of the native function at `address` with int64/pointer `arguments` (no GIL needed)."""

    address: int
    arguments: tuple[int, ...]


@dataclass(frozen=True)
class NativeBatch:
    """Native calls that run one after another (the kernels of one device's lane)."""

    calls: tuple[NativeCall, ...]

    def words(self) -> int:
        """The board words the calls take."""
        return sum(2 + len(call.arguments) for call in self.calls)


class CrewState:
    """What a crew's caller tells its workers outside the board: `in_sequence` while a kernel sequence
    runs (`Crew.sequence`), and `gap_us`, the caller's last gap between jobs (from the return of one
    native job until the post of the next; infinite until one returned). Written and read by Python
    code only (under the GIL): a worker sets its `asleep` and then reads `in_sequence`, the caller
    sets the flag and then reads `asleep`, so one of the two sees the other's write.

    The gap is the caller's measurement because a worker cannot time its own idle spell: a worker
    whose polling ended needs the GIL to note the time and go to sleep, and a caller busy in Python
    holds it (a garbage collection of 25 ms between two 512 x 512 products): the worker noted the
    time only when the caller released the GIL to post the next job, so it saw a spell of its polling
    window alone, and its window grew by half a window per job, six jobs before it outlasted the
    collection."""

    __slots__ = ("in_sequence", "gap_us")

    def __init__(self) -> None:
        self.in_sequence = False
        self.gap_us = float("inf")


class _Worker:
    """One polling thread: its own words (POSTED, FINISHED) carry Python jobs; board tasks it claims.
    While its crew runs a kernel sequence it never sleeps (`_loop`)."""

    def __init__(self, loops: Natives, board: np.ndarray, state: CrewState) -> None:
        self.loops = loops
        self.board = board
        self.state = state
        self.words = np.zeros(2, dtype=np.int64)
        self.address = self.words.ctypes.data
        self.job: Callable[[], object] | None = None
        self.error: BaseException | None = None  # an error that escaped a Python job (jobs record their own)
        self.asleep = False  # read by posters to skip ringing the doorbell of a polling worker
        self.doorbell = threading.Event()
        cpu.ensure_kernel_stacks()
        threading.Thread(target=self._loop, name="fast-share", daemon=True).start()

    def idle(self) -> bool:
        """Whether the worker finished every Python job posted to it."""
        return int(self.words[POSTED]) == int(self.words[FINISHED])

    def _loop(self) -> None:
        seen, first = 0, 1
        idle_us = float("inf")  # the last idle spell: none yet
        while True:
            spin_us = self._spin_us(idle_us)
            generation = self.loops.serve(self.address, self.board.ctypes.data, seen, first, polls(spin_us))
            if generation != seen:  # handed back: a Python job
                seen = generation
                self._run_python(generation)
                first = polls(spin_us)
                continue
            if self.state.in_sequence:  # the sequence posts its steps with no doorbell: keep polling
                first = polls(max(spin_us, SEQUENCE_POLL_US))
                continue
            quiet = time.perf_counter()  # at least spin_us after the last task ended (or after waking)
            self.doorbell.clear()  # idle since the last job (or since waking): sleep
            self.asleep = True
            rung = True
            if int(self.words[POSTED]) == seen and not _open(self.board) and not self.state.in_sequence:
                rung = self.doorbell.wait(0.1)
            self.asleep = False
            # rung: work is coming (a kernel sequence posts its chunks one by one): poll as after a
            # job, as long as the caller's last gap between jobs if that was short (`adapted_spin_us`;
            # the worker's own clock until the caller measured one: CrewState); woken by the
            # timeout: look once
            own_us = (time.perf_counter() - quiet) * 1e6 + spin_us
            idle_us = (own_us if self.state.gap_us == float("inf") else self.state.gap_us) if rung else float("inf")
            first = polls(self._spin_us(idle_us)) if rung else 1

    @staticmethod
    def _spin_us(idle_us: float) -> float:
        """How long to poll after a job, the configuration read now (`adapted_spin_us`)."""
        settings = config.get()
        return adapted_spin_us(idle_us, settings.worker_spin_us, settings.worker_spin_max_us)

    def _run_python(self, generation: int) -> None:
        job, self.job = self.job, None
        try:
            if job is not None:
                job()
        except BaseException as error:  # noqa: BLE001 - a job records its own errors; one that escapes is kept
            self.error = error
        self.loops.publish(self.address + 8 * FINISHED, generation)

    def post(self, job: Callable[[], object]) -> None:
        """Hand `job` to the worker (which must be `idle`)."""
        self.job = job
        self.loops.publish(self.address + 8 * POSTED, int(self.words[POSTED]) + 1)
        self.doorbell.set()


def adapted_spin_us(idle_us: float, base_us: int, most_us: int) -> float:
    """How long a worker polls after its next job, given that its last idle spell (from the end of a
    job until the doorbell rang) lasted `idle_us`: 1.5 times that spell when it was at most `most_us`
    (polling that long would have caught the job, where waking a sleeping thread takes 0.1-2 ms on
    a virtual machine: a loop that does 8 ms of other work between two matmuls found its worker
    asleep every time), else `base_us`; never less than `base_us`, and 0 when `base_us` is 0."""
    if base_us <= 0:
        return 0.0
    if idle_us > most_us:
        return float(base_us)
    return max(float(base_us), min(float(most_us), 1.5 * idle_us))


def _open(board: np.ndarray) -> bool:
    """Whether the board holds a task nobody has claimed."""
    word = int(board[CLAIM])
    return (word & 0xFFFF) < ((word >> 16) & 0xFFFF)


class Crew:
    """`size` polling workers and their claim board; `lock` makes one caller at a time (others use
    claims over a thread pool, fast/runtime/claims.py)."""

    def __init__(self, size: int, loops: Natives) -> None:
        self.loops = loops
        self.board = np.zeros(BOARD_WORDS, dtype=np.int64)
        self.board_address = self.board.ctypes.data
        self.generation = 0
        self.state = CrewState()
        self.workers = [_Worker(loops, self.board, self.state) for _ in range(size)]
        self.native_jobs = loops.native_jobs
        self.lock = threading.Lock()
        self.returned_at: float | None = None  # when the last native job returned (CrewState.gap_us)

    def accepts(self, job: NativeCall | NativeBatch) -> bool:
        """Whether `job` may be posted as a native job here (a NativeCall: as the chunks of a kernel,
        whose `core, cores` are appended)."""
        if isinstance(job, NativeCall):
            return self.native_jobs and len(job.arguments) + 2 <= MAX_NATIVE_ARGS
        return self.native_jobs and 0 < len(job.calls) and job.words() <= JOB_WORDS \
            and all(len(call.arguments) <= MAX_NATIVE_ARGS for call in job.calls)

    def _refuse(self, jobs: Sequence[NativeCall | NativeBatch]) -> None:
        refused = [job for job in jobs if not self.accepts(job)]
        if refused:
            raise ValueError(f"Crew: native job beyond the limits ({MAX_NATIVE_ARGS} arguments a call, "
                             f"{JOB_WORDS} words a batch, native calls here: {self.native_jobs}): "
                             f"{repr(refused[0])[:200]}")

    def chunks(self, call: NativeCall, chunks: int) -> None:
        """Run `call` with `core, cores` = `i, chunks` appended, for every i < chunks, each exactly
        once, on the workers and this thread; return once every chunk has run. The caller holds `lock`."""
        self._refuse([call])
        if not 0 < chunks <= MAX_TASKS:
            raise ValueError(f"Crew.chunks: {chunks} chunks (1 to {MAX_TASKS})")
        board = self.board
        board[MODE], board[CALL], board[COUNT] = CHUNKS, call.address, len(call.arguments)
        board[ARGS:ARGS + len(call.arguments)] = call.arguments
        self._post(chunks)
        self.loops.claim(self.board_address)
        self._wait(chunks)
        self.returned_at = time.perf_counter()

    def batches(self, first: Callable[[], object], batches: Sequence[NativeBatch]) -> None:
        """Post `batches` as tasks, run `first()` here, then claim what is left; return once every
        batch has run, raising `first`'s error. The caller holds `lock`."""
        self._refuse(batches)
        board, position = self.board, TABLE + len(batches)
        if position + sum(1 + batch.words() for batch in batches) > BOARD_WORDS or len(batches) > MAX_TASKS:
            raise ValueError(f"Crew.batches: {len(batches)} batches do not fit the board ({BOARD_WORDS} words)")
        board[MODE] = BATCHES
        for task, batch in enumerate(batches):
            board[TABLE + task], board[position] = position, len(batch.calls)
            position += 1
            for call in batch.calls:
                count = len(call.arguments)
                board[position], board[position + 1] = call.address, count
                board[position + 2:position + 2 + count] = call.arguments
                position += 2 + count
        self._post(len(batches))
        try:
            first()
        finally:
            self.loops.claim(self.board_address)
            self._wait(len(batches))
            self.returned_at = time.perf_counter()

    def _post(self, tasks: int) -> None:
        """Open the board's next generation with `tasks` tasks and wake sleeping workers."""
        self._note_gap()
        self.generation = (self.generation + 1) & 0x7FFF_FFFF
        self.board[DONE] = 0
        self.loops.publish(self.board_address + 8 * CLAIM, (self.generation << 32) | (tasks << 16))
        self.ring()

    def _note_gap(self) -> None:
        """Tell the workers how long this caller went without a native job (CrewState.gap_us)."""
        if self.returned_at is not None:
            self.state.gap_us = (time.perf_counter() - self.returned_at) * 1e6

    def ring(self) -> None:
        """Wake the sleeping workers (they poll the board for `config.worker_spin_us` once woken)."""
        for worker in self.workers:
            if worker.asleep:
                worker.doorbell.set()

    def sequence(self, words_address: int, steps: int) -> None:
        """Run `steps` kernels listed at `words_address` (runtime/sequence.py) on this thread with the
        workers claiming threaded steps' chunks (native_loops `fast_program`). The caller holds `lock`.

        The native program posts each step's chunks without ringing a doorbell, so the workers poll for
        the whole sequence (`CrewState.in_sequence`) instead of sleeping when a gap outlasts their
        window: a worker asleep in the middle of a sequence stayed asleep until its doorbell's 0.1 s
        timeout, leaving every chunk to the caller meanwhile. A caller preempted for a few ms was
        enough: MiniLM 32 x 128 beside a process taking 5 ms of every 20 on one vCPU ran in 1028-1076 ms
        through the sequence against 748-765 launching kernels one by one."""
        self._note_gap()
        self.state.in_sequence = True
        self.ring()
        try:
            self.generation = self.loops.program(self.board_address, words_address, steps, polls(CLAIM_WAIT_US))
        finally:
            self.state.in_sequence = False
            self.returned_at = time.perf_counter()

    def _wait(self, tasks: int) -> None:
        """Wait until `tasks` tasks are done (every one is claimed by now): poll, then nap."""
        done = self.board_address + 8 * DONE
        if self.loops.wait_count(done, tasks, polls(CLAIM_WAIT_US)) >= tasks:
            return
        nap = 50e-6
        while self.loops.wait_count(done, tasks, 1) < tasks:
            time.sleep(nap)
            nap = min(2 * nap, MAX_NAP_S)

    def python(self, job: Callable[[], object], helpers: int) -> int:
        """Post `job` to at most `helpers` idle workers, waiting for none; returns how many got it."""
        self._note_gap()
        posted = 0
        for worker in self.workers:
            if posted < helpers and worker.idle():
                worker.post(job)
                posted += 1
        return posted


_CREWS: dict[int, Crew] = {}
_CREWS_LOCK = threading.Lock()


def crew(size: int) -> Crew | None:
    """The process's crew of `size` workers (made on first use), or None without the native loops
    or with a size below 1."""
    loops = natives()
    if loops is None or size < 1:
        return None
    with _CREWS_LOCK:
        if size not in _CREWS:
            _CREWS[size] = Crew(size, loops)
        return _CREWS[size]

