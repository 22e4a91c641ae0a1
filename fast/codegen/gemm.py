"""Matmul-shaped kernels lowered like BLIS: packed panels of B (and of A), a register-tiled
micro-kernel, loops that block for the caches, and the kernel's elementwise work (bias, activation,
residual, scale) applied to each tile of results as it leaves the registers. This module says which
kernels are matmul-shaped and picks their tiles; codegen/gemm_loops.py writes the loops.

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
       for pc over chunks of KC steps of K:             (one chunk of all K, unless `chunk_steps`)
        pack B[batch][pc chunk, jc block] into scratch, NR columns per micro-panel, KC x NR each,
          zero past N (B stored along K: in squares transposed in registers, codegen/gemm_pack.py)
        for ic over groups of MC rows of the share:        (MC x KC of A fits the core's cache)
          pack A's rows of the group, KC steps (codegen/gemm_pack_a.py), with their bound flags
          for jr over the micro-panels of the block:
            for ir over the MR-row blocks of the group:   micro-kernel: KC steps of
                                                           MR broadcasts of A x NR columns of B (FMA),
                                                           from the sums the output holds (pc > 0)
              before the last chunk: the sums to the output; at the last: the epilogue, the AST
                        above the reduce, per row and vector of columns, then the STOREs
                        (unrolled over the MR rows when small; else from a tile in scratch, in a
                         loop over its rows: `epilogue_size`, `stores_columns_contiguously`)

Edges are static code: the last block of rows of each batch has `M % MR` rows and the last
micro-panel `N % NR` columns (vectors of `lanes`, `lanes/2`, `lanes/4`, then single columns), so
nothing is computed or stored past M or N and no load reads past a buffer. Packed columns past N
hold zeros and are never stored.

Values (docs/semantics.md): every output adds its K products in increasing k, one accumulator (held
in the output between chunks, in its own dtype: exact), with `FMA` when the renderer fuses and the
tile's inputs in the chunk are within the bound (gemm_loops.py), else `acc + round(a*b)`. The order
depends on nothing but k, so results are identical for every thread count, tile and block size.
Threads share units, and each unit is computed whole by one share.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol

from fast import config
from fast.codegen.analyze import KernelInfo, node_dtype, reads_own_output
from fast.codegen.builder import IRBuilder
from fast.codegen.indexing import IndexRenderer
from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, BufferOps, LazyOp, ReduceOps
from fast.renderer.base import RendererOptions
from fast.shape.symbolic import Node, Variable

#: Bytes of packed B per thread share (a stack array of the kernel: codegen/ir.py `scratch`).
SCRATCH_BYTES = 2 << 20
#: Column blocks of B at least, when all of a GEMM's rows fit in one group and N > M (`choose_tiles`):
#: threads share units (batch, column block, block of rows) in that order, so with one block every
#: thread packed all of B for its few rows; with four, each packs its own blocks (and all of A).
#: Per thread that packs A + B / threads instead of B + A / threads: less only while A (M x K) is
#: smaller than B (K x N). `x.T @ dy`, K = 4096 tokens, 384 x 160 (A the larger, in chunks of K):
#: 0.65-0.76x numpy sharing B's three blocks of 64, 64 and 32 columns, 0.86-0.96x splitting rows.
#: A linear layer on 32-160 tokens (`x @ W.T`, 384 x 384, two threads, a chain of 24 under
#: `fast.jit`): 133, 183, 272 and 347 us at 32, 64, 128 and 160 tokens (numpy 103-408) -> 78, 138,
#: 239 and 295 us. Products that already had two blocks (MiniLM's 384 <-> 1536 on 32 tokens) ran
#: the same with two or four.
SHARED_BLOCKS = 4
#: The fewest rows per batch for which packing B pays (fewer: the plain register tiles of opt.py).
MIN_ROWS = 32
#: At most this many micro-panels of B: each block of A is its own group (`choose_tiles`).
FEW_PANELS = 2
#: A is packed only when K is at least `PACK_A_MIN_K` and B has at least `PACK_A_MIN_PANELS`
#: micro-panels: shorter rows (attention's heads of 32) are too short to compete for cache sets, and
#: with few panels each packed row is read too few times to repay its copy (attention's `p @ v`, N =
#: 32: packing A cost as much as the products; measured 27 -> 45+ GFLOP/s per core without it).
#: An A stored along M (`transposes_a`) is packed whenever K holds a square of lanes (`squares_a`): its bound
#: flags (and the checked tiles' chunks, gemm_checked.py) would otherwise read it along K, a gather
#: of `lanes` cache lines per vector, where the squares copy it with vector loads (`x.T @ dy`, K =
#: 4096 tokens, 384 x 160: 0.21x numpy before).
PACK_A_MIN_K = 64
PACK_A_MIN_PANELS = 4


def packs_a(shape: GemmShape, tiles: GemmTiles) -> bool:
    """Whether a GEMM packs A (the thresholds above)."""
    k, panels = tiles.chunk or shape.sizes[shape.reduce], -(-shape.sizes[shape.column] // tiles.columns)
    if squares_a(shape, tiles.rows, tiles.lanes, k):
        return True
    return k >= PACK_A_MIN_K and panels >= PACK_A_MIN_PANELS

#: Epilogues of at most this many AST nodes (a bias add, a scale and a bias, a bias and a residual)
#: that store whole vectors are unrolled over the tile's rows; others run as a loop over the rows
#: (`GemmEmitter.looped_epilogue`). Attention's `q @ k.T * scale + mask` (K = 32: the epilogue is a
#: large part of the work) ran about 5% slower looped on CLANG.
UNROLLED_EPILOGUE_MAX = 4

#: The fewest accumulators a register tile keeps when its rows are cut down to divide M, once M
#: holds at least `LONG_M_BLOCKS` blocks of the full tile: 5 in 6 of the register budget (10 of 12
#: with 16 vector registers, 20 of 24 with 32). Two FMA pipes of 4-5 cycles' latency need about ten
#: independent chains, and with that many blocks the edge block of M % MR rows costs little. With 16
#: registers (AVX2) the tile is 6 x 2 vectors; cutting it to 4 x 2 so that 4 divides M (512, 1024,
#: MiniLM's 4096) left 8 chains, and the 6-row tile with its edge ran faster on a Zen 3 EPYC (kernels
#: alone, alternating, best of 15: a @ b.T 512 1.60 -> 1.52 ms, 1024 14.3 -> 12.8 ms, the MiniLM
#: linears 26.4-26.7 -> 26.1-26.2 ms and 6.65 -> 6.47 ms; a @ b 512 2.25 -> 2.06 ms). With 32
#: (AVX-512) the 6 x 4 tile with its edge beat the 4 x 4 that divides 4096 (Sapphire Rapids, kernel
#: alone, best of 40: 4096 x 1536 @ 1536 x 384 11.3 against 11.8 ms). Attention's batched products
#: (M = 128 per batch, 21 blocks of 6 and an edge of 2) ran 7-10% slower with 6 rows than with 4 on
#: the EPYC, so a short M keeps the divisor.
LONG_M_FRACTION = (5, 6)
LONG_M_BLOCKS = 32
#: Vectors of columns in a register tile at most: 2 with 16 registers; with 32, `WIDE_VECTORS` once
#: M is long (`LONG_M_BLOCKS` tiles of the wide tile's rows). More columns per broadcast of A: on a
#: Sapphire Rapids (AVX-512, kernels alone, best of 40) 6 x 4 against the 8 x 2 tile took a @ b.T 512
#: 0.68 against 0.74 ms, MiniLM's 4096 x 384 @ 384 x 384 2.75 against 2.87 and 384 -> 1536 10.7
#: against 10.8; attention's short M per batch (128) ran the same or slower wide (p @ v inside
#: the forward 10.7 against 8.3 ms for six), so a short M keeps 2.
WIDE_VECTORS = 4
#: Rows of the tile per step of the looped epilogue (the largest divisor of the tile's rows up to this).
EPILOGUE_ROWS_PER_STEP = 2

Env = dict[int, Node]


class LoweringContext(Protocol):
    """What the GEMM lowering uses of the general lowering (fast/codegen/lower.py `_Lowering`)."""

    builder: IRBuilder
    indexes: IndexRenderer
    var_refs: dict[Variable, int]
    info: KernelInfo
    parallel: bool
    prefetch: bool  # the renderer renders PREFETCH hints (and optimizations are on)
    lanes_by_halves: bool  # RendererOptions.lanes_by_halves
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
    in_output: bool = False  # partial sums may wait in the output between chunks of K (`chunk_steps`)

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
    chunk: int = 0  # KC: steps of K packed and run at a time (`chunk_steps`; 0: K whole)

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
    best = min(found, key=lambda shape: store_strides[shape.column] != 1, default=None)
    return None if best is None else dataclasses.replace(best, in_output=holds_partial_sums(info, dtype))


def holds_partial_sums(info: KernelInfo, dtype: DType) -> bool:
    """Whether the kernel's output may hold a GEMM's partial sums between chunks of K: one STORE, of
    the accumulator's dtype, to a buffer the kernel never reads (an in-place `out += a @ b` reads it)."""
    return len(info.stores) == 1 and info.stores[0].arg.dtype == dtype and not reads_own_output(info.stores[0])


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
    """MR x NR (`register_tile`); KC (`chunk_steps`); MC so that MC x KC of A fills about half the
    core's cache (whole squares of rows, rounded down, when A is packed in squares: `squares_a`); the
    packed block of B within `SCRATCH_BYTES`, and at least `SHARED_BLOCKS` blocks when the rows fit
    in one group and N > M (not batched). None when one micro-panel of B does not fit."""
    dtype = node_dtype(shape.a)
    lanes = options.lanes(dtype)
    if lanes < 4:
        return None
    m, n = shape.size(shape.rows), shape.sizes[shape.column]
    rows, vectors = register_tile(m, n, lanes, options)
    total_panels = -(-n // (vectors * lanes))
    chunk = chunk_steps(shape, lanes, total_panels)
    k = chunk or shape.sizes[shape.reduce]
    panel_bytes = k * vectors * lanes * dtype.itemsize
    if panel_bytes > SCRATCH_BYTES:
        return None
    blocks = -(-(total_panels * panel_bytes) // SCRATCH_BYTES)
    # one block per group when few panels reuse it (a narrow B, as a linear layer on a few tokens):
    # the block's bound pass then reads rows the previous block's tile prefetched
    squares = squares_a(shape, rows, lanes, k)  # A packed in squares of rows (gemm_pack_a.py)
    group = 1 if total_panels <= FEW_PANELS and not squares else \
        max(1, (options.cache_bytes // 2) // (k * dtype.itemsize * rows))
    if squares:  # groups of whole squares, rounded down: only a share's last rows are left over
        unit = lanes // math.gcd(lanes, rows)
        group = max(unit, group // unit * unit)
    if not shape.batch and m <= group * rows and n > m:  # one group of rows: threads share B's columns
        blocks = max(blocks, min(SHARED_BLOCKS, total_panels))
    panels = -(-total_panels // blocks)
    return GemmTiles(rows, vectors, lanes, group * rows, panels, chunk)


def register_tile(m: int, n: int, lanes: int, options: RendererOptions) -> tuple[int, int]:
    """(MR, vectors) from the vector registers (about three quarters hold accumulators: 6 x 2
    vectors with 16 registers; with 32, 12 x 2, or 6 x 4 when M is long), fewer vectors when N is
    narrow, and rows that divide M when a nearby count does (keeping `LONG_M_FRACTION` of the budget
    when M is long), up to `WIDE_VECTORS` vectors with 32 registers and a long M."""
    budget = 24 if options.vector_registers >= 32 else 12
    widest = WIDE_VECTORS if options.vector_registers >= 32 and m >= LONG_M_BLOCKS * (budget // WIDE_VECTORS) else 2
    vectors = max(1, min(widest, -(-n // lanes)))
    most = min(budget // vectors, 16)
    fewest = (most + 1) // 2 + 1
    if m >= LONG_M_BLOCKS * most:
        share, whole = LONG_M_FRACTION
        fewest = max(fewest, -(-(budget * share // whole) // vectors))
    return next((r for r in range(most, fewest - 1, -1) if m % r == 0), most), vectors


#: K steps packed and run at a time, the first that divides K (`chunk_steps`), and the shortest K
#: that is cut into chunks.
CHUNK_STEPS = (512, 384, 256)
CHUNK_MIN_K = 1024


def chunk_steps(shape: GemmShape, lanes: int, panels: int) -> int:
    """KC, or 0 for K whole. Packed B holds KC steps of its micro-panels, packed A KC steps of its
    rows, and a tile's sums wait in the output between chunks (BLIS's KC loop): with K whole, a long
    K (4096) fits two micro-panels of 64 columns in `SCRATCH_BYTES`, and A is packed again for every
    column block. Only where the output may hold the sums (`holds_partial_sums`), A is packed, N is
    whole vectors (no padded edge lanes to keep), and not batched."""
    k = shape.sizes[shape.reduce]
    if not shape.in_output or shape.batch or k < CHUNK_MIN_K or shape.sizes[shape.column] % lanes:
        return 0
    if panels < PACK_A_MIN_PANELS and not transposes_a(shape, lanes):
        return 0
    return next((steps for steps in CHUNK_STEPS if k % steps == 0), 0)


def transposes_a(shape: GemmShape, lanes: int) -> bool:
    """Whether A's full blocks are packed in squares (codegen/gemm_pack_a.py): A walks its last row
    axis with stride 1 and K with another stride, and `lanes` is a power of two."""
    strides = shape.a.arg.st.real_strides()
    return strides[shape.reduce] != 1 and strides[shape.rows[-1]] == 1 and lanes & (lanes - 1) == 0


def squares_a(shape: GemmShape, rows: int, lanes: int, k: int) -> bool:
    """Whether A is packed, in squares, whatever B's width (`packs_a`): stored along M, `k` (K, or
    KC) at least one square, and the fewest rows that are whole squares and whole blocks (lcm(rows,
    lanes)) within `SCRATCH_BYTES` (packed A is a stack array: a longer K falls back to the general rule)."""
    least = rows * lanes // math.gcd(rows, lanes) * k * node_dtype(shape.a).itemsize
    return transposes_a(shape, lanes) and k >= lanes and least <= SCRATCH_BYTES


def column_vectors(n: int, tiles: GemmTiles, edge: bool) -> list[tuple[int, int]]:
    """(first column within the micro-panel, width) of each stored piece of a row: `vectors` vectors of
    `lanes`; on the edge panel only the N % NR columns that exist, in vectors of lanes, lanes/2,
    lanes/4, then single columns."""
    if not edge:
        return [(vector * tiles.lanes, tiles.lanes) for vector in range(tiles.vectors)]
    remaining, offset, columns = n % tiles.columns, 0, []
    for width in (tiles.lanes, tiles.lanes // 2, tiles.lanes // 4, 1):
        while remaining >= width and (width >= 4 or width == 1):
            columns.append((offset, width))
            offset, remaining = offset + width, remaining - width
    return columns


def padded_vectors(n: int, tiles: GemmTiles, edge: bool) -> list[tuple[int, int]]:
    """The accumulators of a row: on the edge panel, whole vectors of `lanes` over the N % NR columns
    that exist (packed B holds zeros past N; `column_vectors` says which columns are stored). In
    vectors of lanes, lanes/2, lanes/4 and single columns, 15 columns made five accumulators a row,
    30 for a tile of 6 rows in 16 registers: a linear layer on 15 tokens took 160 us where 16 took
    46 (`x @ W.T`, 384 x 384, two threads)."""
    if not edge:
        return column_vectors(n, tiles, False)
    return [(vector * tiles.lanes, tiles.lanes) for vector in range(-(-(n % tiles.columns) // tiles.lanes))]


def epilogue_size(info: KernelInfo) -> int:
    """The distinct AST nodes between the kernel's STOREs and its reduce (the work of the epilogue)."""
    seen: set[int] = set()
    pending = [store.src[0] for store in info.stores]
    while pending:
        node = pending.pop()
        if id(node) in seen or id(node) in info.reduce_ids:
            continue
        seen.add(id(node))
        pending.extend(node.src)
    return len(seen)


def stores_columns_contiguously(info: KernelInfo, shape: GemmShape) -> bool:
    """Whether every STORE walks the N axis with stride 1 (else each vector of columns is stored as
    `lanes` scalars: a large epilogue in code even when its AST is small)."""
    return all(store.arg.st.real_strides()[shape.column] == 1 for store in info.stores)


def packed_row_stride(k: int, itemsize: int, lanes: int) -> int:
    """Elements between two rows of packed A: K rounded up to whole vectors and to whole cache lines,
    plus a line when that count of lines is even, so that the MR rows of a block, read at the same
    step k, fall in different cache sets. With L lines per row, rows r and r + 64 / gcd(L, 64) share a
    set of a 64-set cache: an odd L keeps 64 rows apart, while L = 64 (K = 1024 float32) would put every
    row in one set."""
    per_line = max(1, 64 // itemsize)
    unit = max(lanes, per_line)
    stride = -(-k // unit) * unit
    lines = stride // per_line
    return stride + per_line if lines % 2 == 0 else stride
