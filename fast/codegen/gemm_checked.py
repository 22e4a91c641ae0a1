"""The micro-kernel of a GEMM whose A is read in place and whose B is one micro-panel, or two without batch
axes (`applies`; codegen/gemm_loops.py writes the rest): a linear layer on a few tokens, where A is the
layer's W (its rows are the GEMM's rows) and B the tokens (N <= 2 NR columns: fewer than 32 tokens with
AVX2).

Such a kernel reads each row of A once, from memory. The general path first passes over a block's
rows to AND their bound flag (gemm_loops.py's module docstring), then runs the tile: the pass waits for
the rows to arrive with nothing to overlap it (16 x 384 @ 384 x 384, one core: 68 us with W in cache
and 76 from memory; 56 and 61 without the pass). Here the tile runs fused at once and checks its rows
while it computes (`checked_products`): the K steps go in chunks of one cache line of A's row
(`chunk_steps`); each chunk first loads its MR lines of A as vectors, ANDs their flag and hints the
same lines of the next block, then runs its steps. When a value turns out beyond the bound (or B's
micro-panel flag is false), the tile runs again unfused from zero (`micro_kernel_checked`). So the FMA
choice, per tile, reads the same elements as the pass would and accepts the same values: the results
are the same, for every thread count (56 and 64 us on that kernel).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fast.codegen.gemm import FEW_PANELS
from fast.codegen.gemm_prefetch import hinted_steps, next_batch_hints, step_hint_spacing
from fast.codegen.ir import INT64, LoopKind
from fast.dtype import dtypes
from fast.ops import BinaryOps, UnaryOps
from fast.shape.symbolic import NumNode, Variable, sym_and

#: The largest finite value of each dtype FMA fuses (`and_square_bounded`).
LARGEST = {dtypes.float32: float(np.finfo(np.float32).max), dtypes.float64: float(np.finfo(np.float64).max)}


def applies(fused: bool, packs_a: bool, panels: int, batched: bool) -> bool:
    """Whether a GEMM checks A's rows inside its tiles: fused, A read in place, one micro-panel, or
    two without batch axes (each block of rows is then its own group, and each of its two tiles checks
    the rows itself: a linear on 17-31 tokens, 64-73 -> 57-70 us, where the second tile's checks cost
    less than the pass). Attention's `p @ v` (two panels of d = 32, batched) keeps the pass: its
    timings, alternated, did not tell the two apart."""
    return fused and not packs_a and (panels == 1 or panels <= FEW_PANELS and not batched)


def chunk_steps(emitter: Any) -> int:
    """Steps per chunk: one 64-byte line of a row of A (at least one vector of `lanes`)."""
    return max(emitter.tiles.lanes, 64 // emitter.dtype.itemsize)


def micro_kernel_checked(emitter: Any, panel: Variable, block: Variable, accs: list[list[int]],
                         columns: list[tuple[int, int]]) -> None:
    """The tile's accumulators: fused when B's panel flag holds, checking A's rows on the way; run
    again unfused, from zero, when the panel or a row fails the bound."""
    e, b = emitter, emitter.b
    lanes = e.tiles.lanes
    panel_flag = b.load(e.panel_ok.idx, dtypes.bool, e.render(e.local_panel(panel)))
    vector_ok = b.define_acc(True, dtypes.bool.vec(lanes))
    scalar_ok = b.define_acc(True, dtypes.bool)
    b.loop(e.const(0), b.alu(UnaryOps.CAST, (panel_flag,), INT64), LoopKind.REDUCE)  # once, or not at all
    checked_products(e, panel, block, accs, columns, (vector_ok, scalar_ok))
    b.end_loop()
    good = b.alu(BinaryOps.MUL, (panel_flag, b.alu(BinaryOps.MUL, (e.all_lanes(vector_ok), scalar_ok))))
    b.loop(b.alu(UnaryOps.CAST, (good,), INT64), e.const(1), LoopKind.REDUCE)  # once, when the check failed
    for row_accs in accs:
        for acc in row_accs:
            b.assign(acc, b.const(0.0, b.dtype(acc)))
    e.products(panel, block, accs, columns, False)
    b.end_loop()


def checked_products(emitter: Any, panel: Variable, block: Variable, accs: list[list[int]],
                     columns: list[tuple[int, int]], flags: tuple[int, int]) -> None:
    """The K steps, fused, in chunks (module docstring), then the K % chunk last steps one by one,
    each checking its MR values of A into the scalar flag."""
    e, b = emitter, emitter.b
    chunk = chunk_steps(e)
    full = e.k // chunk
    batch = e.batch if e.prefetch else None
    every = step_hint_spacing(e, batch, panel, block)
    if full:
        first = e.loop("kc", e.const(0), e.const(full), full - 1, LoopKind.REDUCE)
        check_chunk(e, block, accs, first * chunk, flags[0])
        hinted_steps(e, batch, panel, block, every, first * chunk, chunk, "kk",
                     lambda step: e.step(panel, block, accs, columns, True, step))
        b.end_loop()
    if e.k % chunk:
        step = e.loop("kt", e.const(full * chunk), e.const(e.k), e.k - 1, LoopKind.REDUCE)
        for row in range(len(accs)):
            and_square_bounded(e, flags[1], e.ctx.load_leaf(e.shape.a, [e.rows_env(block, row, step)]))
        _step(e, panel, block, accs, columns, step, batch, every)
        b.end_loop()


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


def check_chunk(emitter: Any, block: Variable, accs: list[list[int]], first: Any, ok: int) -> None:
    """AND the flag `ok` with the chunk's values of each row of the block (vectors of `lanes` from step
    `first`), and hint the same line of the next block's rows (when hints are on)."""
    e = emitter
    lanes, rows = e.tiles.lanes, len(accs)
    for row in range(rows):
        for part in range(chunk_steps(e) // lanes):
            start = first + part * lanes
            group = [e.rows_env(block, row, start + lane) for lane in range(lanes)]
            and_square_bounded(e, ok, e.ctx.load_leaf(e.shape.a, group))
    if not e.prefetch:
        return
    for row in range(e.tiles.rows):
        following = block * e.tiles.rows + e.tiles.rows + row
        env = {**e.env, **e.split(e.shape.rows, following), e.shape.reduce: first}
        index, valid = e.shape.a.arg.st.expr_idxs([env.get(axis, NumNode(0)) for axis in range(len(e.shape.sizes))])
        inside = e.ctx.indexes.render_bool(sym_and([following < e.m]))
        e.b.prefetch(e.shape.a.arg.idx, e.render(index), e.ctx.indexes.both(inside, valid))
