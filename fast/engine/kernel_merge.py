"""Several outputs in one kernel: kernels of one schedule that compute different outputs from the same
inputs are merged into one kernel with several STOREs, so each shared input is read once and each
shared subexpression is computed once (two elementwise results of one expression, a row sum and a
row max of one input).

Legality (`may_share_kernel`): both items are kernels that are not assigns, on one device, that read
only buffers no item of this schedule writes (so neither depends on the other, nor on anything in
between), with equal iteration signatures (`signature`: STORE shape and the rows reduced). Policy
(`merge_kernels`): in schedule order, each kernel joins the first earlier group it may share a kernel
with and shares an input buffer with, up to `MAX_OUTPUTS` outputs. Items are frozen: merging builds
a new item and a new step; nothing is mutated.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fast.device import Buffer
from fast.engine.schedule_types import ScheduleItem, Step
from fast.ops import BufferOps, KernelOps, LazyOp, MemBuffer, ReduceOps

MAX_OUTPUTS = 8


def signature(item: ScheduleItem) -> tuple[Any, ...] | None:
    """What two kernels must share to be one: device, STORE shape, and the (axes, input shape) of
    their reductions (at most one kind); None for items that never share a kernel."""
    if item.ast.op is not KernelOps.SINK or item.assign:
        return None
    rows = set()
    for node in item.ast.walk():
        if isinstance(node.op, ReduceOps):
            leaf = next(n for n in node.walk() if n.op in (BufferOps.LOAD, BufferOps.CONST) and not n.src)
            rows.add((node.arg, tuple(leaf.arg.st.shape)))
    if len(rows) > 1:
        return None
    return item.bufs[0].device, tuple(item.ast.src[0].arg.st.shape), tuple(rows)


def may_share_kernel(first: Step, second: Step, written: set[object],
                     signature_of: Callable[[ScheduleItem], tuple[Any, ...] | None] = signature) -> bool:
    """Legality: see the module docstring. `written`: every key some step of the schedule writes;
    `signature_of`: `signature`, or a memo of it."""
    sig = signature_of(first.item)
    return sig is not None and sig == signature_of(second.item) \
        and not (set(first.reads) | set(second.reads)) & written \
        and len(first.item.outputs) + len(second.item.outputs) <= MAX_OUTPUTS


def _reindex(ast: LazyOp, mapping: dict[int, int]) -> list[LazyOp]:
    """The STOREs of `ast` with every buffer index renumbered by `mapping` (iterative rebuild)."""
    rebuilt: dict[int, LazyOp] = {}
    for node in ast.walk():
        srcs = tuple(rebuilt[id(src)] for src in node.src)
        arg = node.arg
        if node.op in (BufferOps.LOAD, BufferOps.STORE):
            arg = MemBuffer(mapping[arg.idx], arg.dtype, arg.st)
        rebuilt[id(node)] = LazyOp(node.op, srcs, arg)
    return [rebuilt[id(store)] for store in ast.src]


def merge_items(first: ScheduleItem, second: ScheduleItem) -> ScheduleItem:
    """One kernel storing the outputs of both: outputs first, then the union of the inputs."""
    outputs = (*first.outputs, *second.outputs)
    inputs: list[Buffer] = []
    for buffer in (*first.inputs, *second.inputs):
        if all(known is not buffer for known in inputs):
            inputs.append(buffer)

    def mapping(item: ScheduleItem, output_offset: int) -> dict[int, int]:
        count = len(item.outputs)
        numbers = {index: output_offset + index for index in range(count)}
        for index, buffer in enumerate(item.inputs):
            numbers[count + index] = len(outputs) + next(i for i, known in enumerate(inputs) if known is buffer)
        return numbers

    stores = _reindex(first.ast, mapping(first, 0)) + _reindex(second.ast, mapping(second, len(first.outputs)))
    return ScheduleItem(LazyOp(KernelOps.SINK, tuple(stores)), (*outputs, *inputs),
                        {**first.var_vals, **second.var_vals}, index_checks=first.index_checks + second.index_checks)


def _shares_input(first: ScheduleItem, second: ScheduleItem) -> bool:
    return any(a is b for a in first.inputs for b in second.inputs)


def merge_kernels(steps: list[Step]) -> list[Step]:
    """Policy: see the module docstring. Returns the steps with merged kernels in place of groups."""
    written = {key for step in steps for key in step.writes}
    memo: dict[int, tuple[ScheduleItem, tuple[Any, ...] | None]] = {}

    def signature_of(item: ScheduleItem) -> tuple[Any, ...] | None:
        """`signature`, computed once per item (the entry keeps the item, so its id stays its own)."""
        entry = memo.get(id(item))
        if entry is None or entry[0] is not item:
            entry = memo[id(item)] = (item, signature(item))
        return entry[1]

    merged: list[Step] = []
    for step in steps:
        target = next((i for i, done in enumerate(merged) if _shares_input(done.item, step.item)
                       and may_share_kernel(done, step, written, signature_of)), None)
        if target is None:
            merged.append(step)
            continue
        done = merged[target]
        merged[target] = replace(done, item=merge_items(done.item, step.item), writes=done.writes + step.writes,
                                 reads=done.reads + step.reads, read_bases=done.read_bases + step.read_bases,
                                 also_owners=(*done.also_owners, step.owner, *step.also_owners))
    return merged
