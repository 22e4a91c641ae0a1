"""float32 GEMMs on x86 AMX tiles: each float32 split into three bfloat16 pieces, six tile products.

Where the renderer has matrix tiles (`RendererOptions.matrix_tiles`: AMX-TILE and AMX-BF16, the
process allowed to use them), a float32 matmul-shaped kernel (codegen/gemm.py `match`) whose K is a
multiple of 32, M (per batch) a multiple of 16 and N a multiple of 32 runs on the tiles instead of
the FMA micro-kernel. The loops are gemm_loops.py's (thread shares of units, column blocks of packed
B, groups of rows of packed A, micro-panels, blocks of rows); what differs is what is packed and the
micro-kernel:

- every value x of A and B is split into bfloat16 pieces x = h + m + l (h: x rounded to nearest
  bfloat16, m: x - h so rounded, l: x - h - m so rounded; the sum is x except in the last bit or
  two of l, about 2^-25 of |x|), written as bit patterns: `pieces`;
- packed A: per row, its three pieces' K values as pairs (two bfloat16 in a 32-bit word, the even
  step low), h then m then l; packed B: per 16 columns and piece, K/2 rows of 16 pairs (VNNI:
  `b[k // 2][n][k % 2]`), the layout the tile product reads;
- the micro-kernel is a tile of 16 rows x 32 columns in two float32 tiles; per 32 steps of K it
  loads A's three pieces (tiles 2-4) and, per 16 columns, B's three pieces (tiles 5-7), and adds
  the six products hh, mh, lh, hm, mm, hl (in that order) into the accumulator (`TileOps.DOT`);
- the tile's sums go to the tile scratch, and the epilogue (bias, activation, residual) runs from
  there row by row, as the FMA path's looped epilogue does;
- a K of `CHUNK_MIN_K` or more runs in chunks of KC steps where the output may hold the sums
  between chunks (`chunk_steps`), as gemm.py's FMA chunks do: the pieces are packed per chunk, and a
  tile's sums go through the tile scratch to and from the output.

Values (docs/semantics.md, "matmul on AMX tiles"): each product a*b is the six partial products
of the pieces, each exact in float32; the pieces' products left out (ml, lm, ll) are below 2^-23 of
|a*b| together. Sums are rounded to nearest float32 in an order fixed by the shape alone (K in
steps of 32; within a step, the hardware's order over the 16 pairs of each product; the six
products in the order above), never by the thread count. Subnormal pieces, products and sums read
and write as zero (the instruction's flush to zero). Measured against float64 on 4096 x 384 @ 384 x
1536 uniform(-1, 1): largest error 9.5e-8 of sum |a*b|, float32's serial FMA sum 1.2e-7.

Each block of 16 rows of A and each micro-panel of B gets a flag as it is packed: every value is
below `FMA_BOUNDS` in magnitude (NaN fails), so no partial product overflows. A tile whose two flags
hold runs on the tiles; any other tile (an infinity or NaN, or a huge value: the pieces of an
infinity are NaN) runs the unfused float32 loop over A and B as stored, `acc + round(a*b)` in
increasing k, the FMA path's own fallback, and gives IEEE results.
"""
from __future__ import annotations

from typing import Any

from fast.codegen.analyze import node_dtype
from fast.codegen.gemm import SHARED_BLOCKS, GemmShape, GemmTiles, transposes_a
from fast.codegen.gemm_loops import GemmEmitter
from fast.codegen.gemm_pack import transpose, transposes
from fast.codegen.ir import INT64, TILE_ROWS, IndexOps, LoopKind, TileOps
from fast.dtype import dtypes
from fast.ops import BinaryOps, BufferOps, LazyOp, UnaryOps
from fast.renderer.base import RendererOptions
from fast.shape.symbolic import Node, NumNode, Variable

#: K steps per tile product (32 bfloat16 a row), columns per accumulator tile, pieces per float32.
STEP, HALF, PIECES = 32, 16, 3
#: Columns of the register tile: two accumulator tiles side by side.
COLUMNS = 2 * HALF
#: Bytes of packed pieces of B per thread share (a stack array: runtime/cpu.py KERNEL_STACK_BYTES is
#: 8 MiB; with a group of A's rows, at most half the core's cache, a kernel takes about 5 MiB). Twice
#: gemm.py's SCRATCH_BYTES: the pieces take three times a float32's bytes, and a block that holds
#: all of N packs A once. MiniLM's 1536 -> 384 (3.4 MiB of pieces), in two blocks of columns, packs
#: A's 4096 x 1536 twice: 33-36 ms against 14-17 in one block (two threads, a loaded host, best of 30).
SCRATCH_BYTES = 4 << 20
#: K steps per chunk, the first that divides K (`chunk_steps`), and the shortest K cut into chunks.
CHUNK_STEPS = (512, 384, 256)
CHUNK_MIN_K = 1024
#: Tile numbers: accumulators, A's pieces, B's pieces.
ACCUMULATORS, A_TILES, B_TILES = (0, 1), (2, 3, 4), (5, 6, 7)
#: (A piece, B piece) of the six products, in the order they are added (module docstring).
PRODUCTS = ((0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (0, 2))
F32, U32 = dtypes.float32, dtypes.uint32


def applies(shape: GemmShape, options: RendererOptions) -> bool:
    """Whether this GEMM runs on the tiles (module docstring): float32, not batched, K a multiple of
    32, M a multiple of 16, N a multiple of 32, and one micro-panel of packed pieces (of a chunk of K,
    where K runs in chunks) within `SCRATCH_BYTES`. Batched products stay on the FMA micro-kernel:
    attention's (per batch and head 128 x 128 x 32 and 128 x 32 x 128) ran 2.2-2.6x slower on the
    tiles, their packing of pieces (every element of A used by 32-128 columns only) costing more
    than the products."""
    k, m, n = shape.sizes[shape.reduce], shape.size(shape.rows), shape.sizes[shape.column]
    return (options.matrix_tiles and not shape.batch and node_dtype(shape.a) == F32 and options.lanes(F32) == HALF
            and k % STEP == 0 and m % TILE_ROWS == 0 and n % COLUMNS == 0
            and panel_bytes(chunk_steps(shape) or k) <= SCRATCH_BYTES)


def panel_bytes(k: int) -> int:
    """Bytes of one packed micro-panel: 32 columns x 3 pieces x K bfloat16."""
    return COLUMNS * PIECES * k * 2


def chunk_steps(shape: GemmShape) -> int:
    """KC, or 0 for K whole: a K of `CHUNK_MIN_K` or more runs in chunks of `CHUNK_STEPS` (the first
    that divides K), the sums waiting in the output between chunks (gemm.py `chunk_steps`; only where
    the output may hold them, `GemmShape.in_output`). A chunk's pieces of A and B stay in the core's
    cache, and the column blocks of a wide N hold more columns, so A is packed fewer times."""
    k = shape.sizes[shape.reduce]
    if not shape.in_output or k < CHUNK_MIN_K:
        return 0
    return next((steps for steps in CHUNK_STEPS if k % steps == 0), 0)


def choose_tiles(shape: GemmShape, options: RendererOptions) -> GemmTiles:
    """16 x 32 tiles; KC (`chunk_steps`); groups of rows whose packed pieces fill about half the
    core's cache; column blocks within `SCRATCH_BYTES` (at least `SHARED_BLOCKS` when the rows fit one
    group, N > M and nothing is batched, so that threads share B's columns), as gemm.py does for the
    FMA tiles."""
    chunk = chunk_steps(shape)
    k, m, n = chunk or shape.sizes[shape.reduce], shape.size(shape.rows), shape.sizes[shape.column]
    row_bytes = PIECES * k * 2
    total_panels = n // COLUMNS
    blocks = -(-(total_panels * panel_bytes(k)) // SCRATCH_BYTES)
    group = max(1, (options.cache_bytes // 2) // (row_bytes * TILE_ROWS))
    if not shape.batch and m <= group * TILE_ROWS and n > m:
        blocks = max(blocks, min(SHARED_BLOCKS, total_panels))
    return GemmTiles(TILE_ROWS, 2, HALF, group * TILE_ROWS, -(-total_panels // blocks), chunk)


class TileEmitter(GemmEmitter):
    """gemm_loops.py's loops with the packing and the micro-kernel of the module docstring."""

    def __init__(self, ctx: Any, shape: GemmShape, tiles: GemmTiles) -> None:  # noqa: PLW0231 - own scratch
        self.ctx, self.shape, self.tiles, self.fused = ctx, shape, tiles, False
        self.b = ctx.builder
        self.dtype = F32
        self.m, self.n, self.k = shape.size(shape.rows), shape.sizes[shape.column], shape.sizes[shape.reduce]
        self.blocks = self.m // TILE_ROWS
        self.full_panels = self.all_panels = self.n // COLUMNS
        self.pack_a, self.checks_in_tile, self.prefetch = True, False, False
        self.arrays = []
        self.kc, self.k0, self.chunk = tiles.chunk or self.k, NumNode(0), None
        self.partial = LazyOp(BufferOps.LOAD, (), ctx.info.stores[0].arg) if tiles.chunk else None
        self.pairs = self.kc // 2  # 32-bit words of one piece of one row (or of 16 columns' VNNI row)
        self.pieces_b = self.scratch(U32, tiles.panels * 2 * PIECES * self.pairs * HALF)  # B's pieces, packed
        self.a_stride = piece_row_stride(self.pairs)
        self.packed_a = self.scratch(U32, self.a_stride * tiles.group_rows)
        self.panel_ok = self.scratch(dtypes.bool, tiles.panels)
        self.rows_ok = self.scratch(dtypes.bool, tiles.group_rows // TILE_ROWS)
        self.tile = self.scratch(F32, TILE_ROWS * COLUMNS)
        self.group_start = -1
        self.column_block = None
        self.env = {}
        self.batch = None

    def run(self) -> None:
        """Configure the tiles, run the loops, release the tiles."""
        self.b.tile(TileOps.CONFIG)
        super().run()
        self.b.tile(TileOps.RELEASE)

    # -- pieces
    def pieces(self, values: int) -> list[int]:
        """The bit patterns (uint32, low half zero) of the three bfloat16 pieces of a float32 vector."""
        b, lanes = self.b, self.b.dtype(values).count
        words = U32.vec(lanes)
        pieces = []
        for piece in range(PIECES):
            bits = b.alu(UnaryOps.BITCAST, (values,), words)
            odd = b.alu(BinaryOps.MOD, (b.alu(BinaryOps.DIV, (bits, b.const(1 << 16, words))), b.const(2, words)))
            rounded = b.alu(BinaryOps.ADD, (b.alu(BinaryOps.ADD, (bits, b.const(0x7FFF, words))), odd))
            top = b.alu(BinaryOps.SUB, (rounded, b.alu(BinaryOps.MOD, (rounded, b.const(1 << 16, words)))))
            pieces.append(top)
            if piece < PIECES - 1:
                values = b.alu(BinaryOps.SUB, (values, b.alu(UnaryOps.BITCAST, (top,), F32.vec(lanes))))
        return pieces

    def pair(self, low: int, high: int) -> int:
        """Two pieces' patterns as one word: `low`'s bfloat16 in the low half, `high`'s in the high."""
        words = self.b.dtype(low)
        return self.b.alu(BinaryOps.ADD, (self.b.alu(BinaryOps.DIV, (low, self.b.const(1 << 16, words))), high))

    # -- packed B
    def pack_b(self) -> None:
        """The current column block's micro-panels: per 16 columns, K/2 pairs of steps of each piece,
        from vectors along N (loaded along N, or in squares along K turned by `transpose`)."""
        panel = self.loop("pack", *self.panel_range(False), self.all_panels - 1)
        ok = self.b.define_acc(True, dtypes.bool.vec(HALF))
        for half in range(2):
            column = panel * COLUMNS + half * HALF
            if transposes(self.shape, self.tiles):
                square = self.loop("packsq", self.const(0), self.const(self.kc // HALF), self.kc // HALF - 1)
                steps = transpose(self.b, [self.b_vector(column + within, self.k0 + square * HALF, along_n=False)
                                           for within in range(HALF)])
                for pair in range(HALF // 2):
                    even, odd = steps[2 * pair], steps[2 * pair + 1]
                    self.store_b_pair(panel, half, square * (HALF // 2) + pair, even, odd, ok)
            else:
                pair_var = self.loop("packk", self.const(0), self.const(self.pairs), self.pairs - 1)
                even, odd = (self.b_vector(column, self.k0 + pair_var * 2 + parity, along_n=True) for parity in (0, 1))
                self.store_b_pair(panel, half, pair_var, even, odd, ok)
            self.b.end_loop()
        self.b.store(self.panel_ok.idx, self.render(self.local_panel(panel)), self.all_lanes(ok))  # type: ignore[union-attr]
        self.b.end_loop()

    def b_vector(self, column: Node, step: Node, along_n: bool) -> int:
        """16 values of B from (column, step): along N (16 columns at one step) or along K."""
        axis, fixed = (self.shape.column, self.shape.reduce) if along_n else (self.shape.reduce, self.shape.column)
        start, at = (column, step) if along_n else (step, column)
        return self.ctx.load_leaf(self.shape.b, [{**self.env, axis: start + lane, fixed: at} for lane in range(HALF)])

    def store_b_pair(self, panel: Variable, half: int, pair: Node, even: int, odd: int, ok: int) -> None:
        """Steps 2*pair and 2*pair + 1 of 16 columns (vectors along N) into the panel's VNNI rows."""
        self.and_bounded(ok, even)
        self.and_bounded(ok, odd)
        for piece, (low, high) in enumerate(zip(self.pieces(even), self.pieces(odd), strict=True)):
            at = self.render(self.b_index(panel, half, piece) + pair * HALF)
            self.b.store(self.pieces_b.idx, at, self.pair(low, high))

    def b_index(self, panel: Variable, half: int, piece: int) -> Node:
        """Where packed B's VNNI rows of this panel's half and piece start."""
        return ((self.local_panel(panel) * 2 + half) * PIECES + piece) * (self.pairs * HALF)

    # -- packed A
    def pack_rows(self, start: int, end: int, rows: int) -> None:
        """Blocks [start, end) of 16 rows: each row's pieces as pairs of steps, with the block's flag.
        Per 32 steps, a row's two vectors along K: loaded along K, or, for an A stored along M
        (`transposes_a`, `a.T @ b`), 16 vectors along M turned by `transpose` (a gather along K
        reads 16 cache lines per vector)."""
        block = self.loop("fa", start, end, self.blocks - 1)
        ok = self.b.define_acc(True, dtypes.bool.vec(HALF))
        origin = self.b.index(IndexOps.MUL, self.block_slot(block), self.const(TILE_ROWS * self.a_stride))
        if transposes_a(self.shape, HALF):
            step = self.loop("fak", self.const(0), self.const(self.kc // STEP), self.kc // STEP - 1)
            at_step = self.k0 + step * STEP
            column = [NumNode(row) for row in range(rows)]
            halves = [transpose(self.b, [self.a_vector(block, [(row, at_step + half * HALF + lane) for row in column])
                                         for lane in range(HALF)]) for half in range(2)]
            for row in range(rows):
                self.store_a_row(origin, NumNode(row), step, halves[0][row], halves[1][row], ok)
        else:
            row_var = self.loop("far", self.const(0), self.const(rows), rows - 1)
            step = self.loop("fak", self.const(0), self.const(self.kc // STEP), self.kc // STEP - 1)
            at_step = self.k0 + step * STEP
            first, second = (self.a_vector(block, [(row_var, at_step + half * HALF + lane) for lane in range(HALF)])
                             for half in range(2))
            self.store_a_row(origin, row_var, step, first, second, ok)
            self.b.end_loop()
        self.b.end_loop()
        self.b.store(self.rows_ok.idx, self.block_slot(block), self.all_lanes(ok))  # type: ignore[union-attr]
        self.b.end_loop()

    def a_vector(self, block: Variable, places: list[tuple[Node, Node]]) -> int:
        """The vector of A's values at (row of `block`, step) for each place (along K or along M)."""
        return self.ctx.load_leaf(self.shape.a, [self.rows_env(block, row, step) for row, step in places])

    def store_a_row(self, origin: int, row: Node, step: Node, first: int, second: int, ok: int) -> None:
        """One row's 32 steps (two vectors along K) as three pieces of 16 pairs into packed A."""
        evens, odds = tuple(range(0, 2 * HALF, 2)), tuple(range(1, 2 * HALF, 2))
        self.and_bounded(ok, first)
        self.and_bounded(ok, second)
        low_pieces, high_pieces = self.pieces(first), self.pieces(second)
        for piece in range(PIECES):
            low, high = (self.b.shuffle(low_pieces[piece], high_pieces[piece], lanes) for lanes in (evens, odds))
            at = self.b.index(IndexOps.ADD, origin, self.render(row * self.a_stride + piece * self.pairs + step * HALF))
            self.b.store(self.packed_a.idx, at, self.pair(low, high))  # type: ignore[union-attr]

    # -- the micro-kernel
    def micro_kernel(self, panel: Variable, block: Variable, rows: int, columns: list[tuple[int, int]],
                     stored: list[tuple[int, int]]) -> None:
        """The tile's sums on the tiles (both flags hold) or by the unfused loop, into the tile scratch;
        then its epilogue. In chunks of K the sums start from what the chunks before left in the
        output (zero at the first), and go back there before the last chunk (exactly: float32)."""
        b = self.b
        if self.partial is not None:
            self.sums_from_output(panel, block, rows, stored)
        flags = (b.load(self.panel_ok.idx, dtypes.bool, self.render(self.local_panel(panel))),  # type: ignore[union-attr]
                 b.load(self.rows_ok.idx, dtypes.bool, self.block_slot(block)))  # type: ignore[union-attr]
        on_tiles = b.alu(UnaryOps.CAST, (b.alu(BinaryOps.MUL, flags),), INT64)
        b.loop(self.const(0), on_tiles, LoopKind.REDUCE)  # once, or not at all
        self.tile_products(panel, block)
        b.end_loop()
        b.loop(on_tiles, self.const(1), LoopKind.REDUCE)
        self.unfused_products(panel, block, rows, stored)
        b.end_loop()
        if self.partial is None:
            self.epilogue_from_tile(panel, block, rows, stored)
            return
        last = self.chunk_past(self.k // self.kc - 2)
        b.loop(last, self.const(1), LoopKind.REDUCE)  # once before the last chunk, else not at all
        self.tile_rows(panel, block, rows, stored, to_output=True)
        b.end_loop()
        b.loop(self.const(0), last, LoopKind.REDUCE)  # once at the last chunk
        self.epilogue_from_tile(panel, block, rows, stored)
        b.end_loop()

    def sums_from_output(self, panel: Variable, block: Variable, rows: int, stored: list[tuple[int, int]]) -> None:
        """The tile scratch := the sums the output holds (after the first chunk) or zeros (at it)."""
        b, later = self.b, self.chunk_past(0)
        b.loop(self.const(0), later, LoopKind.REDUCE)
        self.tile_rows(panel, block, rows, stored, to_output=False)
        b.end_loop()
        b.loop(later, self.const(1), LoopKind.REDUCE)
        for row in range(rows):
            for offset, width in stored:
                b.store(self.tile.idx, self.const(row * COLUMNS + offset), b.const(0.0, self.vector(width)))  # type: ignore[union-attr]
        b.end_loop()

    def tile_rows(self, panel: Variable, block: Variable, rows: int, stored: list[tuple[int, int]],
                  to_output: bool) -> None:
        """Copy the tile's sums between the tile scratch and the output (the kernel's one STORE), in a
        loop over the rows."""
        assert self.partial is not None and self.tile is not None  # noqa: S101 - chunked kernels only
        row = self.loop("tr", self.const(0), self.const(rows), rows - 1)
        env = self.rows_env(block, row)
        for offset, width in stored:
            at = self.render(row * COLUMNS + offset)
            group = [{**env, self.shape.column: panel * COLUMNS + offset + lane} for lane in range(width)]
            if to_output:
                self.ctx.store_value(self.ctx.info.stores[0], group, self.b.load(self.tile.idx, self.vector(width), at))
            else:
                self.b.store(self.tile.idx, at, self.ctx.load_leaf(self.partial, group))
        self.b.end_loop()

    def tile_products(self, panel: Variable, block: Variable) -> None:
        """The six products of every 32 steps (module docstring) into two accumulator tiles, stored
        to the tile scratch."""
        b = self.b
        for half, accumulator in enumerate(ACCUMULATORS):
            if self.partial is None:
                b.tile(TileOps.ZERO, accumulator)
            else:  # the sums so far (sums_from_output)
                b.tile(TileOps.LOAD, accumulator, self.tile.idx, COLUMNS, index=self.const(half * HALF))  # type: ignore[union-attr]
        step = self.loop("tk", self.const(0), self.const(self.kc // STEP), self.kc // STEP - 1, LoopKind.REDUCE)
        origin = b.index(IndexOps.MUL, self.block_slot(block), self.const(TILE_ROWS * self.a_stride))
        for piece, tile in enumerate(A_TILES):
            at = b.index(IndexOps.ADD, origin, self.render(piece * self.pairs + step * HALF))
            b.tile(TileOps.LOAD, tile, self.packed_a.idx, self.a_stride, index=at)  # type: ignore[union-attr]
        for half, accumulator in enumerate(ACCUMULATORS):
            loaded: set[int] = set()
            for a_piece, b_piece in PRODUCTS:
                if b_piece not in loaded:
                    at = self.render(self.b_index(panel, half, b_piece) + step * (STEP // 2) * HALF)
                    b.tile(TileOps.LOAD, B_TILES[b_piece], self.pieces_b.idx, HALF, index=at)
                    loaded.add(b_piece)
                b.tile(TileOps.DOT, accumulator, A_TILES[a_piece], B_TILES[b_piece])
        b.end_loop()
        for half, accumulator in enumerate(ACCUMULATORS):
            b.tile(TileOps.STORE, accumulator, self.tile.idx, COLUMNS, index=self.const(half * HALF))  # type: ignore[union-attr]

    def unfused_products(self, panel: Variable, block: Variable, rows: int, stored: list[tuple[int, int]]) -> None:
        """The tile's sums from A and B as stored, `acc + round(a*b)` in increasing k, into the tile scratch."""
        b = self.b
        accs = [[b.define_acc(0.0, self.vector(width)) for _, width in stored] for _ in range(rows)]
        if self.partial is not None:  # the sums so far (sums_from_output)
            for row, row_accs in enumerate(accs):
                for acc, (offset, width) in zip(row_accs, stored, strict=True):
                    b.assign(acc, b.load(self.tile.idx, self.vector(width), self.const(row * COLUMNS + offset)))  # type: ignore[union-attr]
        step = self.loop("uk", self.const(0), self.const(self.kc), self.kc - 1, LoopKind.REDUCE)
        k = self.k0 + step
        columns = self.b_as_stored(panel * COLUMNS, k, stored)
        for row, row_accs in enumerate(accs):
            scalar = self.ctx.load_leaf(self.shape.a, [self.rows_env(block, row, k)])
            for acc, value, (_, width) in zip(row_accs, columns, stored, strict=True):
                product = b.alu(BinaryOps.MUL, (b.broadcast(scalar, width), value))
                b.assign(acc, b.alu(BinaryOps.ADD, (acc, product)))
        b.end_loop()
        for row, row_accs in enumerate(accs):
            for acc, (offset, _) in zip(row_accs, stored, strict=True):
                b.store(self.tile.idx, self.const(row * COLUMNS + offset), acc)  # type: ignore[union-attr]


def piece_row_stride(pairs: int) -> int:
    """Words between two rows of packed A: three pieces of `pairs` words, plus a cache line when that
    is an even count of lines (rows a power of two lines apart share cache sets; gemm.py
    `packed_row_stride`)."""
    words = PIECES * pairs
    return words + HALF if (words // HALF) % 2 == 0 else words
