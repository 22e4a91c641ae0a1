"""The `mpi_sharded` workload: the `sharded` graph (graphs.mul_add_sum over three 16M float32 vectors)
sharded along axis 0 over `DEVICE@0` and `DEVICE@1`, two MPI ranks with THREADS=1 each, against
`DEVICE` alone in one process with THREADS=1 (docs/mpi.md).

The bench process times the single-process run itself, half of its repeats before the MPI job and
half after (so drifting machine load hits both sides alike), and launches
`mpiexec -n 2 python -m mpi4py -m bench.mpi_sharded ...` (`-m mpi4py`: an exception on either rank
aborts the job instead of leaving the other waiting). In that job every rank makes the same inputs
from the seed (bench.workloads.seeded_inputs) and runs, once cold and then in rounds, two
configurations one after the other: `ranks` (the inputs sharded over both ranks, each keeping its
half) and `rank0` (the whole inputs on `DEVICE@0`: rank 0 computes alone, rank 1 only takes
placeholders). Rank 0 decides whether another round runs (budget and repeat limits, like
bench.timing.repeat) and tells rank 1; before each timed run both pass a barrier. A `ranks` round
takes the slower rank's time (each rank times `build + realize`: its kernels, then the all-reduce's
transfers); a `rank0` round takes rank 0's. The values are gathered to rank 0 and checked against
numpy by the bench process.

The row's `median_ms` is the two-rank time. `speedup_threads1` (target SPEEDUP_TARGET) divides the
bench process's own single-process median by it; `speedup_interleaved` divides the `rank0` median,
measured in the same rounds as the two-rank one, a cross-check that machine load drifting between
the bench process's repeats and the MPI job does not decide the ratio.

Waiting never spins: the barrier and the round's flag are non-blocking MPI calls polled with
short sleeps (`polite`), and fast's transfers wait the same way (fast/runtime/mpi.py), so a rank
that finishes first, or the idle rank of `rank0`, does not take the CPU from work still running
(MPICH's blocking calls busy-poll).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import fast
from bench.runner import BenchError, check_result, compiles_so_far, realized_inputs
from bench.sharded import make_run, probe, sharded_inputs
from bench.timing import Budget, repeat, timed
from bench.workloads import Workload, by_name, seeded_inputs

SPEEDUP_TARGET = 1.6  # two ranks with THREADS=1 each: at least this much faster than one process
RANKS = 2
REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the bench process

def mpiexec() -> str | None:
    """MPICH's mpiexec beside this Python, or on PATH (None when there is none)."""
    return shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


def unavailable() -> str | None:
    """Why the MPI job cannot run here (mpi4py or mpiexec missing), or None when it can."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install 'fast-lazy[mpi]')"
    if mpiexec() is None:
        return "mpiexec was not found (pip install 'fast-lazy[mpi]' brings MPICH's)"
    return None


def run_ranks(device: str, budget: Budget, seed: int, quick: bool) -> dict[str, Any]:
    """The MPI job's results (see `job`), run with THREADS=1 on every rank."""
    with tempfile.TemporaryDirectory(prefix="bench-mpi-") as folder:
        out = Path(folder) / "ranks.json"
        command = [mpiexec() or "mpiexec", "-n", str(RANKS), sys.executable, "-m", "mpi4py", "-m", "bench.mpi_sharded",
                   "--device", device, "--seed", str(seed), "--budget", str(budget.seconds),
                   "--min-repeats", str(budget.min_repeats), "--max-repeats", str(budget.max_repeats),
                   "--out", str(out), *(["--quick"] if quick else [])]
        environment = {**os.environ, "THREADS": "1", "FAST_CACHE_DIR": str(fast.config.get().cache_dir),
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, check=False,
                              timeout=600)
        if done.returncode != 0 or not out.exists():
            raise BenchError(f"mpi_sharded: {' '.join(command[:3])} ... exited {done.returncode}: "
                             f"{(done.stdout + done.stderr)[-2000:]}")
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def run_mpi_sharded(workload: Workload, device: str, arrays: list[np.ndarray], reference: np.ndarray,
                    budget: Budget, seed: int, quick: bool) -> dict[str, Any]:
    """The row's fast-side fields for `device` (see the module docstring)."""
    single = make_run(workload, realized_inputs(arrays, device), threads=1)
    cold_single, out = timed(single)
    checks = [check_result(fast.to_numpy(out), reference, workload.rtol, workload.atol)]
    del out
    half = Budget(budget.seconds / 2, budget.min_repeats, max(1, budget.max_repeats // 2))
    single_times = repeat(single, half).times_s
    ranks = run_ranks(device, budget, seed, quick)
    single_times += repeat(single, half).times_s
    checks += [check_result(np.asarray(ranks[f"{name}_value"], dtype=np.float32).reshape(ranks["out_shape"]),
                            reference, workload.rtol, workload.atol) for name in ("rank0", "ranks")]
    times, alone = ranks["ranks_s"], ranks["rank0_s"]
    median_ms, single_ms = statistics.median(times) * 1e3, statistics.median(single_times) * 1e3
    return {"median_ms": median_ms, "min_ms": min(times) * 1e3, "max_ms": max(times) * 1e3, "repeats": len(times),
            "cold_ms": ranks["cold_s"] * 1e3, "cold_minus_warm_s": ranks["cold_s"] - median_ms / 1e3,
            "compile_s": max(0.0, ranks["cold_s"] - median_ms / 1e3), "compiles": ranks["compiles"],
            "warm_compiles": ranks["warm_compiles"], "kernels": ranks["kernels"],
            "check": next((check for check in checks if not check["ok"]), checks[-1]),
            "out_shape": ranks["out_shape"], "ranks": RANKS, "sharded_devices": ranks["devices"],
            "rank_median_ms": ranks["rank_median_ms"], "single_threads1_ms": single_ms,
            "single_cold_ms": cold_single * 1e3, "single_repeats": len(single_times),
            "rank0_alone_ms": statistics.median(alone) * 1e3, "speedup_threads1": single_ms / median_ms,
            "speedup_threads1_best": min(single_times) / min(times),
            "speedup_interleaved": statistics.median(alone) / statistics.median(times),
            "speedup_threads1_target": SPEEDUP_TARGET, "targets_met": single_ms / median_ms >= SPEEDUP_TARGET}


# ---------------------------------------------------------------- the MPI job

def polite(request: Any, longest: float) -> None:
    """Complete an MPI request, polling with sleeps that grow to `longest` seconds (never spinning)."""
    pause = 1e-6
    while not request.Test():
        time.sleep(pause)
        pause = min(pause * 2, longest)


def rounds(comm: Any, runs: dict[str, Any], budget: Budget) -> dict[str, list[float]]:
    """Warm repeats of every run, one of each per round, on every rank in step: rank 0 decides each
    round from its own times (until each run spent the budget, within the repeat limits)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    go = np.zeros(1, dtype=np.int8)
    while True:
        done = len(next(iter(times.values())))
        go[0] = done < budget.max_repeats and (done < budget.min_repeats or
                                               any(sum(t) < budget.seconds for t in times.values()))
        polite(comm.Ibcast(go, root=0), 1e-3)
        if not go[0]:
            return times
        for name, run in runs.items():
            gc.collect()
            polite(comm.Ibarrier(), 2e-5)  # short sleeps: the ranks start each run within tens of µs
            elapsed, result = timed(run)
            del result
            times[name].append(elapsed)


def job(args: argparse.Namespace) -> dict[str, Any] | None:
    """One rank's part: inputs, both configurations cold (values gathered), probe, rounds; the results
    on rank 0, None elsewhere."""
    from mpi4py import MPI

    import fast.mpi
    comm = MPI.COMM_WORLD
    workload = by_name("mpi_sharded")[0]
    device = fast.Device.canonicalize(args.device)
    devices = tuple(f"{device}@{rank}" for rank in range(comm.Get_size()))
    arrays = seeded_inputs(workload, args.seed, args.quick)
    inputs: dict[str, list[Any]] = {
        "ranks": sharded_inputs([fast.from_numpy(array, device) for array in arrays], devices),
        "rank0": realized_inputs(arrays, devices[0])}
    runs = {name: make_run(workload, inputs[name], threads=0) for name in ("ranks", "rank0")}  # THREADS=1: env
    before = compiles_so_far()
    cold_s, out = timed(runs["ranks"])
    compiles = compiles_so_far() - before
    values = {"ranks": fast.mpi.gather(out, 0), "rank0": fast.mpi.gather(runs["rank0"](), 0)}
    del out
    kernels = probe(workload, inputs["ranks"])
    before = compiles_so_far()
    times = rounds(comm, runs, Budget(args.budget, args.min_repeats, args.max_repeats))
    polite(comm.Ibarrier(), 1e-3)
    every = comm.gather((times, cold_s, compiles_so_far() - before), root=0)
    if comm.Get_rank() != 0 or every is None:
        return None
    rank_times = [t["ranks"] for t, *_ in every]
    found = {name: np.asarray(value) for name, value in values.items()}  # (rank 0 holds both values)
    return {"ranks_s": [max(per_rank) for per_rank in zip(*rank_times, strict=True)], "rank0_s": times["rank0"],
            "cold_s": max(c for _, c, _ in every), "compiles": compiles, "warm_compiles": max(w for *_, w in every),
            "kernels": kernels, "devices": list(devices), "out_shape": list(found["ranks"].shape),
            "rank_median_ms": [statistics.median(t) * 1e3 for t in rank_times],
            **{f"{name}_value": value.reshape(-1).tolist() for name, value in found.items()}}


def main(argv: list[str] | None = None) -> int:
    """`mpiexec -n 2 python -m bench.mpi_sharded --device CLANG --out FILE [...]` (run by the bench)."""
    parser = argparse.ArgumentParser(prog="python -m bench.mpi_sharded", description=__doc__)
    parser.add_argument("--device", default="CLANG")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--budget", type=float, default=3.0)
    parser.add_argument("--min-repeats", type=int, default=1)
    parser.add_argument("--max-repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = job(args)
    if result is not None:
        args.out.write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
