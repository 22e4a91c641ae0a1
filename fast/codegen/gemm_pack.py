"""Packing B for a GEMM (codegen/gemm_loops.py's emitter writes the rest of the loops).

Packed B holds the micro-panels of one column block: micro-panel p, step k, at `(p*K + k) * NR`, the
NR columns of that step side by side, zeros past N. Each micro-panel gets its FMA bound flag (the AND
over its elements, gemm_loops.py's module docstring) from the same values it stores.

Where B already lies that way (`reads_b_in_place`), nothing is copied: the pass only computes the flag.

Two ways to fill a micro-panel, the same values in the same places:
- step by step (`pack_steps`): per step, a vector of `lanes` columns. Where B's columns are contiguous
  (`a @ b`) that is one vector load; the edge micro-panel takes only the columns that exist.
- in squares (`pack_transposed`), for a full micro-panel of a B stored along K (`a @ b.T`: a linear
  layer's W, attention's k; `transposes`): lanes x lanes elements at a time, one vector load along K
  per column, turned into vectors along N by `transpose` (n x log2(n) SHUFFLEs). Step by step, such a
  B costs a cache line of each of `lanes` columns per step, each line used again only `lanes` steps
  later; columns a power of two bytes apart share a cache set and the lines are gone by then
  (perf, 1024 x 1024 `a @ b.T`: 13% of the kernel in that copy; in squares the micro-kernel's share
  went from 82% to 89%, the shuffles take 2.4%). The K % lanes last steps go step by step. Each
  vector of the tile's columns gets its own loop over K's squares, so a loop reads `lanes` rows of B
  at a time: with the wide tile (4 vectors of 16) one loop over all four read 64 rows at once, more
  streams than the hardware prefetchers follow, and `a @ b.T` 512 right after a garbage collection
  spent 1.02-1.04 ms in its launch against 0.87-0.88 this way (warm, alone: the same).
"""
from __future__ import annotations

from typing import Any

from fast.codegen.gemm import Env, GemmShape, GemmTiles
from fast.dtype import dtypes
from fast.shape.symbolic import Variable


def reads_b_in_place(shape: GemmShape, tiles: GemmTiles) -> bool:
    """Whether B already lies as packed B would hold it: one full micro-panel (N = NR), K whole (no
    chunks), a single view without a mask whose columns are contiguous and whose steps follow each
    other (stride NR along K), as a contiguous `v` of attention's `p @ v` (d = 32, AVX-512). The
    micro-kernel then reads B where it is, and the pass over B only computes its flag: the copy of
    16 KiB per batch into the scratch, with nothing gained, cost `p @ v` 1.3% (session 22)."""
    if tiles.chunk or shape.sizes[shape.column] != tiles.columns:
        return False
    st = shape.b.arg.st
    if len(st.views) != 1 or st.views[0].mask is not None:
        return False
    strides = st.real_strides()
    return strides[shape.column] == 1 and strides[shape.reduce] == tiles.columns


def transposes(shape: GemmShape, tiles: GemmTiles) -> bool:
    """Whether B's full micro-panels are packed in squares: B walks K with stride 1 and N with another
    stride, and the lanes are a power of two (`transpose`)."""
    strides = shape.b.arg.st.real_strides()
    return strides[shape.reduce] == 1 and strides[shape.column] != 1 and tiles.lanes & (tiles.lanes - 1) == 0


def pack_columns(emitter: Any) -> None:
    """Pack B's columns of the emitter's current column block, each micro-panel's bound flag beside
    (when fused): full micro-panels in squares when B is stored along K (`transposes`), the rest step
    by step."""
    e = emitter
    if e.packed_b is None and not e.fused:  # B read in place and no flag to compute: no pass at all
        return
    squares = transposes(e.shape, e.tiles)
    for edge in (False, True) if e.n % e.tiles.columns else (False,):
        panel = e.loop("pack", *e.panel_range(edge), e.all_panels - 1)
        ok = e.b.define_acc(True, dtypes.bool.vec(e.tiles.lanes)) if e.fused else None
        first = pack_transposed(e, panel, ok) if squares and not edge else 0
        if first < e.kc:
            pack_steps(e, panel, edge, ok, first)
        if ok is not None and e.panel_ok is not None:
            e.b.store(e.panel_ok.idx, e.render(e.local_panel(panel)), e.all_lanes(ok))
        e.b.end_loop()


def pack_steps(e: Any, panel: Variable, edge: bool, ok: int | None, first: int) -> None:
    """Steps [first, K) of the micro-panel, one at a time: per vector of columns, `lanes` values of B
    at that step (only ANDed into the flag where the micro-kernel reads B in place)."""
    step = e.loop("packk", e.const(first), e.const(e.kc), e.kc - 1)
    local = e.local_panel(panel) * e.kc + step
    for vector in range(e.tiles.vectors):
        column = panel * e.tiles.columns + vector * e.tiles.lanes
        group = [{**e.env, e.shape.column: column + lane, e.shape.reduce: e.k0 + step} for lane in range(e.tiles.lanes)]
        value = packed_value(e, group, edge)
        if e.packed_b is not None:
            e.b.store(e.packed_b.idx, e.render(local * e.tiles.columns + vector * e.tiles.lanes), value)
        e.and_bounded(ok, value)
    e.b.end_loop()


def packed_value(e: Any, group: list[Env], edge: bool) -> int:
    """B's values for a vector of columns; on the edge panel each lane past N reads nothing (0)."""
    if not edge:
        return int(e.ctx.load_leaf(e.shape.b, group))
    inside = [e.ctx.indexes.render_bool(env[e.shape.column] < e.n) for env in group]
    lanes = [e.ctx.load_leaf(e.shape.b, [env], valid) for env, valid in zip(group, inside, strict=True)]
    return int(e.b.vectorize(lanes))


def pack_transposed(e: Any, panel: Variable, ok: int | None) -> int:
    """Steps [0, K - K % lanes) of a full micro-panel, in squares of lanes x lanes (module docstring).
    Returns the first step left to `pack_steps`."""
    lanes, squares = e.tiles.lanes, e.kc // e.tiles.lanes
    if squares == 0:
        return 0
    for vector in range(e.tiles.vectors):
        square = e.loop("packsq", e.const(0), e.const(squares), squares - 1)
        column = panel * e.tiles.columns + vector * lanes
        runs = [e.ctx.load_leaf(e.shape.b, [{**e.env, e.shape.column: column + within,
                                             e.shape.reduce: e.k0 + square * lanes + lane} for lane in range(lanes)])
                for within in range(lanes)]
        for lane, value in enumerate(transpose(e.b, runs)):
            local = e.local_panel(panel) * e.kc + square * lanes + lane
            e.b.store(e.packed_b.idx, e.render(local * e.tiles.columns + vector * lanes), value)
            e.and_bounded(ok, value)
        e.b.end_loop()
    return int(squares * lanes)


def transpose(builder: Any, rows: list[int]) -> list[int]:
    """The columns of a square of n vectors of n lanes (n a power of two), by n x log2(n) SHUFFLEs.
    Each round interleaves vector i with vector i + n/2 (their low halves, then their high halves);
    after log2(n) rounds vector k holds lane k of every row, in row order."""
    half = len(rows) // 2
    low = tuple(lane for pair in zip(range(half), range(2 * half, 3 * half), strict=True) for lane in pair)
    high = tuple(lane + half for lane in low)
    for _ in range(len(rows).bit_length() - 1):
        rows = [builder.shuffle(rows[i], rows[i + half], order) for i in range(half) for order in (low, high)]
    return rows
