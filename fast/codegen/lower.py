"""Lowering: a kernel AST (SINK of STOREs) -> `LinearProgram`, following the plan from opt.py.
The loops and the memory accesses of groups of lanes are codegen/lower_lanes.py's `LaneLowering`.

Shape of the generated program:

    DEFINE_VAR for every symbolic variable (then constant parameters, then core~ cores~)
    [LOOP (REDUCE) over the chunks of a strided reduce axis (plan.chunk)]
    LOOP (GLOBAL) over each output axis that has a loop, in plan order (the first: this thread's share)
      per reduce (several in a row kernel, sources first):
        DEFINE_ACC per output copy (x reduce copy when the reduce axis is vectorized)
        LOOP (REDUCE) over each reduced axis that has a loop
          per output copy x reduce copy: the subtree below the reduce, acc := op(acc, value)
        ENDLOOP ...; the accumulators combined in a fixed tree order
      [row kernel: LOOP over the reduced axes again (plan.inner_axes)]
        [row kernel: PREFETCH of the first reduce's loads for the next row (codegen/prefetch.py)]
        per output copy: the tree above the reduces (their values read as uniform), STOREs
        [chunked: the earlier chunks' partial results added from the output first; work over
         the reduce (a mean's scale, a bias) only in the last chunk, earlier ones store the total]
    ENDLOOP ...

A "copy" is one body position of the unrolled axes and a "group" its vector lanes (opt.py); each lane
maps every axis to a symbolic index (`counter * step + copy * lanes + lane`), and
`ShapeTracker.expr_idxs` turns it into an int64 buffer index and a validity condition. Per LOAD or
STORE the lanes of a group read one element (uniform: a scalar), consecutive elements under one
validity (a vector access) or anything else (one scalar access per lane, gathered with VECTORIZE).
Those symbolic Nodes become INDEX instructions (codegen/indexing.py's `IndexRenderer`), so all index
arithmetic is int64. EXP2/LOG2/SIN are expanded into plain ALU code (codegen/transcendental.py).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fast import config
from fast.codegen import gemm_plan, transcendental
from fast.codegen.analyze import HALVES, KernelInfo, analyze, estimates, kernel_name, node_dtype, reads_own_output
from fast.codegen.const_args import const_name, define_params
from fast.codegen.fma import fuse_accumulations
from fast.codegen.gather import gathered_load
from fast.codegen.ir import (
    INT64,
    BufferInfo,
    IndexOps,
    LinearProgram,
    LoopKind,
    eliminate_dead_code,
)
from fast.codegen.ir_verify import verify
from fast.codegen.lower_lanes import THREAD_VARS, Env, Group, LaneLowering
from fast.codegen.opt import AxisPlan, plan_kernel
from fast.codegen.paths import gemm_paths, plan_paths
from fast.codegen.prefetch import prefetched_loads
from fast.codegen.streaming import streamed_buffers
from fast.dtype import DType, dtypes
from fast.ops import (
    BinaryOps,
    BufferOps,
    LazyOp,
    ReduceOps,
    TernaryOps,
    UnaryOps,
)
from fast.renderer.base import RendererOptions
from fast.shape.symbolic import NumNode, Variable

__all__ = ["THREAD_VARS", "Env", "Group", "lower"]


class _Lowering(LaneLowering):
    """One kernel's lowering: the reduces, row kernels, chunks and STOREs over `LaneLowering`'s loops
    and accesses."""

    # -- what codegen/gemm.py uses (its LoweringContext), besides LaneLowering's accesses
    def lower_node(self, node: LazyOp, group: Group, reduce_values: dict[int, int], memo: dict[int, int]) -> int:
        return self._lower_node(node, group, reduce_values, memo)

    # -- the AST
    def _lower_node(self, node: LazyOp, group: Group, reduce_values: dict[int, int], memo: dict[int, int]) -> int:
        """The value of `node` for a group of lanes; reduce nodes are taken from `reduce_values`.
        Iterative (sources before users, in source order), so graphs of any depth lower."""
        for current in _post_order(node):
            if id(current) in memo:
                continue
            if current.op in (BufferOps.LOAD, BufferOps.CONST) and current.src:  # a gathered LOAD
                ref = gathered_load(self, current, group, memo[id(current.src[0])])
            elif current.op in (BufferOps.LOAD, BufferOps.CONST):
                ref = self._load(current, group)
            elif isinstance(current.op, ReduceOps):
                ref = reduce_values[id(current)]
            else:
                srcs = tuple(memo[id(src)] for src in current.src)
                to_dtype = current.arg if current.op in (UnaryOps.CAST, UnaryOps.BITCAST) else None
                ref = self._alu(current.op, srcs, to_dtype)
            memo[id(current)] = ref
        return memo[id(node)]

    def _alu(self, op: Any, srcs: tuple[int, ...], to_dtype: DType | None) -> int:
        if op in (UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN) and \
                transcendental.supported(op, self.builder.dtype(srcs[0]).scalar()):
            fused = self.options.fused_multiply_add and not config.get().noopt
            return transcendental.expand(self.builder, op, srcs[0], fused)
        return self.builder.alu(op, srcs, to_dtype)

    def _combine(self, op: Any, values: list[int]) -> int:
        """Fold values pairwise in a fixed tree order ((v0 op v1) op (v2 op v3)) ..."""
        while len(values) > 1:
            pairs = [self.builder.alu(op, (values[i], values[i + 1])) for i in range(0, len(values) - 1, 2)]
            values = pairs + ([values[-1]] if len(values) % 2 else [])
        return values[0]

    def _combine_lanes(self, op: Any, vector: int, lanes: int) -> int:
        """The lanes of `vector` folded in `_combine`'s order ((l0 op l1) op (l2 op l3)) ... With a
        power-of-two count each level is one vector op on the even and the odd lanes of the level
        before (two SHUFFLEs; lanes past the level's count repeat and are ignored): the same pairs,
        each operand on the same side, so the same bits as folding the lanes one by one, in log2(n)
        vector ops instead of n - 1 scalar ones (softmax's horizontal MAX alone was 15 scalar ops,
        each with its NaN test, per row of 128)."""
        b = self.builder
        dtype = b.dtype(vector)
        if lanes & (lanes - 1) or dtype.count != lanes or (op, dtype.scalar()) not in b.vector_ops:
            return self._combine(op, [b.gep(vector, lane) for lane in range(lanes)])
        width = lanes
        while width > 1:
            width //= 2
            evens = tuple(2 * (lane % width) for lane in range(lanes))
            odds = tuple(2 * (lane % width) + 1 for lane in range(lanes))
            vector = b.alu(op, (b.shuffle(vector, vector, evens), b.shuffle(vector, vector, odds)))
        return b.gep(vector, 0)

    def _lower_reduce(self, reduce: LazyOp, output_groups: list[Group],
                      earlier: list[dict[int, int]] | None = None, scratch: LazyOp | None = None) -> list[int]:
        """Accumulate the reduce for every output copy; return the reduced value of each copy.
        `earlier[copy]` holds the values of reduces computed before this one (a row kernel);
        `scratch`: a STORE that also receives every reduced element (read back by `_run_rows`).

        Half floats accumulate in float32 and round once at the end (docs/semantics.md). With a
        vectorized reduce axis every reduce copy has its own vector accumulator; they are combined
        copy by copy, then lane by lane, in `_combine`'s fixed order."""
        b, element = self.builder, node_dtype(reduce.src[0])
        acc_dtype = dtypes.float32 if element in HALVES else element
        init = 0 if reduce.op is ReduceOps.SUM else dtypes.min(acc_dtype)
        update = BinaryOps.ADD if reduce.op is ReduceOps.SUM else BinaryOps.MAX
        reduce_lanes = self.plan.reduce_axes[-1].vector if self.plan.reduce_vector else 1
        copies = self.plan.reduce_axes[-1].unroll if self.plan.reduce_vector else 1
        accs = [[b.define_acc(init, acc_dtype.vec(max(len(group), reduce_lanes))) for _ in range(copies)]
                for group in output_groups]
        reduce_groups = self._open_loops(self.plan.reduce_axes, LoopKind.REDUCE)
        for copy, (group, group_accs) in enumerate(zip(output_groups, accs, strict=True)):
            for number, reduce_group in enumerate(reduce_groups):
                lanes = [{**out, **inner} for out in group for inner in reduce_group]
                value = self._lower_node(reduce.src[0], lanes, earlier[copy] if earlier else {}, {})
                if scratch is not None:
                    self._store(scratch, lanes, value)
                acc = group_accs[number % copies]
                value = b.broadcast(b.alu(UnaryOps.CAST, (value,), acc_dtype.vec(b.dtype(value).count)),
                                    b.dtype(acc).count)
                b.assign(acc, b.alu(update, (acc, value)))
        self._close_loops(self.plan.reduce_axes)
        results = []
        for group_accs in accs:
            total = self._combine(update, list(group_accs))
            if reduce_lanes > 1:
                total = self._combine_lanes(update, total, reduce_lanes)
            results.append(b.alu(UnaryOps.CAST, (total,), element.vec(b.dtype(total).count)))
        return results

    def _open_chunks(self) -> None:
        """plan.chunk: a loop over the chunks of one reduce axis, outside the output loops."""
        if self.plan.chunk is None:
            return
        axis, count = self.plan.chunk
        b = self.builder
        self.chunk_counter = Variable(f"chunk{axis}~", 0, count - 1)
        self.var_refs[self.chunk_counter] = b.loop(b.const(0, INT64), b.const(count, INT64), LoopKind.REDUCE)
        self.offsets[axis] = self.chunk_counter * self.plan.reduce_axes[0].size

    def _add_previous_chunks(self, store: LazyOp, group: Group, value: int) -> int:
        """value combined with what the earlier chunks left in the output (nothing for the first)."""
        b, reduce = self.builder, self.info.reduce
        later = b.index(IndexOps.CMPLT, b.const(0, INT64), self.var_refs[self.chunk_counter])  # type: ignore
        partial = self._load(LazyOp(BufferOps.LOAD, (), store.arg), group, later)
        if reduce.op is ReduceOps.MAX:  # type: ignore[union-attr]
            partial = b.alu(TernaryOps.WHERE, (later, partial, b.const(dtypes.min(store.arg.dtype), store.arg.dtype)))
        return b.alu(BinaryOps.ADD if reduce.op is ReduceOps.SUM else BinaryOps.MAX, (partial, value))  # type: ignore

    def _run_rows(self) -> None:
        """Several reduces: per output, each reduce in turn (later ones read the earlier results), then
        the STOREs. In a row kernel the STOREs walk the row's reduced axes (`plan.inner_axes`) and
        read the reduces as values uniform along the row; otherwise they store once per output."""
        self._nests(self._rows_nest)

    def _nests(self, nest: Callable[[tuple[AxisPlan, ...]], None]) -> None:
        """`nest` over the plan's output loops, then again over the positions the vectorized output
        axis left over (`KernelPlan.tail`), one lane at a time; threads share each nest's outer loop.
        In a threaded kernel a nest without an output loop (its outputs one vector, no loop to share)
        runs in the first share only: run by every share it would store the same outputs from several
        threads at once, and in a kernel that walks the reduce in chunks (`plan.chunk`) each chunk
        reads back and updates what the previous one stored, so concurrent shares lose updates."""
        tail = self.plan.tail_plan()
        nests = [self.plan.output_axes] + ([tail[0]] if tail is not None else [])
        shared = self.parallel and any(axis.has_loop for axes in nests for axis in axes)
        for number, axes in enumerate(nests):
            if number and tail is not None:
                self.offsets[tail[1]] = NumNode(tail[2])
                self.split_pending = True
            if shared and not any(axis.has_loop for axis in axes):
                self._in_first_share(nest, axes)
            else:
                nest(axes)

    def _in_first_share(self, nest: Callable[[tuple[AxisPlan, ...]], None], axes: tuple[AxisPlan, ...]) -> None:
        """`nest(axes)` inside a loop that runs once in the share of thread 0 (`core~ == 0`) and not at
        all in the others."""
        b = self.builder
        if self.thread_vars is None:
            self.thread_vars = (b.define_var(THREAD_VARS[0]), b.define_var(THREAD_VARS[1]))
        first = b.index(IndexOps.CMPLT, self.thread_vars[0], b.const(1, INT64))
        b.loop(b.const(0, INT64), b.alu(UnaryOps.CAST, (first,), INT64), LoopKind.REDUCE)
        nest(axes)
        b.end_loop()

    def _rows_nest(self, output_axes: tuple[AxisPlan, ...]) -> None:
        """`_run_rows` over the output loops of `output_axes`."""
        output_groups = self._open_loops(output_axes, LoopKind.GLOBAL)
        values: list[dict[int, int]] = [{} for _ in output_groups]
        scratch = self._scratch_store()
        for index, reduce in enumerate(self.info.reduces):
            last = index == len(self.info.reduces) - 1
            reduced = self._lower_reduce(reduce, output_groups, values, scratch if last else None)
            ids = [node_id for node_id, which in self.info.reduce_index.items() if which == index]
            for copy, value in enumerate(reduced):
                values[copy].update({node_id: value for node_id in ids})
        # threads share rows only: a row's reduces and STOREs stay on one thread (the STOREs may read
        # back what the row's last reduce loop stored, see `_scratch_store`)
        inner_groups = self._open_loops(self.plan.inner_axes, LoopKind.GLOBAL, split=False)
        prefetched = prefetched_loads(self.info) if self.options.prefetch and not config.get().noopt else ()
        for copy, group in enumerate(output_groups):
            for inner_group in inner_groups:
                lanes = [{**out, **inner} for out in group for inner in inner_group]
                self._prefetch_next_row(output_axes, lanes, prefetched)
                memo: dict[int, int] = {}
                if scratch is not None:  # the last reduce's input, stored during its loop: read, not recomputed
                    memo[id(self.info.reduces[-1].src[0])] = self._load(LazyOp(BufferOps.LOAD, (), scratch.arg), lanes)
                for store in self.info.stores:
                    self._store(store, lanes, self._lower_node(store.src[0], lanes, values[copy], memo))
        self._close_loops(self.plan.inner_axes)
        self._close_loops(output_axes)

    def _prefetch_next_row(self, output_axes: tuple[AxisPlan, ...], lanes: Group, loads: tuple[LazyOp, ...]) -> None:
        """PREFETCH what `loads` read for `lanes` one step further along the innermost output loop
        (the row processed next), when that step exists (codegen/prefetch.py); vector accesses
        only, and only loads that move along that loop (a bias row shared by every row does not)."""
        inner = next((axis for axis in reversed(output_axes) if axis.has_loop), None)
        if inner is None or not loads:
            return
        counter, count = self.counters[inner.axis]
        shifted = [{axis: node.substitute({counter: counter + 1}) for axis, node in env.items()} for env in lanes]
        ix = self.indexes
        has_next = ix.render_bool((counter + 1) < count)
        for load in loads:
            kind, places = self._access(load.arg.st, shifted, load.arg.dtype)
            if kind != "vector":
                continue
            index, valid = places[0]
            if index == self._access(load.arg.st, lanes, load.arg.dtype)[1][0][0]:
                continue
            self.builder.prefetch(load.arg.idx, ix.render_int(index), ix.both(has_next, valid))

    def _scratch_store(self) -> LazyOp | None:
        """In a row kernel whose one STORE recomputes the last reduce's input (softmax: exp(x - max)
        is summed, then divided by the sum), the reduce loop also stores that input, so the STORE
        phase reads it back from the output (the row is still in cache) instead of computing it again."""
        if not self.info.row or len(self.info.stores) != 1:
            return None
        store, source = self.info.stores[0], self.info.reduces[-1].src[0]
        if node_dtype(source) != store.arg.dtype or any(view.mask is not None for view in store.arg.st.views):
            return None
        return store if any(node is source for node in _post_order(store.src[0])) else None

    def run(self) -> None:
        self.define_variables()
        if self.info.row or len(self.info.reduces) > 1:
            self._run_rows()
            return
        self._open_chunks()
        self._nests(self._output_nest)
        if self.plan.chunk is not None:
            self.builder.end_loop()

    def _output_nest(self, output_axes: tuple[AxisPlan, ...]) -> None:
        """The output loops over `output_axes`, the reduce inside them, and the STOREs."""
        output_groups = self._open_loops(output_axes, LoopKind.GLOBAL)
        reduced = self._lower_reduce(self.info.reduce, output_groups) if self.info.reduce is not None else []
        for copy, group in enumerate(output_groups):
            memo: dict[int, int] = {}
            for store in self.info.stores:
                if self.plan.chunk is None:
                    reduce_values = {node_id: reduced[copy] for node_id in self.info.reduce_ids}
                    self._store(store, group, self._lower_node(store.src[0], group, reduce_values, memo))
                    continue
                total = self._add_previous_chunks(store, group, reduced[copy])
                value = self._lower_node(store.src[0], group, dict.fromkeys(self.info.reduce_ids, total), memo)
                self._store(store, group, value if value == total else self._after_last_chunk(total, value))
        self._close_loops(output_axes)

    def _after_last_chunk(self, total: int, value: int) -> int:
        """A chunked STORE with elementwise work over its reduce (a mean's scale, a bias): the earlier
        chunks store the running total, the last one the value computed from the whole total."""
        b = self.builder
        _, count = self.plan.chunk  # type: ignore[misc]
        earlier = b.index(IndexOps.CMPLT, self.var_refs[self.chunk_counter], b.const(count - 1, INT64))  # type: ignore
        return b.alu(TernaryOps.WHERE, (earlier, total, value))


def _post_order(root: LazyOp) -> list[LazyOp]:
    """The nodes of `root`'s tree, sources before users, not descending below reduce nodes."""
    seen: set[int] = set()
    order: list[LazyOp] = []
    stack: list[tuple[LazyOp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            if not isinstance(node.op, ReduceOps):
                stack.extend((src, False) for src in reversed(node.src) if id(src) not in seen)
    return order


def _chunkable(info: KernelInfo) -> bool:
    """One reduce and one STORE in the reduce's own dtype (not a half float, which accumulates in
    float32) to a buffer the kernel does not read: partial results may then be kept in the output
    between chunks. The STORE's value is the reduce or elementwise work over it (lowering applies
    that work to the last chunk's total only)."""
    if info.reduce is None or info.row or len(info.reduces) > 1 or len(info.stores) != 1:
        return False
    store = info.stores[0]
    dtype = store.arg.dtype
    if dtype in HALVES or dtype != node_dtype(info.reduce.src[0]) or dtype.count != 1:
        return False
    return not reads_own_output(store)


def _kernel_lanes(info: KernelInfo, options: RendererOptions) -> int:
    """Vector lanes for this kernel: every buffer's dtype must be loadable as vectors."""
    lanes = [options.lanes(buffer.dtype) for buffer in info.buffers]
    return min(lanes) if lanes and min(lanes) > 1 else 1


def lower(ast: LazyOp, options: RendererOptions, *, const_params: bool = False) -> LinearProgram:
    """Lower a kernel AST for a renderer with `options`; verified when DEBUG >= 3. `const_params`:
    every CONST leaf's value is a kernel parameter (codegen/const_args.py), not an inline constant."""
    info = analyze(ast)
    loads = [node.arg.st.real_strides()[:-1 if node.src else None] for node in ast.walk() if node.op is BufferOps.LOAD]
    plan = plan_kernel(info.full_shape, info.reduce_axes, info.stores[0].arg.st.real_strides(), options,
                       loads, _kernel_lanes(info, options), _chunkable(info), info.row)
    flops, mem_bytes = estimates(info)
    parallel = options.supports_threads and flops + mem_bytes >= config.get().parallel_min_work
    lowering = _Lowering(info, plan, options, parallel)
    lowering.const_slots = define_params(lowering.builder, ast) if const_params else None
    matmul = gemm_plan.plan(info, options)
    scratch: tuple[BufferInfo, ...] = ()
    gemm_chunks = 0
    if matmul is None:
        lowering.run()
        paths = plan_paths(plan, info)
    else:
        lowering.define_variables()
        scratch, gemm_chunks = matmul(lowering)
        paths, units = gemm_paths(info, options, options.fused_multiply_add and not config.get().noopt)
        lowering.split_counts.append(units)
    consts = tuple(const_name(slot) for slot in range(len(set((lowering.const_slots or {}).values()))))
    threaded = lowering.thread_vars is not None
    names = tuple(v.expr for v in info.variables) + consts + (THREAD_VARS if threaded else ())
    instrs = tuple(lowering.builder.instrs)
    bounded: frozenset[int] = frozenset()
    if options.fused_multiply_add and not config.get().noopt:
        instrs, bounded = fuse_accumulations(instrs, info.buffers, flops)
    instrs = eliminate_dead_code(instrs)
    paths |= {"fma"} if bounded else set()
    paths |= {"const-params"} if consts else set()
    paths |= {"threaded"} if threaded else set()
    program = LinearProgram(kernel_name(info), instrs, info.buffers, names, info.variables, flops, mem_bytes,
                            threaded, len(consts), streamed_buffers(instrs, info.buffers, options.stream_min_bytes),
                            tuple(sorted(bounded)), scratch, gemm_chunks, frozenset(paths),
                            tuple(lowering.split_counts) if threaded else ())
    if config.get().debug >= 3:
        verify(program)
    return program
