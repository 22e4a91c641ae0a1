"""Repeat a timed call until a time budget is spent: median, min and max of the repeats.

The callable returns whatever it computed; the result is dropped after the clock stops (so freeing
it is not timed) and before the next repeat starts (so `fast`'s weak node cache cannot hand the
previous, already realized output back). The garbage collector is off while the clock runs.

Garbage: `repeat` collects the whole heap once, before its first repeat, and only the youngest
generation between repeats. Everything a repeat allocated is young when it returns (the collector
is off meanwhile), so a reference cycle in a dropped result is freed all the same; a full collection
before every repeat walked the whole heap each time instead (67-79 ms with torch imported) and left
the caches and the core cold: on session 19's Sapphire Rapids VM a `fast` 512 x 512 product right
after it took 1.56-1.70 ms against 0.86 with none, numpy's 1.21-1.29 against 0.88, every system
timed in a state that a program calling it in a loop never sees (bench/results s19 notes,
docs/performance.md).

`blocks` times several systems on one workload: each gets its repeats in BLOCKS blocks, the
systems' blocks alternating, with PAUSE_S (untimed) before each block. On a 2-core virtual machine
the cores the host lends change from second to second (two threads of FMAs ran at one core's speed
a quarter of the time, in 5 ms samples: bench/machine.py `fma_spread`); a system timed in one
stretch of 0.2 s could land wholly in a slow or a fast one, so a small workload's ratio moved from
0.65 to 1.0 between runs. Within a block the repeats run back to back, as `repeat` runs them: after
a BLAS call OpenBLAS's threads keep spinning for a while, and a `fast` matmul 512 started right
after numpy's took 6.1 ms instead of 4.3 ms, so the pause lets the previous system's threads go
idle before the next block, and only then is anything timed.
"""
from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
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
    gc.collect()
    while len(stats.times_s) < budget.max_repeats:
        if len(stats.times_s) >= budget.min_repeats and spent >= budget.seconds:
            break
        gc.collect(0)  # the last repeat's garbage (module docstring)
        elapsed, result = timed(fn)
        del result
        stats.times_s.append(elapsed)
        spent += elapsed
    return stats


def as_dict(budget: Budget) -> dict[str, Any]:
    """The budget as plain data for the JSON."""
    return asdict(budget)


#: Blocks per system in `blocks`, and the untimed pause before each block. OpenBLAS's threads keep
#: spinning after a call: on the Zen 3 EPYC of session 9 for 0.11 s (process CPU time sampled every
#: 10 ms after ten 512 products: a core's worth for eleven samples, then nothing), so a pause of 0.1 s
#: let the block that follows numpy's (`fast` CLANG when torch is not a peer) start beside a spinning
#: thread. 0.15 s covers it.
BLOCKS = 4
PAUSE_S = 0.15


def blocks(calls: Sequence[Callable[[], Any]], budget: Budget, count: int = BLOCKS,
           pause_s: float = PAUSE_S) -> tuple[list[Stats], list[Exception | None]]:
    """Time every call of `calls` in `count` blocks each, alternating (module docstring): a block
    holds at least ceil(min_repeats / count) repeats, at most ceil(max_repeats / count), and stops
    once it spent budget.seconds / count. Returns one Stats per call, in order, and per call the
    exception it raised (a call that raised is not timed again; its Stats keeps what ran before)."""
    per_block = Budget(seconds=budget.seconds / count, min_repeats=-(-budget.min_repeats // count),
                       max_repeats=max(1, -(-budget.max_repeats // count)))
    stats = [Stats() for _ in calls]
    errors: list[Exception | None] = [None for _ in calls]
    for _ in range(count):
        for index, fn in enumerate(calls):
            if errors[index] is not None:
                continue
            time.sleep(pause_s)
            try:
                stats[index].times_s += repeat(fn, per_block).times_s
            except Exception as error:  # recorded for the caller's row; the other systems go on
                errors[index] = error
    return stats, errors
