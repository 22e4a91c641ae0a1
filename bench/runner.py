"""Running one workload: the peers (numpy first: its result is the reference) and `fast` on a device.

What is timed for `fast`: building the lazy graph from already realized input buffers and
`fast.realize(out)` (graph build + schedule + run). The first run is timed apart (cold: it compiles,
into the fresh cache the caller set up); then warm repeats within the budget. `prepare_peer` and
`prepare_fast` do everything but the warm repeats, so that bench/suite.py can time every system of a
workload in alternating blocks (bench/timing.py `blocks`), or one system alone (`repeat`). Outside
the timing, once per workload and device, the result is checked against numpy, and a rebuilt graph
is checked to be unrealized with a non-empty schedule (so the repeats really run kernels rather than
getting the previous output back from the weak node cache); its kernels are counted.
"""
from __future__ import annotations

import gc
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import fast
from bench.peers import ArrayOps
from bench.timing import Stats, timed
from bench.workloads import Workload
from fast.ops import KernelOps
from fast.runtime.base import COMPILE_COUNTER


class BenchError(RuntimeError):
    """The measurement itself would be meaningless (e.g. a repeat would run nothing)."""


def compiles_so_far() -> int:
    """Compiler invocations in this process so far."""
    return COMPILE_COUNTER.snapshot()[0]


def count_kernels(items: list[Any]) -> int:
    """Schedule items that are kernels (a SINK of stores), not copies or other load ops."""
    return sum(1 for item in items if item.ast.op is KernelOps.SINK)


def check_result(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    """Compare `got` with the reference `want` (reshaped when only the keepdims layout differs)."""
    if got.shape != want.shape and got.size == want.size:
        want = want.reshape(got.shape)
    if got.shape != want.shape:
        return {"ok": False, "reason": f"shape {got.shape} != {want.shape}", "rtol": rtol, "atol": atol}
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = int(np.count_nonzero(~(diff <= atol + rtol * np.abs(want.astype(np.float64)))))
    return {"ok": bad == 0, "max_abs_err": float(np.nanmax(diff)) if diff.size else 0.0,
            "bad_elements": bad, "rtol": rtol, "atol": atol}


def throughput(workload: Workload, arrays: list[np.ndarray], out_shape: tuple[int, ...],
               median_s: float, bandwidth_gbs: float) -> dict[str, Any]:
    """GB/s and its fraction of the machine's bandwidth (memory-bound workloads), else GFLOP/s."""
    if workload.memory_bound:
        moved = workload.moved(arrays, out_shape) if workload.moved is not None \
            else sum(array.nbytes for array in arrays) + math.prod(out_shape) * 4
        gbs = moved / median_s / 1e9
        return {"bytes": moved, "gbs": gbs, "bw_fraction": gbs / bandwidth_gbs if bandwidth_gbs else None}
    flops = workload.flops(arrays) if workload.flops else None
    return {"flops": flops, "gflops": flops / median_s / 1e9 if flops else None}


@dataclass(frozen=True)
class Prepared:
    """A system warmed up (and checked) on one workload: `once` is one timed call, `finish` turns the
    Stats of its warm repeats into its fields (a peer's summary, or a fast row's fields)."""

    once: Callable[[], Any]
    finish: Callable[[Stats], dict[str, Any]]


def prepare_peer(ops: ArrayOps, workload: Workload, arrays: list[np.ndarray]) -> tuple[Prepared, np.ndarray]:
    """A peer ready to time on `workload` (its first call, the warm-up, is timed apart), and its result."""
    native = [ops.convert(array) for array in arrays]
    fn = ops.compile(lambda *xs: workload.peer(ops, *xs))  # type: ignore[misc]

    def once() -> Any:
        result = fn(*native)
        ops.sync(result)
        return result

    warmup_s, result = timed(once)
    value = ops.to_numpy(result)
    del result

    def finish(stats: Stats) -> dict[str, Any]:
        return {"peer": ops.name, "version": ops.version, "warmup_ms": warmup_s * 1e3, **stats.summary()}
    return Prepared(once, finish), value


def realized_inputs(arrays: list[np.ndarray], device: str) -> list[fast.LazyBuffer]:
    """The arrays as realized buffers on `device`."""
    buffers = [fast.from_numpy(array, device) for array in arrays]
    fast.realize(*buffers)
    return buffers


def probe_repeat(workload: Workload, inputs: list[fast.LazyBuffer]) -> int:
    """Build the graph again (previous output dropped): it must be unrealized with a non-empty
    schedule, or the repeats would time nothing. Returns its kernel count. Not timed."""
    gc.collect()
    out = workload.build(*inputs)  # type: ignore[misc]
    if out.is_realized():
        raise BenchError(f"{workload.name}: a rebuilt graph is already realized (weak node cache hit); "
                         "the repeats would run nothing")
    items = fast.schedule(out)
    if not items:
        raise BenchError(f"{workload.name}: a rebuilt graph schedules nothing; the repeats would run nothing")
    return count_kernels(items)


def prepare_fast(workload: Workload, device: str, arrays: list[np.ndarray], reference: np.ndarray) -> Prepared:
    """Cold run, check and probe of `workload` on `device`: ready for its warm repeats. `finish`
    gives the row's fast-side fields; its `warm_compiles` are the compiles since the probe, which
    are this device's alone only when its repeats ran alone."""
    inputs = realized_inputs(arrays, device)

    def once() -> fast.LazyBuffer:
        out = workload.build(*inputs)  # type: ignore[misc]
        fast.realize(out)
        return out

    before = compiles_so_far()
    cold_s, out = timed(once)
    compiles = compiles_so_far() - before
    check = check_result(fast.to_numpy(out), reference, workload.rtol, workload.atol)
    out_shape = tuple(out.shape)
    del out
    kernels = probe_repeat(workload, inputs)
    before = compiles_so_far()

    def finish(stats: Stats) -> dict[str, Any]:
        return {**stats.summary(), "cold_ms": cold_s * 1e3, "cold_minus_warm_s": cold_s - stats.median_s,
                "compile_s": max(0.0, cold_s - stats.median_s), "compiles": compiles,
                "warm_compiles": compiles_so_far() - before, "kernels": kernels, "check": check,
                "out_shape": list(out_shape)}
    return Prepared(once, finish)
