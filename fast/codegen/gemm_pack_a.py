"""The pass over A's rows of a GEMM group (codegen/gemm_loops.py's emitter writes the rest of the loops):
each block of MR rows is copied into packed A (when A is packed) and gets its FMA bound flag (when
fused; gemm_loops.py's module docstring).

Packed A keeps the group's rows whole, `a_stride` elements apart (`packed_row_stride`): row g of the
group at `g * a_stride`, its K values in order. Two ways to fill it, the same values in the same places:
- row by row (`rows_pass`): per row, vectors of `lanes` values along K, then the K % lanes last ones.
  Where A's rows are contiguous along K (`a @ b`, a linear layer's activations) that is one vector
  load each.
- in squares (`pack_squares`), for the full blocks of an A stored along M (`a.T @ b`: A's stored rows
  are the GEMM's K; `transposes_a`): `lanes` rows x `lanes` steps at a time, one vector load along M
  per step, turned into vectors along K by the same register transpose as B's squares
  (gemm_pack.py `transpose`). Row by row, such an A is a gather of `lanes` scalars per vector, each
  from another cache line: on a 1024 x 1024 `a.T @ b` (Sapphire Rapids, perf) that copy took 28% of
  the kernel. The K % lanes last steps go as one vector along M each, stored lane by lane; the rows
  past the last whole square go row by row. The flags are then read from the packed copy
  (`rows_pass` over packed A, contiguous and in cache).
"""
from __future__ import annotations

from typing import Any

from fast.codegen.gemm import Env, transposes_a
from fast.codegen.gemm_pack import transpose
from fast.codegen.ir import IndexOps
from fast.dtype import dtypes
from fast.ops import BinaryOps
from fast.shape.symbolic import Node, NumNode, Variable


def prepare_rows(e: Any, start: int, end: int, rows: int) -> None:
    """For blocks [start, end) of `rows` rows (IR values; `start` is where the group starts, or the
    edge block): packed A (when packed) and each block's bound flag (when fused)."""
    if e.rows_ok is None and e.packed_a is None:
        return
    squares = e.packed_a is not None and rows == e.tiles.rows and e.kc >= e.tiles.lanes \
        and transposes_a(e.shape, e.tiles.lanes)
    if squares:
        pack_squares(e, start, end)
        if e.rows_ok is None:
            return
    block = e.loop("fa", start, end, e.blocks - 1)
    bounded = rows_pass(e, block, rows, from_packed=squares)
    if e.rows_ok is not None and bounded is not None:  # both or neither: set when fused
        e.b.store(e.rows_ok.idx, e.block_slot(block), bounded)
    e.b.end_loop()


def rows_pass(e: Any, block: Variable, rows: int, from_packed: bool) -> int | None:
    """A loop over the block's rows, in each vectors of `lanes` along K, then the K % lanes last
    ones one by one: each value is copied to packed A (when packed and not `from_packed`) and checked
    against the bound (when fused). With `from_packed` the values are read from packed A (already
    filled) instead of A. Returns whether every element is within the bound (None when not fused).
    (A loop, not MR unrolled copies: the same loads in a row-major order, a fraction of the code to
    lower.)"""
    lanes, b, fused = e.tiles.lanes, e.b, e.rows_ok is not None
    ok = b.define_acc(True, dtypes.bool.vec(lanes)) if fused else None
    tail = b.define_acc(True, dtypes.bool) if fused else None
    row = e.loop("far", e.const(0), e.const(rows), rows - 1)
    if e.kc >= lanes:
        step = e.loop("fak", e.const(0), e.const(e.kc // lanes), e.kc // lanes - 1)
        copy_row_part(e, block, row, step * lanes, lanes, ok, from_packed)
        b.end_loop()
    for step_in_tail in range(e.kc - e.kc % lanes, e.kc):
        copy_row_part(e, block, row, NumNode(step_in_tail), 1, tail, from_packed)
    b.end_loop()
    if ok is None or tail is None:
        return None
    return b.alu(BinaryOps.MUL, (e.all_lanes(ok), tail))


def copy_row_part(e: Any, block: Variable, row: Variable, first: Node, width: int, ok: int | None,
                  from_packed: bool) -> None:
    """A's `width` values of the block's row `row` from step `first`: stored to packed A (when packed,
    read from there with `from_packed`) and ANDed into the flag `ok` (when fused)."""
    if from_packed:
        value = e.b.load(e.packed_a.idx, e.vector(width), e.packed_row_index(block, first, row))
    else:
        value = e.ctx.load_leaf(e.shape.a, [e.rows_env(block, row, e.k0 + first + lane) for lane in range(width)])
        if e.packed_a is not None:
            e.b.store(e.packed_a.idx, e.packed_row_index(block, first, row), value)
    e.and_bounded(ok, value)


def pack_squares(e: Any, start: int, end: int) -> None:
    """Packed A for the full blocks [start, end) of an A stored along M (module docstring): squares
    of `lanes` rows, then the rows left over one by one."""
    lanes, b = e.tiles.lanes, e.b
    first_row = bound_variable(e, "ar~", b.index(IndexOps.MUL, start, e.const(e.tiles.rows)),
                               (e.blocks - 1) * e.tiles.rows)  # A's row of the first block
    slot = bound_variable(e, "ag~", b.index(IndexOps.MUL, e.sub(start, e.group_start), e.const(e.tiles.rows)),
                          e.tiles.group_rows)  # its row in the group's packed copy
    count = b.index(IndexOps.MUL, e.sub(end, start), e.const(e.tiles.rows))
    squares = b.index(IndexOps.NONNEG_DIV, count, e.const(lanes))
    top = -(-e.tiles.group_rows // lanes) - 1
    parts = e.kc // lanes
    for tail in (False, True) if e.kc % lanes else (False,):
        # steps outside, squares inside: each step's loads walk along A's stored rows
        part = None if tail else e.loop("ask", e.const(0), e.const(parts), parts - 1)
        square = e.loop("asq", e.const(0), squares, top)
        rows = [first_row + square * lanes + within for within in range(lanes)]
        packed = [(slot + square * lanes + within) * e.a_stride for within in range(lanes)]
        if part is not None:
            runs = [e.ctx.load_leaf(e.shape.a, [flat_env(e, row, e.k0 + part * lanes + lane) for row in rows])
                    for lane in range(lanes)]
            for origin, value in zip(packed, transpose(b, runs), strict=True):
                b.store(e.packed_a.idx, e.render(origin + part * lanes), value)
        else:
            for step in range(parts * lanes, e.kc):  # one vector along M per step, stored lane by lane
                value = e.ctx.load_leaf(e.shape.a, [flat_env(e, row, e.k0 + step) for row in rows])
                for lane, origin in enumerate(packed):
                    b.store(e.packed_a.idx, e.render(origin + step), b.gep(value, lane))
        b.end_loop()
        if part is not None:
            b.end_loop()
    left = e.loop("arl", b.index(IndexOps.MUL, squares, e.const(lanes)), count, e.tiles.group_rows - 1)
    copy_flat_row(e, first_row + left, slot + left)
    b.end_loop()


def copy_flat_row(e: Any, row: Node, packed_row: Node) -> None:
    """A's row `row` (flat over the row axes) to row `packed_row` of packed A: vectors of `lanes`
    along K, then the K % lanes last values."""
    lanes, b = e.tiles.lanes, e.b
    if e.kc >= lanes:
        step = e.loop("arv", e.const(0), e.const(e.kc // lanes), e.kc // lanes - 1)
        value = e.ctx.load_leaf(e.shape.a, [flat_env(e, row, e.k0 + step * lanes + lane) for lane in range(lanes)])
        b.store(e.packed_a.idx, e.render(packed_row * e.a_stride + step * lanes), value)
        b.end_loop()
    for step_in_tail in range(e.kc - e.kc % lanes, e.kc):
        value = e.ctx.load_leaf(e.shape.a, [flat_env(e, row, e.k0 + step_in_tail)])
        b.store(e.packed_a.idx, e.render(packed_row * e.a_stride + step_in_tail), value)


def flat_env(e: Any, row: Node, step: Node) -> Env:
    """The index of every axis but N for A's row `row` (flat over the row axes) at step `step`."""
    return {**e.env, **e.split(e.shape.rows, row), e.shape.reduce: step}


def bound_variable(e: Any, name: str, value: int, top: int) -> Variable:
    """A Variable in [0, top] that renders as the IR value `value` (which never leaves that range)."""
    variable = Variable(name, 0, max(top, 0))
    e.ctx.var_refs[variable] = value
    return variable
