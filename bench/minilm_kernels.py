"""The matmul kernels of one MiniLM forward on `fast`, each timed alone (issue 26: "every matmul
kernel of the MiniLM forward at 60% or more of the measured FMA peak").

A forward's wall time includes its memory-bound kernels (layer norms, softmax, GELU's epilogues
are inside the matmuls) and the call's Python; this measures the matmul kernels themselves. The
forward runs `ROUNDS` times under `DEBUG=2` (taping off: every kernel is a scheduled item, timed by
`launch` from its start until every chunk of every thread finished); each kernel of the schedule
keeps its fastest round, as the FMA peak is the best of its repeats (with 3 rounds, a kernel whose
rounds all fell in stretches where the host lent one core's worth of FMAs to the two threads read
76-78% for the linears; the fastest of 10 read 87-88%). A kernel is a matmul when it was lowered as
a GEMM (its program's paths hold "gemm", fast/codegen/paths.py) or its name is one of those kernels'
names. Reported per kernel name: how many in the forward, ms (sum of the fastest rounds), GFLOP/s
(the program's own flop count) and the fraction of the FMA peak measured in the same bench run.
"""
from __future__ import annotations

import contextlib
import importlib
import io
from collections.abc import Callable
from typing import Any

ROUNDS = 8


def _gemm_names(build: Callable[[], Any]) -> dict[str, bool]:
    """Names of the kernels of one forward's schedule that were lowered as GEMMs, each with whether
    it is batched (attention's products; the linears are not) (nothing runs; the kernels are
    already compiled by the timed calls)."""
    import fast
    from fast.ops import KernelOps

    kernels = importlib.import_module("fast.engine.realize")
    names: dict[str, bool] = {}
    for item in fast.schedule(build()):
        if item.ast.op is KernelOps.SINK:
            kernel, _ = kernels.get_kernel(item.bufs[0].device, item.ast)
            if "gemm" in kernel.program.paths:
                names[kernel.program.name] = "gemm-batched" in kernel.program.paths
    return names


def _debug_lines(build: Callable[[], Any]) -> list[str]:
    """The `***` lines of one forward realized under DEBUG=2."""
    import fast
    from fast import config

    out = io.StringIO()
    with contextlib.redirect_stdout(out), config.override(debug=2):
        fast.realize(build())
    return [line for line in out.getvalue().splitlines() if line.startswith("***") and "GFLOP/s" in line]


def fastest_rounds(build: Callable[[], Any]) -> dict[int, tuple[str, float, float]]:
    """Per schedule position of the forward `build()` returns (a LazyBuffer): the kernel's name, its
    fastest round in ms, and its GFLOP (the program's own count)."""
    best: dict[int, tuple[str, float, float]] = {}
    for _ in range(ROUNDS):
        for line in _debug_lines(build):
            fields = line.split()
            position, name = int(fields[2]), fields[3]
            ms = float(fields[fields.index("ms") - 1])
            gflop = float(fields[fields.index("GFLOP/s") - 1]) * ms / 1e3
            if position not in best or ms < best[position][1]:
                best[position] = (name, ms, gflop)
    return best


def matmul_kernels(build: Callable[[], Any], fma_gflops: float | None) -> tuple[list[dict[str, Any]], float]:
    """Per matmul kernel name of the forward `build()` returns: count, ms, GFLOP/s, fraction of
    `fma_gflops` (module docstring); and the forward's kernel floor, the sum of every kernel's
    fastest round (matmul or not), ms: what one call would take with every kernel at its best and
    nothing between them."""
    names = _gemm_names(build)
    best = fastest_rounds(build)
    rows: dict[str, dict[str, Any]] = {}
    for name, ms, gflop in best.values():
        if name not in names:
            continue
        row = rows.setdefault(name, {"kernel": name, "count": 0, "ms": 0.0, "gflop": 0.0, "batched": names[name]})
        row["count"] += 1
        row["ms"] += ms
        row["gflop"] += gflop
    for row in rows.values():
        row["gflops"] = row["gflop"] / (row["ms"] / 1e3) if row["ms"] else None
        row["fma_fraction"] = row["gflops"] / fma_gflops if fma_gflops and row["gflops"] else None
    return sorted(rows.values(), key=lambda row: -row["ms"]), sum(ms for _, ms, _ in best.values())


def kernel_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The report's lines for one device's matmul kernels."""
    lines = []
    for row in rows:
        peak = f", {row['fma_fraction'] * 100:.0f}% of the FMA peak" if row.get("fma_fraction") else ""
        lines.append(f"{row['kernel']} x{row['count']}: {row['ms']:.2f} ms, {row['gflops']:.0f} GFLOP/s{peak}")
    return lines
