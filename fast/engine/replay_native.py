"""A captured plan's kernels as one native sequence (runtime/sequence.py): a call costs its kernels.

A plan qualifies when every replayed step is a CPU kernel that the native loops can call
(`native_call`), with no FMA guard scan (`bounded_inputs`) and no per-call Variable: then nothing
between two kernels needs Python. The sequence is built at the plan's first native run from that
call's Buffers; later runs patch only the words holding per-call Buffers' addresses (the plan's
inputs and output roots and their views). The fixed Buffers (weights, intermediates) keep their
memory while the plan holds them; should one's handle change anyway, the sequence is rebuilt.

Allocation follows `capture._run_step`: a kernel's outputs are allocated unzeroed (the kernel
writes every byte), the views it reads are allocated on their (written) base.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fast.device import Buffer
from fast.ops import KernelOps
from fast.runtime.sequence import KernelSequence, SequenceStep, host_addresses, supported


def qualifies(steps: Sequence[Any]) -> bool:
    """Whether every step is a kernel the native sequence can run (module docstring)."""
    return bool(steps) and all(
        step.op is KernelOps.SINK and not step.variables and not step.kernel.program.bounded_inputs
        and hasattr(step.kernel.runner, "native_call") for step in steps)


class NativePlan:
    """The native sequence of a qualifying plan's `steps`; `dynamic`: the per-call table positions."""

    def __init__(self, steps: Sequence[Any], dynamic: Sequence[int]) -> None:
        self.steps = steps
        dynamic_set = set(dynamic)
        # per-call allocations, in table order of the positions (a root before its views)
        self.outputs = sorted({position for step in steps for position in step.positions[:len(step.ast.src)]
                               if position in dynamic_set})
        self.reads = sorted({position for step in steps for position in step.positions[len(step.ast.src):]
                             if position in dynamic_set} - set(self.outputs))
        self.dynamic = sorted(dynamic_set)
        self.sequence: KernelSequence | None = None
        self.fixed: list[tuple[Buffer, Any]] = []
        self.indices = np.zeros(0, dtype=np.int64)
        self.slots = np.zeros(0, dtype=np.int64)  # indices[i] takes the address of dynamic[slots[i]]
        self.usable = True

    def run(self, table: Sequence[Buffer | None]) -> bool:
        """Run every step on `table`'s Buffers (the per-call ones made); False when it ran nothing
        (the plan then launches its steps one by one)."""
        for position in self.outputs:
            table[position].allocate(zeroed=False)  # type: ignore[union-attr]
        for position in self.reads:
            table[position].allocate()  # type: ignore[union-attr]
        if self.sequence is None or any(buffer.handle is not handle for buffer, handle in self.fixed):
            self.usable = self._build(table)
            if not self.usable:
                return False
        assert self.sequence is not None
        addresses = np.array(host_addresses([table[position].handle for position in self.dynamic]),  # type: ignore[union-attr]
                             dtype=np.int64)
        return self.sequence.run(self.indices, addresses[self.slots])

    def _build(self, table: Sequence[Buffer | None]) -> bool:
        """The sequence from this call's Buffers, and where the per-call addresses go."""
        slot_of = {position: slot for slot, position in enumerate(self.dynamic)}
        calls, indices, slots, fixed = [], [], [], {}
        for step in self.steps:
            bufs: list[Buffer] = [table[position] for position in step.positions]  # type: ignore[misc]
            outputs = len(step.ast.src)
            for buffer in bufs[:outputs]:
                buffer.allocate(zeroed=False)
            for buffer in bufs[outputs:]:
                buffer.allocate()
            program = step.kernel.program
            call = step.kernel.runner.native_call([buffer.handle for buffer in bufs], step.values)
            calls.append(SequenceStep(call, program.threaded, program.mem_bytes + program.flops,
                                      program.chunks_per_thread))
        if not supported(calls):
            return False
        sequence = KernelSequence(calls)
        for number, step in enumerate(self.steps):
            for argument, position in enumerate(step.positions):
                if position in slot_of:
                    indices.append(sequence.argument_word(number, argument))
                    slots.append(slot_of[position])
                else:
                    buffer = table[position]
                    fixed[id(buffer)] = (buffer, buffer.handle)  # type: ignore[union-attr]
        self.sequence, self.fixed = sequence, list(fixed.values())
        self.indices, self.slots = np.array(indices, dtype=np.int64), np.array(slots, dtype=np.int64)
        return True
