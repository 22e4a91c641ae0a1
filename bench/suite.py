"""Running the selected workloads on every device and peer, and assembling the rows of the results.

A row is one (workload, fast device) pair: fast's timings, kernels, compile cost, check, and the
peers' medians and ratios (peer time / fast time: higher is better for fast). An exception in one
row is recorded in that row (`error`) and the run goes on; the caller reports it loudly.
"""
from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.const_realizes import REALIZES, REALIZES_QUICK, run_const_realizes
from bench.contention import run_contention
from bench.graph_build import run_graph_build
from bench.minilm import run_minilm
from bench.mpi_sharded import run_mpi_sharded
from bench.mpi_sharded import unavailable as mpi_unavailable
from bench.peers import ArrayOps
from bench.runner import Prepared, check_result, prepare_fast, prepare_peer, throughput
from bench.safetensors_read import FILE_BYTES, FILE_BYTES_QUICK, run_safetensors_read
from bench.sharded import run_sharded
from bench.timing import Budget, blocks, repeat
from bench.workloads import GRAPH_NODES, GRAPH_NODES_QUICK, Workload, seeded_inputs


@dataclass(frozen=True)
class Plan:
    """What to run: devices, peers, budget, sizes, seed, the measured bandwidth and FMA peak."""

    devices: tuple[str, ...]
    peers: tuple[ArrayOps, ...]
    budget: Budget
    quick: bool
    seed: int
    bandwidth_gbs: float
    log: Callable[[str], None] = print
    fma_gflops: float | None = None


def make_arrays(workload: Workload, plan: Plan) -> list[np.ndarray]:
    """The workload's inputs, the same for every device and peer, reproducible from the seed."""
    return seeded_inputs(workload, plan.seed, plan.quick)


def error_text(error: BaseException) -> str:
    """The exception and where it was raised, for the row and the console."""
    where = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    place = f" at {where[0].filename}:{where[0].lineno}" if where else ""
    return f"{type(error).__name__}: {error}{place}"


def run_peers(workload: Workload, arrays: list[np.ndarray], plan: Plan) -> tuple[dict[str, Any], np.ndarray]:
    """Every peer's summary, each timed alone after all are warmed up (the sharded workloads, whose
    fast rows time themselves: bench/sharded.py, bench/mpi_sharded.py), and numpy's result."""
    summaries, ready, reference = prepared_peers(workload, arrays, plan)
    for name, prepared in ready.items():
        summaries[name].update(prepared.finish(repeat(prepared.once, plan.budget)))
    return summaries, reference


def peer_fields(fast_ms: float | None, peers: dict[str, Any]) -> dict[str, Any]:
    """numpy_ms, ratio_numpy and the other peers' ratios for one fast median."""
    def ratio(name: str) -> float | None:
        peer_ms = peers.get(name, {}).get("median_ms")
        return peer_ms / fast_ms if peer_ms and fast_ms else None
    return {"numpy_ms": peers.get("numpy", {}).get("median_ms"), "ratio_numpy": ratio("numpy"),
            "peer_ratios": {name: ratio(name) for name in peers if name != "numpy"}}


def compute_row(workload: Workload, device: str, arrays: list[np.ndarray], reference: np.ndarray,
                peers: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """One (workload, device) row of a sharded workload (bench/sharded.py, bench/mpi_sharded.py),
    timed alone after the peers."""
    row: dict[str, Any] = {"workload": workload.name, "device": device,
                           "inputs": [list(array.shape) for array in arrays]}
    try:
        if workload.kind == "mpi_sharded" and mpi_unavailable():
            row["skipped"] = f"no MPI run: {mpi_unavailable()}"
            return row
        if workload.kind == "mpi_sharded":
            row.update(run_mpi_sharded(workload, device, arrays, reference, plan.budget, plan.seed, plan.quick))
        else:
            row.update(run_sharded(workload, device, arrays, reference, plan.budget))
    except Exception as error:
        row["error"] = error_text(error)
        return row
    return finish_row(row, workload, arrays, peers, plan)


def finish_row(row: dict[str, Any], workload: Workload, arrays: list[np.ndarray], peers: dict[str, Any],
               plan: Plan) -> dict[str, Any]:
    """The row with its peers' ratios and its throughput (GB/s or GFLOP/s, % of the machine's)."""
    row.update(peer_fields(row["median_ms"], peers))
    row.update(throughput(workload, arrays, tuple(row["out_shape"]), row["median_ms"] / 1e3, plan.bandwidth_gbs))
    if row.get("gflops") and plan.fma_gflops:
        row["fma_fraction"] = row["gflops"] / plan.fma_gflops
    return row


def prepared_peers(workload: Workload, arrays: list[np.ndarray],
                   plan: Plan) -> tuple[dict[str, Any], dict[str, Prepared], np.ndarray]:
    """Every peer warmed up and checked (numpy first: its result is the reference): the summaries
    so far (a failed peer's holds its error), the ones to time, and the reference."""
    summaries: dict[str, Any] = {}
    ready: dict[str, Prepared] = {}
    reference: np.ndarray | None = None
    for ops in plan.peers:
        try:
            prepared, value = prepare_peer(ops, workload, arrays)
        except Exception as error:
            if reference is None:
                raise
            summaries[ops.name] = {"peer": ops.name, "error": error_text(error)}
            continue
        if reference is None:
            reference, summaries[ops.name] = value, {}
        else:
            summaries[ops.name] = {"check": check_result(value, reference, workload.rtol, workload.atol)}
        ready[ops.name] = prepared
    if reference is None:
        raise RuntimeError("no numpy reference: numpy must be the first peer")
    return summaries, ready, reference


def timed_together(workload: Workload, arrays: list[np.ndarray],
                   plan: Plan) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A compute workload's rows and peers' summaries, every system's warm repeats timed in
    alternating blocks (bench/timing.py `blocks`). A fast row's `warm_compiles` counts every
    device's compiles during the blocks (0 when nothing recompiles, as it should be)."""
    peers, ready, reference = prepared_peers(workload, arrays, plan)
    rows: list[dict[str, Any]] = []
    for device in plan.devices:
        rows.append({"workload": workload.name, "device": device, "inputs": [list(array.shape) for array in arrays]})
        try:
            ready[device] = prepare_fast(workload, device, arrays, reference)
        except Exception as error:
            rows[-1]["error"] = error_text(error)
    names = list(ready)
    stats, errors = blocks([ready[name].once for name in names], plan.budget)
    by_device = {row["device"]: row for row in rows}
    for name, timing, raised in zip(names, stats, errors, strict=True):
        target = by_device[name] if name in by_device else peers[name]
        if raised is not None:
            target["error"] = error_text(raised)
        else:
            target.update(ready[name].finish(timing))
    for row in rows:
        if not row.get("error"):
            finish_row(row, workload, arrays, peers, plan)
        plan.log(progress_line(row))
    return rows, peers


def device_rows(workload: Workload, plan: Plan, measure: Callable[[str], dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per device for a workload without peers: `measure(device)`'s fields, or its error."""
    rows = []
    for device in plan.devices:
        row: dict[str, Any] = {"workload": workload.name, "device": device}
        try:
            row.update(measure(device))
        except Exception as error:
            row["error"] = error_text(error)
        rows.append(row)
        plan.log(progress_line(row))
    return rows


def graph_rows(workload: Workload, plan: Plan) -> list[dict[str, Any]]:
    """The graph_build rows."""
    nodes = GRAPH_NODES_QUICK if plan.quick else GRAPH_NODES
    return device_rows(workload, plan, lambda device: run_graph_build(device, nodes, plan.budget))


def const_rows(workload: Workload, plan: Plan) -> list[dict[str, Any]]:
    """The const_realizes rows."""
    count = REALIZES_QUICK if plan.quick else REALIZES
    return device_rows(workload, plan, lambda device: run_const_realizes(device, count, plan.seed))


def safetensors_rows(workload: Workload, plan: Plan) -> list[dict[str, Any]]:
    """The safetensors_read rows: the copy's target is the row's device."""
    size = FILE_BYTES_QUICK if plan.quick else FILE_BYTES
    return device_rows(workload, plan, lambda device: run_safetensors_read(device, size, plan.budget, plan.seed))


def contention_rows(workload: Workload, plan: Plan) -> list[dict[str, Any]]:
    """The contention rows: every case's medians, quiet and loaded (bench/contention.py)."""
    calls = 5 if plan.quick else 25
    return device_rows(workload, plan, lambda device: run_contention(device, calls, 3, plan.quick, plan.log))


def progress_line(row: dict[str, Any]) -> str:
    """A one-line account of a finished row."""
    head = f"  {row['workload']:<12} {row['device']:<8}"
    if row.get("error"):
        return f"{head} ERROR {row['error']}"
    if row.get("skipped"):
        return f"{head} skipped: {row['skipped']}"
    check = row.get("check") or {}
    verdict = "ok" if check.get("ok") else f"CHECK FAILED {check}"
    numpy_ms = row.get("numpy_ms")
    peer = f", numpy {numpy_ms:.3f} ms" if numpy_ms else ""
    return f"{head} {row['median_ms']:.3f} ms median of {row['repeats']}{peer}, {row.get('kernels')} kernels, {verdict}"


def run_workload(workload: Workload, plan: Plan) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows for every device, and the peers' summaries for this workload."""
    if workload.kind == "graph_build":
        return graph_rows(workload, plan), {}
    if workload.kind == "const_realizes":
        return const_rows(workload, plan), {}
    if workload.kind == "safetensors_read":
        return safetensors_rows(workload, plan), {}
    if workload.kind == "contention":
        return contention_rows(workload, plan), {}
    if workload.kind == "minilm":
        return run_minilm(workload, plan)
    arrays = make_arrays(workload, plan)
    if workload.kind not in ("sharded", "mpi_sharded"):
        return timed_together(workload, arrays, plan)
    peers, reference = run_peers(workload, arrays, plan)
    rows = []
    for device in plan.devices:
        rows.append(compute_row(workload, device, arrays, reference, peers, plan))
        plan.log(progress_line(rows[-1]))
    return rows, peers


def failures(rows: list[dict[str, Any]], peer_results: dict[str, Any]) -> list[str]:
    """Every error and failed check, one line each."""
    lines = []
    for row in rows:
        if row.get("error"):
            lines.append(f"{row['workload']} on {row['device']}: {row['error']}")
        elif row.get("check") and not row["check"].get("ok"):
            lines.append(f"{row['workload']} on {row['device']}: check failed {row['check']}")
    for workload, peers in peer_results.items():
        for name, summary in peers.items():
            if summary.get("error") or (summary.get("check") and not summary["check"].get("ok")):
                lines.append(f"{workload} on {name}: {summary.get('error') or summary['check']}")
    return lines


def run_all(workloads: list[Workload], plan: Plan) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run every workload; the rows and, per workload, the peers' summaries."""
    rows: list[dict[str, Any]] = []
    peer_results: dict[str, Any] = {}
    for workload in workloads:
        plan.log(f"{workload.name}: {workload.description}")
        try:
            new_rows, peers = run_workload(workload, plan)
        except Exception as error:  # the numpy reference itself failed: nothing to compare with
            new_rows = [{"workload": workload.name, "device": d, "error": error_text(error)} for d in plan.devices]
            peers = {}
            print(f"  {workload.name}: ERROR {error_text(error)}", file=sys.stderr)
        rows += new_rows
        if peers:
            peer_results[workload.name] = peers
    return rows, peer_results
