"""Which GLOBAL loops of a `LinearProgram` a GPU spreads over its threads (`grid_map`).

GLOBAL loops walk output axes and their iterations are independent (fast/codegen/ir.py): the CPU
runtime already splits the outermost one of each loop nest between cores. A GPU renderer turns the
same loops into grid-stride loops: thread `t` of `T` runs iterations `t, t + T, t + 2T, ...`, so any
grid and block size covers every iteration exactly once, and which thread runs an iteration never
changes what it computes.

`grid_map(program)` picks the loops and proves the split safe, else it maps nothing (the kernel then
runs on one thread). The rules:
- candidates are the GLOBAL loops that no other GLOBAL loop encloses, starting at the constant 0 (the
  first GLOBAL loop of each nest; a chunked column reduction's nest sits inside its REDUCE chunk
  loop, and iteration `j` then runs on the same thread in every chunk, so what one chunk adds into
  an output is read back by that thread in the next);
- every STORE lies inside a candidate, and every ASSIGN inside a candidate updates an accumulator
  defined inside that same candidate. Work outside the candidates is then private to each thread
  (every thread computes it alike): a row kernel whose rows have no loop, which writes and reads
  back the whole row, fails this and stays on one thread;
- every loop outside the candidates encloses one (a chunk loop): a loop of its own outside them (the
  reduces of a row kernel whose rows have no loop) would be repeated by every thread, so such a
  kernel stays on one thread too;
- a candidate that is perfectly nested with the GLOBAL loop inside it (only pure instructions
  between the two openings, the inner loop starting at 0, its end computable before the outer loop,
  the two loops closing together) is flattened with it into one loop over the product of their trip
  counts, repeatedly: neighbouring threads then take neighbouring positions of the innermost
  output axis (coalesced memory accesses), and short outer axes do not starve the grid.

Block reductions (`BlockReduce`): a kernel that reduces at least `MIN_BLOCK_REDUCE` iterations into
each of few outputs (none: a full reduction; or one flattened output group of at most
`MAX_BLOCK_OUTPUTS`, whose iterations then go to blocks, not threads) spreads each reduction over
the threads of a block. The reduction is split into `LANES` partial lanes (a constant, never the
block size): lane `l` takes iterations `l, l + LANES, l + 2 LANES, ...` of the flattened reduce
loops in order, thread `t` of a block of `T` computes lanes `t, t + T, ...` one after another, the
partials go to shared memory, and after a barrier they are combined in a fixed tree (`p[i] =
p[i] op p[i + h]` for h = LANES/2, ..., 1, a barrier after each level); thread 0 stores. The value
is the same for every block size and grid. Float sums are reassociated, as docs/semantics.md allows
(the order depends only on the program). It applies when the region (the whole kernel, or the body
of the output loop) is: pure instructions and DEFINE_ACCs whose initial values are the identities
of their updates (0 for ADD, the dtype's minimum for MAX); one perfectly nested REDUCE loop nest
whose body holds pure instructions and ASSIGNs `acc := op(acc, value)` (the ALU read by nothing
else; the accumulator read nowhere else before the loop ends); after the loop, pure instructions
and STOREs only, reading no value defined between the first DEFINE_ACC and the loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fast.codegen.ir import Instr, IROps, LinearProgram, LoopKind, same_const
from fast.dtype import dtypes
from fast.ops import BinaryOps, normalize_const

_PURE = frozenset({IROps.CONST, IROps.DEFINE_VAR, IROps.INDEX, IROps.LOAD, IROps.ALU, IROps.VECTORIZE, IROps.GEP})
LANES = 256  # partial lanes of a block reduction: a constant, so its value never depends on the block size
MIN_BLOCK_REDUCE = 2048  # iterations per output from which a reduction is spread over a block
MAX_BLOCK_OUTPUTS = 4096  # more outputs: a thread each already fills the GPU (and walks columns coalesced)


@dataclass(frozen=True)
class BlockReduce:
    """A reduction spread over the threads of a block (module docstring). `accs`: its DEFINE_ACCs;
    `updates`: per accumulator one ALU that updates it (its op combines the partials); `loops`: the
    REDUCE loops flattened into the lanes' loop; `end`: the ENDLOOP of `loops[0]`; `close`: the
    instruction before which the region ends (its output loop's ENDLOOP, or `len(instrs)`)."""

    accs: tuple[int, ...]
    updates: tuple[int, ...]
    loops: tuple[int, ...]
    end: int
    close: int
    lanes: int = LANES


@dataclass(frozen=True)
class GridMap:
    """`groups`: per grid-stride loop, the LOOP instruction numbers it flattens, outermost first (no
    group: the kernel runs on one thread). `count`: iterations of the longest group when every
    bound is a constant, None when one is symbolic (also None without groups)."""

    groups: tuple[tuple[int, ...], ...]
    count: int | None
    block_reduce: BlockReduce | None = None

    @property
    def single(self) -> bool:
        """Nothing is spread: the kernel runs on one thread."""
        return not self.groups and self.block_reduce is None

    @property
    def heads(self) -> dict[int, tuple[int, ...]]:
        """Outermost loop number -> its group."""
        return {group[0]: group for group in self.groups}

    @property
    def folded(self) -> frozenset[int]:
        """Loops flattened into an outer loop of their group: no loop of their own is rendered."""
        reduce_loops = self.block_reduce.loops[1:] if self.block_reduce is not None else ()
        return frozenset([loop for group in self.groups for loop in group[1:]] + list(reduce_loops))


def _closers(program: LinearProgram) -> dict[int, int]:
    """LOOP number -> the number of its ENDLOOP."""
    return {number: instr_number for instr_number, instr in enumerate(program.instrs)
            if instr.op is IROps.ENDLOOP for number in instr.srcs}


def _starts_at_zero(program: LinearProgram, loop: int) -> bool:
    start = program.instrs[program.instrs[loop].srcs[0]]
    return start.op is IROps.CONST and start.arg == 0


def _candidates(program: LinearProgram, closers: dict[int, int]) -> list[int] | None:
    """The outermost GLOBAL loops, when splitting them is safe (module docstring), else None."""
    candidates: list[int] = []
    owner: dict[int, int] = {}  # instruction number -> the candidate it lies in
    current: int | None = None
    outside: list[tuple[int, int]] = []  # open loops outside every candidate: (loop, candidates before it)
    for number, instr in enumerate(program.instrs):
        if current is not None and number > closers[current]:
            current = None
        if current is None and instr.op is IROps.ENDLOOP:
            if outside.pop()[1] == len(candidates):
                return None  # a loop enclosing no candidate: every thread would repeat its work
            continue
        if current is None and instr.op is IROps.LOOP and instr.arg is LoopKind.REDUCE:
            outside.append((number, len(candidates)))
        elif current is None and instr.op is IROps.LOOP:
            if not _starts_at_zero(program, number):
                return None
            current = number
            candidates.append(number)
        if current is not None:
            owner[number] = current
        if instr.op is IROps.STORE and current is None:
            return None
        if instr.op is IROps.ASSIGN and current is not None and owner.get(instr.srcs[0]) != current:
            return None
    return candidates


def _inner_loop(program: LinearProgram, outer: int, closers: dict[int, int],
                kind: LoopKind = LoopKind.GLOBAL) -> int | None:
    """The loop of `kind` perfectly nested in `outer` (module docstring), or None."""
    end = closers[outer]
    for number in range(outer + 1, end):
        instr = program.instrs[number]
        if instr.op in _PURE:
            continue
        if instr.op is not IROps.LOOP or instr.arg is not kind or closers[number] != end - 1:
            return None
        bound = program.instrs[instr.srcs[1]]
        hoistable = instr.srcs[1] < outer or bound.op in (IROps.CONST, IROps.DEFINE_VAR)
        return number if hoistable and _starts_at_zero(program, number) else None
    return None


def _trip_count(program: LinearProgram, group: tuple[int, ...]) -> int | None:
    ends = [program.instrs[program.instrs[loop].srcs[1]] for loop in group]
    if any(end.op is not IROps.CONST for end in ends):
        return None
    return math.prod(max(0, int(end.arg)) for end in ends)


def _nest(program: LinearProgram, outer: int, closers: dict[int, int], kind: LoopKind) -> tuple[int, ...]:
    """`outer` and the loops of `kind` perfectly nested in it, outermost first."""
    group = [outer]
    while (inner := _inner_loop(program, group[-1], closers, kind)) is not None:
        group.append(inner)
    return tuple(group)


def _users(program: LinearProgram) -> dict[int, list[int]]:
    """Value number -> the instructions that read it."""
    users: dict[int, list[int]] = {}
    for number, instr in enumerate(program.instrs):
        for src in instr.srcs:
            users.setdefault(src, []).append(number)
    return users


def _updates(program: LinearProgram, accs: list[int], body: range, users: dict[int, list[int]]) -> list[int] | None:
    """Per accumulator one ALU `op(acc, value)` that an ASSIGN in `body` stores into it, when every
    instruction of `body` is pure or such an ASSIGN, each ALU read only by its ASSIGN, every update
    of an accumulator with one op whose identity is its initial value; else None."""
    instrs = program.instrs
    found: dict[int, int] = {}
    for number in body:
        if instrs[number].op is not IROps.ASSIGN:
            if instrs[number].op not in _PURE:
                return None
            continue
        acc, value = instrs[number].srcs
        update = instrs[value]
        if acc not in accs or update.op is not IROps.ALU or update.srcs[0] != acc or acc in update.srcs[1:] \
                or update.arg not in (BinaryOps.ADD, BinaryOps.MAX) or users[value] != [number] \
                or instrs[found.setdefault(acc, value)].arg is not update.arg:
            return None
    for acc in accs:
        dtype = instrs[acc].dtype
        if acc not in found or dtype is None:
            return None
        identity = 0 if instrs[found[acc]].arg is BinaryOps.ADD else dtypes.min(dtype)
        if not same_const(instrs[acc].arg, normalize_const(identity, dtype)):
            return None
    return [found[acc] for acc in accs]


def _updates_of(instr: Instr, acc: int) -> bool:
    """Whether `instr` is an update `op(acc, value)` of accumulator `acc` (checked by `_updates`)."""
    return instr.op is IROps.ALU and instr.srcs[0] == acc and instr.arg in (BinaryOps.ADD, BinaryOps.MAX)


def _block_reduce(program: LinearProgram, start: int, stop: int, closers: dict[int, int],
                  users: dict[int, list[int]]) -> BlockReduce | None:
    """The block reduction of instructions [start, stop), when they have its shape (module docstring)."""
    instrs, number, accs = program.instrs, start, []
    while number < stop and instrs[number].op is not IROps.LOOP:
        if instrs[number].op is IROps.DEFINE_ACC:
            accs.append(number)
        elif instrs[number].op not in _PURE:
            return None
        number += 1
    if not accs or number == stop or instrs[number].arg is not LoopKind.REDUCE:
        return None
    loops, end = _nest(program, number, closers, LoopKind.REDUCE), closers[number]
    updates = _updates(program, accs, range(loops[-1] + 1, closers[loops[-1]]), users)
    count = _trip_count(program, loops)
    if updates is None or count is None or count < MIN_BLOCK_REDUCE or not _starts_at_zero(program, loops[0]) \
            or any(instrs[n].op not in _PURE and instrs[n].op is not IROps.STORE for n in range(end + 1, stop)):
        return None
    for value in range(accs[0], end):  # the accumulators, and what the lanes' scope hides, are read after the loop only
        readers = users.get(value, [])
        inline = instrs[value].op in (IROps.CONST, IROps.DEFINE_VAR)  # names, not statements: visible anywhere
        if value in accs and any(r < end and instrs[r].op is not IROps.ASSIGN and not _updates_of(instrs[r], value)
                                 for r in readers):
            return None
        if not inline and value not in accs and any(r > end for r in readers):
            return None
    return BlockReduce(tuple(accs), tuple(updates), loops, end, stop)


def grid_map(program: LinearProgram) -> GridMap:
    """The loops of `program` a GPU spreads over its threads (module docstring)."""
    closers, users = _closers(program), _users(program)
    if not any(instr.op is IROps.LOOP and instr.arg is LoopKind.GLOBAL for instr in program.instrs):
        block = _block_reduce(program, 0, len(program.instrs), closers, users)
        return GridMap((), None, block)
    candidates = _candidates(program, closers)
    if not candidates:
        return GridMap((), None)
    groups = [_nest(program, loop, closers, LoopKind.GLOBAL) for loop in candidates]
    counts = [_trip_count(program, group) for group in groups]
    count = None if any(c is None for c in counts) else max(c for c in counts if c is not None)
    if len(groups) == 1 and count is not None and count <= MAX_BLOCK_OUTPUTS:
        inner = groups[0][-1]
        block = _block_reduce(program, inner + 1, closers[inner], closers, users)
        if block is not None:
            return GridMap(tuple(groups), count, block)
    return GridMap(tuple(groups), count)
