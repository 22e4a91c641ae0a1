"""The AMX tile peak, beside the FMA peak (bench/machine.py): bfloat16 tile products from registers.

On a CPU with AMX tiles and bfloat16 products (`amx_tile`, `amx_bf16` in its flags), float32 GEMMs
that fit run on the tiles (fast/codegen/gemm_tiles.py): six bfloat16 tile products per float32
product. This probe compiles a C loop of `TDPBF16PS` on four accumulator tiles (the operand tiles
loaded once, so nothing but the products is timed) and runs it on one thread and on every usable
core. Reported: bfloat16 GFLOP/s (2 flops per multiply-add), and a sixth of it, the float32 rate a
GEMM on the tiles could reach if the products were all it did. {"error": why} where the CPU, the
kernel or the compiler cannot run it.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import time
from typing import Any

from bench.probe_build import build_probe

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


def _best_gflops(library: ctypes.CDLL, threads: int, seconds: float, repeats: int) -> float:
    """The best of `repeats` runs of about `seconds` each (the iteration count calibrated first)."""
    iterations = 1 << 10
    while True:
        start = time.perf_counter()
        library.tile_run(iterations, threads)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4 or iterations >= 1 << 34:
            break
        iterations *= 2
    iterations = max(1, int(iterations * seconds / max(elapsed, 1e-9)))
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        library.tile_run(iterations, threads)
        best = max(best, FLOPS_PER_ITERATION * iterations * threads / (time.perf_counter() - start) / 1e9)
    return best


def measure_tile_peak(flags: set[str], seconds: float = 0.1, repeats: int = 5) -> dict[str, Any]:
    """bfloat16 tile GFLOP/s on one thread and on every usable core, and the float32-equivalent rate
    (a sixth); {"error": why} without AMX tiles here."""
    if not {"amx_tile", "amx_bf16"} <= flags:
        return {"error": "the CPU reports no AMX tiles with bfloat16 products"}
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="fast-bench-tiles-") as directory:
        try:
            library = _library(directory)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            return {"error": str(error)}
        if library.tile_permission() != 0:
            return {"error": "the kernel refused the tiles' state (arch_prctl ARCH_REQ_XCOMP_PERM)"}
        single = _best_gflops(library, 1, seconds, repeats)
        every = _best_gflops(library, threads, seconds, repeats)
    return {"threads": threads, "bf16_gflops": round(every, 1), "single_thread_bf16_gflops": round(single, 1),
            "float32_gflops": round(every / PRODUCTS_PER_FLOAT32, 1),
            "counts": "2 flops per bfloat16 multiply-add, 4 accumulator tiles per thread, best of repeats"}


def tile_line(tiles: dict[str, Any] | None) -> str | None:
    """The machine section's line, or None when the probe did not run."""
    if not tiles:
        return None
    if "error" in tiles:
        return f"- AMX tile peak: not measured ({tiles['error']})"
    return (f"- AMX tile peak (C, bfloat16 tile products from registers, {tiles['threads']} threads): "
            f"{tiles['bf16_gflops']} GFLOP/s, {tiles['single_thread_bf16_gflops']} one thread; a float32 "
            f"product on the tiles takes {PRODUCTS_PER_FLOAT32} (fast/codegen/gemm_tiles.py): "
            f"{tiles['float32_gflops']} float32 GFLOP/s at most")
