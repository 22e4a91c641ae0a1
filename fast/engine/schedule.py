"""Scheduling: a lazy graph -> an ordered list of frozen `ScheduleItem`s (SPEC §6).

The items and steps are defined in fast/engine/schedule_types.py, a kernel's AST is built in
fast/engine/kernel_builder.py, the steps are ordered in fast/engine/schedule_order.py; this module
builds each realized base's steps and drives the rest (and re-exports those modules' names).

`fusion.choose_realizes` decides which bases get a buffer; this module turns each of them into
items: a kernel (`KERNEL_SINK` of one STORE) that inlines every unrealized base it reads and
loads the rest, or a non-kernel item (`LOAD_COPY`, `CUSTOM`, `EMPTY`, `VIEW`).

Invariants:
- Scheduling reads the lazy graph and changes nothing: no lazy buffer is mutated, no Buffer is
  allocated (temporaries are fresh, unallocated Buffers). `run_schedule` (realize.py) allocates,
  and a lazy base is realized exactly when its Buffer is allocated (fast/graph/node.py).
- A kernel's `bufs` are its output, then each distinct input Buffer once, in first-read order;
  LOADs of the output Buffer (an in-place assign) use index 0. Trackers are simplified and their
  bound variables unbound into `var_vals`, so identical graphs over other buffers give equal ASTs.
- Kernel iteration shape: the output's shape, or, when the kernel holds a reduce, the reduce's
  output shape (same ndim as its input, reduced axes of size 1) after the reduce and its input
  shape before it. STOREs and post-reduce LOADs use the former, pre-reduce LOADs the latter.
- Items are ordered dependencies first; an item that reads a Buffer's old value is ordered before
  the assign that overwrites it (a snapshot copy is made when that order is impossible); an assign
  whose kernel reads its target other than at the index it writes computes into a temporary first.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fast.device import Buffer
from fast.engine import fusion
from fast.engine.kernel_builder import GATHER, KernelBuilder, _bound_shape, _int, reads_output_in_place_only
from fast.engine.kernel_merge import merge_kernels
from fast.engine.schedule_order import order_steps
from fast.engine.schedule_types import NOT_KERNELS, CustomCall, ScheduleItem, Step
from fast.graph.node import LazyBuffer
from fast.graph.versions import check_fresh
from fast.ops import (
    BUFFER_LOAD,
    BUFFER_STORE,
    KERNEL_SINK,
    LOAD_ASSIGN,
    LOAD_COPY,
    LOAD_CUSTOM,
    LOAD_EMPTY,
    LOAD_VIEW,
    LazyOp,
    MemBuffer,
)
from fast.shape.shapetracker import ShapeTracker

__all__ = ["GATHER", "NOT_KERNELS", "CustomCall", "KernelBuilder", "ScheduleItem", "Step", "StepBuilder",
           "check_stale_outputs", "check_stale_reads", "create_schedule", "lazy_buffers", "order_steps",
           "plan_schedule", "reads_output_in_place_only", "schedule"]


class StepBuilder:
    """Builds the steps that give each realized base its value (temporaries first)."""

    def __init__(self, decision: fusion.Fusion) -> None:
        self.realizes = set(decision.realizes)
        self.reduce_of = decision.reduce_of
        self.substitutions: dict[LazyBuffer, Buffer] = {}  # old values, snapshotted before an assign

    def boundary(self, base: LazyBuffer) -> Buffer | None:
        if base in self.substitutions:
            return self.substitutions[base]
        if base.realized is not None:
            return base.realized
        return base.buffer if base in self.realizes else None

    def key(self, base: LazyBuffer) -> object:
        return self.substitutions.get(base, base)

    def steps_for(self, base: LazyBuffer) -> list[Step]:
        if base.op is LOAD_EMPTY:
            return [Step(ScheduleItem(LazyOp(LOAD_EMPTY), (base.buffer,)), (base,), (), (), base)]
        if base.op is LOAD_VIEW:
            parent = base.srcs[0].base
            item = ScheduleItem(LazyOp(LOAD_VIEW, (), base.arg), (base.buffer, parent.buffer))
            return [Step(item, (base,), (self.key(parent),), (parent,), base)]
        if base.op in (LOAD_COPY, LOAD_CUSTOM) or fusion.is_disk_assign(base):
            return self._host_steps(base)
        return self._kernel_steps(base)

    def kernel_step(self, value: LazyBuffer, output: Buffer, owner: LazyBuffer, written: object,
                    iteration: tuple[Any, ...] | None = None, root: bool = False) -> Step:
        """A kernel storing `value` contiguously into `output` (`root`: value is a base computed
        here, not loaded, even though it is a boundary for every other kernel)."""
        builder = KernelBuilder(output, self.boundary)
        ast = builder.kernel(value, iteration or value.shape, root=root)
        item = ScheduleItem(ast, (output, *builder.inputs), builder.var_vals,
                            assign=written is owner and owner.op is LOAD_ASSIGN,
                            index_checks=tuple(builder.index_checks))
        reads = tuple(self.key(base) for base in builder.read_bases)
        direct = tuple(base for base in builder.read_bases if base not in self.substitutions)
        return Step(item, (written,), reads, direct, owner)

    def _kernel_steps(self, base: LazyBuffer) -> list[Step]:
        reduce = self.reduce_of.get(base)
        iteration = reduce.shape if reduce is not None else None
        step = self.kernel_step(base, base.buffer, base, base, iteration, root=True)
        if base.op is not LOAD_ASSIGN or reads_output_in_place_only(step.item.ast, step.item.bufs):
            return [step]
        temp = Buffer(base.device, base.buffer.size, base.dtype)
        first = self.kernel_step(base, temp, base, temp, iteration, root=True)
        st = ShapeTracker.from_shape(base.shape)
        load = LazyOp(BUFFER_LOAD, (), MemBuffer(1, base.dtype, st))
        sink = LazyOp(KERNEL_SINK, (LazyOp(BUFFER_STORE, (load,), MemBuffer(0, base.dtype, st)),))
        copy = Step(ScheduleItem(sink, (base.buffer, temp), assign=True), (base,), (temp,), (), base)
        return [first, copy]

    def source_buffer(self, src: LazyBuffer, owner: LazyBuffer, steps: list[Step]) -> Buffer:
        """The Buffer holding `src` contiguously: its base's, or a temporary computed by a new step."""
        buffer = self.boundary(src.base)
        if buffer is not None and fusion.is_identity_view(src, src.base):
            return buffer
        temp = Buffer(src.device, src.base.buffer.size if src is src.base else _int(src.size), src.dtype)
        steps.append(self.kernel_step(src, temp, owner, temp))
        return temp

    def _host_steps(self, base: LazyBuffer) -> list[Step]:
        steps: list[Step] = []
        disk_assign = fusion.is_disk_assign(base)
        srcs = base.srcs[:1] if disk_assign else base.srcs  # a DISK assign copies its value (srcs[0]) in
        sources = [self.source_buffer(src, base, steps) for src in srcs]
        if base.op is LOAD_COPY or disk_assign:
            ast = LazyOp(LOAD_COPY, (), base.buffer.nbytes)
        else:
            call = CustomCall(base.arg, _bound_shape(base.shape), tuple(_bound_shape(s.shape) for s in base.srcs))
            ast = LazyOp(LOAD_CUSTOM, (), call)
        reads = tuple(self.key(src.base) if buffer is self.boundary(src.base) else buffer
                      for src, buffer in zip(srcs, sources, strict=True))
        read_bases = tuple(src.base for src, buffer in zip(srcs, sources, strict=True)
                           if buffer is self.boundary(src.base))
        item = ScheduleItem(ast, (base.buffer, *sources), assign=disk_assign)
        steps.append(Step(item, (base,), reads, read_bases, base))
        return steps

    def snapshot(self, old: LazyBuffer) -> Step:
        """A kernel copying the current value of realized `old` into a temporary that later
        readers load instead (used when they must run after an assign overwrites `old`)."""
        temp = Buffer(old.device, old.buffer.size, old.dtype)
        step = self.kernel_step(old, temp, old, temp)
        self.substitutions[old] = temp
        return step


def check_stale_reads(graph: fusion.Graph) -> None:
    """RuntimeError for an unrealized base built from memory that a realized assign has since
    overwritten: the value it was built from no longer exists."""
    for base in graph.order:
        stale = base.stale_reads()
        if stale:
            buffer, version = stale[0]
            raise RuntimeError(f"{base!r} was built from {buffer!r} at version {version}, but an assign has since "
                               f"overwritten it (version {buffer.version}): the value it read no longer exists")


def check_stale_outputs(outs: Sequence[LazyBuffer]) -> None:
    """RuntimeError for an output that aliases memory (a view, a VIEW base) overwritten by a realized
    assign since it was built: it would read the new value in place of the one it stood for."""
    for out in outs:
        check_fresh("realize", out)


def plan_schedule(outs: Sequence[LazyBuffer]) -> list[Step]:
    """The ordered steps realizing `outs` (their `item`s are the schedule)."""
    check_stale_outputs(outs)
    graph = fusion.collect_graph(outs)
    check_stale_reads(graph)
    builder = StepBuilder(fusion.choose_realizes(graph))
    per_owner = {base: builder.steps_for(base) for base in graph.order if base in builder.realizes}
    snapshots: list[Step] = []
    for _ in range(len(graph.order) + 1):
        order, conflicts = order_steps([*snapshots, *(s for steps in per_owner.values() for s in steps)])
        if not conflicts:
            return merge_kernels(order)
        for _, old in conflicts:
            if old not in builder.substitutions:
                snapshots.append(builder.snapshot(old))
        for owner in dict.fromkeys(owner for owner, _ in conflicts):
            per_owner[owner] = builder.steps_for(owner)
    raise RuntimeError("scheduler: could not order the assigns of this graph")


def create_schedule(outs: Sequence[LazyBuffer]) -> list[ScheduleItem]:
    """The items that realize `outs`, dependencies first. Changes nothing (see module docstring)."""
    return [step.item for step in plan_schedule(outs)]


def lazy_buffers(buffers: Sequence[Any]) -> list[LazyBuffer]:
    """LazyBuffers of the arguments: MultiLazyBuffers contribute their shards (`lbs`); anything
    else is a TypeError naming it."""
    found: list[LazyBuffer] = []
    for buffer in buffers:
        if type(buffer) is LazyBuffer:
            found.append(buffer)
            continue
        shards = getattr(buffer, "lbs", None)
        for shard in shards if shards is not None else [buffer]:
            if not isinstance(shard, LazyBuffer):
                raise TypeError(f"expected LazyBuffer or MultiLazyBuffer arguments, got {buffer!r}")
            found.append(shard)
    return found


def schedule(*buffers: Any) -> list[ScheduleItem]:
    """Public: the kernels and copies `realize(*buffers)` would run. Runs nothing, changes nothing."""
    return create_schedule(lazy_buffers(buffers))
