"""The `sharded` workload: a graph on inputs sharded along axis 0 over two devices of one kind
(`DEVICE`, `DEVICE:1`, so their items run concurrently: fast/engine/parallel.py) against the same
graph on `DEVICE` alone, with THREADS=1 (each device runs one thread: the speedup is the devices
overlapping) and with the default threads (the cores are shared between the devices: it should not
be slower).

The row's own timing (median_ms, compiles, check, ...) is the sharded run with default threads, so
it reads like any compute row; the extra fields are the other three medians and the two speedups
(single time / sharded time, higher is better; medians, and `_best` from each configuration's
fastest repeat) with the targets of the issue. The four
configurations are timed in alternation, round by round, so drifting machine load hits them alike.
Results are checked against numpy for the sharded and the single-device graph.
"""
from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np

import fast
from bench.runner import BenchError, check_result, compiles_so_far, count_kernels, realized_inputs
from bench.timing import Budget, Stats, timed
from bench.workloads import Workload
from fast import config

SPEEDUP_THREADS1_TARGET = 1.6  # sharded over two devices, THREADS=1: at least this much faster
DEFAULT_THREADS_FLOOR = 1 / 1.1  # default threads: never more than 10% slower than one device
CONFIGS = {"sharded": ("sharded", 0), "single": ("single", 0), "sharded_threads1": ("sharded", 1),
           "single_threads1": ("single", 1)}  # name: (inputs, THREADS; 0 is the default)


def shard_devices(device: str) -> tuple[str, str]:
    """`device` and the next device of its kind (CLANG -> CLANG, CLANG:1; LLVM:2 -> LLVM:2, LLVM:3)."""
    canonical = fast.Device.canonicalize(device)
    kind, _, number = canonical.partition(":")
    return canonical, f"{kind}:{int(number or 0) + 1}"


def sharded_inputs(singles: list[fast.LazyBuffer], devices: tuple[str, ...]) -> list[fast.MultiLazyBuffer]:
    """Each input sharded along axis 0 over `devices`, realized."""
    inputs = [fast.MultiLazyBuffer.from_sharded(lb, devices, 0) for lb in singles]
    fast.realize(*inputs)
    return inputs


def make_run(workload: Workload, inputs: list[Any], threads: int) -> Callable[[], Any]:
    """Build the graph on `inputs` and realize it with THREADS=`threads` (0: default)."""
    def once() -> Any:
        with config.override(threads=threads) if threads else config.override():
            out = workload.build(*inputs)  # type: ignore[misc]
            fast.realize(out)
            return out
    return once


def alternate(runs: dict[str, Callable[[], Any]], budget: Budget) -> dict[str, Stats]:
    """Warm repeats of every run, one of each per round, until each spent `budget.seconds` (at
    least `budget.min_repeats`, at most `budget.max_repeats` rounds); results dropped untimed."""
    stats = {name: Stats() for name in runs}
    while len(stats[next(iter(runs))].times_s) < budget.max_repeats:
        rounds = len(stats[next(iter(runs))].times_s)
        if rounds >= budget.min_repeats and all(sum(s.times_s) >= budget.seconds for s in stats.values()):
            break
        for name, run in runs.items():
            gc.collect()
            elapsed, result = timed(run)
            del result
            stats[name].times_s.append(elapsed)
    return stats


def cold_runs(runs: dict[str, Callable[[], Any]]) -> tuple[dict[str, float], dict[str, np.ndarray], dict[str, int]]:
    """Each run once (compiling what it needs): its seconds, value and compiler invocations."""
    seconds: dict[str, float] = {}
    values: dict[str, np.ndarray] = {}
    compiles: dict[str, int] = {}
    for name, run in runs.items():
        before = compiles_so_far()
        seconds[name], out = timed(run)
        compiles[name] = compiles_so_far() - before
        values[name] = fast.to_numpy(out)
        del out
    return seconds, values, compiles


def probe(workload: Workload, inputs: list[Any]) -> int:
    """Kernels of a rebuilt sharded graph; BenchError when it would run nothing (weak cache hit)."""
    gc.collect()
    items = fast.schedule(workload.build(*inputs))  # type: ignore[misc]
    if not items:
        raise BenchError(f"{workload.name}: a rebuilt graph schedules nothing; the repeats would run nothing")
    return count_kernels(items)


def speedups(stats: dict[str, Stats]) -> dict[str, Any]:
    """The medians of the other configurations and the two speedups, with their targets."""
    ms = {name: s.median_s * 1e3 for name, s in stats.items()}
    threads1, default = ms["single_threads1"] / ms["sharded_threads1"], ms["single"] / ms["sharded"]
    best = {name: min(s.times_s) for name, s in stats.items()}  # the least disturbed repeat of each
    return {"single_ms": ms["single"], "sharded_threads1_ms": ms["sharded_threads1"],
            "single_threads1_ms": ms["single_threads1"], "speedup_threads1": threads1,
            "speedup_default": default, "speedup_threads1_best": best["single_threads1"] / best["sharded_threads1"],
            "speedup_default_best": best["single"] / best["sharded"],
            "speedup_threads1_target": SPEEDUP_THREADS1_TARGET, "speedup_default_floor": DEFAULT_THREADS_FLOOR,
            "targets_met": threads1 >= SPEEDUP_THREADS1_TARGET and default >= DEFAULT_THREADS_FLOOR}


def run_sharded(workload: Workload, device: str, arrays: list[np.ndarray], reference: np.ndarray,
                budget: Budget) -> dict[str, Any]:
    """The row's fast-side fields for `device` (see the module docstring)."""
    devices = shard_devices(device)
    singles = realized_inputs(arrays, devices[0])
    inputs: dict[str, list[Any]] = {"sharded": sharded_inputs(singles, devices), "single": singles}
    runs = {name: make_run(workload, inputs[which], threads) for name, (which, threads) in CONFIGS.items()}
    cold, values, compiles = cold_runs(runs)
    checks = {name: check_result(value, reference, workload.rtol, workload.atol) for name, value in values.items()}
    failed = {name: check for name, check in checks.items() if not check["ok"]}
    kernels = probe(workload, inputs["sharded"])
    before = compiles_so_far()
    stats = alternate(runs, budget)
    main = stats["sharded"]
    return {**main.summary(), "cold_ms": cold["sharded"] * 1e3, "cold_minus_warm_s": cold["sharded"] - main.median_s,
            "compile_s": max(0.0, cold["sharded"] - main.median_s), "compiles": compiles["sharded"],
            "warm_compiles": compiles_so_far() - before, "kernels": kernels,
            "check": failed[next(iter(failed))] if failed else checks["sharded"],
            "out_shape": list(values["sharded"].shape), "sharded_devices": list(devices), **speedups(stats)}
