"""Lowering's loops and memory accesses for groups of lanes: `LaneLowering` holds the builder, the
index renderer and the loop counters of one kernel being lowered, opens and closes loop nests (the
first GLOBAL loop of a threaded kernel shared between threads) and reads and writes a view for a
group of lanes (fast/codegen/lower.py builds the reduces and STOREs on it; codegen/gather.py and
codegen/gemm_loops.py use its accesses).

Invariants:
- A group is the lanes of one body copy: one env (axis -> symbolic index) per vector lane.
- A group's access to a view is "uniform" (one element for every lane), "vector" (consecutive
  elements under one validity, only for dtypes in `options.vector_memory`) or "lanes" (one scalar
  access per lane, gathered with VECTORIZE); every index is rendered as int64 INDEX instructions.
- Loop counters are Variables whose names end in "~", reserved: kernel variables may not use them.
"""
from __future__ import annotations

from typing import Any

from fast import config
from fast.codegen.analyze import KernelInfo
from fast.codegen.builder import IRBuilder
from fast.codegen.const_args import leaf_value
from fast.codegen.indexing import IndexRenderer
from fast.codegen.ir import INT64, IndexOps, LoopKind
from fast.codegen.opt import AxisPlan, KernelPlan
from fast.dtype import DType
from fast.ops import BufferOps, LazyOp, TernaryOps
from fast.renderer.base import RendererOptions
from fast.shape.symbolic import Node, NumNode, Variable, as_node

Env = dict[int, Node]
Group = list[Env]  # the lanes of one body copy: one env per vector lane (a single env when scalar)
THREAD_VARS = ("core~", "cores~")


class LaneLowering:
    """One kernel being lowered: loops and the memory accesses of groups of lanes (module docstring)."""

    const_slots: dict[int, int] | None = None  # CONST leaf id -> parameter slot (lower's const_params)

    def __init__(self, info: KernelInfo, plan: KernelPlan, options: RendererOptions, parallel: bool) -> None:
        self.info, self.plan, self.options, self.parallel = info, plan, options, parallel
        self.prefetch = options.prefetch and not config.get().noopt  # codegen/gemm_loops.py reads it
        self.lanes_by_halves = options.lanes_by_halves  # (gemm_loops.py `all_lanes`)
        self.builder = IRBuilder(options.vector_ops, options.vector_casts)
        self.var_refs: dict[Variable, int] = {}
        self.indexes = IndexRenderer(self.builder, self.var_refs)
        self.offsets: dict[int, Node] = {}  # axis -> start of the current chunk (plan.chunk) or tail
        self.chunk_counter: Variable | None = None
        self.counters: dict[int, tuple[Variable, Node]] = {}  # axis -> (its loop counter, the loop's count)
        self.thread_vars: tuple[int, int] | None = None  # `core, cores` once defined: the kernel is threaded
        self.split_pending = True  # the next GLOBAL loop opened is this nest's first: threads share it
        self.split_counts: list[int] = []  # iterations of each loop threads share (codegen/paths.py)
        names = {v.expr for v in info.variables}
        if any(name.endswith("~") for name in names):
            raise ValueError(f"lower: variable names ending in '~' are reserved, got {sorted(names)}")

    # -- loops
    def _loop_bounds(self, count: Node, kind: LoopKind, split: bool = True) -> tuple[int, int]:
        """[start, end) of a loop over `count` iterations; the first GLOBAL loop of each loop nest of
        a threaded kernel runs only its share `[count*core/cores, count*(core+1)/cores)`."""
        b = self.builder
        if kind is not LoopKind.GLOBAL or not self.split_pending or not self.parallel or not split:
            return b.const(0, INT64), self.indexes.render_int(count)
        self.split_pending = False
        if self.thread_vars is None:
            self.thread_vars = (b.define_var(THREAD_VARS[0]), b.define_var(THREAD_VARS[1]))
        core, cores = self.thread_vars
        if isinstance(count, NumNode):
            self.split_counts.append(int(count.b))
        total = self.indexes.render_int(count)
        start = b.index(IndexOps.NONNEG_DIV, b.index(IndexOps.MUL, total, core), cores)
        after = b.index(IndexOps.ADD, core, b.const(1, INT64))
        return start, b.index(IndexOps.NONNEG_DIV, b.index(IndexOps.MUL, total, after), cores)

    def _open_loops(self, axes: tuple[AxisPlan, ...], kind: LoopKind, split: bool = True) -> list[Group]:
        """Open the loops of `axes`; return the body copies, each a group of lanes (axis -> index).
        `split=False`: none of them is shared out between threads."""
        groups: list[Group] = [[{}]]
        for axis in axes:
            base: Node = self.offsets.get(axis.axis, NumNode(0))
            if axis.has_loop:
                count = as_node(axis.size) // axis.step
                prefix = "gidx" if kind is LoopKind.GLOBAL else "ridx"
                counter = Variable(f"{prefix}{axis.axis}~", 0, max(count.max - 1, 0))
                self.var_refs[counter] = self.builder.loop(*self._loop_bounds(count, kind, split), kind)
                self.counters[axis.axis] = (counter, count)
                base = base + counter * axis.step
            groups = [[{**env, axis.axis: base + copy * axis.vector + lane} for env in group
                       for lane in range(axis.vector)] for group in groups for copy in range(axis.unroll)]
        return groups

    def _close_loops(self, axes: tuple[AxisPlan, ...]) -> None:
        for axis in axes:
            if axis.has_loop:
                self.builder.end_loop()

    # -- memory access of a group of lanes
    def _idxs(self, env: Env) -> list[Node]:
        return [env.get(axis, NumNode(0)) for axis in range(len(self.info.full_shape))]

    def _access(self, st: Any, group: Group, dtype: DType) -> tuple[str, list[tuple[Node, Node]]]:
        """How a group reads or writes a view: "uniform" (one element for every lane), "vector"
        (consecutive elements, one validity) or "lanes"; with each lane's (index, valid)."""
        return self._kind([st.expr_idxs(self._idxs(env)) for env in group], dtype)

    def _kind(self, places: list[tuple[Node, Node]], dtype: DType) -> tuple[str, list[tuple[Node, Node]]]:
        """`_access`'s answer for the lanes' (index, valid) places."""
        first_index, first_valid = places[0]
        if all(place == places[0] for place in places[1:]):
            return "uniform", places
        if dtype in self.options.vector_memory and all(
                valid == first_valid and index == first_index + lane for lane, (index, valid) in enumerate(places)):
            return "vector", places
        return "lanes", places

    def _load(self, node: LazyOp, group: Group, also: int | None = None) -> int:
        """A LOAD or CONST leaf for a group of lanes; `also`: a bool value that must hold as well."""
        b, dtype, ix = self.builder, node.arg.dtype, self.indexes
        kind, places = self._access(node.arg.st, group, dtype)
        if also is not None:
            return b.vectorize([b.load(node.arg.idx, dtype, ix.render_int(index), ix.both(also, valid))
                                for index, valid in (places[:1] if kind == "uniform" else places)]) \
                if kind != "vector" else b.load(node.arg.idx, dtype.vec(len(group)), ix.render_int(places[0][0]),
                                               ix.both(also, places[0][1]))
        if node.op is BufferOps.CONST:
            value, zero = leaf_value(b, node, self.const_slots), b.const(0, dtype)
            lanes = places[:1] if kind == "uniform" else places
            return b.vectorize([b.alu(TernaryOps.WHERE, (ix.render_bool(valid), value, zero)) for _, valid in lanes])
        if kind == "vector":
            return b.load(node.arg.idx, dtype.vec(len(group)), ix.render_int(places[0][0]), ix.valid_ref(places[0][1]))
        lanes = places[:1] if kind == "uniform" else places
        return b.vectorize([b.load(node.arg.idx, dtype, ix.render_int(index), ix.valid_ref(valid))
                            for index, valid in lanes])

    def _store(self, store: LazyOp, group: Group, value: int) -> None:
        b, dtype, ix = self.builder, store.arg.dtype, self.indexes
        kind, places = self._access(store.arg.st, group, dtype)
        if kind == "vector":
            vector = b.broadcast(value, len(group))
            b.store(store.arg.idx, ix.render_int(places[0][0]), vector, ix.valid_ref(places[0][1]))
            return
        for lane, (index, valid) in enumerate(places[:1] if kind == "uniform" else places):
            b.store(store.arg.idx, ix.render_int(index), b.gep(value, lane), ix.valid_ref(valid))

    # -- what codegen/gemm.py uses (its LoweringContext)
    def load_leaf(self, node: LazyOp, group: Group, also: int | None = None) -> int:
        return self._load(node, group, also)

    def store_value(self, store: LazyOp, group: Group, value: int) -> None:
        self._store(store, group, value)

    def define_variables(self) -> None:
        """DEFINE_VAR of every shape variable: the kernel's first parameters after the buffers."""
        for variable in self.info.variables:
            self.var_refs[variable] = self.builder.define_var(variable.expr)
