"""Compiling the bench's C probes (the read ceiling, the FMA peak, the AMX tile peak) into shared
libraries with the C compiler on PATH (CC, else cc, gcc or clang), timing a probe's runs
(`probe_rates`) and summing up short runs (`spread_summary`)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any


def build_probe(directory: str, name: str, source: str, flags: list[str]) -> ctypes.CDLL:
    """`source` compiled with -O2, `flags`, -shared -fPIC -pthread into `directory`, loaded
    (RuntimeError naming the compiler's message when it fails, or when there is no compiler)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    source_path, library = os.path.join(directory, f"{name}.c"), os.path.join(directory, f"{name}.so")
    with open(source_path, "w", encoding="utf-8") as handle:
        handle.write(source)
    command = [compiler, "-O2", *flags, "-shared", "-fPIC", "-pthread", source_path, "-o", library]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[:400]}")
    return ctypes.CDLL(library)


def probe_rates(run: Callable[[int], object], flops_per_iteration: float, seconds: float, runs: int,
                first_iterations: int) -> list[float]:
    """GFLOP/s of `runs` calls of `run(iterations)` lasting about `seconds` each: the iteration count
    is calibrated first (doubled from `first_iterations` until one call takes a quarter of `seconds`)."""
    iterations = first_iterations
    while True:
        start = time.perf_counter()
        run(iterations)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4 or iterations >= 1 << 34:
            break
        iterations *= 2
    iterations = max(1, int(iterations * seconds / max(elapsed, 1e-9)))
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        run(iterations)
        rates.append(flops_per_iteration * iterations / (time.perf_counter() - start) / 1e9)
    return rates


def spread_summary(rates: list[float], sample_s: float, threads: int) -> dict[str, Any]:
    """Short runs' GFLOP/s summed up: their count and length, median, 25th and 10th percentiles."""
    ordered = sorted(rates)
    return {"samples": len(ordered), "sample_ms": round(sample_s * 1e3, 1), "threads": threads,
            "median_gflops": round(ordered[len(ordered) // 2], 1), "p25_gflops": round(ordered[len(ordered) // 4], 1),
            "p10_gflops": round(ordered[len(ordered) // 10], 1)}
