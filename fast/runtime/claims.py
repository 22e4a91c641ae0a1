"""Claiming Python tasks: the same rule as the native claim board (runtime/workers.py) for work that
runs as Python calls (kernels without a native call, or launched while the crew is busy).

`Claims(tasks)` holds callables; any thread calling `help()` claims the next unclaimed task under a
lock and runs it, until none is left. The thread that made it calls `finish()`: it helps too, then
waits only for tasks that another thread has already claimed, and raises the error of the
lowest-numbered task that failed (every task still runs exactly once: a failure stops nothing, so
a kernel's chunks never leave part of an output unwritten behind the error). A helper that starts
after everything was claimed returns at once, so helpers never hold the caller.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


class Claims:
    """Tasks 0..n-1, each run exactly once by whichever thread claims it (module docstring)."""

    def __init__(self, tasks: Sequence[Callable[[], object]]) -> None:
        self.tasks = tasks
        self.next = 0  # the next unclaimed task (guarded by `state`)
        self.done = 0  # tasks finished (guarded by `state`)
        self.errors: dict[int, BaseException] = {}
        self.state = threading.Condition()

    def _claim(self) -> int | None:
        with self.state:
            if self.next >= len(self.tasks):
                return None
            self.next += 1
            return self.next - 1

    def help(self) -> int:
        """Claim and run tasks until none is left; returns how many this thread ran."""
        ran = 0
        while (index := self._claim()) is not None:
            try:
                self.tasks[index]()
            except BaseException as error:  # noqa: BLE001 - raised by `finish`, lowest task first
                self.errors[index] = error
            with self.state:
                self.done += 1
                if self.done == len(self.tasks):
                    self.state.notify_all()
            ran += 1
        return ran

    def finish(self) -> None:
        """Help, wait for the tasks others claimed, then raise the lowest-numbered task's error."""
        self.help()
        with self.state:
            self.state.wait_for(lambda: self.done == len(self.tasks))
        if self.errors:
            raise self.errors[min(self.errors)]
