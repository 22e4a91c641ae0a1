"""What the numbers were measured on: CPU, cores, memory, library versions, thread settings, and the
machine's memory bandwidth measured in the same run (numpy copies, one thread and all cores).
"""
from __future__ import annotations

import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "neon", "asimd", "sve")
THREAD_VARIABLES = ("THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _cpuinfo() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError):
        pass
    return None


def _blas() -> dict[str, Any]:
    """numpy's BLAS as its build config names it (empty when numpy cannot say)."""
    try:
        config = np.show_config(mode="dicts")  # type: ignore[call-arg]
        blas = config["Build Dependencies"]["blas"]
        return {key: blas.get(key) for key in ("name", "version", "openblas configuration")}
    except Exception:  # older numpy: no dict mode
        return {}


def machine_info() -> dict[str, Any]:
    """CPU model and flag summary, cores, memory, Python, numpy and its BLAS, thread variables."""
    cpu = _cpuinfo()
    flags = set((cpu.get("flags") or cpu.get("Features") or "").split())
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu_model": cpu.get("model name") or platform.processor() or platform.machine(),
        "cpu_flags": [flag for flag in CPU_FLAGS if flag in flags],
        "cores": os.cpu_count(),
        "cores_usable": affinity,
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "blas": _blas(),
        "environment": {name: os.environ.get(name) for name in THREAD_VARIABLES},
    }


def _best_copy_seconds(dst: np.ndarray, src: np.ndarray, threads: int, rounds: int) -> float:
    """Best time to copy src into dst, split into `threads` contiguous chunks copied in parallel."""
    bounds = np.linspace(0, src.size, threads + 1).astype(int)
    chunks = [(dst[lo:hi], src[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    best = float("inf")
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in range(rounds):
            start = time.perf_counter()
            list(pool.map(lambda pair: np.copyto(pair[0], pair[1]), chunks))
            best = min(best, time.perf_counter() - start)
    return best


def measure_bandwidth(mib: int = 256, rounds: int = 5) -> dict[str, Any]:
    """Copy bandwidth in GB/s (bytes read + bytes written) on one thread and on every core.

    numpy releases the GIL while copying, so threads copy in parallel. `bandwidth_gbs` is the larger
    of the two: the ceiling the memory-bound workloads are compared with.
    """
    src = np.ones(mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch every page before timing
    threads = os.cpu_count() or 1
    moved = 2.0 * src.nbytes
    single = moved / _best_copy_seconds(dst, src, 1, rounds) / 1e9
    parallel = moved / _best_copy_seconds(dst, src, threads, rounds) / 1e9
    return {"array_mib": mib, "rounds": rounds, "threads": threads, "single_thread_gbs": round(single, 2),
            "all_cores_gbs": round(parallel, 2), "bandwidth_gbs": round(max(single, parallel), 2),
            "counts": "bytes read + bytes written, best of rounds"}
