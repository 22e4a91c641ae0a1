"""The micro-kernel of a GEMM whose A is read in place and whose B is one micro-panel, or two without batch
axes (`applies`; codegen/gemm_loops.py writes the rest): a linear layer on a few tokens, where A is the
layer's W (its rows are the GEMM's rows) and B the tokens (N <= 2 NR columns: fewer than 32 tokens with
AVX2).

Such a kernel reads each row of A once, from memory. The general path first passes over a block's
rows to AND their bound flag (gemm_loops.py's module docstring), then runs the tile: the pass waits for
the rows to arrive with nothing to overlap it (16 x 384 @ 384 x 384, one core: 68 us with W in cache
and 76 from memory; 56 and 61 without the pass). Here the tile runs fused at once and checks its rows
while it computes (`checked_products`): the K steps go in chunks of one cache line of A's row
(`chunk_steps`); each chunk hints the same lines of the next block and adds the squares of its MR
lines of A, lane by lane, into the tile's sums of squares (one FMA per vector, spread among the steps
where the step loop allows: `lead_check`); the steps of K's tail check their values one by one. When
a lane's sum reaches the largest finite value (a value at or past the bound, or NaN:
`tile_within_bound`), a tail value fails, or B's micro-panel flag is false, the tile runs again
unfused from zero (`micro_kernel_checked`). So the FMA choice is made per tile from its own values,
the same for every thread count, and a fused tile has every value of A below the bound. Tiles whose
values are all below the bound but whose squares add past the largest value (values from about
2^60 in float32) run unfused where the pass would fuse them: both are the specified sum within its
tolerance (docs/semantics.md).

`p @ v` of attention (batched, d = 32: one micro-panel) takes this path too. Its kernel alone on a
Sapphire Rapids (32 x 12 batches, p in the cache, alternated in one process; session 21), two
threads / one: 1.10-1.11 / 2.14 ms with a compare per vector of A (a multiply, a compare and an AND
on the FMA ports, which also carry the FMAs), 1.06-1.07 / 2.05 with a sum of squares per vector
before each chunk's steps, 1.05 / 2.02 with them spread among the steps, 0.99 / 1.90 with no check
at all (not a valid kernel: the bound). With the bound flags' lanes folded in halves as well
(gemm_loops.py `all_lanes`), alternating one thread and two: 1.14-1.15 / 2.12-2.16 ms before this
session against 1.07-1.08 / 1.98-2.02 (CLANG; LLVM 1.11 / 2.10 against 1.09 / 2.06).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fast.codegen.gemm import FEW_PANELS
from fast.codegen.gemm_prefetch import hinted_steps, next_batch_hints, step_group, step_hint_spacing
from fast.codegen.ir import INT64, LoopKind
from fast.dtype import dtypes
from fast.ops import BinaryOps, UnaryOps
from fast.shape.symbolic import Node, NumNode, Variable, sym_and

#: The largest finite value of each dtype FMA fuses (`and_square_bounded`).
LARGEST = {dtypes.float32: float(np.finfo(np.float32).max), dtypes.float64: float(np.finfo(np.float64).max)}


def applies(fused: bool, packs_a: bool, panels: int, batched: bool) -> bool:
    """Whether a GEMM checks A's rows inside its tiles: fused, A read in place, one micro-panel, or
    two without batch axes (each block of rows is then its own group, and each of its two tiles checks
    the rows itself: a linear on 17-31 tokens, 64-73 -> 57-70 us, where the second tile's checks cost
    less than the pass). Attention's `p @ v` (d = 32: one micro-panel of AVX-512's 2 vectors, two of
    AVX2's, batched) checks in its tiles with AVX-512 and keeps the pass with AVX2."""
    return fused and not packs_a and (panels == 1 or panels <= FEW_PANELS and not batched)


def chunk_steps(emitter: Any) -> int:
    """Steps per chunk: one 64-byte line of a row of A (at least one vector of `lanes`)."""
    return max(emitter.tiles.lanes, 64 // emitter.dtype.itemsize)


def micro_kernel_checked(emitter: Any, panel: Variable, block: Variable, accs: list[list[int]],
                         columns: list[tuple[int, int]]) -> None:
    """The tile's accumulators: fused when B's panel flag holds, checking A's rows on the way; run
    again unfused, from zero, when the panel or a row fails the bound (`tile_within_bound`)."""
    e, b = emitter, emitter.b
    panel_flag = b.load(e.panel_ok.idx, dtypes.bool, e.render(e.local_panel(panel)))
    squares = b.define_acc(0.0, e.dtype.vec(e.tiles.lanes))
    scalar_ok = b.define_acc(True, dtypes.bool)
    b.loop(e.const(0), b.alu(UnaryOps.CAST, (panel_flag,), INT64), LoopKind.REDUCE)  # once, or not at all
    checked_products(e, panel, block, accs, columns, (squares, scalar_ok))
    b.end_loop()
    good = b.alu(BinaryOps.MUL, (panel_flag, b.alu(BinaryOps.MUL, (tile_within_bound(e, squares), scalar_ok))))
    b.loop(b.alu(UnaryOps.CAST, (good,), INT64), e.const(1), LoopKind.REDUCE)  # once, when the check failed
    for row_accs in accs:
        for acc in row_accs:
            b.assign(acc, b.const(0.0, b.dtype(acc)))
    e.products(panel, block, accs, columns, False)
    b.end_loop()


def tile_within_bound(emitter: Any, squares: int) -> int:
    """Whether every lane of the tile's sums of squares (`add_squares`) is below the dtype's largest
    finite value. A value at or past FMA_BOUNDS squares past it (to infinity, which stays infinite in
    a sum of non-negative terms), and a NaN makes its lane NaN: either fails, so a tile that passes
    has every value of A below the bound. The converse need not hold (sixty-four squares of values
    near 2^61 add past the largest float32): such a tile runs unfused, as a tile with a value past
    the bound does. The choice depends on the tile's values alone."""
    b = emitter.b
    dtype = b.dtype(squares)
    return emitter.all_lanes(b.alu(BinaryOps.CMPLT, (squares, b.const(LARGEST[dtype.scalar()], dtype))))


def add_squares(emitter: Any, squares: int, value: int) -> None:
    """squares += value * value, lane by lane, with one rounding (FMA): one vector op per vector of A,
    where the compare of `and_square_bounded` takes a multiply, a compare and an AND."""
    emitter.b.assign(squares, emitter.b.fma(value, value, squares))


def checked_products(emitter: Any, panel: Variable, block: Variable, accs: list[list[int]],
                     columns: list[tuple[int, int]], flags: tuple[int, int]) -> None:
    """The K steps, fused, in chunks (module docstring), then the K % chunk last steps one by one,
    each checking its MR values of A into the scalar flag. A chunk's vectors of A go into the sums
    of squares one per trip of its step loop where the trips are as many (`lead_check`: attention's
    `p @ v`, eight rows of one vector and eight trips of two steps), else all before its steps."""
    e, b = emitter, emitter.b
    chunk = chunk_steps(e)
    full = e.k // chunk
    batch = e.batch if e.prefetch else None
    every = step_hint_spacing(e, batch, panel, block)
    if full:
        first = e.loop("kc", e.const(0), e.const(full), full - 1, LoopKind.REDUCE)
        hint_next_block(e, block, first * chunk)
        vectors = check_vectors(e, len(accs))
        lead = None
        if chunk // step_group(e, batch, every, first * chunk, chunk) == len(vectors):
            lead = lead_check(e, block, first * chunk, flags[0])
        else:
            for row, part in vectors:
                add_squares(e, flags[0], chunk_vector(e, block, row, first * chunk + part * e.tiles.lanes))
        hinted_steps(e, batch, panel, block, every, first * chunk, chunk, "kk",
                     lambda step: e.step(panel, block, accs, columns, True, step), lead)
        b.end_loop()
    if e.k % chunk:
        step = e.loop("kt", e.const(full * chunk), e.const(e.k), e.k - 1, LoopKind.REDUCE)
        for row in range(len(accs)):
            and_square_bounded(e, flags[1], e.ctx.load_leaf(e.shape.a, [e.rows_env(block, row, step)]))
        _step(e, panel, block, accs, columns, step, batch, every)
        b.end_loop()


def check_vectors(emitter: Any, rows: int) -> list[tuple[int, int]]:
    """(row, part) of each vector of a chunk of A's tile rows: `lanes` values of the row from the
    chunk's step part * lanes."""
    return [(row, part) for row in range(rows) for part in range(chunk_steps(emitter) // emitter.tiles.lanes)]


def chunk_vector(emitter: Any, block: Variable, row: Node | int, start: Node) -> int:
    """The vector of A's tile row `row` at K steps start .. start + lanes - 1."""
    group = [emitter.rows_env(block, row, start + lane) for lane in range(emitter.tiles.lanes)]
    return emitter.ctx.load_leaf(emitter.shape.a, group)


def lead_check(emitter: Any, block: Variable, first: Node, squares: int) -> Callable[[Variable], None]:
    """`hinted_steps`'s lead: trip t of the chunk's step loop adds vector t of the chunk
    (`check_vectors`' order: row t // parts, part t % parts) to the sums of squares, so the check's
    loads and FMAs spread among the steps rather than wait as a burst before them (module docstring:
    `p @ v` alone, two threads, 1.06-1.07 ms with the sums before the steps, 1.05 spread)."""
    parts = chunk_steps(emitter) // emitter.tiles.lanes

    def lead(trip: Variable) -> None:
        add_squares(emitter, squares, chunk_vector(emitter, block, trip // parts,
                                                   first + (trip % parts) * emitter.tiles.lanes))
    return lead


def _step(e: Any, panel: Variable, block: Variable, accs: list[list[int]], columns: list[tuple[int, int]],
          step: Any, batch: Any, every: int) -> None:
    if batch is not None and every:
        next_batch_hints(e, batch, panel, block, step)
    e.step(panel, block, accs, columns, True, step)


def and_square_bounded(emitter: Any, ok: int, value: int) -> None:
    """ok &= (value * value < the dtype's largest finite value), lane by lane: false for NaN, for
    infinities and for every |value| >= codegen/fma.py's FMA_BOUNDS (whose square is the first power of
    two past the largest finite value, so it rounds to infinity), true for every value below it (the
    largest one squares to a finite value: tests/fast/test_gemm_checked.py): the same answer as the
    pass's two compares. One multiply and one compare, where `bounded` takes two compares and an AND
    (16 x 384 @ 384 x 384, one core: 62 -> 56 us)."""
    b = emitter.b
    dtype = b.dtype(value)
    square = b.alu(BinaryOps.MUL, (value, value))
    below = b.alu(BinaryOps.CMPLT, (square, b.const(LARGEST[dtype.scalar()], dtype)))
    b.assign(ok, b.alu(BinaryOps.MUL, (ok, below)))


def hint_next_block(emitter: Any, block: Variable, first: Any) -> None:
    """Hint the chunk's line (from step `first`) of each of the next block's rows, when hints are on."""
    e = emitter
    if not e.prefetch:
        return
    for row in range(e.tiles.rows):
        following = block * e.tiles.rows + e.tiles.rows + row
        env = {**e.env, **e.split(e.shape.rows, following), e.shape.reduce: first}
        index, valid = e.shape.a.arg.st.expr_idxs([env.get(axis, NumNode(0)) for axis in range(len(e.shape.sizes))])
        inside = e.ctx.indexes.render_bool(sym_and([following < e.m]))
        e.b.prefetch(e.shape.a.arg.idx, e.render(index), e.ctx.indexes.both(inside, valid))
