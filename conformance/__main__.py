"""Command line: `python -m conformance [--examples N] [--devices CLANG,...] [--seed S] [--profile ci|full|mpi]
[--cuda-archs sm_80,sm_90] [--mpi]` (with --mpi, under mpiexec: conformance/mpi_driver.py).

Prints progress on stderr (a tqdm bar in a terminal; plain lines every 30 s in a pipe or a CI log), then
the coverage table, then every distinct failure with a runnable snippet (ending in the line that runs
it through `python -m fast.debug`). Exit status: 0 when the candidate agrees with reference everywhere,
1 otherwise (2 with --require-coverage when a required item was not exercised; 2 as well, before
anything runs, for an argument it does not understand or a device this machine cannot run).
`--require-coverage` includes fast's optimization paths (`opt:` items, conformance/optpaths.py),
reached by random programs alone, when the candidate is fast and the run is not under MPI.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from typing import TextIO

from tqdm import tqdm

from conformance import coverage, cuda_compile
from conformance.directed import directed_programs
from conformance.profiles import PROFILES, GenConfig
from conformance.runner import RunResult, run

KINDS = ("CLANG", "LLVM", "CUDA", "DISK")

def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    parser.add_argument("--examples", type=int, help="random programs (default: the profile's)")
    parser.add_argument("--devices", default="CLANG",
                        help="comma-separated device kinds, e.g. CLANG or CLANG,LLVM; add DISK for DISK copies; "
                             "KIND=N uses at most N devices of KIND (CUDA=1 on a machine with one GPU)")
    parser.add_argument("--max-devices", type=int, default=4, help="devices per kind used for sharding (2-4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: CPUs)")
    parser.add_argument("--candidate", default="fast", help="package compared with reference (fast)")
    parser.add_argument("--time-limit", type=float, help="seconds of generation (default: the profile's)")
    parser.add_argument("--require-coverage", action="store_true", help="exit 2 if a required item was missed")
    parser.add_argument("--cuda-archs", default="",
                        help="compile-only CUDA: also compile every kernel with NVRTC for these architectures "
                             "(e.g. sm_80,sm_90; no GPU needed; conformance/cuda_compile.py)")
    parser.add_argument("--mpi", action="store_true",
                        help="run under mpiexec (e.g. mpiexec -n 3 python -m conformance --mpi --profile mpi): "
                             "devices spread over the ranks, rank 0 generates, compares and reports "
                             "(conformance/mpi_driver.py; --jobs is ignored)")
    return parser.parse_args(argv)


class Progress:
    """Progress of a run on `stream` (stderr). In a terminal, a tqdm bar redrawn in place; elsewhere (a
    pipe, a CI log) a plain line every `every` seconds and one when the run ends: never a carriage
    return. Called as `progress(done, failures)` by the runner; `close()` when the run is over."""

    def __init__(self, total: int, stream: TextIO | None = None, every: float = 30.0) -> None:
        self.total, self.stream, self.every = total, stream or sys.stderr, every
        self.done = self.failures = 0
        self.start = self.last = time.time()
        self.bar = tqdm(total=total, unit="program", desc="conformance", file=self.stream, dynamic_ncols=True,
                        leave=True) if self.stream.isatty() else None

    def __call__(self, done: int, failures: int) -> None:
        self.done, self.failures = done, failures
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            self.bar.set_postfix(failing=failures, refresh=True)
        elif time.time() - self.last >= self.every:
            self.line()

    def line(self) -> None:
        self.stream.write(f"[conformance] {self.done}/{self.total} programs, {self.failures} failing, "
                          f"{time.time() - self.start:.0f}s\n")
        self.stream.flush()
        self.last = time.time()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            self.line()


def tolerance_line(failures: int) -> str:
    """What the tolerance count means, in words (reference builds a tolerance for every approximate
    value it fetches; when it cannot, that value's approximate elements are not compared)."""
    if not failures:
        return "every approximate value (float sums, transcendentals) was compared within its tolerance"
    return (f"{failures} approximate values were not compared: reference could not compute their tolerance, "
            f"so their elements that may legitimately differ were skipped (exact elements were still compared)")


def report(result: RunResult, header: str, optimizations: bool = True) -> str:
    """The run's report; `optimizations`: the `opt:` coverage items count as required."""
    summary = f"{result.examples} programs in {result.seconds:.0f}s; {tolerance_line(result.tolerance_failures)}"
    lines = [header, summary, "", "Exercised:", coverage.table(result.coverage)]
    missed = coverage.missing(result.coverage, optimizations)
    if missed:
        lines.append(f"Not exercised: {', '.join(missed)}")
    lines.append("")
    if not result.failures:
        lines.append("No disagreements.")
    for number, failure in enumerate(sorted(result.failures.values(), key=lambda f: -f.count), 1):
        lines += [f"FAILURE {number}: {failure.signature} (seen {failure.count}x)", failure.detail,
                  "--- snippet ---", failure.snippet, "---------------", ""]
    return "\n".join(lines)


def parse_devices(text: str) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """`--devices`: (kinds, (kind, limit) for each KIND=N); ValueError naming the bad entry."""
    named = [k.strip().partition("=") for k in text.split(",") if k.strip()]
    if not named:
        raise ValueError(f"--devices {text!r} names no device kind")
    for kind, equals, limit in named:
        if kind not in KINDS:
            raise ValueError(f"--devices: unknown device kind {kind!r} (expected {', '.join(KINDS)})")
        if equals and (not limit.isdigit() or int(limit) < 1):
            raise ValueError(f"--devices: {kind}={limit} is not a device count (KIND=N with N >= 1)")
    return tuple(kind for kind, _, _ in named), tuple((kind, int(limit)) for kind, _, limit in named if limit)


def unusable_device(candidate: str, devices: tuple[str, ...]) -> str | None:
    """Why one of `devices` cannot run here (a value copied to it and back fails), or None. Run
    before any worker starts, so a machine without a GPU refuses `--devices CUDA` in one line."""
    import importlib

    import numpy as np
    package = importlib.import_module(candidate)
    for device in devices:
        try:
            package.to_numpy(package.from_numpy(np.zeros(1, dtype=np.float32), device))
        except Exception as error:  # noqa: BLE001 - any failure means the device is unusable here
            message = str(error).splitlines()[0] if str(error) else ""
            return f"device {device} cannot run on this machine ({type(error).__name__}: {message})"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.mpi and (missing := _mpi_missing()):
        print(f"python -m conformance: {missing}", file=sys.stderr)
        return 2
    profile = PROFILES[args.profile]
    try:
        kinds, limits = parse_devices(args.devices)
    except ValueError as error:
        print(f"python -m conformance: {error}", file=sys.stderr)
        return 2
    compute = tuple(k for k in kinds if k != "DISK")
    probe = replace(profile.gen, kinds=compute or ("CLANG",), max_devices=max(2, min(4, args.max_devices)),
                    kind_limits=limits)
    if not args.mpi and (why := unusable_device(args.candidate, probe.single_devices())):
        print(f"python -m conformance: {why}; leave it out of --devices (or give KIND=N for fewer)", file=sys.stderr)
        return 2
    disk_dir = tempfile.mkdtemp(prefix="conformance-disk-") if "DISK" in kinds else None
    archs = tuple(a.strip() for a in args.cuda_archs.split(",") if a.strip())
    gen = replace(profile.gen, kinds=compute or ("CLANG",), max_devices=max(2, min(4, args.max_devices)),
                  disk_dir=disk_dir, cuda_archs=archs, kind_limits=limits)
    try:
        result = _run(args, gen, profile.examples if args.examples is None else args.examples,
                      profile.time_limit if args.time_limit is None else args.time_limit, profile.shrink_seconds)
    finally:
        if disk_dir is not None:
            shutil.rmtree(disk_dir, ignore_errors=True)
    if result is None:  # an MPI rank other than 0: rank 0 reports
        return 0
    header = (f"conformance: reference vs {args.candidate}, profile {profile.name}, devices {','.join(kinds)}, "
              f"seed {args.seed}, {args.jobs} jobs")
    if args.mpi:
        from conformance import mpi_driver
        ranks = mpi_driver.world().Get_size()
        header = (f"conformance under MPI: reference vs fast, {ranks} ranks, profile {profile.name}, seed {args.seed}, "
                  f"{result.coverage['feature:sharded-program']} programs sharded; devices "
                  f"{mpi_driver.describe(gen, ranks)}{', DISK local' if disk_dir else ''}")
    observed = not args.mpi and args.candidate == "fast"  # optimization paths are fast's, seen in workers
    print(report(result, header, observed), flush=True)
    if archs:
        print(cuda_compile.summary(result.coverage, archs))
    if result.failures or any(not result.coverage.get(f"cuda:{arch}") for arch in archs):
        return 1
    return 2 if args.require_coverage and coverage.missing(result.coverage, observed) else 0


def _mpi_missing() -> str | None:
    """Why --mpi cannot run here (mpi4py is not installed), or None."""
    from conformance import mpi_driver
    try:
        mpi_driver.world()
    except ImportError as error:
        return str(error)
    return None


def _run(args: argparse.Namespace, gen: GenConfig, examples: int, limit: float, shrink: float) -> RunResult | None:
    """Run the suite (over worker processes, or under MPI with --mpi); None on MPI ranks other than 0."""
    if args.mpi:
        from conformance import mpi_driver
        if mpi_driver.world().Get_rank() != 0:
            return mpi_driver.run(gen, examples, args.seed, shrink, limit)
    start = time.time()
    progress = Progress(examples + len(directed_programs(gen)))
    try:
        if args.mpi:
            result = mpi_driver.run(gen, examples, args.seed, shrink, limit, progress)
        else:
            result = run(gen, args.candidate, examples, max(1, args.jobs), args.seed, shrink, limit, progress)
        if result is not None:
            progress(result.examples, len(result.failures))
    finally:
        progress.close()
    if result is not None:
        result.seconds = time.time() - start
    return result


if __name__ == "__main__":
    sys.exit(main())
