"""Runs programs on the expected package (reference) and a candidate, collects coverage and failures.

`check(program, expected, candidate)` compares one program. `run_worker` drives Hypothesis in one
process: each failure with a new signature is shrunk (for at most `shrink_seconds`, after which
only already-failing programs fail, so Hypothesis settles on the smallest one found) and recorded
once; later failures with a known signature are only counted. Generation then resumes with a new
seed for the examples left. `run` spreads the examples over worker processes and merges results.
"""
from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import queue as queue_module
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from conformance import coverage, cuda_compile, optpaths
from conformance.captured import capturable, check_captured, reproduction
from conformance.compare import Mismatch, binding_text, compare, compare_reuse
from conformance.directed import directed_programs
from conformance.driver import Outcome, replay
from conformance.minimize import minimize
from conformance.profiles import GenConfig
from conformance.program import Program
from conformance.strategies import programs


@dataclass
class Failure:
    signature: str
    detail: str
    snippet: str
    count: int = 1


@dataclass
class RunResult:
    examples: int = 0
    coverage: Counter[str] = field(default_factory=Counter)
    failures: dict[str, Failure] = field(default_factory=dict)
    tolerance_failures: int = 0
    seconds: float = 0.0

    def merge(self, other: RunResult) -> None:
        self.examples += other.examples
        self.coverage.update(other.coverage)
        self.tolerance_failures += other.tolerance_failures
        for sig, failure in other.failures.items():
            if sig in self.failures:
                self.failures[sig].count += failure.count
            else:
                self.failures[sig] = failure
        self.seconds = max(self.seconds, other.seconds)


@dataclass(frozen=True)
class Checked:
    mismatches: list[Mismatch]
    steps_run: int
    tolerance_failures: int


def check(program: Program, expected: ModuleType, candidate: ModuleType,
          outcomes: list[tuple[Outcome, Outcome]] | None = None) -> Checked:
    """Replay on both packages and compare (a symbolic program once per binding, checking that the
    candidate's later bindings build no kernel); a crash of the suite itself is a mismatch too.
    `steps_run` counts the first binding's steps. Each binding's (expected, candidate) outcomes are
    appended to `outcomes` when given (the MPI driver compares other ranks' outcomes with them)."""
    try:
        mismatches: list[Mismatch] = []
        first: Outcome | None = None
        for run in range(program.runs):
            want = replay(expected, program, tolerances=True, run=run)
            got = replay(candidate, program, run=run)
            if outcomes is not None:
                outcomes.append((want, got))
            first = first or got
            found = compare(program.instantiate(run), want, got)
            found += [m for m in (compare_reuse(program, run, first, got),) if m is not None]
            if program.variables:
                found = [Mismatch(m.signature, f"binding {binding_text(program, run)}: {m.detail}") for m in found]
            mismatches += found
            if run == 0:
                ran = len(program.steps) if want.error is None else want.error.step + 1
                tolerance_failures = want.tolerance_failures
        return Checked(mismatches, ran, tolerance_failures)
    except Exception as error:  # noqa: BLE001 - a bug in the suite must be reported, not crash the run
        return Checked([Mismatch(f"suite:{type(error).__name__}", traceback.format_exc())], 0, 0)


PROGRAM_SECONDS = 120  # a program running longer than this (a hang) is reported as a failure


class ProgramTimeoutError(Exception):
    """Raised by SIGALRM inside a program that ran past PROGRAM_SECONDS."""


@contextlib.contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    """Interrupt the block after `seconds` (main thread of a Unix process only; else no limit)."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise ProgramTimeoutError(f"program ran longer than {seconds}s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class ShrinkFailureError(AssertionError):
    """Raised inside the Hypothesis test so it shrinks toward a minimal failing program."""


def _fail(detail: str) -> None:
    """The one place the test raises, so Hypothesis sees every failure as the same bug."""
    raise ShrinkFailureError(detail)


@dataclass
class _State:
    result: RunResult
    known: set[str] = field(default_factory=set)
    target: str | None = None
    shrink_start: float = 0.0
    raised: dict[Program, str] = field(default_factory=dict)
    best: tuple[Program, Mismatch] | None = None


class Worker:
    """One process's share: `examples` programs from `cfg`, until `deadline` (time.time())."""

    def __init__(self, cfg: GenConfig, candidate: str, shrink_seconds: float, deadline: float,
                 report: Callable[[int, int], None] | None = None, journal: str | None = None) -> None:
        self.cfg, self.shrink_seconds, self.deadline, self.report = cfg, shrink_seconds, deadline, report
        self.journal = journal  # a file holding the program being run (read back if the process dies)
        self.expected = importlib.import_module("reference")
        self.candidate = importlib.import_module(candidate)
        self.candidate_name = candidate
        self.state = _State(RunResult())
        self.last_report = 0.0
        self.paths = optpaths.PathObserver()  # the optimization paths the candidate's kernels took
        self.paths.install(self.candidate)

    def check(self, program: Program, captured: bool = False) -> Checked:
        """`check`, plus with `captured` (a capturable program) the captured mode's two calls
        (conformance/captured.py); a captured call that replayed its trace counts `opt:captured`."""
        if self.journal is not None:
            with open(self.journal, "w") as handle:
                handle.write(program.render(self.candidate_name))
        with _alarm(PROGRAM_SECONDS):
            checked = check(program, self.expected, self.candidate)
            if not captured or not capturable(program) or not hasattr(self.candidate, "jit"):
                return checked
            found, replayed = check_captured(program, self.expected, self.candidate)
        if replayed:
            self.paths.seen.add("opt:captured")
        return Checked(checked.mismatches + found, checked.steps_run, checked.tolerance_failures)

    def captures(self, directed: bool) -> bool:
        """Whether the next random program also runs captured: every `cfg.captured_every`-th one."""
        every = self.cfg.captured_every
        return not directed and every > 0 and self.state.result.examples % every == 0

    def record(self, program: Program, directed: bool = False) -> list[Mismatch]:
        """Run one program in the generation phase: count coverage and known failures. The
        optimization paths (`opt:` keys) count for random programs only (conformance/optpaths.py)."""
        self.paths.take()
        checked = self.check(program, self.captures(directed))
        result = self.state.result
        result.examples += 1
        result.tolerance_failures += checked.tolerance_failures
        result.coverage.update(coverage.program_keys(program, checked.steps_run))
        paths = self.paths.take()
        if not directed:
            result.coverage.update(paths)
        for mismatch in checked.mismatches:
            if mismatch.signature in result.failures:
                result.failures[mismatch.signature].count += 1
        if self.report and time.time() - self.last_report > 0.5:
            self.last_report = time.time()
            self.report(result.examples, len(result.failures))
        return checked.mismatches

    def body(self, program: Program) -> None:
        state = self.state
        if state.target is not None:  # shrinking
            if program in state.raised:
                _fail(state.raised[program])
            now = time.time()
            if now - state.shrink_start > self.shrink_seconds or now > self.deadline + self.shrink_seconds:
                return
            found = self.check(program, state.target.startswith("captured:")).mismatches
        else:
            if time.time() > self.deadline:
                return
            found = self.record(program)
        new = [m for m in found if m.signature not in state.known]
        if not new:
            return
        if state.target is None:
            state.target, state.shrink_start = new[0].signature, time.time()
        hit = next((m for m in new if m.signature == state.target), None)
        if hit is not None:
            state.raised[program] = hit.detail
            state.best = (program, hit)
            _fail(hit.detail)

    def run_directed(self, programs_list: list[Program]) -> None:
        for program in programs_list:
            for mismatch in self.record(program, directed=True):
                self._keep(program, mismatch)

    def _keep(self, program: Program, mismatch: Mismatch) -> None:
        """Record a new failure, its program first cut down step by step (same signature)."""
        failures = self.state.result.failures
        if mismatch.signature in failures:
            return
        self.state.known.add(mismatch.signature)

        def same(candidate: Program) -> Mismatch | None:
            captured = mismatch.signature.startswith("captured:")
            return next((m for m in self.check(candidate, captured).mismatches if m.signature == mismatch.signature),
                        None)
        program = minimize(program, lambda p: same(p) is not None, self.shrink_seconds)
        mismatch = same(program) or mismatch
        snippet = program.render(self.candidate_name)
        if mismatch.signature.startswith("captured:"):
            snippet += reproduction(program)
        failures[mismatch.signature] = Failure(mismatch.signature, mismatch.detail, snippet)

    def run(self, examples: int, seed: int, strategy: st.SearchStrategy[Program] | None = None) -> RunResult:
        strategy = strategy if strategy is not None else programs(self.cfg)
        start, rounds = time.time(), 0
        while self.state.result.examples < examples and time.time() < self.deadline and rounds < 50:
            self._round(strategy, examples - self.state.result.examples, seed * 1000 + rounds)
            rounds += 1
        self.state.result.seconds = time.time() - start
        return self.state.result

    def _round(self, strategy: st.SearchStrategy[Program], count: int, seed: int) -> None:
        state = self.state
        state.target, state.raised, state.best = None, {}, None

        @hypothesis_seed(seed)
        @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate, Phase.shrink],
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False)
        @given(strategy)
        def test(program: Program) -> None:
            self.body(program)

        try:
            test()
        except ShrinkFailureError:
            pass
        except Exception as error:  # noqa: BLE001 - e.g. Flaky: keep what was found
            print(f"conformance: hypothesis stopped: {type(error).__name__}: {error}", file=sys.stderr)
        if state.target is not None:
            state.known.add(state.target)
            if state.best is not None:
                self._keep(*state.best)
            else:
                state.known.add(state.target)


def worker_disk_dir(cfg: GenConfig, index: int) -> GenConfig:
    """`cfg` with DISK files in a folder of worker `index`'s own. A DISK file's name is a function of
    a program's draws (strategies/builder.py `disk_device`), so two workers can draw the same name,
    and with one folder their programs would write the same file at once. Session 19's full profile
    (seed 11) once read, in a copy from DISK, floats that its program never wrote (int64 [-9, -1, -9,
    0] came back as -4.5e18, ...); the program alone, eight times, and the same seed's full run again
    agreed."""
    if cfg.disk_dir is None:
        return cfg
    folder = os.path.join(cfg.disk_dir, f"w{index}")
    os.makedirs(folder, exist_ok=True)
    return replace(cfg, disk_dir=folder)


def _worker_main(index: int, cfg: GenConfig, candidate: str, examples: int, seed: int, shrink_seconds: float,
                 deadline: float, jobs: int, journal: str, out: Any) -> None:
    def report(done: int, failures: int) -> None:
        out.put(("progress", index, done, failures))
    if cfg.cuda_archs:
        cuda_compile.install(cfg.cuda_archs)
    cfg = worker_disk_dir(cfg, index)
    worker = Worker(cfg, candidate, shrink_seconds, deadline, report, journal)
    worker.run_directed(directed_programs(cfg)[index::jobs])  # the fixed programs, dealt round-robin
    result = worker.run(examples + worker.state.result.examples, seed * 100 + index)
    result.coverage.update(cuda_compile.coverage_keys())
    out.put(("done", index, result))


def run(cfg: GenConfig, candidate: str, examples: int, jobs: int, seed: int, shrink_seconds: float,
        time_limit: float, progress: Callable[[int, int], None] | None = None) -> RunResult:
    """Run `examples` random programs (plus the directed ones) over `jobs` processes.

    A worker process that dies (a crash inside the candidate) is reported as a failure carrying the
    program it was running.
    """
    deadline = time.time() + time_limit
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    shares = [examples // jobs + (1 if i < examples % jobs else 0) for i in range(jobs)]
    with tempfile.TemporaryDirectory(prefix="conformance-") as journal_dir:
        journals = [os.path.join(journal_dir, f"worker{i}.py") for i in range(jobs)]
        procs = [context.Process(target=_worker_main, args=(i, cfg, candidate, shares[i], seed, shrink_seconds,
                                                             deadline, jobs, journals[i], out))
                 for i in range(jobs)]
        for proc in procs:
            proc.start()
        hard_deadline = deadline + 2 * shrink_seconds + PROGRAM_SECONDS + 60
        try:
            total = _collect(procs, out, progress, hard_deadline)
        finally:  # interrupted (Ctrl-C) or failed: no worker outlives the run
            for proc in procs:
                if proc.is_alive() and sys.exc_info()[0] is not None:
                    proc.terminate()
        for index, proc in enumerate(procs):
            proc.join()
            if index not in total.finished:
                snippet = open(journals[index]).read() if os.path.exists(journals[index]) else "(none)"
                sig = f"crash:worker-exit-{proc.exitcode}"
                total.result.merge(RunResult(failures={sig: Failure(sig, f"worker {index} died (exit code "
                                                                         f"{proc.exitcode}) running:", snippet)}))
    return total.result


@dataclass
class _Collected:
    result: RunResult = field(default_factory=RunResult)
    finished: set[int] = field(default_factory=set)


def _collect(procs: list[Any], out: Any, progress: Callable[[int, int], None] | None,
             hard_deadline: float) -> _Collected:
    """Merge worker results as they arrive; past `hard_deadline` a still-running (hung) worker is
    terminated and reported by the caller as a crash with the program it was running."""
    collected, counts = _Collected(), [(0, 0)] * len(procs)
    while len(collected.finished) < len(procs):
        try:
            kind, index, *payload = out.get(timeout=1.0)
        except queue_module.Empty:
            if time.time() > hard_deadline:
                for proc in procs:
                    if proc.is_alive():
                        proc.terminate()
            if all(not p.is_alive() for p in procs):
                break
            continue
        if kind == "progress":
            counts[index] = (payload[0], payload[1])
            if progress:
                progress(sum(c[0] for c in counts), sum(c[1] for c in counts))
        else:
            collected.result.merge(payload[0])
            collected.finished.add(index)
    return collected
