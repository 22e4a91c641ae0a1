"""The report of the `minilm_*` workloads (bench/minilm.py): a Markdown table per workload with
every system of the same run, each device's matmul kernels timed alone, and the first calls in new
processes."""
from __future__ import annotations

from typing import Any

from bench import minilm_kernels, minilm_split

TABLE_HEADER = ("system", "ms median", "min", "max", "first call ms", "GFLOP/s", "vs torch eager",
                "vs onnxruntime", "min cosine", "max abs diff", "kernels / host steps")


def _cell(value: Any, digits: int = 3) -> str:
    from bench.report import fmt

    return fmt(value, digits) if isinstance(value, (int, float)) or value is None else str(value)


def _table_line(name: str, fields: dict[str, Any]) -> list[str]:
    if "median_ms" not in fields:
        return [name, f"skipped: {fields.get('skipped')}" if fields.get("skipped") else f"ERROR {fields.get('error')}",
                *[""] * (len(TABLE_HEADER) - 2)]
    ratios, check = fields.get("ratios") or fields.get("peer_ratios") or {}, fields.get("check") or {}
    return [name, _cell(fields["median_ms"]), _cell(fields["min_ms"]), _cell(fields["max_ms"]),
            _cell(fields.get("first_ms", fields.get("cold_ms"))), _cell(fields.get("gflops")),
            _cell(ratios.get("torch")), _cell(ratios.get("onnxruntime")),
            "reference" if not check else f"{check['min_cosine']:.7f}" if "min_cosine" in check else "-",
            _cell(check.get("max_abs_err"), 2) if check else "-",
            f"{fields['kernels']} / {fields.get('custom_items')}" if "kernels" in fields else "-"]


def minilm_tables(result: dict[str, Any]) -> list[str]:
    """A Markdown table per minilm workload in the result: every system of the same run."""
    lines: list[str] = []
    for workload in dict.fromkeys(row["workload"] for row in result["results"] if row["workload"].startswith("minilm")):
        rows = [row for row in result["results"] if row["workload"] == workload]
        peers = result.get("peer_results", {}).get(workload, {})
        if not peers and all(row.get("skipped") for row in rows):
            lines += ["", f"{workload}: skipped ({rows[0]['skipped']})"]
            continue
        checks = [fields.get("check") or {} for fields in [*rows, *peers.values()]]
        against = next((check["against"] for check in checks if "against" in check), "-")
        lines += ["", f"{workload} (same run, rounds interleaved; ratios = other's time / this time; cosine and "
                  f"abs diff against {against}):", "",
                  "| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
        body = [_table_line(f"fast {row['device']}", row) for row in rows]
        body += [_table_line(name, fields) for name, fields in peers.items()]
        lines += ["| " + " | ".join(line) + " |" for line in body]
        for row in rows:
            if row.get("matmul_kernels"):
                lines += ["", f"Matmul kernels of one forward on {row['device']}, each timed alone (DEBUG=2, "
                          f"fastest of {minilm_kernels.ROUNDS} rounds; bench/minilm_kernels.py):", "",
                          *(f"- {line}" for line in minilm_kernels.kernel_lines(row["matmul_kernels"]))]
                if row.get("kernel_floor_ms"):
                    lines += ["", f"Every kernel of that forward at its fastest round: {row['kernel_floor_ms']:.1f} ms "
                              f"in all (the call's floor on this machine; its median: {row['median_ms']:.1f} ms)."]
                if row.get("torch_split"):
                    lines += ["", *minilm_split.target_lines(row["torch_split"], row["torch_split"]["torch_median_ms"],
                                                             row, row["torch_split"].get("fma_gflops"))]
        lines += _first_call_lines(rows)
    return lines


def _first_call_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per first-call case of the rows (bench/first_call.py), when they were measured."""
    cases = [case for row in rows for case in row.get("first_call", [])]
    if not cases:
        return []
    from bench.first_call import progress

    return ["", "First call in a new process, weights loaded (bench/first_call.py; wall and CPU seconds, "
            "stage wall seconds):", "", *(f"- {progress(case)}" for case in cases)]
