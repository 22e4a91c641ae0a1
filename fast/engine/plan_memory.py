"""One allocation for a captured plan's intermediates whose lifetimes do not overlap.

A plan (fast/engine/capture.py) keeps a fixed Buffer for every intermediate of the traced function
and rewrites it on every call. Kept as traced, a plan holds all of them at once: MiniLM 32 x 128's
forward keeps 720 MB, where the intermediates live at any one step of it need about a tenth of
that, and every call writes the whole 720 MB of distinct memory. `share_intermediates` puts each
*shareable* intermediate at the start of a *slot*, one allocation per slot, such that two
intermediates of one slot are never live at the same step.

Shareable: a fixed root Buffer of the plan's table (not an argument's or a result's memory, not a
constant: nothing a hoisted item touched) on a device other than DISK, such that
- only kernel steps touch it, each through the root itself (no view of it is in the table);
- the first step that touches it writes it (one of the kernel's outputs) without reading it.
A kernel writes every byte of its outputs (the engine allocates them unzeroed; conformance runs
with poisoned memory), so a shareable intermediate's bytes within a call are always that call's:
nothing is read from the previous call or from another intermediate of its slot.

Lifetime: from the first step that touches the intermediate to the last. Steps run one after
another (`Plan.run`, the native sequence: each kernel's chunks finish before the next kernel
starts; a device's queue runs its kernels in order), so an intermediate whose lifetime starts after
another's ended may reuse its bytes. Slots are given out in order of first use: the smallest free
slot of the device that is large enough, else the largest free one (which grows), else a new one. A
slot's allocation is as large as its largest intermediate; each intermediate becomes a view at
offset 0 of it (same size and dtype as the traced Buffer). Values are unchanged: the same kernels
run on the same bytes of input.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fast.device import Buffer
from fast.dtype import dtypes
from fast.ops import KernelOps


@dataclass
class _Slot:
    """One allocation shared by intermediates: its device, size and when its last user ends."""

    device: str
    nbytes: int
    free_after: int = -1  # the last step of the intermediate holding it now
    members: list[int] = field(default_factory=list)  # table positions placed in it


def share_intermediates(table: Sequence[Buffer | None], steps: Sequence[Any], pinned: set[int]) -> list[Buffer | None]:
    """`table` with its shareable intermediates (module docstring) replaced by views of shared
    slots; `steps`: the plan's steps (`op`, `ast`, `positions`, outputs first); `pinned`: the ids of
    root Buffers that hoisted items touched. Returns `table` unchanged (a copy) when no slot would
    hold two intermediates."""
    lifetimes = _lifetimes(table, steps, pinned)
    slots = _assign(lifetimes, table)
    shared = [slot for slot in slots if len(slot.members) > 1]
    result = list(table)
    for slot in shared:
        backing = Buffer(slot.device, slot.nbytes, dtypes.uint8).allocate(zeroed=False)
        for position in slot.members:
            traced = table[position]
            assert traced is not None  # noqa: S101 - lifetimes only holds fixed Buffers
            result[position] = Buffer(traced.device, traced.size, traced.dtype, base=backing).allocate()
    return result


def _lifetimes(table: Sequence[Buffer | None], steps: Sequence[Any], pinned: set[int]) -> dict[int, tuple[int, int]]:
    """(first step, last step) per shareable table position."""
    viewed = {id(buffer.base) for buffer in table if buffer is not None and buffer.base is not buffer}
    spans: dict[int, list[int]] = {}
    refused: set[int] = set()
    for number, step in enumerate(steps):
        outputs = len(step.ast.src) if step.op is KernelOps.SINK else 0
        for argument, position in enumerate(step.positions):
            buffer = table[position]
            if buffer is None or position in refused:
                continue
            is_output = argument < outputs
            if position not in spans:
                first_read = not is_output or position in step.positions[outputs:]
                if step.op is not KernelOps.SINK or first_read or not _may_share(buffer, viewed, pinned):
                    refused.add(position)
                    continue
                spans[position] = [number, number]
            elif step.op is not KernelOps.SINK:
                refused.add(position)
                continue
            spans[position][1] = number
    return {position: (first, last) for position, (first, last) in spans.items() if position not in refused}


def _may_share(buffer: Buffer, viewed: set[int], pinned: set[int]) -> bool:
    """A root that no table view reads through, no hoisted item touched, not on DISK, allocated."""
    return buffer.base is buffer and id(buffer) not in viewed and id(buffer) not in pinned \
        and not buffer.device.startswith("DISK") and buffer.is_allocated() and buffer.nbytes > 0


def _assign(lifetimes: dict[int, tuple[int, int]], table: Sequence[Buffer | None]) -> list[_Slot]:
    """Slots for the intermediates, in order of first use (module docstring)."""
    slots: list[_Slot] = []
    for position, (first, last) in sorted(lifetimes.items(), key=lambda entry: (entry[1][0], entry[0])):
        buffer = table[position]
        assert buffer is not None  # noqa: S101 - lifetimes only holds fixed Buffers
        free = [slot for slot in slots if slot.device == buffer.device and slot.free_after < first]
        fitting = [slot for slot in free if slot.nbytes >= buffer.nbytes]
        if fitting:
            slot = min(fitting, key=lambda candidate: candidate.nbytes)
        elif free:
            slot = max(free, key=lambda candidate: candidate.nbytes)
            slot.nbytes = buffer.nbytes
        else:
            slot = _Slot(buffer.device, buffer.nbytes)
            slots.append(slot)
        slot.free_after = last
        slot.members.append(position)
    return slots
