"""What the numbers were measured on: CPU, cores, memory, library versions, thread settings, the
machine's memory bandwidth measured in the same run (numpy copies, one thread and all cores), and its
fused-multiply-add peak (`measure_fma_peak`: a small C program compiled at run time for each SIMD
instruction set the CPU reports, independent FMA chains on every core), the yardstick of the matmuls.
"""
from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.probe_build import build_probe, probe_rates, spread_summary

CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "neon", "asimd", "sve")
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


# ---------------------------------------------------------------- the fused-multiply-add peak

_FMA_SOURCE = r"""
#include <pthread.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SPLAT(x) _mm512_set1_ps(x)
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
#define LANES 8
#define SPLAT(x) _mm256_set1_ps(x)
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#else
typedef float vec __attribute__((vector_size(16)));
#define LANES 4
#define SPLAT(x) ((vec){x, x, x, x})
#define FMA(a, b, c) ((a) * (b) + (c))
#endif
#define CHAINS 14
/* each chain a named register variable: an array of accumulators would live in memory at -O2 */
#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define DECLARE(i) vec acc##i = SPLAT((float)i);
#define STEP(i) acc##i = FMA(acc##i, scale, add);
#define FOLD(i) *(vec *)lanes = acc##i; for (int lane = 0; lane < LANES; lane++) total += lanes[lane];
struct job { int64_t iterations; float scale, add, out; };
static void *chains_run(void *argument) {
  struct job *job = argument;
  vec scale = SPLAT(job->scale), add = SPLAT(job->add);
  EACH(DECLARE)
  for (int64_t n = 0; n < job->iterations; n++) { EACH(STEP) }
  float lanes[LANES] __attribute__((aligned(64))), total = 0.0f;
  EACH(FOLD)
  job->out = total;
  return 0;
}
int fma_lanes(void) { return LANES; }
int fma_chains(void) { return CHAINS; }
int fma_supported(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#if defined(__AVX512F__)
  return __builtin_cpu_supports("avx512f");
#elif defined(__AVX2__) && defined(__FMA__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
#endif
  return 1;
}
double fma_run(int64_t iterations, int threads, float scale, float add) {
  pthread_t ids[256]; struct job jobs[256];
  if (threads < 1) threads = 1;
  if (threads > 256) threads = 256;
  for (int t = 0; t < threads; t++) jobs[t] = (struct job){iterations, scale, add, 0.0f};
  for (int t = 1; t < threads; t++) pthread_create(&ids[t], 0, chains_run, &jobs[t]);
  chains_run(&jobs[0]);
  double total = jobs[0].out;
  for (int t = 1; t < threads; t++) { pthread_join(ids[t], 0); total += jobs[t].out; }
  return total;
}
"""


def fma_variants(flags: set[str]) -> list[tuple[str, list[str]]]:
    """The instruction sets to probe, from the CPU's flags read at run time: AVX-512 (16 lanes) and
    AVX2 + FMA (8 lanes) where the CPU has them, else the compiler's native target (4 lanes)."""
    variants = []
    if "avx512f" in flags:
        variants.append(("avx512", ["-mavx512f", "-mfma"]))
    if {"avx2", "fma"} <= flags:
        variants.append(("avx2+fma", ["-mavx2", "-mfma"]))
    return variants or [("native", ["-march=native"])]


def _fma_library(directory: str, name: str, flags: list[str]) -> ctypes.CDLL:
    """The probe compiled for one instruction set (RuntimeError with the compiler's message)."""
    loaded = build_probe(directory, f"fma_{name}", _FMA_SOURCE, flags)
    loaded.fma_run.restype = ctypes.c_double
    loaded.fma_run.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_float, ctypes.c_float]
    return loaded


def _fma_rates(library: ctypes.CDLL, threads: int, seconds: float, runs: int) -> list[float]:
    """GFLOP/s of `runs` runs of about `seconds` each on `threads` threads (2 flops per lane per
    FMA; bench/probe_build.py `probe_rates`)."""
    per_iteration = 2.0 * library.fma_lanes() * library.fma_chains() * threads
    return probe_rates(lambda iterations: library.fma_run(iterations, threads, 0.999, 0.001),
                       per_iteration, seconds, runs, 1 << 12)


def _fma_gflops(library: ctypes.CDLL, threads: int, seconds: float, repeats: int) -> float:
    """The best GFLOP/s of `repeats` runs of about `seconds` each on `threads` threads. The best, not
    the median: a peak is what the cores can do, and on a shared host the noise only ever lowers it
    (a median taken while others loaded the 2-core EPYC read 69.5 GFLOP/s, below a matmul measured
    after it); `fma_spread` gives the median of short runs."""
    return max(_fma_rates(library, threads, seconds, repeats))


#: `fma_spread`: samples of about SPREAD_SAMPLE_S each on every core.
SPREAD_SAMPLES = 100
SPREAD_SAMPLE_S = 0.005


def fma_spread(library: ctypes.CDLL, threads: int, samples: int = SPREAD_SAMPLES,
               sample_s: float = SPREAD_SAMPLE_S) -> dict[str, Any]:
    """GFLOP/s of `samples` short runs of the FMA chains on `threads` threads: their median, 25th
    and 10th percentiles. The peak is the best run; this is what the cores deliver most of the
    time. On a virtual machine whose vCPUs the host places from moment to moment (the 2-core EPYC:
    two threads ran at one core's speed in a quarter of the 5 ms samples), a kernel's median cannot
    beat the median here, whatever its code."""
    return spread_summary(_fma_rates(library, threads, sample_s, samples), sample_s, threads)


def cpu_flags() -> set[str]:
    """The CPU's feature flags as the kernel reports them (empty where it reports none)."""
    return set((_cpuinfo().get("flags") or _cpuinfo().get("Features") or "").split())


def measure_fma_peak(seconds: float = 0.1, repeats: int = 7) -> dict[str, Any]:
    """GFLOP/s of independent float32 vector FMA chains on one thread and on every usable core, for
    each instruction set the CPU reports; `peak_gflops` is the best all-cores rate, the yardstick of
    the matmuls' "% of FMA peak". {"error": why} when nothing could be compiled."""
    flags = cpu_flags()
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    variants: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fast-bench-fma-") as directory:
        for name, compile_flags in fma_variants(flags):
            try:
                library = _fma_library(directory, name, compile_flags)
            except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                variants[name] = {"error": str(error)}
                continue
            if not library.fma_supported():
                variants[name] = {"error": "the CPU does not support it (__builtin_cpu_supports)"}
                continue
            variants[name] = {"lanes": library.fma_lanes(), "chains": library.fma_chains(),
                              "single_thread_gflops": round(_fma_gflops(library, 1, seconds, repeats), 1),
                              "all_cores_gflops": round(_fma_gflops(library, threads, seconds, repeats), 1),
                              "spread": fma_spread(library, threads)}
    measured = {name: v for name, v in variants.items() if "all_cores_gflops" in v}
    if not measured:
        return {"error": "; ".join(f"{name}: {v['error']}" for name, v in variants.items()), "variants": variants}
    best = max(measured, key=lambda name: measured[name]["all_cores_gflops"])
    return {"threads": threads, "variants": variants, "best": best, "peak_gflops": measured[best]["all_cores_gflops"],
            "single_thread_gflops": measured[best]["single_thread_gflops"], "spread": measured[best]["spread"],
            "counts": "2 flops per float32 lane per FMA, independent chains per thread, best of repeats"}
