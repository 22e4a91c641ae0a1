"""Command line: `python -m conformance [--examples N] [--devices CLANG,...] [--seed S] [--profile ci|full]`.

Prints a progress line on stderr, then the coverage table, then every distinct failure with a
runnable snippet. Exit status: 0 when the candidate agrees with reference everywhere, 1 otherwise
(2 with --require-coverage when a required item was not exercised).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace

from conformance import coverage
from conformance.profiles import PROFILES
from conformance.runner import RunResult, run


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    parser.add_argument("--examples", type=int, help="random programs (default: the profile's)")
    parser.add_argument("--devices", default="CLANG",
                        help="comma-separated device kinds, e.g. CLANG or CLANG,LLVM; add DISK for DISK copies")
    parser.add_argument("--max-devices", type=int, default=4, help="devices per kind used for sharding (2-4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: CPUs)")
    parser.add_argument("--candidate", default="fast", help="package compared with reference (fast)")
    parser.add_argument("--time-limit", type=float, help="seconds of generation (default: the profile's)")
    parser.add_argument("--require-coverage", action="store_true", help="exit 2 if a required item was missed")
    return parser.parse_args(argv)


def _progress(total: int, start: float) -> object:
    def show(done: int, failures: int) -> None:
        width = 30
        filled = min(width, width * done // max(total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} programs, "
                         f"{failures} failing, {time.time() - start:.0f}s ")
        sys.stderr.flush()
    return show


def report(result: RunResult, header: str) -> str:
    lines = [header, f"{result.examples} programs in {result.seconds:.0f}s; "
             f"{result.tolerance_failures} tolerance graphs not built (elements skipped)", "",
             "Exercised:", coverage.table(result.coverage)]
    missed = coverage.missing(result.coverage)
    if missed:
        lines.append(f"Not exercised: {', '.join(missed)}")
    lines.append("")
    if not result.failures:
        lines.append("No disagreements.")
    for number, failure in enumerate(sorted(result.failures.values(), key=lambda f: -f.count), 1):
        lines += [f"FAILURE {number}: {failure.signature} (seen {failure.count}x)", failure.detail,
                  "--- snippet ---", failure.snippet, "---------------", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    profile = PROFILES[args.profile]
    kinds = tuple(k.strip() for k in args.devices.split(",") if k.strip())
    compute = tuple(k for k in kinds if k != "DISK")
    disk_dir = tempfile.mkdtemp(prefix="conformance-disk-") if "DISK" in kinds else None
    gen = replace(profile.gen, kinds=compute or ("CLANG",), max_devices=max(2, min(4, args.max_devices)),
                  disk_dir=disk_dir)
    examples = profile.examples if args.examples is None else args.examples
    limit = profile.time_limit if args.time_limit is None else args.time_limit
    start = time.time()
    try:
        result = run(gen, args.candidate, examples, max(1, args.jobs), args.seed, profile.shrink_seconds, limit,
                     _progress(examples, start))  # type: ignore[arg-type]
    finally:
        if disk_dir is not None:
            shutil.rmtree(disk_dir, ignore_errors=True)
    sys.stderr.write("\n")
    result.seconds = time.time() - start
    header = (f"conformance: reference vs {args.candidate}, profile {profile.name}, devices {','.join(kinds)}, "
              f"seed {args.seed}, {args.jobs} jobs")
    print(report(result, header))
    if result.failures:
        return 1
    return 2 if args.require_coverage and coverage.missing(result.coverage) else 0


if __name__ == "__main__":
    sys.exit(main())
