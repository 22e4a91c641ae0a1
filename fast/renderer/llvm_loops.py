"""Which loops of a program the LLVM renderer keeps from LLVM's loop vectorizer.

The codegen chooses vectorization itself (vector dtypes in the IR); LLVM's loop vectorizer only
sees the loops it left scalar (tails, axes it did not widen). In LLVM 22 (llvmlite 0.50) that
vectorizer decides whether each value of a loop is uniform by walking the value's operands again
for every use, which takes time exponential in the depth of a shared expression. An innermost
loop that recomputes a deep loop-invariant expression every trip (float64 SIN of a value broadcast
along the loop: its double-double argument reduction is a few hundred shared values deep) then
compiled for minutes. Such a loop gets `llvm.loop.vectorize.enable false`: the invariant part would
be hoisted by LLVM's LICM anyway, and what vectorizing the rest of a scalar tail gains is small.

Invariant: the marked loops are innermost loops (no LOOP between LOOP and its ENDLOOP) holding at
least `INVARIANT_LIMIT` instructions whose operands do not depend, directly or through other
instructions, on the loop's counter or on an accumulator.
"""
from __future__ import annotations

from fast.codegen.ir import IROps, LinearProgram

INVARIANT_LIMIT = 32
_COMPUTED = (IROps.ALU, IROps.LOAD, IROps.INDEX, IROps.VECTORIZE, IROps.GEP, IROps.SHUFFLE)


def unvectorized_loops(program: LinearProgram) -> frozenset[int]:
    """Numbers of the LOOP instructions that must not be given to LLVM's loop vectorizer."""
    accumulators = {n for n, instr in enumerate(program.instrs) if instr.op is IROps.DEFINE_ACC}
    marked: set[int] = set()
    opened: int | None = None
    for number, instr in enumerate(program.instrs):
        if instr.op is IROps.LOOP:
            opened = number
        elif instr.op is IROps.ENDLOOP:
            if opened == instr.srcs[0] and _invariant_count(program, opened, number, accumulators) >= INVARIANT_LIMIT:
                marked.add(opened)
            opened = None
    return frozenset(marked)


def _invariant_count(program: LinearProgram, loop: int, end: int, accumulators: set[int]) -> int:
    """How many computed instructions strictly between LOOP `loop` and its ENDLOOP `end` are the
    same on every trip (no operand varies with the counter or with an accumulator)."""
    varying = {loop} | accumulators
    count = 0
    for number in range(loop + 1, end):
        instr = program.instrs[number]
        if any(src in varying for src in instr.srcs):
            varying.add(number)
        elif instr.op in _COMPUTED:
            count += 1
    return count
