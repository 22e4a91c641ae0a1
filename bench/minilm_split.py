"""Where torch eager's MiniLM forward spends its time, and what "1.2x torch" then leaves (issue 26).

`torch_split(model, ids, mask)` runs the forward `ROUNDS` times under `torch.profiler` (CPU
activities only) and sums each aten op's self time: the linear layers' GEMMs (`aten::addmm`, and
`aten::mm`/`aten::bmm`/`aten::matmul` should a torch build route them there), the fused attention
(`aten::_scaled_dot_product_*`: its products and softmax in one op) and everything else. Shares are
of the profiled self time (the profiler's own overhead spreads over every op).

`target_lines` turns that and a fast row (its matmul kernels timed alone by bench/minilm_kernels.py,
its floor) into the report's lines: with torch's median T, 1.2x torch needs T / 1.2 ms; fast's
kernels other than the matmuls take the floor less the matmul kernels; what is left is the time its
matmuls' GFLOP would have to fit in, as a rate and as a share of the run's FMA peak. Beside it, the
rate of torch's own linears (their GFLOP over the GEMM share of torch's median)."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

ROUNDS = 3
GEMM_OPS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::matmul")
ATTENTION_PREFIX = "aten::_scaled_dot_product"
TARGET = 1.2  # issue 26: at least 1.2x torch eager


def torch_split(model: Any, ids: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    """Self-time shares of torch eager's forward: linears' GEMMs, fused attention, the rest; and the
    five ops with the most self time (name, ms per forward)."""
    torch = importlib.import_module("torch")
    profiler = importlib.import_module("torch.profiler")
    ids64, mask64 = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(mask.astype(np.int64))
    with torch.inference_mode():
        model(ids64, mask64)
        with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as recorded:
            for _ in range(ROUNDS):
                model(ids64, mask64)
    per_op = {row.key: row.self_cpu_time_total / ROUNDS / 1e3 for row in recorded.key_averages()}
    total = sum(per_op.values())
    gemm = sum(ms for name, ms in per_op.items() if name in GEMM_OPS)
    attention = sum(ms for name, ms in per_op.items() if name.startswith(ATTENTION_PREFIX))
    top = sorted(per_op.items(), key=lambda item: -item[1])[:5]
    return {"profiled_ms": total, "gemm_share": gemm / total, "attention_share": attention / total,
            "other_share": 1 - (gemm + attention) / total, "top_ops": [[name, round(ms, 2)] for name, ms in top]}


def target_lines(split: dict[str, Any], torch_ms: float, row: dict[str, Any], fma_gflops: float | None) -> list[str]:
    """The report's lines for one fast row: what 1.2x torch eager needs of fast's matmuls, beside
    where torch spends its forward."""
    lines = [f"torch eager under torch.profiler ({ROUNDS} forwards, self time): linears' GEMMs "
             f"{split['gemm_share'] * 100:.1f}%, fused attention {split['attention_share'] * 100:.1f}%, the rest "
             f"{split['other_share'] * 100:.1f}% (top: " + ", ".join(f"{name} {ms} ms" for name, ms in split["top_ops"])
             + ")."]
    kernels, floor = row.get("matmul_kernels") or [], row.get("kernel_floor_ms")
    if not kernels or not floor or not fma_gflops:
        return lines
    need = torch_ms / TARGET
    matmul_ms = sum(entry["ms"] for entry in kernels)
    matmul_gflop = sum(entry["gflop"] for entry in kernels)
    linear_gflop = sum(entry["gflop"] for entry in kernels if not entry.get("batched"))
    rest = floor - matmul_ms
    torch_rate = linear_gflop / (split["gemm_share"] * torch_ms / 1e3)
    required = matmul_gflop / ((need - rest) / 1e3) if need > rest else float("inf")
    lines.append(f"{TARGET}x torch eager ({torch_ms:.1f} ms) needs {need:.1f} ms. fast {row['device']}'s other "
                 f"kernels take {rest:.1f} ms (floor {floor:.1f} less its matmul kernels {matmul_ms:.1f}), so its "
                 f"matmuls ({matmul_gflop:.1f} GFLOP, epilogues inside) would have to average {required:.0f} GFLOP/s, "
                 f"{required / fma_gflops * 100:.0f}% of the FMA peak; they average "
                 f"{matmul_gflop / matmul_ms * 1e3:.0f} ({matmul_gflop / matmul_ms * 1e3 / fma_gflops * 100:.0f}%). "
                 f"torch's linears at its median: {torch_rate:.0f} GFLOP/s ({torch_rate / fma_gflops * 100:.0f}%).")
    return lines


def attach(rows: list[dict[str, Any]], peers: dict[str, Any], split: Callable[[], dict[str, Any]],
           fma_gflops: float | None) -> None:
    """Each measured row with timed matmul kernels gains `torch_split` (computed once), with torch's
    median and the run's FMA peak beside it."""
    torch_ms = (peers.get("torch") or {}).get("median_ms")
    if not torch_ms or not any(row.get("matmul_kernels") for row in rows):
        return
    shares = split()
    for row in rows:
        if row.get("matmul_kernels"):
            row["torch_split"] = {**shares, "torch_median_ms": torch_ms, "fma_gflops": fma_gflops}
