"""Scheduling: a lazy graph -> an ordered list of frozen `ScheduleItem`s (SPEC §6).

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

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fast.device import Buffer
from fast.engine import fusion, gathers
from fast.graph.node import LazyBuffer
from fast.graph.versions import check_fresh
from fast.ops import (
    BUFFER_CONST,
    BUFFER_LOAD,
    BUFFER_STORE,
    KERNEL_SINK,
    LOAD_ASSIGN,
    LOAD_CONST,
    LOAD_CONTIGUOUS,
    LOAD_COPY,
    LOAD_CUSTOM,
    LOAD_EMPTY,
    LOAD_VIEW,
    UNARY_BITCAST,
    UNARY_CAST,
    ConstBuffer,
    GatherOps,
    LazyOp,
    LoadOps,
    MemBuffer,
    ReduceOps,
)
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Node, Variable

GATHER = GatherOps.GATHER
NOT_KERNELS = frozenset({LOAD_COPY, LOAD_CUSTOM, LOAD_EMPTY, LOAD_VIEW})


@dataclass(frozen=True)
class CustomCall:
    """The arg of a CUSTOM item: `fn(out, *inputs)` on host arrays of these shapes."""

    fn: Callable[..., Any]
    out_shape: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ScheduleItem:
    """One step: `ast` (SINK of STOREs, or a LoadOps op), `bufs` (outputs, then inputs in
    MemBuffer.idx order), `var_vals` (symbolic variable values), `assign`: the outputs are
    assign targets, whose Buffer versions realize bumps once the item has run, and `index_checks`:
    the indices of the gathers the kernel computes, checked before it runs (engine/gathers.py)."""

    ast: LazyOp
    bufs: tuple[Buffer, ...]
    var_vals: Mapping[Variable, int] = field(default_factory=dict, hash=False)
    assign: bool = False
    index_checks: tuple[gathers.IndexCheck, ...] = ()  # run before the kernel (engine/gathers.py)

    @property
    def output_count(self) -> int:
        return len(self.ast.src) if self.ast.op is KERNEL_SINK else 1

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return self.bufs[:self.output_count]

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return self.bufs[self.output_count:]


# ---------------------------------------------------------------- kernel ASTs

class KernelBuilder:
    """Builds one kernel's AST. `boundary(base)` is the Buffer a base is loaded from, or None when
    the base is inlined (computed inside this kernel)."""

    def __init__(self, output: Buffer, boundary: Callable[[LazyBuffer], Buffer | None]) -> None:
        self.output = output
        self.boundary = boundary
        self.inputs: list[Buffer] = []
        self.read_bases: list[LazyBuffer] = []
        self.var_vals: dict[Variable, int] = {}
        self.memo: dict[tuple[int, ShapeTracker], LazyOp] = {}
        self.index_checks: list[gathers.IndexCheck] = []

    def kernel(self, value: LazyBuffer, iteration_shape: tuple[Any, ...], root: bool) -> LazyOp:
        """SINK(STORE(value)) over `iteration_shape` (same size as value's shape). With `root`,
        `value` is the base being realized and is computed here; otherwise it is read normally."""
        st = ShapeTracker.from_shape(value.shape)
        if iteration_shape != value.shape:
            st = st.reshape(iteration_shape)
        computed = self.compute(value, st) if root else self.value(value, st)
        store = LazyOp(BUFFER_STORE, (computed,), MemBuffer(0, value.dtype, self._unbind(st)))
        return LazyOp(KERNEL_SINK, (store,))

    def value(self, lb: LazyBuffer, st: ShapeTracker) -> LazyOp:
        """The op reading `lb` at the kernel position mapped by `st` (whose input shape is lb's).

        Iterative (an explicit stack, children first, in source order), so graphs of any depth build
        without recursion; loads are met in the same depth-first order as a recursive walk."""
        root = self._place(lb, st)
        stack: list[tuple[LazyBuffer, ShapeTracker, bool]] = [(*root, False)]
        while stack:
            base, view, expanded = stack.pop()
            key = (id(base), view)
            if key in self.memo:
                continue
            buffer = self.boundary(base)
            if buffer is not None:
                self.memo[key] = self.load(base, buffer, view)
                continue
            children = self._children(base, view)
            if expanded:
                self.memo[key] = self._make(base, view, [self.memo[(id(b), v)] for b, v in children])
                continue
            stack.append((base, view, True))
            stack.extend((b, v, False) for b, v in reversed(children))
        return self.memo[(id(root[0]), root[1])]

    @staticmethod
    def _place(lb: LazyBuffer, st: ShapeTracker) -> tuple[LazyBuffer, ShapeTracker]:
        """(base, view of the base) for reading `lb` through `st`."""
        return (lb.base, lb.st + st) if lb.base is not lb else (lb, st)

    def load(self, base: LazyBuffer, buffer: Buffer, st: ShapeTracker) -> LazyOp:
        self.read_bases.append(base)
        if buffer is self.output:
            index = 0
        else:
            if all(known is not buffer for known in self.inputs):
                self.inputs.append(buffer)
            index = 1 + next(i for i, known in enumerate(self.inputs) if known is buffer)
        return LazyOp(BUFFER_LOAD, (), MemBuffer(index, base.dtype, self._unbind(st)))

    def compute(self, base: LazyBuffer, st: ShapeTracker) -> LazyOp:
        """The op computing `base` itself inside this kernel."""
        return self._make(base, st, [self.value(b, v) for b, v in self._children(base, st)])

    def _children(self, base: LazyBuffer, st: ShapeTracker) -> list[tuple[LazyBuffer, ShapeTracker]]:
        """What computing `base` at `st` reads: (base, view) of each source, in order."""
        op = base.op
        if op is LOAD_CONST:
            return []
        if op in (LOAD_CONTIGUOUS, LOAD_ASSIGN):
            return [self._place(base.srcs[0], st)]
        if isinstance(op, ReduceOps):
            source = base.srcs[0]
            broadcast = st.shape == source.shape and fusion.is_broadcast_of(st, base.shape)
            if not (st.contiguous and st.shape == base.shape) and not broadcast:
                raise RuntimeError(f"scheduler: reduce {base!r} read through a non-identity view {st}")
            return [self._place(source, ShapeTracker.from_shape(source.shape))]
        if isinstance(op, LoadOps):
            raise RuntimeError(f"scheduler: {op.name} {base!r} must be realized before a kernel reads it")
        if op is GATHER:
            x, idx = base.srcs
            read = gathers.source_view(x.shape, idx.shape, base.arg, st)
            return [self._place(x, read), self._place(idx, gathers.index_view(x.shape, idx.shape, base.arg, st))]
        return [self._place(src, st) for src in base.srcs]

    def _make(self, base: LazyBuffer, st: ShapeTracker, srcs: list[LazyOp]) -> LazyOp:
        """The op of `base` at `st` from the ops of its sources (`_children` order)."""
        op = base.op
        if op is LOAD_CONST:
            return LazyOp(BUFFER_CONST, (), ConstBuffer(base.arg, base.dtype, self._unbind(st)))
        if op in (LOAD_CONTIGUOUS, LOAD_ASSIGN):
            return srcs[0]
        if isinstance(op, ReduceOps):
            return LazyOp(op, (srcs[0],), base.arg)
        if op is GATHER:
            return self._gathered(base, srcs[0], srcs[1])
        arg = base.arg if op in (UNARY_CAST, UNARY_BITCAST) else None  # canonical: equal graphs, equal ASTs
        return LazyOp(op, tuple(srcs), arg)

    def _gathered(self, base: LazyBuffer, source: LazyOp, index: LazyOp) -> LazyOp:
        """The gathered LOAD of a GATHER base (engine/gathers.py), noting the check of its indices."""
        x, idx = base.srcs
        buffer = self.boundary(idx.base)
        if source.op is not BUFFER_LOAD or source.src or index.op is not BUFFER_LOAD or buffer is None:
            raise RuntimeError(f"scheduler: the sources of gather {base!r} must be realized before a kernel reads it")
        bound = _bound_shape((x.shape[base.arg], idx.size))
        check = gathers.IndexCheck(buffer, idx.dtype, bound[1], bound[0], base.arg)
        if not any(known.buffer is buffer and (known.count, known.size) == (check.count, check.size)
                   for known in self.index_checks):
            self.index_checks.append(check)
        return LazyOp(BUFFER_LOAD, (index,), source.arg)

    def _unbind(self, st: ShapeTracker) -> ShapeTracker:
        unbound, values = st.simplify().unbind()
        self.var_vals.update(values)
        return unbound


def reads_output_in_place_only(ast: LazyOp, bufs: Sequence[Buffer]) -> bool:
    """True when the kernel may write its output in place: every LOAD of the output (index 0)
    uses the STORE's tracker, there is no reduce, and no input aliases the output's memory. Each
    position then reads its own element before writing it."""
    root = bufs[0].base
    if any(buffer.base is root for buffer in bufs[1:]):
        return False
    store_st = ast.src[0].arg.st
    nodes = ast.walk()
    reads_output = [n for n in nodes if n.op is BUFFER_LOAD and n.arg.idx == 0]
    if not reads_output:
        return True
    return all(n.arg.st == store_st for n in reads_output) and not any(isinstance(n.op, ReduceOps) for n in nodes)


# ---------------------------------------------------------------- steps: items plus ordering facts

@dataclass(eq=False)
class Step:
    """An item plus what ordering needs: the keys it writes and reads (lazy bases, or temporary
    Buffers), the lazy bases it loads, and `owner`, the realized base whose steps it belongs to."""

    item: ScheduleItem
    writes: tuple[object, ...]
    reads: tuple[object, ...]
    read_bases: tuple[LazyBuffer, ...]
    owner: LazyBuffer
    also_owners: tuple[LazyBuffer, ...] = ()  # bases whose kernels were merged into this one

    @property
    def owners(self) -> tuple[LazyBuffer, ...]:
        return (self.owner, *self.also_owners)


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


def _int(size: Any) -> int:
    """A concrete size: a symbolic one at its maximum (Buffers are allocated for the largest)."""
    return int(size.max if isinstance(size, Node) else size)


def _int_shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(_int(size) for size in shape)


def _bound_shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """A shape at its bound Variables' values: the arrays a CUSTOM function gets (docs/api.md)."""
    return tuple(int(size.evaluate({})) if isinstance(size, Node) else int(size) for size in shape)


# ---------------------------------------------------------------- ordering

def _dependencies(steps: Sequence[Step]) -> list[set[int]]:
    """deps[i]: steps that must run before step i: producers of what it reads, and, for an
    assign, every other step reading the old contents of the assigned memory."""
    producer = {key: index for index, step in enumerate(steps) for key in step.writes}
    deps = [{producer[key] for key in step.reads if key in producer and producer[key] != index}
            for index, step in enumerate(steps)]
    for index, step in enumerate(steps):
        if not step.item.assign:
            continue
        root = step.item.outputs[0].base
        for other, reader in enumerate(steps):
            if other != index and any(base is not step.owner and base.buffer.base is root
                                      for base in reader.read_bases):
                deps[index].add(other)
    return deps


def order_steps(steps: Sequence[Step]) -> tuple[list[Step], list[tuple[LazyBuffer, LazyBuffer]]]:
    """Steps in dependency order (ties by position), or, when the order is impossible, the
    (owner, old base) pairs of readers that would have to run both before and after an assign."""
    deps = _dependencies(steps)
    users: list[list[int]] = [[] for _ in steps]
    for index, needed in enumerate(deps):
        for other in needed:
            users[other].append(index)
    waiting = [len(needed) for needed in deps]
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[Step] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(steps[index])
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) == len(steps):
        return order, []
    return [], _conflicts(steps, deps, {index for index, count in enumerate(waiting) if count})


def _conflicts(steps: Sequence[Step], deps: list[set[int]], stuck: set[int]) -> list[tuple[LazyBuffer, LazyBuffer]]:
    """Readers of an assign's old memory that also (transitively) need the assign's result."""
    found: list[tuple[LazyBuffer, LazyBuffer]] = []
    for index in stuck:
        step = steps[index]
        if not step.item.assign:
            continue
        root = step.item.outputs[0].base
        for other in stuck:
            for base in steps[other].read_bases:
                if other != index and base is not step.owner and base.buffer.base is root \
                        and (steps[other].owner, base) not in found:
                    found.append((steps[other].owner, base))
    if not found:
        raise RuntimeError("scheduler: the schedule has a dependency cycle that no snapshot resolves")
    return found


# ---------------------------------------------------------------- public entry points

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
            from fast.engine.kernel_merge import merge_kernels  # it builds on this module's types
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
