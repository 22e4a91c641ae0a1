"""Presenting a run: the console table, `<prefix>.json`, `<prefix>.md` (a Markdown table for the
README) and `<prefix>.png` (ratios numpy_time / fast_time per workload and device; needs matplotlib).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.ceiling import reachable_ratio
from bench.minilm_report import minilm_tables
from bench.tile_peak import tile_line

READ_WORKLOADS = ("sum", "row_sum", "col_sum")  # each reads 16M float32 once, like the ceiling

BASE_COLUMNS = ("workload", "device", "median ms", "min", "max", "numpy ms", "ratio")
TAIL_COLUMNS = ("kernels", "compile s", "GB/s", "% bw", "GFLOP/s", "% fma", "check")


def fmt(value: float | None, digits: int = 3) -> str:
    """A number with about `digits` significant figures, '-' when missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{decimals}f}"


def check_text(row: dict[str, Any]) -> str:
    """ok, FAIL (with the reason or the error), skipped (mpi_sharded without MPI), or n/a."""
    if row.get("error"):
        return "ERROR"
    if row.get("skipped"):
        return "skipped"
    check = row.get("check")
    if not check:
        return "n/a"
    return "ok" if check.get("ok") else "FAIL"


def columns(result: dict[str, Any]) -> list[str]:
    """Table columns: a ratio column per optional peer that ran."""
    peers = [f"{name} ratio" for name in result.get("peers", []) if name != "numpy"]
    return [*BASE_COLUMNS, *peers, *TAIL_COLUMNS]


def _compile_cell(row: dict[str, Any]) -> str:
    if row.get("compile_s") is None:
        return "-"
    return f"{fmt(row['compile_s'])} ({row.get('compiles', 0)})"


def cells(row: dict[str, Any], peers: list[str]) -> list[str]:
    """One table row as strings, in `columns` order."""
    bw, fma = row.get("bw_fraction"), row.get("fma_fraction")
    ratios = [fmt(row.get("peer_ratios", {}).get(name)) for name in peers if name != "numpy"]
    kernels = row.get("kernels")
    return [row["workload"], row["device"], fmt(row.get("median_ms")), fmt(row.get("min_ms")),
            fmt(row.get("max_ms")), fmt(row.get("numpy_ms")), fmt(row.get("ratio_numpy")), *ratios,
            "-" if kernels is None else str(kernels), _compile_cell(row), fmt(row.get("gbs")),
            fmt(None if bw is None else 100 * bw, 2), fmt(row.get("gflops")),
            fmt(None if fma is None else 100 * fma, 2), check_text(row)]


def table_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the results table."""
    peers = list(result.get("peers", []))
    return columns(result), [cells(row, peers) for row in result["results"]]


def text_table(result: dict[str, Any]) -> str:
    """The table as aligned plain text."""
    header, rows = table_rows(result)
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def summary_lines(result: dict[str, Any]) -> list[str]:
    """Machine, bandwidth and notes, one fact a line."""
    machine, bandwidth = result["machine"], result["bandwidth"]
    lines = [f"command: {result['command']}" + (" (quick sizes: smoke test only)" if result.get("quick") else ""),
             f"machine: {machine['cpu_model']}, {machine['cores']} cores, flags {' '.join(machine['cpu_flags'])}, "
             f"numpy {machine['numpy']}",
             f"bandwidth: {bandwidth['single_thread_gbs']} GB/s one thread, {bandwidth['all_cores_gbs']} GB/s "
             f"{bandwidth['threads']} threads (copy of {bandwidth['array_mib']} MiB; read + write)",
             ceiling_line(result.get("read_ceiling")),
             fma_line(result.get("fma_peak")),
             *([line] if (line := tile_line(result.get("tile_peak"), result.get("tile_spread_end"))) else []),
             f"fast: {result['fast']['file']} (git {result['fast'].get('git') or '?'})"]
    lines += [f"note: {note}" for note in result.get("notes", [])]
    return lines


def detail_lines(result: dict[str, Any]) -> list[str]:
    """What the table has no column for: graph_build's µs per node, const_realizes' compiles and memory
    growth, sharded's and mpi_sharded's speedups, safetensors_read's bytes read and full-read time, and
    every failure."""
    lines, ceiling = [], result.get("read_ceiling") or {}
    for row in result["results"]:
        if row["workload"] == "graph_build" and "build_us_per_node" in row:
            lines.append(f"graph_build on {row['device']} ({row['nodes']} nodes): build "
                         f"{fmt(row['build_us_per_node'])} µs/node, schedule {fmt(row['schedule_us_per_node'])} "
                         f"µs/node; build with the node cache off {fmt(row['us_per_node_cache_off'])}, rebuild of "
                         f"a live graph {fmt(row['us_per_node_cache_hit'])}, a trivial Python object "
                         f"{fmt(row['us_per_trivial_object'])} µs")
        if row["workload"] == "const_realizes" and "compiles" in row:
            growth = row.get("rss_growth_mb")
            lines.append(f"const_realizes on {row['device']} ({row['realizes']} realizes of a + c_i): "
                         f"{row['compiles']} kernels compiled, RSS growth "
                         f"{'-' if growth is None else fmt(growth)} MB, {fmt(row['us_per_realize'])} µs per realize; "
                         f"a 3-op graph realized again: {fmt(row.get('repeat_realize_us', float('nan')))} µs")
        if row["workload"] == "sharded" and "speedup_threads1" in row:
            lines.append(sharded_line(row))
        if row["workload"] == "mpi_sharded" and "speedup_threads1" in row:
            lines.append(mpi_sharded_line(row))
        if row["workload"] == "safetensors_read" and "full_ms" in row:
            lines.append(safetensors_line(row))
        if row["workload"] in READ_WORKLOADS and "median_ms" in row and "all_cores_ms" in ceiling:
            lines.append(reduction_line(row, ceiling))
        if by_group(row["workload"]) == "matmul" and "gflops" in row and row.get("gflops"):
            lines.append(matmul_line(row, result))
    lines += [f"{row['workload']} on {row['device']}: {row['skipped']}" for row in result["results"]
              if row.get("skipped")]
    return lines + [f"FAILED: {line}" for line in result.get("failures", [])]


def ceiling_line(ceiling: dict[str, Any] | None) -> str:
    """The read ceiling (bench/ceiling.py), or why it is missing."""
    if not ceiling or "all_cores_ms" not in ceiling:
        return f"read ceiling: not measured ({(ceiling or {}).get('error', 'absent from this result')})"
    return (f"read ceiling (hand-written C sum of {ceiling['elements']:,} float32): {ceiling['single_thread_gbs']} "
            f"GB/s one thread ({ceiling['single_thread_ms']} ms), {ceiling['all_cores_gbs']} GB/s "
            f"{ceiling['threads']} threads ({ceiling['all_cores_ms']} ms); bytes read, median")


def fma_line(fma: dict[str, Any] | None) -> str:
    """The FMA peak (bench/machine.py), or why it is missing."""
    if not fma or "peak_gflops" not in fma:
        return f"FMA peak: not measured ({(fma or {}).get('error', 'absent from this result')})"
    each = "; ".join(f"{name} {v['all_cores_gflops']} ({v['single_thread_gflops']} one thread)" if "lanes" in v
                     else f"{name} {v['error']}" for name, v in fma["variants"].items())
    return (f"FMA peak (C, independent float32 FMA chains on {fma['threads']} threads): {fma['peak_gflops']} GFLOP/s "
            f"with {fma['best']}, {fma['single_thread_gflops']} one thread; each set: {each}; "
            f"{'median' if 'median' in fma.get('counts', '') else 'best'} of repeats{spread_text(fma.get('spread'))}")


def spread_text(spread: dict[str, Any] | None) -> str:
    """What the cores delivered most of the time (bench/machine.py `fma_spread`), or nothing."""
    if not spread:
        return ""
    return (f"; in {spread['samples']} runs of {spread['sample_ms']} ms on {spread['threads']} threads: "
            f"median {spread['median_gflops']}, 25th percentile {spread['p25_gflops']}, "
            f"10th {spread['p10_gflops']} GFLOP/s")


def by_group(name: str) -> str:
    """The group of a workload name ("" when unknown, e.g. in an older result)."""
    from bench.workloads import WORKLOADS
    return next((workload.group for workload in WORKLOADS if workload.name == name), "")


def matmul_line(row: dict[str, Any], result: dict[str, Any]) -> str:
    """A matmul row's GFLOP/s and % of the FMA peak, beside numpy's and the other peers' in the same run."""
    peak = (result.get("fma_peak") or {}).get("peak_gflops")

    def rate(ms: float | None) -> str:
        if not ms or not row.get("flops"):
            return "-"
        gflops = row["flops"] / ms / 1e6
        return f"{fmt(gflops)} GFLOP/s" + (f" ({fmt(100 * gflops / peak)}% of peak)" if peak else "")
    peers = result.get("peer_results", {}).get(row["workload"], {})
    others = "; ".join(f"{name} {rate(summary.get('median_ms'))}" for name, summary in peers.items())
    return f"{row['workload']} on {row['device']}: fast {rate(row['median_ms'])}; {others}"


def reduction_line(row: dict[str, Any], ceiling: dict[str, Any]) -> str:
    """A reduction over 16M float32 against the read ceiling: its share of the ceiling, and the best
    ratio against numpy that a kernel running exactly at the ceiling would reach in this run."""
    reachable = reachable_ratio(row.get("numpy_ms"), ceiling)
    return (f"{row['workload']} on {row['device']}: {fmt(row['median_ms'])} ms, "
            f"{fmt(100 * float(ceiling['all_cores_ms']) / row['median_ms'])}% of the read ceiling's speed; "
            f"ratio {fmt(row.get('ratio_numpy'))}x numpy, {fmt(reachable)}x at the ceiling")


def safetensors_line(row: dict[str, Any]) -> str:
    """The safetensors_read row: the small tensor's copy against the full read, times and bytes read."""
    return (f"safetensors_read to {row['device']} ({row['file_bytes']:,}-byte sparse file, safe_load "
            f"{fmt(row['load_ms'])} ms): {row['small_bytes']:,}-byte tensor {fmt(row['median_ms'])} ms reading "
            f"{row['small_bytes_read']:,} bytes; full {row['full_bytes']:,}-byte tensor {fmt(row['full_ms'])} ms "
            f"reading {row['full_bytes_read']:,} bytes ({fmt(row['full_gbs'])} GB/s, {fmt(row['full_over_small'])}x "
            "the small copy's time)")


def sharded_line(row: dict[str, Any]) -> str:
    """The sharded workload's speedups: single-device time / sharded time, with the issue's targets."""
    devices = ",".join(row["sharded_devices"])
    return (f"sharded on {devices} vs {row['device']} alone: THREADS=1 {fmt(row['sharded_threads1_ms'])} ms vs "
            f"{fmt(row['single_threads1_ms'])} ms, speedup {fmt(row['speedup_threads1'])}x (target >= "
            f"{fmt(row['speedup_threads1_target'])}x); default threads {fmt(row['median_ms'])} ms vs "
            f"{fmt(row['single_ms'])} ms, speedup {fmt(row['speedup_default'])}x (target >= "
            f"{fmt(row['speedup_default_floor'])}x); best repeats {fmt(row['speedup_threads1_best'])}x and "
            f"{fmt(row['speedup_default_best'])}x{'' if row['targets_met'] else ' -- TARGETS NOT MET'}")


def mpi_sharded_line(row: dict[str, Any]) -> str:
    """The MPI workload's speedup: one process's time / two ranks' time, with the issue's target."""
    ranks = " and ".join(f"{fmt(ms)} ms" for ms in row["rank_median_ms"])
    return (f"mpi_sharded on {','.join(row['sharded_devices'])} ({row['ranks']} MPI ranks, THREADS=1 each; the "
            f"ranks' own medians {ranks}) vs {row['device']} alone in one process, THREADS=1: "
            f"{fmt(row['median_ms'])} ms vs {fmt(row['single_threads1_ms'])} ms, speedup "
            f"{fmt(row['speedup_threads1'])}x (target >= {fmt(row['speedup_threads1_target'])}x); best repeats "
            f"{fmt(row['speedup_threads1_best'])}x; against rank 0 alone in the same rounds "
            f"{fmt(row['rank0_alone_ms'])} ms, {fmt(row['speedup_interleaved'])}x"
            f"{'' if row['targets_met'] else ' -- TARGET NOT MET'}")


def markdown(result: dict[str, Any]) -> str:
    """A Markdown table ready to paste into the README, with the machine summary above it."""
    header, rows = table_rows(result)
    lines = [f"- {line}" for line in summary_lines(result)]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "ratio = numpy time / fast time (higher is better); compile s = cold run minus median warm "
              "run, 0 when noise makes it negative (compiles in brackets); GB/s counts inputs read once + output "
              "written once; % bw is GB/s over the measured copy bandwidth; % fma is GFLOP/s over the measured "
              "FMA peak; times include graph build + schedule."]
    lines += minilm_tables(result)
    lines += [""] + [f"- {line}" for line in detail_lines(result)]
    return "\n".join(lines) + "\n"


def write_png(result: dict[str, Any], path: Path) -> str | None:
    """Bar chart of ratio vs numpy per workload and device; None when written, else why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install '.[bench]'): no PNG written"
    rows = [row for row in result["results"] if row.get("ratio_numpy")]
    if not rows:
        return "no ratios to plot: no PNG written"
    workloads = list(dict.fromkeys(row["workload"] for row in rows))
    devices = list(dict.fromkeys(row["device"] for row in rows))
    width = 0.8 / len(devices)
    figure, axes = plt.subplots(figsize=(max(6.0, 1.1 * len(workloads)), 4.5))
    for index, device in enumerate(devices):
        ratio = {row["workload"]: row["ratio_numpy"] for row in rows if row["device"] == device}
        xs = [i + (index - (len(devices) - 1) / 2) * width for i in range(len(workloads))]
        bars = axes.bar(xs, [ratio.get(name, 0.0) for name in workloads], width, label=f"fast {device}")
        axes.bar_label(bars, fmt="%.2g", fontsize=7)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    axes.set_xticks(range(len(workloads)), workloads, rotation=30, ha="right")
    axes.set_ylabel("numpy time / fast time (higher is better)")
    axes.set_title(f"fast vs numpy — {result['machine']['cpu_model']}", fontsize=9)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return None


def write_all(result: dict[str, Any], out_dir: Path, prefix: str, png: bool) -> list[Path]:
    """Write <prefix>.png (when asked and possible), then .json and .md; what was skipped goes in the notes.
    Returns the paths written, in that order (no PNG path when none was written)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png_path = out_dir / f"{prefix}.png"
    why_not = write_png(result, png_path) if png else "PNG not drawn (--no-png)"
    if why_not:
        result.setdefault("notes", []).append(why_not)
    written = [] if why_not else [png_path]
    for path, text in ((out_dir / f"{prefix}.json", json.dumps(result, indent=2) + "\n"),
                       (out_dir / f"{prefix}.md", markdown(result))):
        path.write_text(text)
        written.append(path)
    return written
