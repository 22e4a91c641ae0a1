"""Fused multiply-add in float sums of products: `acc = acc + a*b` becomes `acc = FMA(a, b, acc)`.

A SUM reduction whose summand is a product (a matrix product, a convolution, a dot product built as
expand-multiply-sum) accumulates `acc + round(a*b)`. On a renderer with `fused_multiply_add` (CPU
hosts with FMA instructions: fast/runtime/cpu.py) the accumulation step skips the rounding of the
product: one instruction instead of two, and a result at least as close to the exact sum. This is
allowed because a float SUM's order and rounding are unspecified within the reduction tolerance of
docs/semantics.md; the user-visible `MULACC` op keeps its two roundings, and every other product and
sum is untouched. The rewrite is a pure function of the instructions and the option, so it is the
same for every thread count and for CLANG and LLVM (both render FMA as the hardware instruction).

What is rewritten: an ALU ADD of float32 or float64 (scalar or vector) whose operands are a
DEFINE_ACC and an ALU MUL of the same dtype, when the ADD's only use is the ASSIGN of its result to
that accumulator. The MUL stays where it was (other uses keep its rounded value); dead code
elimination drops it when nothing else reads it. Half floats are never fused (their products are
rounded to the half dtype by definition of the per-op rounding).
"""
from __future__ import annotations

from fast.codegen.ir import FusedOps, Instr, IROps
from fast.dtype import dtypes
from fast.ops import BinaryOps

FUSABLE = (dtypes.float32, dtypes.float64)


def fuse_accumulations(instrs: tuple[Instr, ...]) -> tuple[Instr, ...]:
    """`instrs` with every accumulation `acc + a*b` (module docstring) as `FMA(a, b, acc)`; the
    positions of all instructions are unchanged."""
    uses: dict[int, list[int]] = {}
    for number, instr in enumerate(instrs):
        for src in instr.srcs:
            uses.setdefault(src, []).append(number)
    fused = list(instrs)
    for number, instr in enumerate(instrs):
        operands = _accumulation(instrs, number, uses.get(number, []))
        if operands is not None:
            fused[number] = Instr(IROps.ALU, instr.dtype, operands, FusedOps.FMA)
    return tuple(fused)


def _accumulation(instrs: tuple[Instr, ...], number: int, users: list[int]) -> tuple[int, int, int] | None:
    """(a, b, acc) when instruction `number` is `acc + a*b` assigned back to acc, else None."""
    instr = instrs[number]
    if instr.op is not IROps.ALU or instr.arg is not BinaryOps.ADD or instr.dtype is None \
            or instr.dtype.scalar() not in FUSABLE or len(users) != 1:
        return None
    first, second = instr.srcs
    acc, product = (first, second) if instrs[first].op is IROps.DEFINE_ACC else (second, first)
    multiply = instrs[product]
    if instrs[acc].op is not IROps.DEFINE_ACC or multiply.op is not IROps.ALU \
            or multiply.arg is not BinaryOps.MUL or multiply.dtype != instr.dtype:
        return None
    assign = instrs[users[0]]
    if assign.op is not IROps.ASSIGN or assign.srcs != (acc, number):
        return None
    return multiply.srcs[0], multiply.srcs[1], acc
