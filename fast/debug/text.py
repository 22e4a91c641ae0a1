"""`str(report)`: the readable summary of a compare Report (see report.py for the fields)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # (report.py imports this module: the types only, no import cycle at run time)
    from fast.debug.report import Difference, KernelRef, Report

ARRAY_CHARS = 400  # at most this much of one array is printed
SOURCE_LINES = 60  # lines of kernel source str(report) shows (the Report keeps all of it)


def show_array(array: np.ndarray | None) -> str:
    if array is None:
        return "(none)"
    text = np.array2string(array, threshold=24, edgeitems=3, max_line_width=100)
    text = text if len(text) <= ARRAY_CHARS else text[:ARRAY_CHARS - 4] + " ..."
    return text.replace("\n", "\n      ")


def _how(first: Difference) -> str:
    if first.unfused:
        tail = {True: " and in the fused schedule", False: ", but agrees in the fused schedule",
                None: " (its value is not a buffer of the fused schedule)"}[first.fused]
        return f"differs unfused: the op alone, run on reference's values of its inputs{tail}"
    return "differs only in the fused schedule: the op alone agrees"


def _elements(first: Difference) -> list[str]:
    lines = [f"  {first.reason}"]
    for index, want, got, tol in first.elements():
        extra = "" if tol is None else f" (tolerance {tol!r})"
        lines.append(f"    at {index}: reference {want!r}, fast {got!r}{extra}")
    return lines


def _kernel(kernel: KernelRef | None, title: str) -> list[str]:
    if kernel is None:
        return [f"  {title}: (none: computed outside the schedule's buffers)"]
    lines = [f"  {title}: {kernel}"]
    if kernel.source:
        source = kernel.source.rstrip().splitlines()
        lines += ["    " + line for line in source[:SOURCE_LINES]]
        if len(source) > SOURCE_LINES:
            lines.append(f"    ... {len(source) - SOURCE_LINES} more lines (report.first.kernel.source)")
    return lines


def format_difference(first: Difference, total: int) -> list[str]:
    lines = [f"first difference: node {first.index} of {total}: {first.code}",
             f"  op {first.op}  arg {first.arg or '-'}  shape {first.shape}  dtype {first.dtype}  "
             f"device {first.device}",
             f"  {_how(first)}"]
    lines += _elements(first)
    if first.expected_error or first.actual_error:
        lines.append(f"  errors: reference {first.expected_error or '-'}; fast {first.actual_error or '-'}")
    lines += [f"  reference: {show_array(first.expected)}", f"  fast:      {show_array(first.actual)}"]
    lines += [f"  input {name}: {show_array(array)}" for name, array in first.inputs]
    lines += _kernel(first.kernel, "kernel in the fused schedule" + (" that reads it" if first.kernel_reads else ""))
    if first.unfused and first.unfused_kernels:
        lines.append(f"  run alone in: {', '.join(k.name for k in first.unfused_kernels)}")
    if not first.traced:
        lines.append("  (a node rebuilt from the lazy graph: see the notes)")
    return lines


def format_report(report: Report) -> str:
    total = len(report.nodes)
    kernels = sum(item.kind == "kernel" for item in report.schedule)
    head = (f"compare: {total} nodes ({report.traced} traced), fused schedule of {len(report.schedule)} items "
            f"({kernels} kernels)")
    if report.first is None:
        lines = [head, "every node agrees with reference (unfused and fused, tolerances of docs/semantics.md)"]
    else:
        lines = [head, *format_difference(report.first, total)]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)
