"""The loops of a GEMM (fast/codegen/gemm.py says which kernels and with which tiles): shares of
units, column blocks of packed B (codegen/gemm_pack.py), groups of rows, micro-panels, the
register-tiled micro-kernel and the epilogue, written into the general lowering's builder.

Fused multiply-adds are decided per tile inside the kernel. While B is packed, each micro-panel
gets a flag "every element is below `FMA_BOUNDS` in magnitude" (NaN fails); each block of MR rows of
A gets one from the vector pass over its rows that also packs them, once per group; with A read in
place and B one micro-panel (two without batch axes), each tile checks its rows as it runs (gemm_checked.py). A tile
whose two flags hold adds its products with FMA; any other tile (a product there might overflow,
docs/semantics.md) runs the unfused loop, `acc + round(a*b)`. Tiles are fixed by the shape alone
(blocks of MR rows of one batch, panels of NR columns), never by the thread share, so the choice,
like the order, never depends on the thread count, and no input needs the engine's scan.
"""
from __future__ import annotations

from collections.abc import Callable

from fast.codegen import gemm_checked
from fast.codegen.analyze import node_dtype
from fast.codegen.fma import FMA_BOUNDS
from fast.codegen.gemm import (
    EPILOGUE_ROWS_PER_STEP,
    UNROLLED_EPILOGUE_MAX,
    Env,
    GemmShape,
    GemmTiles,
    LoweringContext,
    column_vectors,
    epilogue_size,
    packed_row_stride,
    packs_a,
    padded_vectors,
    stores_columns_contiguously,
)
from fast.codegen.gemm_pack import pack_columns, reads_b_in_place
from fast.codegen.gemm_pack_a import prepare_rows
from fast.codegen.gemm_prefetch import hinted_steps, spread_hint, spread_steps, step_hint_spacing
from fast.codegen.ir import INT64, BufferInfo, IndexOps, LoopKind
from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, BufferOps, LazyOp, TernaryOps, UnaryOps
from fast.shape.symbolic import Node, NumNode, Variable


class GemmEmitter:
    """Writes the loops of gemm.py's docstring into the context's builder."""

    def __init__(self, ctx: LoweringContext, shape: GemmShape, tiles: GemmTiles, fused: bool) -> None:
        self.ctx, self.shape, self.tiles, self.fused = ctx, shape, tiles, fused
        self.b = ctx.builder
        self.dtype: DType = node_dtype(shape.a)
        self.m, self.n, self.k = shape.size(shape.rows), shape.sizes[shape.column], shape.sizes[shape.reduce]
        self.blocks = -(-self.m // tiles.rows)  # blocks of rows per batch
        self.full_panels, self.all_panels = self.n // tiles.columns, -(-self.n // tiles.columns)
        self.pack_a = packs_a(shape, tiles)
        self.checks_in_tile = gemm_checked.applies(fused, self.pack_a, self.all_panels, bool(shape.batch))
        self.prefetch = ctx.prefetch
        self.arrays: list[BufferInfo] = []
        self.kc = tiles.chunk or self.k  # steps of K packed and run at a time
        self.k0: Node = NumNode(0)  # the first step of the current chunk (set by `run` when chunked)
        self.chunk: Variable | None = None
        self.partial = LazyOp(BufferOps.LOAD, (), ctx.info.stores[0].arg) if tiles.chunk else None
        # None: B lies as packed B would (gemm_pack.py `reads_b_in_place`), the micro-kernel reads it there
        self.packed_b: BufferInfo | None = None if reads_b_in_place(shape, tiles) else \
            self.scratch(self.dtype, self.kc * tiles.columns * tiles.panels)
        self.a_stride = packed_row_stride(self.kc, self.dtype.itemsize, tiles.lanes)
        self.packed_a = self.scratch(self.dtype, self.a_stride * tiles.group_rows) if self.pack_a else None
        self.panel_ok = self.scratch(dtypes.bool, tiles.panels) if fused else None
        rows_flags = fused and not self.checks_in_tile  # else the tiles check A's rows (gemm_checked.py)
        self.rows_ok = self.scratch(dtypes.bool, tiles.group_rows // tiles.rows) if rows_flags else None
        looped = epilogue_size(ctx.info) > UNROLLED_EPILOGUE_MAX or not stores_columns_contiguously(ctx.info, shape)
        padded = padded_vectors(self.n, tiles, True) != column_vectors(self.n, tiles, True)  # edge: via the tile
        self.tile = self.scratch(self.dtype, tiles.rows * tiles.columns) if looped or padded else None
        self.group_start = -1  # IR value: the first block of rows of the current group (packed A's origin)
        self.column_block: Node | None = None
        self.env: Env = {}  # the batch axes, set while emitting
        self.batch: Node | None = None  # the batch of the current unit, set while emitting

    # -- small IR helpers
    def scratch(self, dtype: DType, size: int) -> BufferInfo:
        array = BufferInfo(len(self.ctx.info.buffers) + len(self.arrays), dtype, False, size)
        self.arrays.append(array)
        return array

    def const(self, value: int) -> int:
        return self.b.const(value, INT64)

    def minimum(self, x: int, y: int) -> int:
        return self.b.alu(TernaryOps.WHERE, (self.b.alu(BinaryOps.CMPLT, (x, y)), x, y))

    def maximum(self, x: int, y: int) -> int:
        return self.b.alu(BinaryOps.MAX, (x, y))

    def sub(self, x: int, y: int) -> int:
        return self.b.alu(BinaryOps.SUB, (x, y))

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

    def rows_env(self, block: Variable, row: int | Node, step: Node | None = None) -> Env:
        """The index of every axis but N for row `row` of `block` (at reduce step `step`)."""
        env = {**self.env, **self.split(self.shape.rows, block * self.tiles.rows + row)}
        return env if step is None else {**env, self.shape.reduce: step}

    # -- bounds of fused products
    def bounded(self, value: int) -> int:
        """bool (lane by lane): -bound < value < bound, false for NaN (codegen/fma.py FMA_BOUNDS)."""
        b, dtype = self.b, self.b.dtype(value)
        bound = FMA_BOUNDS[self.dtype]
        below = b.alu(BinaryOps.CMPLT, (value, b.const(bound, dtype)))
        return b.alu(BinaryOps.MUL, (below, b.alu(BinaryOps.CMPLT, (b.const(-bound, dtype), value))))

    def all_lanes(self, value: int) -> int:
        """The AND of a bool vector's lanes (a scalar is itself): log2(n) vector ANDs of its halves
        (two SHUFFLEs each) where the renderer asks for them (`RendererOptions.lanes_by_halves`: GCC
        extracts each lane of a mask on its own, 2% of `p @ v`, session 21), has vector bool ops and
        n is a power of two; else lane by lane (which LLVM turns into one mask test)."""
        b, count = self.b, self.b.dtype(value).count
        if self.ctx.lanes_by_halves and not count & (count - 1) and (BinaryOps.MUL, dtypes.bool) in b.vector_ops:
            width = count
            while width > 1:
                width //= 2
                halves = [tuple(lane % width + half for lane in range(count)) for half in (0, width)]
                value = b.alu(BinaryOps.MUL, tuple(b.shuffle(value, value, lanes) for lanes in halves))
            return b.gep(value, 0)
        lanes = [b.gep(value, lane) for lane in range(count)]
        while len(lanes) > 1:
            lanes = [self.b.alu(BinaryOps.MUL, (lanes[i], lanes[i + 1])) for i in range(0, len(lanes) - 1, 2)] \
                + lanes[len(lanes) - len(lanes) % 2:]
        return lanes[0]

    # -- the loops
    def run(self) -> None:
        """The share's units, in order: (batch, column block, block of rows), rows fastest. For each
        (batch, column block) it holds: that block of B packed, then its rows. A share that splits
        the column blocks (a product with several, threaded) packs each of its blocks of B once and
        none of another share's, where splitting rows alone made every thread pack all of B."""
        batches = self.shape.size(self.shape.batch)
        column_blocks = -(-self.all_panels // self.tiles.panels)
        start, end = self.share(batches * column_blocks * self.blocks)
        blocks = self.const(self.blocks)
        first = self.b.index(IndexOps.NONNEG_DIV, start, blocks)
        last = self.b.index(IndexOps.NONNEG_DIV, self.b.index(IndexOps.ADD, end, self.const(self.blocks - 1)), blocks)
        pair = self.loop("bj", first, last, batches * column_blocks - 1)
        self.batch = pair // column_blocks
        self.column_block = pair % column_blocks
        self.env = self.split(self.shape.batch, self.batch) if self.shape.batch else {}
        origin = self.render(pair * self.blocks)
        lo = self.maximum(self.sub(start, origin), self.const(0))  # lo <= hi: the share's blocks of rows here
        hi = self.minimum(self.sub(end, origin), blocks)
        if self.partial is not None:  # chunks of K: B's and A's steps packed chunk by chunk
            chunks = self.k // self.kc
            self.chunk = self.loop("pc", self.const(0), self.const(chunks), chunks - 1)
            self.k0 = self.chunk * self.kc
        self.pack_b()
        self.row_groups(lo, hi)
        if self.partial is not None:
            self.b.end_loop()
        self.b.end_loop()

    def pack_b(self) -> None:
        """B's micro-panels of the current column block into packed B, with their flags (gemm_pack.py)."""
        pack_columns(self)

    def pack_rows(self, start: int, end: int, rows: int) -> None:
        """Blocks [start, end) of `rows` rows into packed A, with their flags (gemm_pack_a.py)."""
        prepare_rows(self, start, end, rows)

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

    def panel_range(self, edge: bool) -> tuple[int, int]:
        """[first, end) of the micro-panels of this column block: the full ones, or the edge one."""
        block = self.column_block
        assert block is not None  # noqa: S101 - set by `run` before any panel loop
        first, end = self.render(block * self.tiles.panels), self.render(block * self.tiles.panels + self.tiles.panels)
        if edge:
            return self.maximum(first, self.const(self.full_panels)), self.minimum(end, self.const(self.all_panels))
        return first, self.minimum(end, self.const(self.full_panels))

    def local_panel(self, panel: Variable) -> Node:
        return panel - self.column_block * self.tiles.panels  # type: ignore[operator]

    def and_bounded(self, ok: int | None, value: int) -> None:
        """ok &= every lane of `value` is within the FMA bound (nothing when not fused)."""
        if ok is not None:
            self.b.assign(ok, self.b.alu(BinaryOps.MUL, (ok, self.bounded(value))))

    def row_groups(self, lo: int, hi: int) -> None:
        """Groups of MC rows of this batch's share: packed A and the rows' bound flags, then the
        micro-panels, then the blocks of rows (full ones, then the edge block of M % MR rows)."""
        per_group = self.tiles.group_rows // self.tiles.rows
        blocks = self.b.alu(BinaryOps.ADD, (self.sub(hi, lo), self.const(per_group - 1)))
        count = self.b.index(IndexOps.NONNEG_DIV, blocks, self.const(per_group))
        group = self.loop("ic", self.const(0), count, -(-self.blocks // per_group))
        self.group_start = self.b.alu(BinaryOps.ADD, (lo, self.render(group * per_group)))
        group_end = self.minimum(self.b.alu(BinaryOps.ADD, (self.group_start, self.const(per_group))), hi)
        full_blocks = self.const(self.m // self.tiles.rows)
        edge = self.m % self.tiles.rows
        ranges = [(self.group_start, self.minimum(group_end, full_blocks), self.tiles.rows)]
        ranges += [(self.maximum(self.group_start, full_blocks), group_end, edge)] if edge else []
        for start, end, rows in ranges:
            self.pack_rows(start, end, rows)
        for edge_columns in (False, True) if self.n % self.tiles.columns else (False,):
            panel = self.loop("jr", *self.panel_range(edge_columns), self.all_panels - 1)
            for start, end, rows in ranges:
                block = self.loop("ir", start, end, self.blocks - 1)
                self.micro_kernel(panel, block, rows, padded_vectors(self.n, self.tiles, edge_columns),
                                  column_vectors(self.n, self.tiles, edge_columns))
                self.b.end_loop()
            self.b.end_loop()
        self.b.end_loop()

    def block_slot(self, block: Variable) -> int:
        """The block's position within its group (IR value)."""
        return self.sub(self.ctx.var_refs[block], self.group_start)

    def packed_row_index(self, block: Variable, step: Node, row: int | Node) -> int:
        """Where packed A holds row `row` of `block` at step k: row `(block - group start) * MR + row`
        of the group's copy, `a_stride` elements per row: `((block - group start) * MR + row) * a_stride + k`."""
        origin = self.b.index(IndexOps.MUL, self.block_slot(block), self.const(self.tiles.rows * self.a_stride))
        return self.b.index(IndexOps.ADD, origin, self.render(row * self.a_stride + step))

    def micro_kernel(self, panel: Variable, block: Variable, rows: int, columns: list[tuple[int, int]],
                     stored: list[tuple[int, int]]) -> None:
        """`rows` x `columns` accumulators over K (fused where the tile's flags allow), then the
        epilogue and STOREs of each of the `stored` columns."""
        accs = [[self.b.define_acc(0.0, self.vector(width)) for _, width in columns] for _ in range(rows)]
        if self.chunk is not None:
            self.b.loop(self.const(0), self.chunk_past(0), LoopKind.REDUCE)  # once after the first chunk
            self.partial_sums(panel, block, accs, columns, load=True)
            self.b.end_loop()
        if self.checks_in_tile:
            gemm_checked.micro_kernel_checked(self, panel, block, accs, columns)
        elif self.panel_ok is not None and self.rows_ok is not None:
            flags = (self.b.load(self.panel_ok.idx, dtypes.bool, self.render(self.local_panel(panel))),
                     self.b.load(self.rows_ok.idx, dtypes.bool, self.block_slot(block)))
            fused = self.b.alu(UnaryOps.CAST, (self.b.alu(BinaryOps.MUL, flags),), INT64)
            for fuse, (start, end) in ((True, (self.const(0), fused)), (False, (fused, self.const(1)))):
                self.b.loop(start, end, LoopKind.REDUCE)  # once, or not at all
                self.products(panel, block, accs, columns, fuse)
                self.b.end_loop()
        else:
            self.products(panel, block, accs, columns, False)
        self.finish(panel, block, accs, columns, stored)

    def finish(self, panel: Variable, block: Variable, accs: list[list[int]], columns: list[tuple[int, int]],
               stored: list[tuple[int, int]]) -> None:
        """The tile's sums so far: its epilogue and STOREs, or, before the last chunk of K, the sums
        themselves stored to the output (`gemm.chunk_steps`: the next chunk starts from them)."""
        if self.chunk is not None:
            last = self.chunk_past(self.k // self.kc - 2)
            self.b.loop(last, self.const(1), LoopKind.REDUCE)  # once before the last chunk, else not at all
            self.partial_sums(panel, block, accs, columns, load=False)
            self.b.end_loop()
            self.b.loop(self.const(0), last, LoopKind.REDUCE)  # once at the last chunk
        rows = len(accs)
        self.tile_epilogue(panel, block, accs, columns, stored, rows)
        if self.chunk is not None:
            self.b.end_loop()

    def chunk_past(self, chunk: int) -> int:
        """IR int64: 1 when the current chunk of K comes after chunk `chunk`, else 0."""
        assert self.chunk is not None  # noqa: S101 - chunked kernels only
        after = self.b.alu(BinaryOps.CMPLT, (self.const(chunk), self.ctx.var_refs[self.chunk]))
        return self.b.alu(UnaryOps.CAST, (after,), INT64)

    def partial_sums(self, panel: Variable, block: Variable, accs: list[list[int]], columns: list[tuple[int, int]],
                     load: bool) -> None:
        """Store the tile's sums to the output, or (`load`) set its accumulators from what the chunks
        before stored there; a whole-vector tile (`chunk_steps`), every column exists."""
        assert self.partial is not None  # noqa: S101 - chunked kernels only
        for row, row_accs in enumerate(accs):
            rows_env = self.rows_env(block, row)
            for acc, (offset, width) in zip(row_accs, columns, strict=True):
                column = panel * self.tiles.columns + offset
                group = [{**rows_env, self.shape.column: column + lane} for lane in range(width)]
                if load:
                    self.b.assign(acc, self.ctx.load_leaf(self.partial, group))
                else:
                    self.ctx.store_value(self.ctx.info.stores[0], group, acc)

    def tile_epilogue(self, panel: Variable, block: Variable, accs: list[list[int]], columns: list[tuple[int, int]],
                      stored: list[tuple[int, int]], rows: int) -> None:
        """The epilogue and STOREs of the tile whose sums are `accs`."""
        if columns == stored and (self.tile is None or rows == 1):
            for row in range(rows):
                self.row_epilogue(panel, self.rows_env(block, row), accs[row], columns)
            return
        self.looped_epilogue(panel, block, accs, columns, stored)

    def row_epilogue(self, panel: Variable, rows_env: Env, values: list[int],
                     columns: list[tuple[int, int]]) -> None:
        """The epilogue and STOREs of one row of the tile, `values` holding its accumulators."""
        for value, (offset, width) in zip(values, columns, strict=True):
            column = panel * self.tiles.columns + offset
            self.epilogue([{**rows_env, self.shape.column: column + lane} for lane in range(width)], value)

    def looped_epilogue(self, panel: Variable, block: Variable, accs: list[list[int]],
                        columns: list[tuple[int, int]], stored: list[tuple[int, int]]) -> None:
        """The accumulators (of `columns`) go to the tile scratch (row r, column c at `r * NR + c`),
        then one loop over the tile's rows runs the epilogue on the `stored` columns: one copy of its
        code instead of MR. An unrolled epilogue of MR rows made GCC's induction-variable pass take
        seconds per kernel (quadratic in the uses of a loop), and lowering and rendering it cost as
        much again in Python."""
        assert self.tile is not None  # noqa: S101 - callers check
        nr = self.tiles.columns
        for row, row_accs in enumerate(accs):
            for acc, (offset, _) in zip(row_accs, columns, strict=True):
                self.b.store(self.tile.idx, self.const(row * nr + offset), acc)
        self.epilogue_from_tile(panel, block, len(accs), stored)

    def epilogue_from_tile(self, panel: Variable, block: Variable, rows: int, stored: list[tuple[int, int]]) -> None:
        """The epilogue of the tile's first `rows` rows, read from the tile scratch (row r, column c
        at `r * NR + c`), in a loop over the rows: the `stored` columns of each."""
        assert self.tile is not None  # noqa: S101 - callers check
        nr = self.tiles.columns
        per_step = max(d for d in range(1, EPILOGUE_ROWS_PER_STEP + 1) if rows % d == 0)
        steps = rows // per_step
        step = self.loop("er", self.const(0), self.const(steps), steps - 1)
        for within in range(per_step):
            tile_row: Node = step * per_step + within
            values = [self.b.load(self.tile.idx, self.vector(width), self.render(tile_row * nr + offset))
                      for offset, width in stored]
            self.row_epilogue(panel, self.rows_env(block, tile_row), values, stored)
        self.b.end_loop()

    def vector(self, width: int) -> DType:
        return self.dtype.vec(width) if width > 1 else self.dtype

    def products(self, panel: Variable, block: Variable, accs: list[list[int]], columns: list[tuple[int, int]],
                 fuse: bool) -> None:
        """The K steps of the micro-kernel: the packed columns of B, one broadcast of A per row.

        Prefetch hints sit where they can be due, not behind a guard evaluated at every step: the
        next batch's hints, when due on fixed steps of every tile, go before the loop
        (gemm_prefetch.py `tile_start_hints`); the steps past the last spread hint (gemm_prefetch.spread_steps) run in a
        loop of their own without it. The steps and their order are the same either way. GCC does not prove such
        guards false inside the loop (LLVM did): `q @ k.T` (K = 32) on CLANG went from 131 to 160-164
        GFLOP/s, and `p @ v` (K = 128) from 118-120 to 137-146 on CLANG, 146-152 on LLVM (Zen 3)."""
        batch = self.batch if self.prefetch else None
        every = step_hint_spacing(self, batch, panel, block)
        spread = spread_steps(self)
        for start, end in ((0, spread), (spread, self.kc)):
            if start < end:
                hinted_steps(self, batch, panel, block, every, start, end - start, "k",
                             self._spread_step(panel, block, accs, columns, fuse, start == 0 and spread > 0))

    def _spread_step(self, panel: Variable, block: Variable, accs: list[list[int]], columns: list[tuple[int, int]],
                     fuse: bool, spread: bool) -> Callable[[Node], None]:
        """Writes one K step, after its spread hint when `spread`."""
        def emit(step: Node) -> None:
            if spread:
                spread_hint(self, block, step)
            self.step(panel, block, accs, columns, fuse, step)
        return emit

    def step(self, panel: Variable, block: Variable, accs: list[list[int]], columns: list[tuple[int, int]],
             fuse: bool, step: Node) -> None:
        """One K step of the micro-kernel: every accumulator += (row's element of A) x (its columns of B)."""
        b = self.b
        packed = self.b_columns(panel, step, columns)
        for row, row_accs in enumerate(accs):
            if self.packed_a is not None:
                scalar = b.load(self.packed_a.idx, self.dtype, self.packed_row_index(block, step, row))
            else:
                scalar = self.ctx.load_leaf(self.shape.a, [self.rows_env(block, row, self.k0 + step)])
            for acc, value, (_, width) in zip(row_accs, packed, columns, strict=True):
                a = b.broadcast(scalar, width)
                total = b.fma(a, value, acc) if fuse else b.alu(BinaryOps.ADD, (acc, b.alu(BinaryOps.MUL, (a, value))))
                b.assign(acc, total)

    def b_columns(self, panel: Variable, step: Node, columns: list[tuple[int, int]]) -> list[int]:
        """B's values of one K step for the tile's vectors of `columns`: from packed B, or from B
        itself where it lies as packed B would (no packed B: the same values, the same order)."""
        if self.packed_b is None:
            return self.b_as_stored(panel * self.tiles.columns, self.k0 + step, columns)
        base = (self.local_panel(panel) * self.kc + step) * self.tiles.columns
        index = self.packed_b.idx
        return [self.b.load(index, self.vector(width), self.render(base + offset)) for offset, width in columns]

    def b_as_stored(self, first: Node, k: Node, columns: list[tuple[int, int]]) -> list[int]:
        """B's values at step `k` for the vectors of `columns` (offset, width) from column `first`,
        read from B itself."""
        column, reduce = self.shape.column, self.shape.reduce
        groups = [[{**self.env, column: first + offset + lane, reduce: k} for lane in range(width)]
                  for offset, width in columns]
        return [int(self.ctx.load_leaf(self.shape.b, group)) for group in groups]

    def epilogue(self, group: list[Env], acc: int) -> None:
        """Every STORE of the kernel for these lanes, the reduce's value being the accumulator."""
        memo: dict[int, int] = {}
        reduce_values = dict.fromkeys(self.ctx.info.reduce_ids, acc)
        for store in self.ctx.info.stores:
            self.ctx.store_value(store, group, self.ctx.lower_node(store.src[0], group, reduce_values, memo))
