"""A kernel sequence run in one native call: a replayed plan's kernels without a Python launch each.

A `KernelSequence` lists CPU kernel calls (function address and int64 argument words, as
`native_call` gives them; a threaded kernel's without its trailing `core, cores`) in one int64
array laid out for native_loops `fast_program`: per step `chunks, function, count, arguments...`.
Before each run the caller patches the argument words that change between runs (the addresses of
per-call buffers: `run(indices, values)`), and the chunk words are set for the calling thread's
budget exactly as `launch.launch` splits each kernel (`thread_budget`, `config.parallel_min_work`,
`chunk_count`): no step runs other code or another split than its launch would, so a run computes
what launching the steps one by one computes, bit for bit.

Threads: threaded steps' chunks are posted on the crew's claim board one kernel at a time and
claimed by the workers and the caller alike (runtime/workers.py), so a worker that does not get a
core strands nothing. The crew's lock is taken without blocking: when another caller holds it, `run`
returns False and runs nothing (the caller launches the steps one by one instead).

Invariant: `words` is only written by `run`, and one `run` at a time per sequence (the caller's
lock: a captured function's plan runs one call at a time).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fast import config
from fast.runtime import host, workers
from fast.runtime.launch import chunk_count, thread_budget
from fast.runtime.native_loops import ARGS, MAX_NATIVE_ARGS, natives
from fast.runtime.workers import NativeCall

STEP_HEADER = 3  # words before a step's arguments: chunks, function, argument count


@dataclass(frozen=True)
class SequenceStep:
    """One kernel call: `call.arguments` are its buffers' addresses then its int64 values (without
    `core, cores` when `threaded`); `work` and `chunks_per_thread` as `launch.launch` takes them."""

    call: NativeCall
    threaded: bool
    work: int
    chunks_per_thread: int


def supported(steps: Sequence[SequenceStep]) -> bool:
    """Whether the steps can run as one sequence here (native loops present, every call within
    `MAX_NATIVE_ARGS` parameters)."""
    loops = natives()
    return loops is not None and loops.native_jobs and all(
        len(step.call.arguments) + (2 if step.threaded else 0) <= MAX_NATIVE_ARGS for step in steps)


def host_addresses(handles: Sequence[object]) -> list[int]:
    """The addresses of CPU buffers' handles (TypeError when one is not host memory)."""
    return host.addresses("sequence", "CPU", handles)


class KernelSequence:
    """The steps' words (module docstring); `argument_word(i, j)` is the index of step i's argument j."""

    def __init__(self, steps: Sequence[SequenceStep]) -> None:
        if not supported(steps):
            raise ValueError(f"KernelSequence: {len(steps)} steps cannot run natively here "
                             f"(native loops missing or a call over {MAX_NATIVE_ARGS} parameters)")
        words: list[int] = []
        self.offsets: list[int] = []
        chunk_words: list[int] = []
        self.works: list[tuple[int, int]] = []
        for step in steps:
            if step.threaded:
                chunk_words.append(len(words))
                self.works.append((step.work, step.chunks_per_thread))
            self.offsets.append(len(words) + STEP_HEADER)
            words += [0, step.call.address, len(step.call.arguments), *step.call.arguments]
        self.words = np.array(words, dtype=np.int64)
        self.chunk_words = np.array(chunk_words, dtype=np.int64)
        self.steps = len(steps)
        self.private_board = np.zeros(ARGS + MAX_NATIVE_ARGS, dtype=np.int64)  # runs without a crew
        self._splits: dict[tuple[int, int], tuple[np.ndarray, int]] = {}

    def argument_word(self, step: int, argument: int) -> int:
        return self.offsets[step] + argument

    def _split(self) -> tuple[np.ndarray, int]:
        """The threaded steps' chunk counts for this thread's budget, and the threads they use."""
        key = (thread_budget(), config.get().parallel_min_work)
        found = self._splits.get(key)
        if found is None:
            budget, min_work = key
            chunks = [1 if budget == 1 or work < min_work else chunk_count(work, budget, per_thread)
                      for work, per_thread in self.works]
            found = self._splits[key] = (np.array(chunks, dtype=np.int64), budget)
        return found

    def run(self, indices: np.ndarray, values: np.ndarray) -> bool:
        """Set `words[indices] = values`, then run every step in order; False (nothing ran) when
        another caller holds the crew."""
        loops = natives()
        assert loops is not None  # (checked by the constructor)
        self.words[indices] = values
        chunks, budget = self._split()
        self.words[self.chunk_words] = chunks
        if not chunks.size or int(chunks.max()) <= 1:
            loops.program(self.private_board.ctypes.data, self.words.ctypes.data, self.steps, 1)
            return True
        team = workers.crew(budget - 1)
        if team is None or not team.lock.acquire(blocking=False):
            return False
        try:
            team.sequence(self.words.ctypes.data, self.steps)
        finally:
            team.lock.release()
        return True
