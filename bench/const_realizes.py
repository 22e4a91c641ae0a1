"""The `const_realizes` workload: a program that realizes the same graph with a new scalar constant
every time (`a + c_i` on a 256x256 float32 buffer, 3,000 distinct c_i; 100 with --quick).

Reported per device: kernels compiled in the loop (COMPILE_COUNTER: compiler runs, into the fresh
cache the suite sets up), kernels built (compiled or loaded from the disk cache), resident memory
growth (VmRSS from /proc/self/status before and after the loop, after a garbage collection) and the
time per realize (graph build + schedule + run; the median of the per-realize times is the row's
median). The device's runtime is warmed up first on an unrelated kernel, so one-time set-up (LLVM's
JIT, the thread pool) is not counted as growth. The check: at most `MAX_KERNELS` kernels, growth under
`MAX_GROWTH_MB`, and sampled outputs bit-identical to numpy's float32 `a + c`. The row also reports
`repeat_realize_us`: the Python cost of realizing a 3-op graph whose structure was realized before.
"""
from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import numpy as np

import fast
from bench.graphs import add_const
from fast.runtime.base import COMPILE_COUNTER

SIDE = 256
REALIZES = 3000
REALIZES_QUICK = 100
MAX_KERNELS = 2
MAX_GROWTH_MB = 10.0
SAMPLES = 5


def rss_mb() -> float | None:
    """This process's resident set size in MB (VmRSS), or None where /proc is not available."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def constants(count: int) -> list[float]:
    """`count` distinct float32 values, none that folds away (0) or repeats: 0.5 + k / 1024."""
    return [0.5 + k / 1024 for k in range(count)]


def warm_up(device: str) -> None:
    """Start the device's runtime (compiler, JIT, threads) on a kernel of another structure."""
    x = fast.from_numpy(np.ones((SIDE, 2 * SIDE), np.float32), device)
    fast.to_numpy(x.e(fast.BinaryOps.MUL, x.const(3.0)))


def realize_loop(a: fast.LazyBuffer, values: list[float]) -> list[float]:
    """Seconds of each `realize(a + c)`, one per value."""
    times = []
    for value in values:
        start = time.perf_counter()
        fast.realize(add_const(a, value))
        times.append(time.perf_counter() - start)
    return times


def check(a: fast.LazyBuffer, array: np.ndarray, values: list[float]) -> bool:
    """A few outputs, bit for bit, against numpy's float32 addition."""
    picks = values[:: max(1, len(values) // SAMPLES)] + values[-1:]
    return all(np.array_equal(fast.to_numpy(add_const(a, value)).view(np.uint32),
                              (array + np.float32(value)).view(np.uint32)) for value in picks)


REPEAT_SIDE = 16


def repeat_realize_us(device: str, count: int) -> float:
    """Median µs of `realize` (the graph is built outside the timing) of one 3-op graph,
    (x * y + x).sum(1) on 16x16 float32, over fresh inputs each time: what a second and later
    realize of the same structure costs in Python (the kernel itself takes about a microsecond)."""
    data = np.ones((REPEAT_SIDE, REPEAT_SIDE), np.float32)
    inputs = [fast.from_numpy(data, device) for _ in range(4)]
    fast.realize(*inputs)
    times = []
    for index in range(count):
        x, y = inputs[index % 4], inputs[(index + 1) % 4]
        out = x.e(fast.BinaryOps.MUL, y).e(fast.BinaryOps.ADD, x).r(fast.ReduceOps.SUM, (1,))
        start = time.perf_counter()
        fast.realize(out)
        times.append(time.perf_counter() - start)
        del out
    return statistics.median(times[1:]) * 1e6


def run_const_realizes(device: str, count: int, seed: int = 0) -> dict[str, Any]:
    """The const_realizes row for `device` (module docstring)."""
    array = np.random.default_rng(seed).uniform(-1, 1, (SIDE, SIDE)).astype(np.float32)
    a = fast.from_numpy(array, device)
    fast.realize(a)
    warm_up(device)
    values = constants(count)
    gc.collect()
    before_rss, (compiles, lookups, _) = rss_mb(), COMPILE_COUNTER.snapshot()
    times = realize_loop(a, values)
    gc.collect()
    after_rss, (compiles_after, lookups_after, _) = rss_mb(), COMPILE_COUNTER.snapshot()
    kernels = compiles_after - compiles
    growth = None if before_rss is None or after_rss is None else after_rss - before_rss
    exact = check(a, array, values)
    reasons = [f"{kernels} kernels compiled (at most {MAX_KERNELS})"] if kernels > MAX_KERNELS else []
    reasons += [f"RSS grew {growth:.1f} MB (under {MAX_GROWTH_MB})"] if growth is not None and \
        growth >= MAX_GROWTH_MB else []
    reasons += [] if exact else ["outputs differ from numpy"]
    return {"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3, "max_ms": max(times) * 1e3,
            "repeats": count, "realizes": count, "kernels": 1, "compiles": kernels,
            "kernels_built": (lookups_after - lookups) or kernels, "rss_growth_mb": growth,
            "us_per_realize": sum(times) / count * 1e6, "repeat_realize_us": repeat_realize_us(device, count),
            "check": {"ok": not reasons} if not reasons else {"ok": False, "reason": "; ".join(reasons)}}
