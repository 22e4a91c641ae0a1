"""The read ceiling: how fast a hand-written C reduction reads memory on this machine, in the same run.

The copy bandwidth (bench/machine.py) moves bytes both ways; a reduction only reads, and a core can
only keep so many reads in flight, so reading can be slower or faster than copying. To know how close
`fast`'s reductions are to the machine, and what ratio against numpy is reachable at all, the bench
compiles a plain C reduction with the system compiler (`cc -O2 -march=native`: the host's vector
width), sums a float32 array on every core (one contiguous chunk per POSIX thread, the threads
started inside the timed call as a thread pool would be woken) and reports the median of repeats,
timed as the workloads are (a garbage collection before each repeat).
Each thread reads its chunk as four streams at once (its quarters), because one sequential stream
per core leaves bandwidth unused: measured on the 2-core Xeon, four streams per core read 20-35%
faster than one. Nothing in `fast` is used, so the number is an independent yardstick.

Without a C compiler (or on a failing compile) the ceiling is absent and the report says why.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from typing import Any

import numpy as np

from bench.probe_build import build_probe
from bench.timing import Budget, repeat

_SOURCE = r"""
#include <pthread.h>
#include <stdint.h>
typedef float vec __attribute__((vector_size(64)));
typedef float vec_u __attribute__((vector_size(64), aligned(4), may_alias));
struct share { const float *data; int64_t count; double total; };
static void *sum_share(void *argument) {
  /* four streams at once (the share's quarters), four vector accumulators each */
  struct share *share = argument;
  int64_t quarter = share->count / 4 / 16 * 16, i = 0;
  const float *p[4] = {share->data, share->data + quarter, share->data + 2 * quarter, share->data + 3 * quarter};
  vec acc[4][2] = {{{0}}};
  for (; i + 32 <= quarter; i += 32)
    for (int s = 0; s < 4; s++) {
      acc[s][0] += *(const vec_u *)(p[s] + i);
      acc[s][1] += *(const vec_u *)(p[s] + i + 16);
    }
  double total = 0.0;
  for (int s = 0; s < 4; s++)
    for (int lane = 0; lane < 16; lane++) total += acc[s][0][lane] + acc[s][1][lane];
  for (int s = 0; s < 4; s++)
    for (int64_t j = i; j < quarter; j++) total += p[s][j];
  for (int64_t j = 4 * quarter; j < share->count; j++) total += share->data[j];
  share->total = total;
  return 0;
}
double ceiling_sum(const float *data, int64_t count, int threads) {
  pthread_t ids[64]; struct share shares[64];
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  for (int t = 0; t < threads; t++) {
    int64_t lo = count * t / threads, hi = count * (t + 1) / threads;
    shares[t] = (struct share){data + lo, hi - lo, 0.0};
  }
  for (int t = 1; t < threads; t++) pthread_create(&ids[t], 0, sum_share, &shares[t]);
  sum_share(&shares[0]);
  double total = shares[0].total;
  for (int t = 1; t < threads; t++) { pthread_join(ids[t], 0); total += shares[t].total; }
  return total;
}
"""


def _compile(directory: str) -> ctypes.CDLL:
    """The reduction as a loaded shared library (RuntimeError naming the compiler's message)."""
    loaded = build_probe(directory, "ceiling", _SOURCE, ["-march=native"])
    loaded.ceiling_sum.restype = ctypes.c_double
    loaded.ceiling_sum.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    return loaded


def _median_ms(library: ctypes.CDLL, array: np.ndarray, threads: int, repeats: int) -> float:
    """The median of `repeats` calls, timed as every workload is (bench/timing.py `repeat`: a
    garbage collection before each call, none during it). Calls back to back would find part of the
    array still in the last-level cache from the call before (measured on a 32 MiB-L3 EPYC: 64 MiB
    read in 0.87 ms back to back, 2.5-2.7 ms after a collection or a 5 ms pause), a speed no
    workload timed between collections can reach."""
    stats = repeat(lambda: library.ceiling_sum(array.ctypes.data, array.size, threads),
                   Budget(seconds=0.0, min_repeats=repeats, max_repeats=repeats))
    return stats.median_s * 1e3


def measure_read_ceiling(elements: int = 1 << 24, repeats: int = 30) -> dict[str, Any]:
    """Median ms and GB/s of the C reduction over `elements` float32 values on one thread and on
    every core; {"error": why} when it cannot be compiled. The sum is checked against numpy."""
    with tempfile.TemporaryDirectory(prefix="fast-bench-ceiling-") as directory:
        try:
            library = _compile(directory)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            return {"error": str(error)}
        array = np.random.default_rng(0).uniform(0.0, 1.0, elements).astype(np.float32)
        threads = os.cpu_count() or 1
        got, want = library.ceiling_sum(array.ctypes.data, array.size, threads), float(array.sum(dtype=np.float64))
        if abs(got - want) > 1e-3 * want:
            return {"error": f"the C reduction returned {got}, numpy {want}"}
        single = _median_ms(library, array, 1, repeats)
        parallel = _median_ms(library, array, threads, repeats)
    gbs = array.nbytes / 1e9 * 1e3
    return {"elements": elements, "repeats": repeats, "threads": threads,
            "single_thread_ms": round(single, 3), "all_cores_ms": round(parallel, 3),
            "single_thread_gbs": round(gbs / single, 2), "all_cores_gbs": round(gbs / parallel, 2),
            "counts": "bytes read, median of repeats"}


def reachable_ratio(numpy_ms: float | None, ceiling: dict[str, Any]) -> float | None:
    """numpy's time for a full read of the same bytes over the ceiling's time: the best ratio a
    reduction over 16M float32 can reach on this machine."""
    if numpy_ms is None or "all_cores_ms" not in ceiling:
        return None
    return numpy_ms / float(ceiling["all_cores_ms"])
