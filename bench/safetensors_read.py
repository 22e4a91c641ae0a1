"""The `safetensors_read` workload: what copying one tensor out of a large safetensors file costs.

The file (1 GiB; 16 MiB with --quick) holds "small" (256 float32 = 1 KiB, random) then "big" (uint8,
the rest of the file), written sparse: big is a hole that reads as zeros. Per device the row times
- `fast.safe_load` (the header parsed and the file mapped, no tensor byte read; `load_ms`),
- copying "small" to the device (`median_ms`, `min_ms`, `max_ms`: the row's own time) and
- copying "big" to the device (`full_ms`: a full read of ~the whole file),
each copy a new lazy node over the same loaded file (mapped by safe_load, page cache warm after the first
read), and records the bytes the DISK runtime copied out for each (`DISK_READ_COUNTER`). `kernels` is
the number of schedule items of one small copy (views and the copy: no kernel runs). The check:
small reads exactly its 1,024 bytes and holds the values written, big reads exactly its size and
its first and last 4 KiB are zeros.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import struct
import tempfile
import time
from typing import Any

import numpy as np

import fast
from bench.timing import Budget, repeat
from fast.runtime.disk import DISK_READ_COUNTER

FILE_BYTES = 1 << 30
FILE_BYTES_QUICK = 16 << 20
SMALL = 256  # float32 elements: 1 KiB
HEADER_BYTES = 256  # the JSON header, padded with spaces
FULL_REPEATS = 3


def write_sparse_file(path: str, small: np.ndarray, total: int) -> int:
    """Write the workload's file (module docstring) of `total` bytes; returns big's size in bytes."""
    big = total - 8 - HEADER_BYTES - small.nbytes
    header = {"small": {"dtype": "F32", "shape": [small.size], "data_offsets": [0, small.nbytes]},
              "big": {"dtype": "U8", "shape": [big], "data_offsets": [small.nbytes, small.nbytes + big]}}
    text = json.dumps(header).encode().ljust(HEADER_BYTES)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text + small.tobytes())
        handle.truncate(total)
    return big


def timed_copies(tensor: fast.LazyBuffer, device: str, budget: Budget) -> tuple[list[float], int, fast.LazyBuffer]:
    """Seconds of each copy of `tensor` to `device` (a new node each time), the DISK bytes one copy
    read, and one copy (realized) for checking."""
    def copy() -> fast.LazyBuffer:  # returned, so the copy is freed after the clock stops
        out = tensor.copy_to_device(device)
        fast.realize(out)
        return out
    before = DISK_READ_COUNTER.snapshot()
    stats = repeat(copy, budget)
    per_copy = (DISK_READ_COUNTER.snapshot() - before) // len(stats.times_s)
    kept = tensor.copy_to_device(device)
    fast.realize(kept)
    return stats.times_s, per_copy, kept


def _check(small: np.ndarray, got_small: np.ndarray, small_read: int, big_bytes: int, big_read: int,
           big_copy: fast.LazyBuffer) -> dict[str, Any]:
    edges = [fast.to_numpy(big_copy.shrink(((start, start + 4096),))) for start in (0, big_bytes - 4096)]
    reasons = [] if np.array_equal(got_small, small) else ["small's values differ from the file's"]
    reasons += [] if small_read == small.nbytes else [f"small read {small_read} bytes, not {small.nbytes}"]
    reasons += [] if big_read == big_bytes else [f"big read {big_read} bytes, not {big_bytes}"]
    reasons += [] if not any(edge.any() for edge in edges) else ["big is not zeros"]
    return {"ok": True} if not reasons else {"ok": False, "reason": "; ".join(reasons)}


def run_safetensors_read(device: str, total: int, budget: Budget, seed: int = 0) -> dict[str, Any]:
    """The safetensors_read row for `device` (module docstring)."""
    small = np.random.default_rng(seed).standard_normal(SMALL).astype(np.float32)
    directory = tempfile.mkdtemp(prefix="fast-bench-safetensors-")
    try:
        path = os.path.join(directory, "weights.safetensors")
        big_bytes = write_sparse_file(path, small, total)
        start = time.perf_counter()
        loaded = fast.safe_load(path)
        load_ms = (time.perf_counter() - start) * 1e3
        kernels = len(fast.schedule(loaded["small"].copy_to_device(device)))
        small_times, small_read, small_copy = timed_copies(loaded["small"], device, budget)
        full_budget = Budget(seconds=budget.seconds, max_repeats=min(FULL_REPEATS, budget.max_repeats))
        full_times, big_read, big_copy = timed_copies(loaded["big"], device, full_budget)
        check = _check(small, fast.to_numpy(small_copy), small_read, big_bytes, big_read, big_copy)
        del loaded, small_copy, big_copy
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    small_ms, full_ms = statistics.median(small_times) * 1e3, statistics.median(full_times) * 1e3
    return {"median_ms": small_ms, "min_ms": min(small_times) * 1e3, "max_ms": max(small_times) * 1e3,
            "repeats": len(small_times), "kernels": kernels, "file_bytes": total, "load_ms": load_ms,
            "small_bytes": small.nbytes, "small_bytes_read": small_read, "full_ms": full_ms,
            "full_min_ms": min(full_times) * 1e3, "full_repeats": len(full_times), "full_bytes": big_bytes,
            "full_bytes_read": big_read, "full_over_small": full_ms / small_ms,
            "full_gbs": big_read / (full_ms / 1e3) / 1e9, "check": check}
