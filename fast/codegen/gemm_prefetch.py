"""Hints for the next batch of a batched GEMM (codegen/gemm_loops.py), spread over this batch's steps.

A batched matmul (attention's `q @ k.T` and `p @ v`: 384 small products, K = 32 or 128) starts each
batch by reading rows of A and B it has never touched: the bound check of A's rows and the packing of
B's columns each waited for hundreds of cache lines from memory, about a third of a K = 32 kernel on
one core. So while a batch computes, every micro-kernel step may hint one line of the next batch's A
and one of its B: step `g` of the batch (tile `panel * blocks + block`, step `k` within it) hints
line `g // every` of each operand, where `every` (a power of two) spreads the lines evenly over the
steps; a burst of hints would fill the core's miss buffers and stall it (gemm_loops.prefetch_spread).

Line `h` of an operand is row `h // per_row` (A's rows, B's columns), elements `(h % per_row) * line`
onwards along K: one line each where K is the contiguous axis, a part of one otherwise. Each hint is
guarded by the next batch existing and the line being one of the operand's: only addresses the
kernel reads (in this share or another's).
"""
from __future__ import annotations

from typing import Any

from fast.shape.symbolic import Node, NumNode, Variable, sym_and


def hint_spacing(steps: int, lines: int) -> int:
    """The largest power of two `every` with `lines * every <= steps` (at least 1): a hint every
    `every` steps reaches every line when the steps are enough, the first `steps` lines otherwise."""
    every = 1
    while lines * every * 2 <= steps:
        every *= 2
    return every


def _operand_lines(emitter: Any, operand: Any, other: tuple[int, ...], others: int,
                   line: int) -> tuple[int, bool, int] | None:
    """(lines, along K, per) of one operand's batch: its `others` rows (A's rows, B's columns: axes
    `other`) by K elements, walked in lines of `line` elements along whichever of K and its last
    other axis is contiguous (`per` lines per row or per step); None when neither is."""
    strides = operand.arg.st.real_strides()
    if strides[emitter.shape.reduce] == 1:
        per = -(-emitter.k // line)
        return others * per, True, per
    if strides[other[-1]] == 1:
        per = -(-others // line)
        return emitter.k * per, False, per
    return None


def next_batch_hints(emitter: Any, batch: Variable, panel: Variable, block: Variable, step: Variable) -> None:
    """Hint the lines of the next batch's A and B due at this step (module docstring)."""
    shape, b = emitter.shape, emitter.b
    line = max(1, 64 // emitter.dtype.itemsize)
    operands = [(shape.a, shape.rows, emitter.m), (shape.b, (shape.column,), emitter.n)]
    walks = [(operand, axes, walk) for operand, axes, count in operands
             if (walk := _operand_lines(emitter, operand, axes, count, line)) is not None]
    if not walks:
        return
    every = hint_spacing(emitter.all_panels * emitter.blocks * emitter.k, max(walk[0] for _, _, walk in walks))
    position = (panel * emitter.blocks + block) * emitter.k + step
    hint = position // every
    following = batch + 1
    due = [position % every < 1, following < shape.size(shape.batch)]
    for operand, axes, (lines, along_k, per) in walks:
        row, part = hint // per, (hint % per) * line  # along K: row `row`, K from `part`; else step `row`
        if along_k:
            place = {shape.reduce: part, **_flat(emitter, axes, row)}
        else:
            place = {shape.reduce: row, **_flat(emitter, axes, part)}
        env = {**emitter.split(shape.batch, following), **place}
        index, valid = operand.arg.st.expr_idxs([env.get(axis, NumNode(0)) for axis in range(len(shape.sizes))])
        inside: Node = sym_and([*due, hint < lines])
        guard = emitter.ctx.indexes.both(emitter.ctx.indexes.render_bool(inside), valid)
        b.prefetch(operand.arg.idx, emitter.render(index), guard)


def _flat(emitter: Any, axes: tuple[int, ...], flat: Node) -> dict[int, Node]:
    return emitter.split(axes, flat) if len(axes) > 1 else {axes[0]: flat}
