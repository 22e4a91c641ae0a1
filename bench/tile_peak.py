"""The AMX tile peak, beside the FMA peak (bench/machine.py): bfloat16 tile products from registers.

On a CPU with AMX tiles and bfloat16 products (`amx_tile`, `amx_bf16` in its flags), float32 GEMMs
that fit run on the tiles (fast/codegen/gemm_tiles.py): six bfloat16 tile products per float32
product. This probe compiles a C loop of `TDPBF16PS` on four accumulator tiles (the operand tiles
loaded once, so nothing but the products is timed) and runs it on one thread and on every usable
core. Reported: bfloat16 GFLOP/s (2 flops per multiply-add), and a sixth of it, the float32 rate a
GEMM on the tiles could reach if the products were all it did. {"error": why} where the CPU, the
kernel or the compiler cannot run it.

The best run is what the unit can do; `tile_spread` is what it delivered moment to moment: a
physical core has one tile unit, shared by its two hyperthreads, and on a shared host the other
one may belong to another machine. On session 18's Sapphire Rapids VM the one-thread probe read
1,050-1,250 GFLOP/s for seconds at a time, then 2,400-2,960, while the FMA chains stayed within
140-190: a GEMM on the tiles slowed 2.5x in those stretches (the FMA path 1.0-1.3x). The bench
samples the spread at the start of a run and again at its end (`measure_tile_spread`), so a run's
products can be read against the tile unit it actually had.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from typing import Any

from bench.probe_build import build_probe, probe_rates, spread_summary

#: Tile products a float32 product takes on the tiles (gemm_tiles.py PRODUCTS).
PRODUCTS_PER_FLOAT32 = 6

_SOURCE = r"""
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

static const uint8_t config[64] __attribute__((aligned(64))) = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    16, 16, 16, 16, 16, 16, 16, 16};
static uint16_t operand[16 * 32] __attribute__((aligned(64)));

int tile_permission(void) { return (int)syscall(SYS_arch_prctl, 0x1023, 18); }

__attribute__((target("amx-tile,amx-bf16"))) static void *products(void *arg) {
    int64_t iterations = *(int64_t *)arg;
    _tile_loadconfig(config);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, operand, 64); _tile_loadd(5, operand, 64); _tile_loadd(6, operand, 64); _tile_loadd(7, operand, 64);
    for (int64_t i = 0; i < iterations; i++) {
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    _tile_release();
    return 0;
}

/* four tile products of 16 x 16 x 32 multiply-adds per iteration, on `threads` threads */
void tile_run(int64_t iterations, int threads) {
    pthread_t ids[64];
    for (int t = 1; t < threads && t < 64; t++) pthread_create(&ids[t], 0, products, &iterations);
    products(&iterations);
    for (int t = 1; t < threads && t < 64; t++) pthread_join(ids[t], 0);
}
"""

#: Flops of one iteration of the probe on one thread: 4 products of 16 x 16 x 32 multiply-adds.
FLOPS_PER_ITERATION = 4 * 16 * 16 * 32 * 2


def _library(directory: str) -> ctypes.CDLL:
    loaded = build_probe(directory, "tiles", _SOURCE, [])
    loaded.tile_run.argtypes = [ctypes.c_int64, ctypes.c_int]
    return loaded


def _rates(library: ctypes.CDLL, threads: int, seconds: float, runs: int) -> list[float]:
    """bfloat16 GFLOP/s of `runs` runs of about `seconds` each (bench/probe_build.py `probe_rates`)."""
    return probe_rates(lambda iterations: library.tile_run(iterations, threads),
                       FLOPS_PER_ITERATION * threads, seconds, runs, 1 << 10)


#: `tile_spread`: samples of about SPREAD_SAMPLE_S each on every core.
SPREAD_SAMPLES = 60
SPREAD_SAMPLE_S = 0.005


def tile_spread(library: ctypes.CDLL, threads: int, samples: int = SPREAD_SAMPLES, best: float = 0.0,
                sample_s: float = SPREAD_SAMPLE_S) -> dict[str, Any]:
    """bfloat16 GFLOP/s of `samples` short runs on `threads` threads: median, 25th and 10th
    percentiles, and the share of samples below half the best (`best`, `ideal_gflops`, or the best
    sample when that is higher): a tile unit taken by another for that long."""
    rates = _rates(library, threads, sample_s, samples)
    below = sum(rate < max(best, *rates) / 2 for rate in rates) / len(rates)
    return {**spread_summary(rates, sample_s, threads), "below_half_best": round(below, 2)}


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def measure_tile_peak(flags: set[str], seconds: float = 0.1, repeats: int = 5,
                      samples: int = SPREAD_SAMPLES) -> dict[str, Any]:
    """bfloat16 tile GFLOP/s on one thread and on every usable core (the best of `repeats`), the
    float32-equivalent rate (a sixth) and `tile_spread` of `samples` (none with 0); {"error": why}
    without AMX tiles here."""
    threads = _threads()
    with tempfile.TemporaryDirectory(prefix="fast-bench-tiles-") as directory:
        library = _usable_library(flags, directory)
        if isinstance(library, str):
            return {"error": library}
        single = max(_rates(library, 1, seconds, repeats))
        every = max(_rates(library, threads, seconds, repeats))
        spread = tile_spread(library, threads, samples, ideal_gflops(every, single, threads)) if samples else None
    return {"threads": threads, "bf16_gflops": round(every, 1), "single_thread_bf16_gflops": round(single, 1),
            "float32_gflops": round(every / PRODUCTS_PER_FLOAT32, 1), **({"spread": spread} if spread else {}),
            "counts": "2 flops per bfloat16 multiply-add, 4 accumulator tiles per thread, best of repeats"}


def ideal_gflops(every: float, single: float, threads: int) -> float:
    """What every core's tile unit would give undisturbed: the best all-cores run, or one thread's best
    times the threads when that is higher (the all-cores run waits for its slowest core: with one
    core's unit shared it read 2,466 GFLOP/s on two threads against 3,104 on one)."""
    return max(every, single * threads)


def measure_tile_spread(flags: set[str], samples: int = SPREAD_SAMPLES, best: float = 0.0) -> dict[str, Any]:
    """`tile_spread` alone, against the peak `best` (the bench takes it again at the end of a run);
    {"error": why} without tiles."""
    with tempfile.TemporaryDirectory(prefix="fast-bench-tiles-") as directory:
        library = _usable_library(flags, directory)
        return {"error": library} if isinstance(library, str) else tile_spread(library, _threads(), samples, best)


def _usable_library(flags: set[str], directory: str) -> ctypes.CDLL | str:
    """The probe, built and granted the tiles' state, or why not."""
    if not {"amx_tile", "amx_bf16"} <= flags:
        return "the CPU reports no AMX tiles with bfloat16 products"
    try:
        library = _library(directory)
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        return str(error)
    if library.tile_permission() != 0:
        return "the kernel refused the tiles' state (arch_prctl ARCH_REQ_XCOMP_PERM)"
    return library


def tile_line(tiles: dict[str, Any] | None, end: dict[str, Any] | None = None) -> str | None:
    """The machine section's line (with the spread at the start and, given `end`, at the end of the
    run), or None when the probe did not run."""
    if not tiles:
        return None
    if "error" in tiles:
        return f"- AMX tile peak: not measured ({tiles['error']})"
    line = (f"- AMX tile peak (C, bfloat16 tile products from registers, {tiles['threads']} threads): "
            f"{tiles['bf16_gflops']} GFLOP/s, {tiles['single_thread_bf16_gflops']} one thread; a float32 "
            f"product on the tiles takes {PRODUCTS_PER_FLOAT32} (fast/codegen/gemm_tiles.py): "
            f"{tiles['float32_gflops']} float32 GFLOP/s at most")
    spreads = [(when, spread) for when, spread in (("at the start", tiles.get("spread")), ("at the end", end))
               if spread and "error" not in spread]
    for when, spread in spreads:
        line += (f"; {when}, {spread['samples']} runs of {spread['sample_ms']} ms: median {spread['median_gflops']}, "
                 f"10th percentile {spread['p10_gflops']}, {spread['below_half_best'] * 100:.0f}% below half the best")
    return line
