"""The `contention` workload: `fast` on a shared host (issue 29).

Production hosts run other processes. This workload times each case with `fast`'s default threads
and with one thread (`config.override(threads=1)`), first on the quiet host, then with one spinning
process per core but one (`spinners`), and reports the ratio default / one thread under load (the
issue's target: at most `LOADED_RATIO_TARGET`). torch, when importable, is timed with its default
threads beside it. Cases: `a*b + a` over 64K, 1M and 16M float32 (`quick`: divided by 64), a row
softmax of 1024 x 1024 (`quick`: 128 x 128) and the example transformer (examples/transformer.py,
random weights, hidden 64, 2 layers) on 1 x 16 token ids.

Timing: per round, each mode runs `calls` consecutive calls (one untimed call first, so a mode
switch is not timed), the rounds alternating the modes; the median of every timed call is kept.
Each call builds the graph and realizes it (the replay path, as a loop of realizes runs).

`python -m bench.contention [--devices CLANG] [--calls 25] [--rounds 3] [--quick] [--save | --out-prefix P]`
writes <P>.{json,md} (default contention-latest) into a new temporary folder, or into bench/results/ with
`--save` or `--out-prefix` (bench/outputs.py); `python -m bench --only contention` runs it as one row
per device.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import fast
from bench import graphs
from bench.machine import machine_info
from bench.outputs import add_output_options, destination, unusable_device
from bench.runner import count_kernels
from fast import BinaryOps, config
from fast.runtime import cpu

LOADED_RATIO_TARGET = 1.2  # under load, default threads take at most this times the one-thread time
SPIN_CODE = "while True:\n    pass\n"
MODES = ("default", "one")  # THREADS unset (every core) and config.override(threads=1)
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "transformer.py"


@dataclass(frozen=True)
class Case:
    """One timed graph: `make(device)` returns a function that builds it (unrealized; each timed call
    builds and realizes it once) and the numpy value it must have (`rtol`); `torch` makes the same
    computation in torch (None: no torch version)."""

    name: str
    make: Callable[[str], tuple[Callable[[], Any], np.ndarray]]
    rtol: float
    torch: Callable[[], Callable[[], Any]] | None


def _realized(out: Any) -> Any:
    """`out` realized: a LazyBuffer by `fast.realize`, an xp array by reading it (the transformer's
    output is 1 x 64)."""
    if isinstance(out, fast.LazyBuffer):
        fast.realize(out)
        return out
    return np.asarray(out)


def _value(result: Any) -> np.ndarray:
    return fast.to_numpy(result) if isinstance(result, fast.LazyBuffer) else np.asarray(result)


def _vectors(count: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(count)
    return (rng.uniform(-1, 1, count).astype(np.float32), rng.uniform(-1, 1, count).astype(np.float32))


def _matrix(side: int) -> np.ndarray:
    return np.random.default_rng(side).standard_normal((side, side)).astype(np.float32)


def _mul_add_case(count: int) -> Case:
    def make(device: str) -> tuple[Callable[[], Any], np.ndarray]:
        a_np, b_np = _vectors(count)
        a, b = fast.from_numpy(a_np, device), fast.from_numpy(b_np, device)
        fast.realize(a, b)
        return (lambda: a.e(BinaryOps.MUL, b).e(BinaryOps.ADD, a)), a_np * b_np + a_np

    def torch_run() -> Callable[[], Any]:
        import torch

        a, b = (torch.from_numpy(array) for array in _vectors(count))
        return lambda: a * b + a
    return Case(f"mul_add_{_size_name(count)}", make, 1e-6, torch_run)


def _softmax_case(side: int) -> Case:
    def make(device: str) -> tuple[Callable[[], Any], np.ndarray]:
        x_np = _matrix(side)
        x = fast.from_numpy(x_np, device)
        fast.realize(x)
        shifted = np.exp(x_np - x_np.max(1, keepdims=True))
        return (lambda: graphs.softmax(x)), shifted / shifted.sum(1, keepdims=True)

    def torch_run() -> Callable[[], Any]:
        import torch

        x = torch.from_numpy(_matrix(side))
        return lambda: torch.softmax(x, 1)
    return Case(f"softmax_{side}x{side}", make, 1e-4, torch_run)


def _transformer_case(tokens: int) -> Case:
    def make(device: str) -> tuple[Callable[[], Any], np.ndarray]:
        spec = importlib.util.spec_from_file_location("fast_example_transformer", EXAMPLE)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"contention: cannot load the transformer example {EXAMPLE}")
        example = sys.modules.get(spec.name)
        if example is None:  # registered before it runs: its dataclasses look their module up
            example = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(example)
        xp: Any = importlib.import_module("fast.xp")
        settings = example.Config(hidden=64, heads=4, layers=2)
        host = example.random_weights(settings, 100, 32)
        ids_np = np.random.default_rng(tokens).integers(0, 100, (1, tokens)).astype(np.int32)
        mask_np = np.ones((1, tokens), np.int32)
        weights = {name: xp.asarray(value, device=device) for name, value in host.items()}
        ids, mask = xp.asarray(ids_np, device=device), xp.asarray(mask_np, device=device)
        expected = example.encode(host, ids_np, mask_np, settings)
        return (lambda: example.encode(weights, ids, mask, settings)), expected
    return Case(f"transformer_1x{tokens}", make, 1e-3, None)


def _size_name(count: int) -> str:
    return f"{count >> 20}M" if count >= 1 << 20 else f"{count >> 10}K"


def cases(quick: bool) -> list[Case]:
    """The issue's cases (sizes divided by 64, sides by 8, with `quick`)."""
    scale, side = (64, 128) if quick else (1, 1024)
    return [_mul_add_case((1 << 16) // scale), _mul_add_case((1 << 20) // scale), _mul_add_case((1 << 24) // scale),
            _softmax_case(side), _transformer_case(16)]


@contextlib.contextmanager
def spinners(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` processes each spinning on a core (busy loops) while the block runs; each is ended
    (by its own handle) when the block leaves."""
    started = [subprocess.Popen([sys.executable, "-c", SPIN_CODE]) for _ in range(count)]
    try:
        time.sleep(0.2)  # let them get going
        yield started
    finally:
        for process in started:
            process.kill()
        for process in started:
            process.wait()


def _timed_calls(run: Callable[[], Any], calls: int) -> list[float]:
    """Seconds of `calls` calls of `run` after one untimed call (garbage collector off while timing)."""
    run()
    times = []
    for _ in range(calls):
        gc.disable()
        try:
            start = time.perf_counter()
            result = run()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
        del result
    return times


def time_modes(runs: dict[str, Callable[[], Any]], calls: int, rounds: int) -> dict[str, list[float]]:
    """Seconds of each call of each named run: `rounds` rounds of `calls` calls, modes alternating."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name] += _timed_calls(run, calls)
    return times


def medians_ms(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def _with_threads(build: Callable[[], Any], threads: int) -> Callable[[], Any]:
    def once() -> Any:
        with config.override(threads=threads) if threads else contextlib.nullcontext():
            return _realized(build())
    return once


def _torch_run(case: Case) -> Callable[[], Any] | None:
    if case.torch is None or importlib.util.find_spec("torch") is None:
        return None
    return case.torch()


def measure_case(case: Case, device: str, calls: int, rounds: int, loaded: int) -> dict[str, Any]:
    """One case's medians, quiet and with `loaded` spinners, and its check against numpy."""
    build, expected = case.make(device)
    graph = build()
    kernels = count_kernels(fast.schedule(graph)) if isinstance(graph, fast.LazyBuffer) else 0
    got = _value(_with_threads(build, 0)())
    ok = bool(np.allclose(got, expected, rtol=case.rtol, atol=case.rtol))
    for threads in (1, 2, 3):  # bits never depend on the thread count
        ok = ok and bool(np.array_equal(_value(_with_threads(build, threads)()), got))
    runs: dict[str, Callable[[], Any]] = {"default": _with_threads(build, 0), "one": _with_threads(build, 1)}
    peer = _torch_run(case)
    if peer is not None:
        runs["torch"] = peer
    row: dict[str, Any] = {"case": case.name, "check": ok, "kernels": kernels,
                           "quiet": medians_ms(time_modes(runs, calls, rounds))}
    with spinners(loaded):
        times = time_modes(runs, calls, rounds)
    row["loaded"] = medians_ms(times)
    row["loaded_default_min_ms"] = min(times["default"]) * 1e3
    row["loaded_default_max_ms"] = max(times["default"]) * 1e3
    row["loaded_ratio"] = row["loaded"]["default"] / row["loaded"]["one"]
    row["quiet_ratio"] = row["quiet"]["default"] / row["quiet"]["one"]
    row["target_met"] = row["loaded_ratio"] <= LOADED_RATIO_TARGET
    return row


def run_contention(device: str, calls: int = 25, rounds: int = 3, quick: bool = False,
                   log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every case on `device`: per case its medians (quiet and loaded) and ratios, and the summary
    fields of a bench row (`median_ms`, `min_ms`, `max_ms`: sums over the cases of the loaded
    default-thread median, fastest and slowest call; `kernels`: of the lazy-buffer cases)."""
    loaded = max(1, cpu.available_cores() - 1)
    rows = []
    with config.override(cache_dir=tempfile.mkdtemp(prefix="fast-contention-")):
        for case in cases(quick):
            rows.append(measure_case(case, device, calls, rounds, loaded))
            log(case_line(rows[-1]))
    return {"median_ms": sum(row["loaded"]["default"] for row in rows), "repeats": calls * rounds,
            "min_ms": sum(row["loaded_default_min_ms"] for row in rows),
            "max_ms": sum(row["loaded_default_max_ms"] for row in rows), "kernels": sum(row["kernels"] for row in rows),
            "spinners": loaded, "cases": rows, "target": LOADED_RATIO_TARGET,
            "check": {"ok": all(row["check"] for row in rows)}}


def case_line(row: dict[str, Any]) -> str:
    """One line per case: quiet and loaded medians, default / one thread (and torch)."""
    def part(where: str) -> str:
        medians = row[where]
        torch = f", torch {medians['torch']:.3f}" if "torch" in medians else ""
        return f"{where} default {medians['default']:.3f} / one {medians['one']:.3f} ms{torch}"
    verdict = "ok" if row["target_met"] else f"OVER {LOADED_RATIO_TARGET}x"
    return (f"  {row['case']:<18} {part('quiet')}; {part('loaded')}; loaded ratio {row['loaded_ratio']:.2f} "
            f"({verdict}){'' if row['check'] else ' CHECK FAILED'}")


def markdown(result: dict[str, Any]) -> str:
    """The results as a Markdown table per device."""
    lines = [f"# contention ({result['timestamp']})", "", f"Command: `{result['command']}`", ""]
    lines += [f"Note: {note}" for note in result["notes"]]
    for device, summary in result["devices"].items():
        lines += ["", f"## {device} ({summary['spinners']} spinning process(es); medians of "
                  f"{summary['repeats']} calls, ms)", "",
                  "| case | quiet default | quiet one | loaded default | loaded one | loaded ratio | torch quiet"
                  " | torch loaded |", "|---|---|---|---|---|---|---|---|"]
        for row in summary["cases"]:
            quiet, loaded = row["quiet"], row["loaded"]
            torch = [f"{d['torch']:.3f}" if "torch" in d else "-" for d in (quiet, loaded)]
            lines.append(f"| {row['case']} | {quiet['default']:.3f} | {quiet['one']:.3f} | {loaded['default']:.3f} | "
                         f"{loaded['one']:.3f} | {row['loaded_ratio']:.2f} | {torch[0]} | {torch[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.contention`: 0 when every check passed and every loaded ratio met the target."""
    parser = argparse.ArgumentParser(prog="python -m bench.contention", description=__doc__.split("\n")[0])
    parser.add_argument("--devices", default="CLANG")
    parser.add_argument("--calls", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    add_output_options(parser, "contention-latest")
    parser.add_argument("--note", action="append", default=[])
    options = parser.parse_args(argv)
    devices = [name.strip() for name in options.devices.split(",") if name.strip()]
    reasons = [reason for reason in map(unusable_device, devices) if reason is not None]
    if reasons:
        print(f"python -m bench.contention: {'; '.join(reasons)}", file=sys.stderr)
        return 2
    result: dict[str, Any] = {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.contention", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine_info(), "notes": options.note, "devices": {}}
    for device in devices:
        print(f"{device}:", flush=True)
        result["devices"][device] = run_contention(device, options.calls, options.rounds, options.quick,
                                                   lambda line: print(line, flush=True))
    folder, prefix = destination(options, "contention-latest")
    stem = folder / prefix
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    stem.with_suffix(".md").write_text(markdown(result))
    print(f"wrote {stem}.{{json,md}}")
    rows = [row for summary in result["devices"].values() for row in summary["cases"]]
    return 0 if all(row["check"] and row["target_met"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
