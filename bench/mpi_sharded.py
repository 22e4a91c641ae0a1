"""The `mpi_sharded` workload: the `sharded` graph (graphs.mul_add_sum over three 16M float32 vectors)
sharded along axis 0 over `DEVICE@0` and `DEVICE@1`, two MPI ranks with THREADS=1 each, against
`DEVICE` alone in one process with THREADS=1 (docs/mpi.md).

The bench process times the single-process run itself (half of its repeats before the MPI job,
half after, so drifting machine load hits both sides alike) and launches
`mpiexec -n 2 python -m mpi4py -m bench.mpi_sharded ...` for the sharded run (`-m mpi4py`: an
exception on either rank aborts the job instead of leaving the other waiting). In that job every rank makes the
same inputs from the seed (bench.workloads.seeded_inputs), shards them (each rank keeps its own
half), runs the graph once cold and then in rounds: rank 0 decides whether another round runs
(budget and repeat limits, like bench.timing.repeat) and tells rank 1, both pass a barrier, and
each times `build + realize` (its kernels, then the all-reduce's transfers); a round's time is the
slower rank's. The value is gathered to rank 0 and checked against numpy by the bench process.

Waiting never spins: the barrier and the round's flag are non-blocking MPI calls polled with
short sleeps (`polite`), and fast's transfers wait the same way (fast/runtime/mpi.py), so a rank
that finishes first does not take the CPU from work still running (MPICH's blocking calls
busy-poll). The row's `median_ms` is the 2-rank time; `single_threads1_ms` and the speedup
(single / 2 ranks, target SPEEDUP_TARGET) are beside it.
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
    single_check = check_result(fast.to_numpy(out), reference, workload.rtol, workload.atol)
    del out
    half = Budget(budget.seconds / 2, budget.min_repeats, max(1, budget.max_repeats // 2))
    single_times = repeat(single, half).times_s
    ranks = run_ranks(device, budget, seed, quick)
    single_times += repeat(single, half).times_s
    value = np.asarray(ranks["value"], dtype=np.float32).reshape(ranks["out_shape"])
    check = check_result(value, reference, workload.rtol, workload.atol)
    single_ms = statistics.median(single_times) * 1e3
    times = ranks["times_s"]
    median_ms = statistics.median(times) * 1e3
    return {"median_ms": median_ms, "min_ms": min(times) * 1e3, "max_ms": max(times) * 1e3, "repeats": len(times),
            "cold_ms": ranks["cold_s"] * 1e3, "cold_minus_warm_s": ranks["cold_s"] - median_ms / 1e3,
            "compile_s": max(0.0, ranks["cold_s"] - median_ms / 1e3), "compiles": ranks["compiles"],
            "warm_compiles": ranks["warm_compiles"], "kernels": ranks["kernels"],
            "check": next((c for c in (check, single_check) if not c["ok"]), check),
            "out_shape": ranks["out_shape"], "ranks": RANKS, "sharded_devices": ranks["devices"],
            "rank_median_ms": ranks["rank_median_ms"], "single_threads1_ms": single_ms,
            "single_cold_ms": cold_single * 1e3, "single_repeats": len(single_times),
            "speedup_threads1": single_ms / median_ms,
            "speedup_threads1_best": min(single_times) / min(times), "speedup_threads1_target": SPEEDUP_TARGET,
            "targets_met": single_ms / median_ms >= SPEEDUP_TARGET}


# ---------------------------------------------------------------- the MPI job

def polite(request: Any, longest: float) -> None:
    """Complete an MPI request, polling with sleeps that grow to `longest` seconds (never spinning)."""
    pause = 1e-6
    while not request.Test():
        time.sleep(pause)
        pause = min(pause * 2, longest)


def rounds(comm: Any, run: Any, budget: Budget) -> list[float]:
    """Warm repeats of `run` on every rank in step: rank 0 decides each round from its own times."""
    times: list[float] = []
    go = np.zeros(1, dtype=np.int8)
    while True:
        spent = sum(times)
        go[0] = len(times) < budget.max_repeats and (len(times) < budget.min_repeats or spent < budget.seconds)
        polite(comm.Ibcast(go, root=0), 1e-3)
        if not go[0]:
            return times
        gc.collect()
        polite(comm.Ibarrier(), 2e-5)  # short sleeps: the ranks start each round within tens of µs
        elapsed, result = timed(run)
        del result
        times.append(elapsed)


def job(args: argparse.Namespace) -> dict[str, Any] | None:
    """One rank's part: inputs, shards, the cold run, the rounds; the results on rank 0, None elsewhere."""
    from mpi4py import MPI

    import fast.mpi
    comm = MPI.COMM_WORLD
    workload = by_name("mpi_sharded")[0]
    devices = tuple(f"{fast.Device.canonicalize(args.device)}@{rank}" for rank in range(comm.Get_size()))
    inputs = sharded_inputs([fast.from_numpy(array, args.device) for array in
                             seeded_inputs(workload, args.seed, args.quick)], devices)
    run = make_run(workload, inputs, threads=0)  # THREADS=1 comes from the environment
    before = compiles_so_far()
    cold_s, out = timed(run)
    compiles = compiles_so_far() - before
    value = fast.mpi.gather(out, 0)
    del out
    kernels = probe(workload, inputs)
    before = compiles_so_far()
    times = rounds(comm, run, Budget(args.budget, args.min_repeats, args.max_repeats))
    polite(comm.Ibarrier(), 1e-3)
    every = comm.gather((times, cold_s, compiles, compiles_so_far() - before), root=0)
    if comm.Get_rank() != 0 or value is None or every is None:
        return None
    slowest = [max(per_rank) for per_rank in zip(*(t for t, *_ in every), strict=True)]
    return {"times_s": slowest, "cold_s": max(c for _, c, *_ in every), "compiles": compiles,
            "warm_compiles": max(w for *_, w in every), "kernels": kernels, "devices": list(devices),
            "rank_median_ms": [statistics.median(t) * 1e3 for t, *_ in every], "value": value.reshape(-1).tolist(),
            "out_shape": list(value.shape), "threads": fast.config.get().threads}


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
