"""Repeat a timed call until a time budget is spent: median, min and max of the repeats.

The callable returns whatever it computed; the result is dropped after the clock stops (so freeing
it is not timed) and before the next repeat starts (so `fast`'s weak node cache cannot hand the
previous, already realized output back). The garbage collector is off while the clock runs.
"""
from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Budget:
    """Stop after `seconds` of repeats once at least `min_repeats` ran; never more than `max_repeats`."""

    seconds: float = 3.0
    min_repeats: int = 1
    max_repeats: int = 20


@dataclass
class Stats:
    """Seconds of each repeat, and their summary in milliseconds."""

    times_s: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    def summary(self) -> dict[str, Any]:
        """median/min/max in ms and the repeat count (what the JSON stores)."""
        return {"median_ms": self.median_s * 1e3, "min_ms": min(self.times_s) * 1e3,
                "max_ms": max(self.times_s) * 1e3, "repeats": len(self.times_s)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds `fn()` took with the garbage collector paused, and its result."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()
    return elapsed, result


def repeat(fn: Callable[[], Any], budget: Budget) -> Stats:
    """Time `fn` repeatedly within `budget`, dropping each result before the next call."""
    stats = Stats()
    spent = 0.0
    while len(stats.times_s) < budget.max_repeats:
        if len(stats.times_s) >= budget.min_repeats and spent >= budget.seconds:
            break
        gc.collect()
        elapsed, result = timed(fn)
        del result
        stats.times_s.append(elapsed)
        spent += elapsed
    return stats


def as_dict(budget: Budget) -> dict[str, Any]:
    """The budget as plain data for the JSON."""
    return asdict(budget)
