"""The first MiniLM call of a new process (issue 27): all-MiniLM-L6-v2 on 1 sentence of 16 tokens,
`examples/transformer.py`'s `make_encoder` (captured) and `encode` (uncaptured), per device, each
case in a NEW process whose weights are loaded (copied to the device and realized) before the clock
starts, first with an EMPTY cache folder (`FAST_CACHE_DIR`: nothing lowered or compiled yet), then
again with the same folder WARM (what the first process left there).

    python -m bench.first_call [--devices CLANG,LLVM] [--paths encoder,encode] [--out-prefix NAME]
                               [--profile FOLDER]

Reported per case: wall seconds of the call (`time.perf_counter`), CPU seconds (this process's
`time.process_time` plus its finished children's, the C compiler's and the LLVM helper's included:
on a busy host the wall time alone cannot be judged), the main thread's CPU seconds
(`time.thread_time`: with the total, a floor for the wall time on an idle host of N cores is
max(main thread, total / N)), and where the wall time went, by stage (exclusive: a stage
nested in another counts only in the inner one; main thread only, so a parallel build counts as the
wall time the caller waited in it):
- `schedule`: `plan_schedule` (fusion, kernel ASTs);
- `lower_render`: `kernel_cache.lowered` (lowering and rendering, or reading the program store);
- `compile`: `Compiler.compile_cached` and `prebuild` (compiling, or reading the library cache);
- `load`: making the runtime's program (loading the library, finding the function);
- `run`: the rest of `run_schedule` (allocation, launches, kernels);
- `python`: everything else (building the graph, capture bookkeeping, reading the result back).
Builds run on other threads while later kernels are lowered (engine/prebuild.py), so on a cold
cache `lower_render` overlaps compiling and `compile` is mostly the wait after the last lowering.
Also the compiler's counters (compiles, cache lookups, hits) and how many kernels the program store
gave. `--profile FOLDER` writes a cProfile file per case there. `--out-prefix NAME` writes
bench/results/NAME.json and NAME.md; without it nothing is written.

Targets (issue 27, quiet 2-core host): warm at most 0.5 s; empty at most 2 s on LLVM, 3 s on CLANG.
Skipped, with the reason, when the model package or tokenizers is missing.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
STAGES = ("schedule", "lower_render", "compile", "load", "run", "python")
TARGETS_S = {("warm", "CLANG"): 0.5, ("warm", "LLVM"): 0.5, ("empty", "CLANG"): 3.0, ("empty", "LLVM"): 2.0}


class StageTimers:
    """Exclusive wall time per stage on the main thread: entering a stage pauses the one around it."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.totals = dict.fromkeys(STAGES, 0.0)
        self.stack: list[tuple[str, float]] = []
        self.main = threading.main_thread()
        self.clock = clock

    def wrap(self, stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, timed as `stage` when called on the main thread."""
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not self.main:
                return function(*args, **kwargs)
            now = self.clock()
            if self.stack:
                outer, since = self.stack[-1]
                self.totals[outer] += now - since
            self.stack.append((stage, now))
            try:
                return function(*args, **kwargs)
            finally:
                inner, since = self.stack.pop()
                end = self.clock()
                self.totals[inner] += end - since
                if self.stack:
                    self.stack[-1] = (self.stack[-1][0], end)
        return timed


def _instrument(timers: StageTimers) -> None:
    """Wrap the engine's stage functions (module globals and class methods) with `timers`."""
    from fast.runtime import base, clang, llvm

    realize: Any = importlib.import_module("fast.engine.realize")  # `fast.engine.realize` is also a function

    realize.plan_schedule = timers.wrap("schedule", realize.plan_schedule)
    kernel_cache: Any = importlib.import_module("fast.engine.kernel_cache")  # compile_item calls `lowered` there
    kernel_cache.lowered = timers.wrap("lower_render", kernel_cache.lowered)
    realize.prebuild = timers.wrap("compile", realize.prebuild)
    realize.run_schedule = timers.wrap("run", realize.run_schedule)
    base.Compiler.compile_cached = timers.wrap("compile", base.Compiler.compile_cached)  # type: ignore[method-assign]
    clang.ClangProgram.__init__ = timers.wrap("load", clang.ClangProgram.__init__)  # type: ignore[method-assign]
    llvm.LLVMProgram.__init__ = timers.wrap("load", llvm.LLVMProgram.__init__)  # type: ignore[method-assign]


def _cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _store_counter() -> Callable[[], int]:
    """Count the program store's hits from now on; returns the reader."""
    from fast.engine import program_store

    hits = [0]
    load = program_store.load

    def counting(*args: Any, **kwargs: Any) -> Any:
        found = load(*args, **kwargs)
        hits[0] += found is not None
        return found
    program_store.load = counting  # type: ignore[assignment]
    return lambda: hits[0]


def _setup(device: str, path: str) -> tuple[Callable[..., Any], tuple[Any, Any]]:
    """The call (`make_encoder`'s function or `encode`) and its inputs, the weights on `device` and
    realized, the inputs too: what the timed call finds in a process that loaded its model."""
    import fast
    from bench import minilm_model

    xp: Any = importlib.import_module("fast.xp")
    example = minilm_model.load_example()
    with tempfile.TemporaryDirectory(prefix="fast-first-call-") as folder:
        files = minilm_model.model_files(folder)
        config = example.Config.from_json(files["config.json"])
        weights = {name: xp.asarray(value, device=device)
                   for name, value in example.load_numpy(files["model.safetensors"]).items()
                   if value.dtype.name == "float32"}
        ids, mask = minilm_model.tokenize(files["tokenizer.json"], 1, 16)
    inputs = (xp.asarray(ids, device=device), xp.asarray(mask, device=device))
    fast.realize(*(array.lazy for array in [*weights.values(), *inputs]))
    call = (example.make_encoder(weights, config) if path == "encoder"
            else lambda token_ids, attention_mask: example.encode(weights, token_ids, attention_mask, config))
    return call, inputs


def child(device: str, path: str, profile: str | None) -> dict[str, Any]:
    """One case in this (new) process: load the weights, then time the first call."""
    import numpy as np

    from fast.runtime import llvm_build
    from fast.runtime.base import COMPILE_COUNTER

    call, inputs = _setup(device, path)
    timers, store_hits = StageTimers(), _store_counter()
    _instrument(timers)
    profiler = None
    if profile:
        import cProfile
        profiler = cProfile.Profile()
    before, cpu, main_cpu, start = COMPILE_COUNTER.snapshot(), _cpu_seconds(), time.thread_time(), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    value = np.asarray(call(*inputs))
    if profiler is not None:
        profiler.disable()
    wall, main_cpu = time.perf_counter() - start, time.thread_time() - main_cpu
    llvm_build.close_helpers()  # a helper's CPU time counts once it has ended
    cpu = _cpu_seconds() - cpu
    if profiler is not None and profile:
        profiler.dump_stats(profile)
    timers.totals["python"] = max(0.0, wall - sum(timers.totals.values()))
    counts = [after - earlier for after, earlier in zip(COMPILE_COUNTER.snapshot(), before, strict=True)]
    return {"wall_s": wall, "cpu_s": cpu, "main_thread_cpu_s": main_cpu, "stages_s": timers.totals,
            "compiles": counts[0], "library_lookups": counts[1], "library_hits": counts[2], "store_hits": store_hits(),
            "finite": bool(np.isfinite(value).all()), "shape": list(value.shape)}


def run_case(device: str, path: str, cache: str, state: str, profile: str | None) -> dict[str, Any]:
    """One case in a new process with FAST_CACHE_DIR=`cache`; its row."""
    command = [sys.executable, "-m", "bench.first_call", "--child", device, path]
    if profile:
        os.makedirs(profile, exist_ok=True)
        command += ["--profile", os.path.join(profile, f"{device}-{path}-{state}.prof")]
    env = {**os.environ, "FAST_CACHE_DIR": cache}
    row: dict[str, Any] = {"device": device, "path": path, "cache": state,
                           "target_s": TARGETS_S[(state, device)]}
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                            cwd=Path(__file__).resolve().parents[1])
    if result.returncode != 0:
        row["error"] = (result.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return row
    row.update(json.loads(result.stdout.strip().splitlines()[-1]))
    return row


def run_all(devices: list[str], paths: list[str], profile: str | None,
            log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every (device, path): empty, then warm, each in its own cache folder and new processes."""
    from bench import minilm_model

    reason = minilm_model.unavailable()
    if reason:
        return [{"device": d, "path": p, "skipped": reason} for d in devices for p in paths]
    rows = []
    for device in devices:
        for path in paths:
            with tempfile.TemporaryDirectory(prefix="fast-first-call-cache-") as cache:
                for state in ("empty", "warm"):
                    row = run_case(device, path, cache, state, profile)
                    log(progress(row))
                    rows.append(row)
    return rows


def progress(row: dict[str, Any]) -> str:
    """One line per case."""
    head = f"{row['device']:<6} {row['path']:<8} {row.get('cache', ''):<6}"
    if "wall_s" not in row:
        return f"{head} {row.get('error') or row.get('skipped')}"
    stages = " ".join(f"{name} {seconds:.3f}" for name, seconds in row["stages_s"].items())
    return (f"{head} {row['wall_s']:.3f} s wall, {row['cpu_s']:.3f} s CPU, {row['main_thread_cpu_s']:.3f} s main "
            f"thread (target {row['target_s']} s); "
            f"{stages}; compiles {row['compiles']}, store hits {row['store_hits']}")


def markdown(rows: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    header = ("device", "path", "cache", "wall s", "CPU s", "main thread CPU s", "target s", *STAGES, "compiles",
              "store hits")
    lines = ["# First MiniLM 1 x 16 call in a new process (bench/first_call.py)", "",
             f"Host: {machine}. Stages in wall seconds (exclusive; the module docstring says what each holds).",
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if "wall_s" not in row:
            lines.append(f"| {row['device']} | {row['path']} | {row.get('cache', '')} | "
                         f"{row.get('error') or row.get('skipped')} |" + " |" * (len(header) - 4))
            continue
        cells = [row["device"], row["path"], row["cache"], f"{row['wall_s']:.3f}", f"{row['cpu_s']:.3f}",
                 f"{row['main_thread_cpu_s']:.3f}",
                 f"{row['target_s']}", *(f"{row['stages_s'][name]:.3f}" for name in STAGES),
                 str(row["compiles"]), str(row["store_hits"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--devices", default="CLANG,LLVM")
    parser.add_argument("--paths", default="encoder,encode")
    parser.add_argument("--out-prefix", default=None)
    parser.add_argument("--profile", default=None, help="a folder for one cProfile file per case")
    parser.add_argument("--child", nargs=2, metavar=("DEVICE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.profile)))
        return
    rows = run_all(args.devices.split(","), args.paths.split(","), args.profile)
    if args.out_prefix:
        machine = {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]}
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{args.out_prefix}.json").write_text(json.dumps({"machine": machine, "results": rows}, indent=1))
        (RESULTS / f"{args.out_prefix}.md").write_text(markdown(rows, machine))


if __name__ == "__main__":
    main()
