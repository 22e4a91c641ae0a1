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
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fast.codegen.ir import IROps, LinearProgram, LoopKind

_PURE = frozenset({IROps.CONST, IROps.DEFINE_VAR, IROps.INDEX, IROps.LOAD, IROps.ALU, IROps.VECTORIZE, IROps.GEP})


@dataclass(frozen=True)
class GridMap:
    """`groups`: per grid-stride loop, the LOOP instruction numbers it flattens, outermost first (no
    group: the kernel runs on one thread). `count`: iterations of the longest group when every
    bound is a constant, None when one is symbolic (also None without groups)."""

    groups: tuple[tuple[int, ...], ...]
    count: int | None

    @property
    def single(self) -> bool:
        return not self.groups

    @property
    def heads(self) -> dict[int, tuple[int, ...]]:
        """Outermost loop number -> its group."""
        return {group[0]: group for group in self.groups}

    @property
    def folded(self) -> frozenset[int]:
        """Loops flattened into an outer loop of their group: no loop of their own is rendered."""
        return frozenset(loop for group in self.groups for loop in group[1:])


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


def _inner_loop(program: LinearProgram, outer: int, closers: dict[int, int]) -> int | None:
    """The GLOBAL loop perfectly nested in `outer` (module docstring), or None."""
    end = closers[outer]
    for number in range(outer + 1, end):
        instr = program.instrs[number]
        if instr.op in _PURE:
            continue
        if instr.op is not IROps.LOOP or instr.arg is not LoopKind.GLOBAL or closers[number] != end - 1:
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


def grid_map(program: LinearProgram) -> GridMap:
    """The loops of `program` a GPU spreads over its threads (module docstring)."""
    closers = _closers(program)
    candidates = _candidates(program, closers)
    if not candidates:
        return GridMap((), None)
    groups = []
    for loop in candidates:
        group = [loop]
        while (inner := _inner_loop(program, group[-1], closers)) is not None:
            group.append(inner)
        groups.append(tuple(group))
    counts = [_trip_count(program, group) for group in groups]
    count = None if any(c is None for c in counts) else max(c for c in counts if c is not None)
    return GridMap(tuple(groups), count)
