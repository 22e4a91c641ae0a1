"""Matmul-shaped kernels lowered like BLIS: packed panels of B, a register-tiled micro-kernel, loops
that block for the caches, and the kernel's elementwise work (bias, activation, residual, scale)
applied to each tile of results as it leaves the registers.

A kernel is *matmul-shaped* (`match`) when its one reduce is a SUM over one axis K of `A * B`, two
LOADs of float32 (or float64) input buffers, such that
- the N axis: exactly one output axis along which B moves and A does not (stride 0);
- the row axes (M, flattened): the output axes along which B does not move (A moves or not);
- the batch axes: the other output axes (both move: attention's batch and heads).
Any views of A and B are allowed (permuted, reshaped, padded, flipped): every read goes through the
view's index expression and validity, as in the rest of lowering.

Loops, outermost first (`emit`); `MR` rows x `NR = vectors * lanes` columns is the register tile:

    units = batches x ceil(M / MR) blocks of rows; a thread share is a range of units (core~, cores~)
    for each batch the share touches:
      for jc over column blocks of NC columns:           (NC: the packed block fits `SCRATCH_BYTES`)
        pack B[batch][:, jc block] into scratch, NR columns per micro-panel, K x NR each, zero past N
        for ic over groups of MC rows of the share:        (MC x K of A fits the core's cache)
          for jr over the micro-panels of the block:
            for ir over the MR-row blocks of the group:   micro-kernel: K steps of
                                                           MR broadcasts of A x NR columns of B (FMA)
              epilogue: the AST above the reduce, per row and vector of columns, then the STOREs

Edges are static code: the last block of rows of each batch has `M % MR` rows and the last
micro-panel `N % NR` columns (vectors of `lanes`, `lanes/2`, `lanes/4`, then single columns), so
nothing is computed or stored past M or N and no load reads past a buffer. Packed columns past N
hold zeros and are never stored.

Values (docs/semantics.md): every output adds its K products in increasing k, one accumulator, with
`FMA` when the renderer fuses (the same rule and guard as codegen/fma.py: `bounded_inputs`), else
`acc + round(a*b)`. The order depends on nothing but k, so results are identical for every thread
count, tile and block size. Threads share units, and each unit is computed whole by one share.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fast import config
from fast.codegen.analyze import KernelInfo, node_dtype
from fast.codegen.builder import IRBuilder
from fast.codegen.fma import FMA_MIN_REUSE
from fast.codegen.indexing import IndexRenderer
from fast.codegen.ir import INT64, BufferInfo, IndexOps, LoopKind
from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, BufferOps, LazyOp, ReduceOps, TernaryOps
from fast.renderer.base import RendererOptions
from fast.shape.symbolic import Node, Variable

#: Bytes of packed B per thread share (a stack array of the kernel: codegen/ir.py `scratch`).
SCRATCH_BYTES = 2 << 20
#: The fewest rows per batch for which packing B pays (fewer: the plain register tiles of opt.py).
MIN_ROWS = 32
#: A is packed only when K is at least this: shorter rows (attention's heads of 32) cost more to
#: copy than their broadcasts straight from the view, and are too short to compete for cache sets.
PACK_A_MIN_K = 64

Env = dict[int, Node]


class LoweringContext(Protocol):
    """What the GEMM lowering uses of the general lowering (fast/codegen/lower.py `_Lowering`)."""

    builder: IRBuilder
    indexes: IndexRenderer
    var_refs: dict[Variable, int]
    info: KernelInfo
    parallel: bool
    thread_vars: tuple[int, int] | None

    def load_leaf(self, node: LazyOp, group: list[Env], also: int | None = None) -> int: ...

    def store_value(self, store: LazyOp, group: list[Env], value: int) -> None: ...

    def lower_node(self, node: LazyOp, group: list[Env], reduce_values: dict[int, int],
                   memo: dict[int, int]) -> int: ...


@dataclass(frozen=True)
class GemmShape:
    """The axes of a matmul-shaped kernel (module docstring) and its two operand LOADs."""

    rows: tuple[int, ...]  # M axes, outermost first (flattened row-major into one row index)
    column: int  # the N axis
    reduce: int  # the K axis
    batch: tuple[int, ...]  # batch axes, outermost first
    a: LazyOp  # the LOAD fixed along N
    b: LazyOp  # the LOAD fixed along the rows
    sizes: tuple[int, ...]  # the kernel's full shape

    def size(self, axes: tuple[int, ...]) -> int:
        total = 1
        for axis in axes:
            total *= self.sizes[axis]
        return total


@dataclass(frozen=True)
class GemmTiles:
    """Tile sizes, chosen per CPU from the renderer's registers, lanes and cache (`choose_tiles`)."""

    rows: int  # MR: rows of the register tile
    vectors: int  # vectors of `lanes` columns in the register tile (NR = vectors * lanes)
    lanes: int
    group_rows: int  # MC: rows of A walked per micro-panel of B (a multiple of `rows`)
    panels: int  # micro-panels of B packed at once (NC = panels * NR)

    @property
    def columns(self) -> int:
        return self.vectors * self.lanes


def match(info: KernelInfo, options: RendererOptions) -> GemmShape | None:
    """The GEMM shape of a kernel, or None when it is not matmul-shaped or too small to pay."""
    if not options.gemm or config.get().noopt or info.reduce is None or info.row or len(info.reduces) != 1:
        return None
    reduce, sizes = info.reduce, info.full_shape
    if reduce.op is not ReduceOps.SUM or len(info.reduce_axes) != 1 or not all(isinstance(s, int) for s in sizes):
        return None
    product = reduce.src[0]
    if product.op is not BinaryOps.MUL or any(src.op is not BufferOps.LOAD for src in product.src):
        return None
    dtype = node_dtype(product)
    if dtype not in (dtypes.float32, dtypes.float64) or any(src.arg.dtype != dtype for src in product.src):
        return None
    ints = tuple(size for size in sizes if isinstance(size, int))
    found = [shape for a, b in ((0, 1), (1, 0)) if (shape := _classify(info, product.src[a], product.src[b], ints))]
    store_strides = info.stores[0].arg.st.real_strides()
    # prefer columns that the first STORE walks contiguously: the epilogue then stores whole vectors
    return min(found, key=lambda shape: store_strides[shape.column] != 1, default=None)


def _classify(info: KernelInfo, a: LazyOp, b: LazyOp, sizes: tuple[int, ...]) -> GemmShape | None:
    """The shape with `a` as the rows' operand, or None when the axes do not fit."""
    a_strides, b_strides = a.arg.st.real_strides(), b.arg.st.real_strides()
    k = info.reduce_axes[0]
    outputs = [axis for axis in range(len(sizes)) if axis != k and sizes[axis] != 1]
    columns = [axis for axis in outputs if a_strides[axis] == 0 and b_strides[axis] != 0]
    rows = tuple(axis for axis in outputs if b_strides[axis] == 0 and axis not in columns)
    batch = tuple(axis for axis in outputs if axis not in rows and axis not in columns)
    if len(columns) != 1 or not rows:
        return None
    shape = GemmShape(rows, columns[0], k, batch, a, b, sizes)
    if shape.size(rows) < MIN_ROWS or sizes[columns[0]] < 4 or sizes[k] < 4:
        return None
    return shape


def choose_tiles(shape: GemmShape, options: RendererOptions) -> GemmTiles | None:
    """MR x NR from the vector registers (about three quarters hold accumulators: 12 x 2 vectors
    with 32 registers, 6 x 2 with 16), fewer vectors when N is narrow, and rows that divide M when
    a nearby count does; MC so that MC x K of A fills about half the core's cache; the packed block
    of B within `SCRATCH_BYTES`. None when one micro-panel of B does not fit."""
    dtype = node_dtype(shape.a)
    lanes = options.lanes(dtype)
    if lanes < 4:
        return None
    m, n, k = shape.size(shape.rows), shape.sizes[shape.column], shape.sizes[shape.reduce]
    budget = 24 if options.vector_registers >= 32 else 12
    vectors = max(1, min(2, -(-n // lanes)))
    most = min(budget // vectors, 16)
    rows = next((r for r in range(most, (most + 1) // 2, -1) if m % r == 0), most)
    panel_bytes = k * vectors * lanes * dtype.itemsize
    if panel_bytes > SCRATCH_BYTES:
        return None
    total_panels = -(-n // (vectors * lanes))
    blocks = -(-(total_panels * panel_bytes) // SCRATCH_BYTES)
    panels = -(-total_panels // blocks)
    group = max(1, (options.cache_bytes // 2) // (k * dtype.itemsize * rows))
    return GemmTiles(rows, vectors, lanes, group * rows, panels)


def fuses(shape: GemmShape, info: KernelInfo, options: RendererOptions, flops: int) -> bool:
    """Whether the micro-kernel accumulates with FMA: the renderer fuses, and the kernel does at least
    FMA_MIN_REUSE flops per element of A and B (codegen/fma.py: the guard's scan then pays)."""
    elements = sum(info.buffers[load.arg.idx].size for load in (shape.a, shape.b))
    return options.fused_multiply_add and not config.get().noopt and flops >= FMA_MIN_REUSE * elements


class _Emitter:
    """Writes the loops of the module docstring into the context's builder."""

    def __init__(self, ctx: LoweringContext, shape: GemmShape, tiles: GemmTiles, fused: bool) -> None:
        self.ctx, self.shape, self.tiles, self.fused = ctx, shape, tiles, fused
        self.b = ctx.builder
        self.dtype: DType = node_dtype(shape.a)
        self.m, self.n, self.k = shape.size(shape.rows), shape.sizes[shape.column], shape.sizes[shape.reduce]
        self.blocks = -(-self.m // tiles.rows)  # blocks of rows per batch
        self.full_panels, self.all_panels = self.n // tiles.columns, -(-self.n // tiles.columns)
        self.scratch = BufferInfo(len(ctx.info.buffers), self.dtype, False, self.k * tiles.columns * tiles.panels)
        self.packed_rows = BufferInfo(len(ctx.info.buffers) + 1, self.dtype, False, self.k * tiles.group_rows)
        self.pack_a = self.k >= PACK_A_MIN_K
        self.group_start = -1  # IR value: the first block of rows of the current group (packed A's origin)
        self.env: Env = {}  # batch axes and the current column block, set while emitting

    # -- small IR helpers
    def const(self, value: int) -> int:
        return self.b.const(value, INT64)

    def minimum(self, x: int, y: int) -> int:
        return self.b.alu(TernaryOps.WHERE, (self.b.alu(BinaryOps.CMPLT, (x, y)), x, y))

    def maximum(self, x: int, y: int) -> int:
        return self.b.alu(BinaryOps.MAX, (x, y))

    def loop(self, name: str, start: int, end: int, top: int, kind: LoopKind = LoopKind.GLOBAL) -> Variable:
        """Open a loop over [start, end) whose counter never exceeds `top`; returns its Variable."""
        counter = Variable(f"{name}~", 0, max(top, 0))
        self.ctx.var_refs[counter] = self.b.loop(start, end, kind)
        return counter

    def render(self, node: Node) -> int:
        return self.ctx.indexes.render_int(node)

    def split(self, axes: tuple[int, ...], flat: Node) -> Env:
        """Each of `axes` (outermost first) as a function of the flat row-major index `flat`."""
        env: Env = {}
        inner = 1
        for axis in reversed(axes):
            size = self.shape.sizes[axis]
            env[axis] = (flat // inner) % size if axis != axes[0] else flat // inner
            inner *= size
        return env

    # -- the loops
    def run(self) -> None:
        start, end = self.share(self.shape.size(self.shape.batch) * self.blocks)
        blocks = self.const(self.blocks)
        first = self.b.index(IndexOps.NONNEG_DIV, start, blocks)
        last = self.b.index(IndexOps.NONNEG_DIV, self.b.index(IndexOps.ADD, end, self.const(self.blocks - 1)), blocks)
        batch = self.loop("batch", first, last, self.shape.size(self.shape.batch) - 1)
        self.env = self.split(self.shape.batch, batch) if self.shape.batch else {}
        origin = self.render(batch * self.blocks)
        lo = self.maximum(self.b.alu(BinaryOps.SUB, (start, origin)), self.const(0))
        hi = self.minimum(self.b.alu(BinaryOps.SUB, (end, origin)), blocks)
        column_blocks = -(-self.all_panels // self.tiles.panels)
        column_block = self.loop("jc", self.const(0), self.const(column_blocks), column_blocks - 1)
        self.pack(column_block)
        self.row_groups(column_block, lo, hi)
        self.b.end_loop()
        self.b.end_loop()

    def share(self, units: int) -> tuple[int, int]:
        """[start, end) of this thread's units: `[units*core/cores, units*(core+1)/cores)`."""
        b = self.b
        if not self.ctx.parallel:
            return self.const(0), self.const(units)
        if self.ctx.thread_vars is None:
            self.ctx.thread_vars = (b.define_var("core~"), b.define_var("cores~"))
        core, cores = self.ctx.thread_vars
        total = self.const(units)
        start = b.index(IndexOps.NONNEG_DIV, b.index(IndexOps.MUL, total, core), cores)
        after = b.index(IndexOps.ADD, core, self.const(1))
        return start, b.index(IndexOps.NONNEG_DIV, b.index(IndexOps.MUL, total, after), cores)

    def panel_range(self, column_block: Variable, edge: bool) -> tuple[int, int]:
        """[first, end) of the micro-panels of this column block: the full ones, or the edge one."""
        first = self.render(column_block * self.tiles.panels)
        end = self.render(column_block * self.tiles.panels + self.tiles.panels)
        if edge:
            return self.maximum(first, self.const(self.full_panels)), self.minimum(end, self.const(self.all_panels))
        return first, self.minimum(end, self.const(self.full_panels))

    def pack(self, column_block: Variable) -> None:
        """Copy B's columns of this block into scratch: micro-panel p, step k at `(p*K + k) * NR`."""
        for edge in (False, True) if self.n % self.tiles.columns else (False,):
            panel = self.loop("pack", *self.panel_range(column_block, edge), self.all_panels - 1)
            step = self.loop("packk", self.const(0), self.const(self.k), self.k - 1)
            local = (panel - column_block * self.tiles.panels) * self.k + step
            for vector in range(self.tiles.vectors):
                column = panel * self.tiles.columns + vector * self.tiles.lanes
                group = [{**self.env, self.shape.column: column + lane, self.shape.reduce: step}
                         for lane in range(self.tiles.lanes)]
                value = self.packed_value(group, edge)
                self.b.store(self.scratch.idx, self.render(local * self.tiles.columns + vector * self.tiles.lanes),
                             value)
            self.b.end_loop()
            self.b.end_loop()

    def packed_value(self, group: list[Env], edge: bool) -> int:
        """B's values for a vector of columns; on the edge panel each lane past N reads nothing (0)."""
        if not edge:
            return self.ctx.load_leaf(self.shape.b, group)
        inside = [self.ctx.indexes.render_bool(env[self.shape.column] < self.n) for env in group]
        return self.b.vectorize([self.ctx.load_leaf(self.shape.b, [env], valid) for env, valid in zip(group, inside,
                                                                                                     strict=True)])

    def row_groups(self, column_block: Variable, lo: int, hi: int) -> None:
        """Groups of MC rows of this batch's share, then the micro-panels, then the row blocks."""
        per_group = self.tiles.group_rows // self.tiles.rows
        blocks = self.b.alu(BinaryOps.ADD, (self.b.alu(BinaryOps.SUB, (hi, lo)), self.const(per_group - 1)))
        count = self.b.index(IndexOps.NONNEG_DIV, blocks, self.const(per_group))  # hi >= lo: see `run`
        group = self.loop("ic", self.const(0), count, -(-self.blocks // per_group))
        group_start = self.b.alu(BinaryOps.ADD, (lo, self.render(group * per_group)))
        group_end = self.minimum(self.b.alu(BinaryOps.ADD, (group_start, self.const(per_group))), hi)
        self.group_start = group_start
        full_blocks = self.const(self.m // self.tiles.rows)
        if self.pack_a:
            self.pack_rows(self.minimum(group_end, full_blocks), self.tiles.rows)
        if self.pack_a and self.m % self.tiles.rows:
            self.pack_rows(group_end, self.m % self.tiles.rows, self.maximum(group_start, full_blocks))
        for edge_columns in (False, True) if self.n % self.tiles.columns else (False,):
            panel = self.loop("jr", *self.panel_range(column_block, edge_columns), self.all_panels - 1)
            columns = self.column_vectors(edge_columns)
            block = self.loop("ir", group_start, self.minimum(group_end, full_blocks), self.blocks - 1)
            self.micro_kernel(column_block, panel, block, self.tiles.rows, columns)
            self.b.end_loop()
            if self.m % self.tiles.rows:
                block = self.loop("ire", self.maximum(group_start, full_blocks), group_end, self.blocks - 1)
                self.micro_kernel(column_block, panel, block, self.m % self.tiles.rows, columns)
                self.b.end_loop()
            self.b.end_loop()
        self.b.end_loop()

    def packed_row_index(self, block: Variable, step: Node, row: int) -> int:
        """Where packed A holds row `row` of `block` at step k: `((block - group start) * K + k) * MR + row`."""
        local = self.b.alu(BinaryOps.SUB, (self.ctx.var_refs[block], self.group_start))
        within = self.b.index(IndexOps.ADD, self.b.index(IndexOps.MUL, local, self.const(self.k)), self.render(step))
        return self.b.index(IndexOps.ADD, self.b.index(IndexOps.MUL, within, self.const(self.tiles.rows)),
                            self.const(row))

    def pack_rows(self, end: int, rows: int, start: int | None = None) -> None:
        """Copy A's blocks of rows [start (the group's first), end) into packed A, `rows` rows each:
        the micro-kernel then reads its broadcasts in one sequential stream (rows of A far apart in
        memory, a power of two bytes apart at worst, would compete for the same cache sets)."""
        block = self.loop("pa", self.group_start if start is None else start, end, self.blocks - 1)
        step = self.loop("pak", self.const(0), self.const(self.k), self.k - 1)
        for row in range(rows):
            env = {**self.env, **self.split(self.shape.rows, block * self.tiles.rows + row), self.shape.reduce: step}
            self.b.store(self.packed_rows.idx, self.packed_row_index(block, step, row),
                         self.ctx.load_leaf(self.shape.a, [env]))
        self.b.end_loop()
        self.b.end_loop()

    def column_vectors(self, edge: bool) -> list[tuple[int, int]]:
        """(first column within the micro-panel, width) of each accumulator of a row: `vectors`
        vectors of `lanes`; on the edge panel only the N % NR columns that exist, in vectors of
        lanes, lanes/2, lanes/4, then single columns."""
        if not edge:
            return [(vector * self.tiles.lanes, self.tiles.lanes) for vector in range(self.tiles.vectors)]
        remaining, offset, columns = self.n % self.tiles.columns, 0, []
        for width in (self.tiles.lanes, self.tiles.lanes // 2, self.tiles.lanes // 4, 1):
            while width >= 1 and remaining >= width and (width >= 4 or width == 1):
                columns.append((offset, width))
                offset, remaining = offset + width, remaining - width
        return columns

    def micro_kernel(self, column_block: Variable, panel: Variable, block: Variable, rows: int,
                     columns: list[tuple[int, int]]) -> None:
        """`rows` x `columns` accumulators over K, then the epilogue and STOREs of each."""
        b, vec = self.b, self.dtype
        accs = [[b.define_acc(0.0, vec.vec(width) if width > 1 else vec) for _, width in columns] for _ in range(rows)]
        step = self.loop("k", self.const(0), self.const(self.k), self.k - 1, LoopKind.REDUCE)
        base = ((panel - column_block * self.tiles.panels) * self.k + step) * self.tiles.columns
        packed = [b.load(self.scratch.idx, vec.vec(width) if width > 1 else vec, self.render(base + offset))
                  for offset, width in columns]
        for row in range(rows):
            if self.pack_a:
                scalar = b.load(self.packed_rows.idx, vec, self.packed_row_index(block, step, row))
            else:
                rows_env = self.split(self.shape.rows, block * self.tiles.rows + row)
                scalar = self.ctx.load_leaf(self.shape.a, [{**self.env, **rows_env, self.shape.reduce: step}])
            for acc, value, (_, width) in zip(accs[row], packed, columns, strict=True):
                self.accumulate(acc, b.broadcast(scalar, width) if width > 1 else scalar, value)
        b.end_loop()
        for row in range(rows):
            rows_env = self.split(self.shape.rows, block * self.tiles.rows + row)
            for acc, (offset, width) in zip(accs[row], columns, strict=True):
                column = panel * self.tiles.columns + offset
                group = [{**self.env, **rows_env, self.shape.column: column + lane} for lane in range(width)]
                self.epilogue(group, acc)

    def accumulate(self, acc: int, a: int, b: int) -> None:
        """acc := acc + a*b, fused (one rounding) or as the specified product and sum."""
        builder = self.b
        if self.fused:
            builder.assign(acc, builder.fma(a, b, acc))
        else:
            builder.assign(acc, builder.alu(BinaryOps.ADD, (acc, builder.alu(BinaryOps.MUL, (a, b)))))

    def epilogue(self, group: list[Env], acc: int) -> None:
        """Every STORE of the kernel for these lanes, the reduce's value being the accumulator."""
        memo: dict[int, int] = {}
        reduce_values = dict.fromkeys(self.ctx.info.reduce_ids, acc)
        for store in self.ctx.info.stores:
            self.ctx.store_value(store, group, self.ctx.lower_node(store.src[0], group, reduce_values, memo))


def emit(ctx: LoweringContext, shape: GemmShape, tiles: GemmTiles, fused: bool) -> tuple[BufferInfo, ...]:
    """Write the GEMM loops into `ctx`'s builder; returns the scratch arrays the program declares."""
    emitter = _Emitter(ctx, shape, tiles, fused)
    emitter.run()
    return (emitter.scratch, emitter.packed_rows) if emitter.pack_a else (emitter.scratch,)


def plan(info: KernelInfo, options: RendererOptions, flops: int) -> Callable[[Any], tuple[Any, ...]] | None:
    """A function that lowers this kernel as a GEMM into a lowering context, returning (scratch
    arrays, bounded inputs), or None when the kernel is not matmul-shaped (then opt.py plans it)."""
    shape = match(info, options)
    tiles = choose_tiles(shape, options) if shape is not None else None
    if shape is None or tiles is None:
        return None
    fused = fuses(shape, info, options, flops)
    bounded = tuple(sorted({shape.a.arg.idx, shape.b.arg.idx})) if fused else ()
    return lambda ctx: (emit(ctx, shape, tiles, fused), bounded)
