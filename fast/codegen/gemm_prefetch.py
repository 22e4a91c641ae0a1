"""Prefetch hints of a GEMM's micro-kernel (codegen/gemm_loops.py): the next block's rows of an
unpacked A (`spread_hint`), and the next batch of a batched GEMM (`next_batch_hints`), both spread
over the steps.

A batched matmul (attention's `q @ k.T` and `p @ v`: 384 small products, K = 32 or 128) starts each
batch by reading rows of A and B it has never touched: the bound check of A's rows and the packing of
B's columns each waited for hundreds of cache lines from memory, about a third of a K = 32 kernel on
one core. So while a batch computes, every micro-kernel step may hint one line of the next batch's A
and one of its B: step `g` of the batch (tile `panel * blocks + block`, step `k` within it) hints
line `g // every` of each operand, where `every` (a power of two) spreads the lines evenly over the
steps; a burst of hints would fill the core's miss buffers and stall it (`spread_hint`). Where a
tile's hints are few and fall on the same steps of every tile, they go before its steps instead
(`tile_start_hints`), so that the steps carry no guard.

Line `h` of an operand is row `h // per_row` (A's rows, B's columns), elements `(h % per_row) * line`
onwards along K: one line each where K is the contiguous axis, a part of one otherwise. Each hint is
guarded by the next batch existing and the line being one of the operand's: only addresses the
kernel reads (in this share or another's).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fast.codegen.gemm import FEW_PANELS
from fast.codegen.ir import LoopKind
from fast.shape.symbolic import Node, NumNode, Variable, sym_and


def _line(emitter: Any) -> int:
    """Elements of the GEMM's dtype in one 64-byte cache line."""
    return max(1, 64 // emitter.dtype.itemsize)


def spread_steps(emitter: Any) -> int:
    """How many first steps of the micro-kernel issue a `spread_hint`: step k hints column
    (k // MR) * line of a row, so none past MR x (lines of a row); 0 when A is packed, hints are off,
    or B has more than `FEW_PANELS` micro-panels: then each row of A serves several panels' tiles and
    is in the cache after the first, and the hints only cost their steps (attention's `q @ k.T`, four
    panels of 32 columns, inside the MiniLM forward on a Sapphire Rapids: 8.76-8.84 ms for six with
    the hints, 7.91-8.06 without; session 19). The rows that stream from memory once are those of
    one or two panels (`spread_hint`)."""
    if emitter.packed_a is not None or not emitter.prefetch or emitter.all_panels > FEW_PANELS:
        return 0
    return min(emitter.k, emitter.tiles.rows * -(-emitter.k // _line(emitter)))


def spread_hint(emitter: Any, block: Variable, step: Node) -> None:
    """Unpacked A: step k of the micro-kernel hints one cache line of the next block's rows, line k
    of them (row k % MR, columns from (k // MR) * line), so the next block streams in while this one
    computes, one line per step. Rows that stream from memory once each (a linear layer's W on a few
    tokens, attention's `p @ v`) are too short for the hardware prefetchers to find; a burst of hints
    before the tile would fill the core's miss buffers and stall it (`p @ v`, one core: about 52
    GFLOP/s with a burst, 62-66 spread, 45-52 without). With K < MR x lines per row, the hints cover
    the first rows only. Each hint is guarded by the row and the column existing: only addresses the
    kernel reads."""
    shape, line, rows = emitter.shape, _line(emitter), emitter.tiles.rows
    following = block * rows + rows + step % rows
    column = (step // rows) * line
    env = {**emitter.env, **emitter.split(shape.rows, following), shape.reduce: column}
    index, valid = shape.a.arg.st.expr_idxs([env.get(axis, NumNode(0)) for axis in range(len(shape.sizes))])
    inside = emitter.ctx.indexes.render_bool(sym_and([following < emitter.m, column < emitter.k]))
    emitter.b.prefetch(shape.a.arg.idx, emitter.render(index), emitter.ctx.indexes.both(inside, valid))


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


def _walks(emitter: Any) -> tuple[list[tuple[Any, tuple[int, ...], tuple[int, bool, int]]], int]:
    """The operands whose next batch is hinted, each with its walk (`_operand_lines`), and the hint
    spacing `every` (`hint_spacing` over the batch's steps); no walks when neither can be walked."""
    shape, line = emitter.shape, _line(emitter)
    operands = [(shape.a, shape.rows, emitter.m), (shape.b, (shape.column,), emitter.n)]
    walks = [(operand, axes, walk) for operand, axes, count in operands
             if (walk := _operand_lines(emitter, operand, axes, count, line)) is not None]
    lines = max((walk[0] for _, _, walk in walks), default=1)
    return walks, hint_spacing(emitter.all_panels * emitter.blocks * emitter.k, lines)


def batch_hint_spacing(emitter: Any) -> int:
    """`every` of this GEMM's next-batch hints (one hint per operand every `every` steps of a batch,
    at the steps that are multiples of it; a tile starts at a multiple of K steps), or 0 when it is
    not batched or neither operand can be walked."""
    if not emitter.shape.batch:
        return 0
    walks, every = _walks(emitter)
    return every if walks else 0


def next_batch_hints(emitter: Any, batch: Node, panel: Variable, block: Variable, step: Node) -> None:
    """Hint the lines of the next batch's A and B due at this step (module docstring)."""
    shape, b, line = emitter.shape, emitter.b, _line(emitter)
    walks, every = _walks(emitter)
    if not walks:
        return
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


#: Next-batch hints per operand that a tile issues at its start at most (`tile_start_hints`): a burst
#: of more fills the core's miss buffers. On a Sapphire Rapids core (kernels alone, alternated, GFLOP/s
#: one thread / two), attention's `q @ k.T` (K = 32, 4 hints per operand per tile): hints among the
#: steps 160-170 / 317-326, at the tile's start 180-193 / 341-370, none 178-182 / 339-354; `p @ v`
#: (K = 128, 64 per tile) at the tile's start 144 / 279 against 189-196 / 369-376 among the steps.
TILE_START_HINTS = 4


def tile_start_hints(emitter: Any, batch: Node, panel: Variable, block: Variable, every: int) -> bool:
    """Before a tile's K steps, the next-batch hints due anywhere in the tile, when they fall on fixed
    steps of every tile (`every` a multiple of K: step 0; `every` dividing K: steps 0, every, ...,
    at most `TILE_START_HINTS` of them): True when emitted, and then no step issues one. The same
    lines are hinted, each tile's a few steps earlier; the steps carry no guard and no address
    arithmetic. False (hints among the steps) otherwise.

    The hints are written out one by one, each at its constant step, not as a loop over them: GCC 12
    at -O2 keeps a loop of four trips rolled and computes each hint's address (divisions by the head
    count, the batch's row and part) again on every trip, where LLVM unrolls it and folds the steps
    into constant offsets. Attention's `q @ k.T` in the MiniLM forward on a Sapphire Rapids (kernel
    alone, alternated): CLANG 2.46-2.52 -> 2.29-2.35 ms on one thread, 1.32-1.33 -> 1.23 on two;
    LLVM 2.31 and 1.21-1.22 either way (session 20)."""
    k = emitter.k
    if every % k == 0:
        next_batch_hints(emitter, batch, panel, block, NumNode(0))
        return True
    if k % every or k // every > TILE_START_HINTS:
        return False
    for hint in range(k // every):
        next_batch_hints(emitter, batch, panel, block, NumNode(hint * every))
    return True


def step_hint_spacing(emitter: Any, batch: Node | None, panel: Variable, block: Variable) -> int:
    """A tile's next-batch hints (`batch`: its batch, None without hints): those that go before its
    steps are emitted here (`tile_start_hints`); returns the spacing of those its steps issue
    (`next_batch_hints` at every step), 0 when they issue none."""
    every = batch_hint_spacing(emitter) if batch is not None else 0
    if batch is None or not every or tile_start_hints(emitter, batch, panel, block, every):
        return 0
    return every


def _flat(emitter: Any, axes: tuple[int, ...], flat: Node) -> dict[int, Node]:
    return emitter.split(axes, flat) if len(axes) > 1 else {axes[0]: flat}


#: The most K steps written out one by one after each next-batch hint (`hinted_steps`).
HINT_GROUP_MAX = 4


def step_group(emitter: Any, batch: Node | None, every: int, start: Node | int, count: int) -> int:
    """Steps per trip of `hinted_steps`'s loop: `every` where it is at most HINT_GROUP_MAX and divides
    `count`, K and `start` (a multiple of `count` or an int), else 1 (also without hints)."""
    if batch is None or not every:
        return 1
    aligned = not isinstance(start, int) or start % every == 0
    divides = every <= HINT_GROUP_MAX and not count % every and not emitter.k % every
    return every if aligned and divides else 1


def hinted_steps(emitter: Any, batch: Node | None, panel: Variable, block: Variable, every: int, start: Node | int,
                 count: int, name: str, emit: Callable[[Node], None],
                 lead: Callable[[Variable], None] | None = None) -> None:
    """`count` K steps of a tile from `start` in a REDUCE loop named `name`, each written by
    `emit(step)`, with the next-batch hints due among them (`every` from `step_hint_spacing`; none
    when `batch` is None or `every` is 0); `lead(trip)`, when given, writes what each trip of the
    loop does after its hint, before its steps (gemm_checked.py: one vector of the bound check).

    The loop runs over groups of `step_group` steps written out one by one, the group's hint before
    its first step: the hint's position is then a multiple of `every`, so no step tests whether a
    hint is due (the hint keeps its guards that the next batch and the line exist). Where the spacing
    does not allow groups, every step tests it. The same steps run in the same order, and the same
    lines are hinted at the same steps. The guarded form costs a test, a branch and the hint's
    address arithmetic at each step, on the integer ports beside the FMAs: attention's `p @ v` in the
    MiniLM forward (a hint every 2 steps), kernel alone, alternated, on a Sapphire Rapids: 2.46-2.64
    -> 2.42-2.59 ms one thread, 1.31-1.39 -> 1.29-1.37 two, CLANG and LLVM alike (session 20)."""
    if batch is None:
        every = 0
    group = step_group(emitter, batch, every, start, count)
    loop = emitter.loop(name, emitter.const(0), emitter.const(count // group), count // group - 1, LoopKind.REDUCE)
    for within in range(group):
        step = loop * group + within + start
        if batch is not None and every and within == 0:
            next_batch_hints(emitter, batch, panel, block, step)
        if lead is not None and within == 0:
            lead(loop)
        emit(step)
    emitter.b.end_loop()
