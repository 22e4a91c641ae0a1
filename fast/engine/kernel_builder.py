"""One kernel's AST from the lazy graph: `KernelBuilder` inlines every base its boundary says is not
a buffer and loads the rest (fast/engine/schedule.py decides the boundary and builds the items).

Invariants:
- Building reads the lazy graph and changes nothing.
- A kernel's buffers are its output (index 0, also for LOADs of it: an in-place assign), then each
  distinct input Buffer once, in first-read order.
- Trackers are simplified and their bound variables unbound into `var_vals`, so identical graphs
  over other buffers give equal ASTs.
- STOREs and post-reduce LOADs use the kernel's iteration shape after the reduce, pre-reduce LOADs
  the reduce's input shape.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fast.device import Buffer
from fast.engine import fusion, gathers
from fast.graph.node import LazyBuffer
from fast.ops import (
    BUFFER_CONST,
    BUFFER_LOAD,
    BUFFER_STORE,
    KERNEL_SINK,
    LOAD_ASSIGN,
    LOAD_CONST,
    LOAD_CONTIGUOUS,
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


def _int(size: Any) -> int:
    """A concrete size: a symbolic one at its maximum (Buffers are allocated for the largest)."""
    return int(size.max if isinstance(size, Node) else size)


def _int_shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(_int(size) for size in shape)


def _bound_shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """A shape at its bound Variables' values: the arrays a CUSTOM function gets (docs/api.md)."""
    return tuple(int(size.evaluate({})) if isinstance(size, Node) else int(size) for size in shape)
