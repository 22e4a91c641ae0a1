"""`python -m bench`: options, the run (fresh compile cache, bandwidth, workloads), the outputs.

Results go to a new temporary folder unless `--save`, `--out-dir` or `--out-prefix` asks for
bench/results/ or another folder (bench/outputs.py); the last line names the files actually written.
Exit status: 0 when every check passed, 1 when a check failed or a row raised (the results are
written either way), 2 for bad options (unknown ones, unknown workloads, devices that cannot run
here), which are refused before anything runs.
"""
from __future__ import annotations

import argparse
import datetime
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fast
from bench import SCHEMA
from bench.ceiling import measure_read_ceiling
from bench.machine import cpu_flags, machine_info, measure_bandwidth, measure_fma_peak
from bench.minilm_report import minilm_tables
from bench.outputs import add_output_options, destination, unusable_device
from bench.peers import load_peers
from bench.report import detail_lines, summary_lines, text_table, write_all
from bench.suite import Plan, failures, run_all
from bench.tile_peak import SPREAD_SAMPLES, ideal_gflops, measure_tile_peak, measure_tile_spread
from bench.timing import Budget, as_dict
from bench.workloads import WORKLOADS, by_name

DEFAULT_PREFIX = "latest"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; see `python -m bench --help`."""
    names = ", ".join(workload.name for workload in WORKLOADS)
    parser = argparse.ArgumentParser(prog="python -m bench", description="Benchmark fast against numpy "
                                     "(and torch / JAX when importable) on CPU devices.")
    parser.add_argument("--only", metavar="NAME[,NAME]", help=f"workloads to run (default all): {names}")
    parser.add_argument("--devices", default="CLANG,LLVM", help="fast devices, comma separated (default CLANG,LLVM)")
    parser.add_argument("--quick", action="store_true", help="shrink every size ~64x and the time budget (smoke test)")
    parser.add_argument("--skip-slow", action="store_true", help="skip the slow workloads (matmul_2048)")
    parser.add_argument("--budget", type=float, help="seconds of warm repeats per workload per device "
                        "(default 3, 0.2 with --quick); at least one warm run is always timed")
    parser.add_argument("--max-repeats", type=int, default=40,
                        help="at most this many warm repeats (default 40; compute workloads: in 4 blocks)")
    parser.add_argument("--peers", default="torch,jax", help="optional peers to try besides numpy (default torch,jax;"
                        " '' for none)")
    add_output_options(parser, DEFAULT_PREFIX)
    parser.add_argument("--no-png", action="store_true", help="do not draw the chart")
    parser.add_argument("--bandwidth-mib", type=int, help="size of the bandwidth copy (default 256, 32 with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--note", action="append", default=[], help="a note to record with the results "
                        "(repeatable), e.g. which checkout of fast was measured")
    return parser.parse_args(argv)


def refused(options: argparse.Namespace) -> str | None:
    """Why the options cannot run (an unknown workload, a device this machine cannot run), else None."""
    try:
        by_name(options.only)
    except ValueError as error:
        return str(error)
    devices = [device.strip() for device in options.devices.split(",") if device.strip()]
    if not devices:
        return "--devices names no device"
    reasons = [reason for reason in map(unusable_device, devices) if reason is not None]
    return "; ".join(reasons) if reasons else None


def fast_info() -> dict[str, Any]:
    """Where `fast` was imported from, and its git commit (with a dirty flag) when it is a checkout."""
    package = Path(fast.__file__).resolve().parent
    info: dict[str, Any] = {"file": str(package / "__init__.py"), "git": None, "dirty": None}
    try:
        commit = subprocess.run(["git", "-C", str(package), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        status = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "--", "."],
                                capture_output=True, text=True, check=True, timeout=10).stdout
        info.update(git=commit, dirty=bool(status.strip()))
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def build_plan(options: argparse.Namespace, bandwidth_gbs: float, fma_gflops: float | None) -> tuple[Plan, list[str]]:
    """The plan from the options, and notes about peers that are not available."""
    peers, notes = load_peers(tuple(name for name in options.peers.split(",") if name.strip()))
    budget = Budget(seconds=options.budget if options.budget is not None else (0.2 if options.quick else 3.0),
                    max_repeats=max(1, options.max_repeats))
    devices = tuple(device.strip() for device in options.devices.split(",") if device.strip())
    plan = Plan(devices=devices, peers=tuple(peers), budget=budget, quick=options.quick, seed=options.seed,
                bandwidth_gbs=bandwidth_gbs, log=lambda line: print(line, flush=True), fma_gflops=fma_gflops)
    return plan, notes


def selected(options: argparse.Namespace) -> tuple[list[Any], list[str]]:
    """The workloads to run, and a note for each one skipped as slow."""
    workloads = by_name(options.only)
    if not options.skip_slow:
        return workloads, []
    notes = [f"{workload.name} skipped (--skip-slow)" for workload in workloads if workload.slow]
    return [workload for workload in workloads if not workload.slow], notes


def measure(options: argparse.Namespace) -> dict[str, Any]:
    """Run everything and return the whole result (not yet written)."""
    started = time.perf_counter()
    workloads, notes = selected(options)
    notes = [*options.note, *notes]
    bandwidth = measure_bandwidth(options.bandwidth_mib or (32 if options.quick else 256))
    ceiling = measure_read_ceiling((1 << 24) // (64 if options.quick else 1))
    fma = measure_fma_peak(0.02, 3) if options.quick else measure_fma_peak()
    spread_samples = 10 if options.quick else SPREAD_SAMPLES
    tiles = measure_tile_peak(cpu_flags(), 0.02 if options.quick else 0.1, 3 if options.quick else 5, spread_samples)
    plan, peer_notes = build_plan(options, bandwidth["bandwidth_gbs"], fma.get("peak_gflops"))
    notes += peer_notes
    for note in notes:
        print(f"note: {note}", flush=True)
    cache_dir = tempfile.mkdtemp(prefix="fast-bench-cache-")
    try:
        with fast.config.override(cache_dir=cache_dir):
            rows, peer_results = run_all(workloads, plan)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    tiles_end = None if "error" in tiles else measure_tile_spread(cpu_flags(), spread_samples, ideal_gflops(
        tiles["bf16_gflops"], tiles["single_thread_bf16_gflops"], tiles["threads"]))
    return {"schema": SCHEMA, "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python -m bench", *options.argv]), "quick": options.quick,
            "devices": list(plan.devices), "budget": as_dict(plan.budget), "machine": machine_info(),
            "bandwidth": bandwidth, "read_ceiling": ceiling, "fma_peak": fma, "tile_peak": tiles,
            "tile_spread_end": tiles_end,
            "fast": {**fast_info(), "compile_cache": "fresh temporary directory"},
            "peers": {ops.name: ops.version for ops in plan.peers}, "notes": notes, "results": rows,
            "peer_results": peer_results, "failures": failures(rows, peer_results),
            "wall_s": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    options = parse_args(argv)
    options.argv = list(sys.argv[1:] if argv is None else argv)
    refusal = refused(options)
    if refusal is not None:
        print(f"python -m bench: {refusal}", file=sys.stderr)
        return 2
    print(f"fast from {fast.__file__}", flush=True)
    out_dir, prefix = destination(options, DEFAULT_PREFIX)
    result = measure(options)
    written = write_all(result, out_dir, prefix, png=not options.no_png)
    print()
    print("\n".join(summary_lines(result)))
    print(text_table(result))
    print("\n".join(minilm_tables(result)))
    print("\n".join(line for line in detail_lines(result) if not line.startswith("FAILED")))
    print(f"ran in {result['wall_s']} s; wrote {', '.join(str(path) for path in written)}")
    for line in result["failures"]:
        print(f"FAILED: {line}", file=sys.stderr)
    if result["failures"]:
        print(f"{len(result['failures'])} FAILURE(S): see above and 'failures' in the JSON", file=sys.stderr)
    return 1 if result["failures"] else 0
