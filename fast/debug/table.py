"""The schedule table (printed with DEBUG=2 before a schedule runs): one row per item.

Columns: item number, kind (kernel, copy, custom, view, empty), kernel (its name), device, iteration shape,
outputs and inputs (dtype[elements], with the device when it is not the item's), and the lowering's
estimates of bytes moved and flops (kernels; a copy moves its bytes twice: read and write). Kernel names
and estimates come from the program cache (`get_kernel`: compiled once, as running would).
"""
from __future__ import annotations

from collections.abc import Sequence

from fast.device import Buffer
from fast.engine.realize import get_kernel
from fast.engine.schedule import ScheduleItem, Step
from fast.ops import KernelOps

HEADER = ("#", "kind", "kernel", "device", "shape", "outputs", "inputs", "est. bytes", "est. flops")


def _buffers(buffers: Sequence[Buffer], device: str) -> str:
    return " ".join(f"{b.dtype.name}[{b.size}]" + ("" if b.device == device else f"@{b.device}")
                    for b in buffers) or "-"


def item_row(item: ScheduleItem, position: int) -> tuple[str, ...]:
    """The table row of one schedule item."""
    device = item.bufs[0].device
    outputs, inputs = _buffers(item.outputs, device), _buffers(item.inputs, device)
    if item.ast.op is KernelOps.SINK:
        kernel, _ = get_kernel(device, item.ast)
        shape = str(tuple(item.ast.src[0].arg.st.shape))
        return (str(position), "kernel", kernel.program.name, device, shape, outputs, inputs,
                str(kernel.program.mem_bytes), str(kernel.program.flops))
    moved = sum(b.nbytes for b in item.bufs) if item.ast.op.name == "COPY" else 0
    return (str(position), item.ast.op.name.lower(), "-", device, "-", outputs, inputs, str(moved), "0")


def schedule_table(items: Sequence[ScheduleItem]) -> str:
    """The table of `items` (e.g. `fast.schedule(x)`), as aligned text."""
    rows = [HEADER, *(item_row(item, position) for position, item in enumerate(items))]
    widths = [max(len(row[column]) for row in rows) for column in range(len(HEADER))]
    kernels = sum(item.ast.op is KernelOps.SINK for item in items)
    lines = [f"schedule: {len(items)} items, {kernels} kernels"]
    lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    return "\n".join(lines)


def item_members(steps: Sequence[Step], start: int, member: dict[int, int]) -> None:
    """For each base a step computes (its owners, and the unrealized bases it inlines), `member[id(base)]`
    is `start` + the step's index (the first step that computes it, when several do)."""
    owners = {id(owner) for step in steps for owner in step.owners}
    for number, step in enumerate(steps):
        stack = list(step.owners)
        while stack:
            base = stack.pop()
            if id(base) in member:
                continue
            member[id(base)] = start + number
            stack += [src.base for src in base.srcs if src.base.realized is None and id(src.base) not in owners]
