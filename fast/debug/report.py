"""What `compare` returns: a `Report`, whose `first` is None or the first `Difference` in program order.

`str(report)` is the readable summary: the node as a line of code, its op, arg, shape, dtype and device,
how it differs (unfused: the op alone on reference's input values; fused: in the schedule the user's
graph gets), the differing elements, both values, the inputs' values and the kernel of the fused schedule
that computes it, with its source. The data come first, then the functions that write the summary
(`format_report`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class KernelRef:
    """One item of a schedule: `kind` ("kernel", "copy", "custom", "view", "empty"), `name` (a kernel's
    program name), `device`, `source` (a kernel's rendered source, else None), `position` in its schedule."""

    kind: str
    name: str
    device: str
    source: str | None = None
    position: int = 0

    def __str__(self) -> str:
        return f"{self.name} ({self.kind} on {self.device}, item {self.position} of its schedule)"


@dataclass
class Difference:
    """The first node where `fast` and `reference` part (see the module docstring). `expected`/`actual`
    are reference's and fast's values (as `to_numpy` shows them) or None; `bad` marks differing elements;
    `unfused`: the op alone on reference's input values differs; `fused`: its value in the fused schedule
    differs (None when that value is not a buffer of the schedule). `kernel`: the fused schedule's item
    computing it (or, `kernel_reads`, the first one reading it: a view, or a node inlined into a kernel
    whose output it is not); `unfused_kernels`: the items that ran it alone."""

    index: int
    code: str
    op: str
    arg: str
    shape: tuple[int, ...] | None
    dtype: str | None
    device: str | tuple[str, ...] | None
    expected: np.ndarray | None
    actual: np.ndarray | None
    bad: np.ndarray | None
    tolerance: np.ndarray | None
    expected_error: str | None
    actual_error: str | None
    reason: str
    unfused: bool
    fused: bool | None
    inputs: list[tuple[str, np.ndarray | None]] = field(default_factory=list)
    kernel: KernelRef | None = None
    unfused_kernels: list[KernelRef] = field(default_factory=list)
    traced: bool = True
    kernel_reads: bool = False  # `kernel` reads the node (through a view, or inlined) instead of storing it

    def elements(self, limit: int = 8) -> list[tuple[tuple[int, ...], Any, Any, Any]]:
        """Up to `limit` differing elements: (index, reference, fast, tolerance)."""
        if self.bad is None or self.expected is None or self.actual is None:
            return []
        found = []
        for position in np.argwhere(self.bad)[:limit]:
            index = tuple(int(i) for i in position)
            tol = None if self.tolerance is None else self.tolerance[index].item()
            found.append((index, self.expected[index].item(), self.actual[index].item(), tol))
        return found


@dataclass
class Report:
    """`nodes`: the nodes compared, in program order; `first`: None when every node agrees; `notes`:
    what could not be compared and why; `schedule`: the items of the fused schedule."""

    nodes: list[str]
    first: Difference | None
    notes: list[str] = field(default_factory=list)
    schedule: list[KernelRef] = field(default_factory=list)
    traced: int = 0

    def __str__(self) -> str:
        return format_report(self)


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
