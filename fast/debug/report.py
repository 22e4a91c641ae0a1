"""What `compare` returns: a `Report`, whose `first` is None or the first `Difference` in program order.

`str(report)` is the readable summary: the node as a line of code, its op, arg, shape, dtype and device,
how it differs (unfused: the op alone on reference's input values; fused: in the schedule the user's
graph gets), the differing elements, both values, the inputs' values and the kernel of the fused schedule
that computes it, with its source.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fast.debug.text import format_report


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
        return format_report(self)  # (text.py: formatting lives apart from the data)
