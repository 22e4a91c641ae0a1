"""Linear layers on a few tokens, the shapes of one sentence through MiniLM: a chain of `LAYERS`
linears `x @ W.T + b` (384 -> 384, a new W and b each, so W streams from memory as in a forward)
captured with `fast.xp.jit`, against numpy running the same chain, for token counts from 1 to 160;
and the MLP pair 384 -> 1536 -> 384 at a few of them.

    python -m bench.few_tokens [--device CLANG] [--tokens 4,5,7,...] [--out-prefix NAME]

Per token count: microseconds per linear (median of `--repeats` chains, each timed whole and divided
by `LAYERS`), fast and numpy in alternating blocks, and numpy / fast (above 1: fast is faster). A
GEMM's rows are W's below 32 tokens (`codegen/gemm.py` MIN_ROWS) and the tokens' from 32 on, so
the edge widths (N % NR columns) and the split of B between threads both show here. `--out-prefix`
writes bench/results/NAME.json and NAME.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

LAYERS = 24
HIDDEN, INNER = 384, 1536
TOKENS = (1, 4, 5, 7, 8, 12, 15, 16, 17, 24, 31, 32, 48, 64, 128, 160)
MLP_TOKENS = (16, 32, 128)
PAUSE_S = 0.3
RESULTS = os.path.join(os.path.dirname(__file__), "results")


def _median_us(call: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def _alternating(fast_call: Callable[[], Any], numpy_call: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Medians (us) of the two calls timed in three alternating blocks (the medians of the blocks'),
    each block after `PAUSE_S` idle: OpenBLAS's threads poll for a while after numpy's last call and
    would take a core from fast's next block (bench/timing.py)."""
    fast_blocks, numpy_blocks = [], []
    for _ in range(3):
        time.sleep(PAUSE_S)
        fast_blocks.append(_median_us(fast_call, repeats))
        time.sleep(PAUSE_S)
        numpy_blocks.append(_median_us(numpy_call, repeats))
    return statistics.median(fast_blocks), statistics.median(numpy_blocks)


def chain_row(tokens: int, device: str, repeats: int) -> dict[str, Any]:
    """Microseconds per linear of the chain on `tokens` tokens, fast (captured) and numpy."""
    from fast import xp

    rng = np.random.default_rng(tokens)
    x = rng.standard_normal((tokens, HIDDEN), dtype=np.float32)
    weights = [rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32) / 20 for _ in range(LAYERS)]
    biases = [rng.standard_normal(HIDDEN, dtype=np.float32) for _ in range(LAYERS)]
    xs, ws, bs = (xp.asarray(x, device=device), [xp.asarray(w, device=device) for w in weights],
                  [xp.asarray(b, device=device) for b in biases])

    def chain(value: Any) -> Any:
        for w, b in zip(ws, bs, strict=True):
            value = value @ xp.matrix_transpose(w) + b
        return value

    def numpy_chain() -> np.ndarray:
        value = x
        for w, b in zip(weights, biases, strict=True):
            value = value @ w.T + b
        return value

    captured = xp.jit(chain)
    got = np.asarray(captured(xs))
    np.testing.assert_allclose(got, numpy_chain(), rtol=1e-3, atol=1e-3)
    fast_us, numpy_us = _alternating(lambda: np.asarray(captured(xs)), numpy_chain, repeats)
    return {"tokens": tokens, "fast_us": fast_us / LAYERS, "numpy_us": numpy_us / LAYERS,
            "ratio": numpy_us / fast_us}


def mlp_row(tokens: int, device: str, repeats: int) -> dict[str, Any]:
    """Microseconds per 384 -> 1536 -> 384 pair (six pairs, new weights each), fast and numpy."""
    from fast import xp

    rng = np.random.default_rng(tokens + 1)
    x = rng.standard_normal((tokens, HIDDEN), dtype=np.float32)
    ups = [rng.standard_normal((INNER, HIDDEN), dtype=np.float32) / 20 for _ in range(6)]
    downs = [rng.standard_normal((HIDDEN, INNER), dtype=np.float32) / 40 for _ in range(6)]
    xs = xp.asarray(x, device=device)
    up_x, down_x = [xp.asarray(w, device=device) for w in ups], [xp.asarray(w, device=device) for w in downs]

    def mlp(value: Any) -> Any:
        for up, down in zip(up_x, down_x, strict=True):
            value = (value @ xp.matrix_transpose(up)) @ xp.matrix_transpose(down)
        return value

    def numpy_mlp() -> np.ndarray:
        value = x
        for up, down in zip(ups, downs, strict=True):
            value = (value @ up.T) @ down.T
        return value

    captured = xp.jit(mlp)
    np.testing.assert_allclose(np.asarray(captured(xs)), numpy_mlp(), rtol=1e-3, atol=1e-3)
    fast_us, numpy_us = _alternating(lambda: np.asarray(captured(xs)), numpy_mlp, max(5, repeats // 4))
    return {"tokens": tokens, "fast_us": fast_us / 6, "numpy_us": numpy_us / 6, "ratio": numpy_us / fast_us}


def report(result: dict[str, Any]) -> str:
    """The markdown of one run: the chain's table, then the MLP pair's."""
    lines = [f"# Linears on a few tokens ({result['device']}, {result['when']})", "",
             f"A chain of {LAYERS} linears 384 -> 384 (`x @ W.T + b`, a new W each) under `fast.xp.jit`, "
             "against numpy running the same chain; us per linear (bench/few_tokens.py).", "",
             "| tokens | fast us | numpy us | numpy / fast |", "|---|---|---|---|"]
    lines += [f"| {row['tokens']} | {row['fast_us']:.1f} | {row['numpy_us']:.1f} | {row['ratio']:.2f} |"
              for row in result["chain"]]
    lines += ["", "The MLP pair 384 -> 1536 -> 384 (six pairs, new weights each); us per pair:", "",
              "| tokens | fast us | numpy us | numpy / fast |", "|---|---|---|---|"]
    lines += [f"| {row['tokens']} | {row['fast_us']:.0f} | {row['numpy_us']:.0f} | {row['ratio']:.2f} |"
              for row in result["mlp"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="CLANG")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--mlp-tokens", default=",".join(map(str, MLP_TOKENS)))
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--out-prefix", default=None)
    args = parser.parse_args()
    result: dict[str, Any] = {"device": args.device, "when": time.strftime("%Y-%m-%d %H:%M"), "chain": [], "mlp": []}
    for tokens in (int(t) for t in args.tokens.split(",") if t):
        result["chain"].append(chain_row(tokens, args.device, args.repeats))
        print(f"chain {tokens:4d} tokens: {result['chain'][-1]}", flush=True)
    for tokens in (int(t) for t in args.mlp_tokens.split(",") if t):
        result["mlp"].append(mlp_row(tokens, args.device, args.repeats))
        print(f"mlp   {tokens:4d} tokens: {result['mlp'][-1]}", flush=True)
    text = report(result)
    print(text)
    if args.out_prefix:
        with open(os.path.join(RESULTS, f"{args.out_prefix}.json"), "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
        with open(os.path.join(RESULTS, f"{args.out_prefix}.md"), "w", encoding="utf-8") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
