"""Fused multiply-add in float sums of loaded products: `acc = acc + a*b` becomes `acc = FMA(a, b, acc)`.

A SUM reduction whose summand is a product of two loaded values (a matrix product, a convolution, a
dot product built as expand-multiply-sum) accumulates `acc + round(a*b)`. On a renderer with
`fused_multiply_add` (CPU hosts with FMA instructions: fast/runtime/cpu.py) the accumulation step
skips the rounding of the product: one instruction instead of two. A float SUM's order and rounding
are unspecified within the reduction tolerance of docs/semantics.md, so the finite results may
differ from the unfused ones by that much; the user-visible `MULACC` op keeps its two roundings.

Infinities must not differ: the specified sum adds `round(a*b)`, which is infinite when the product
of finite a and b overflows, while the fused step keeps the exact product (`-inf + inf = NaN` would
become a finite number or the wrong infinity). No product overflows when every operand is below
`FMA_BOUNDS[dtype]` in magnitude (2^64 for float32: (2^64 - 2^40)^2 < the largest float32), so the
program lists the input buffers its fused products read (`LinearProgram.bounded_inputs`) and the
engine runs it only when their elements are all within the bound (engine/fma_guard.py), else the
same kernel lowered without fusion. That is why only products of two LOADs of input buffers (or
broadcasts of one, VECTORIZE) are fused: their operands are bounded by the buffers' contents.

What is rewritten, in kernels with at least FMA_MIN_REUSE flops per element of those inputs (so
that the guard's scan is cheap next to the kernel): an ALU ADD of float32 or float64 (scalar or
vector) whose operands are a DEFINE_ACC and an ALU MUL of the same dtype whose operands are such
loads, when the ADD's only use is the ASSIGN of its result to that accumulator. Positions are
unchanged; the MUL is left for dead code elimination. The rewrite is a pure function of the
instructions, so it is the same for every thread count and for CLANG and LLVM (both render FMA as
the hardware instruction).
"""
from __future__ import annotations

from fast.codegen.ir import BufferInfo, FusedOps, Instr, IROps
from fast.dtype import DType, dtypes
from fast.ops import BinaryOps

#: Operands below this magnitude never make a product that overflows (see the module docstring).
FMA_BOUNDS: dict[DType, float] = {dtypes.float32: 2.0**64, dtypes.float64: 2.0**512}
#: Fuse only kernels with at least this many flops per element of the inputs the guard scans: the
#: scan (numpy max and min, ~0.4 ns per element) then costs a few percent of what FMA saves. A
#: square matmul of side n has about n flops per input element (fused from n = 128 up); a dot
#: product has 2 (never fused).
FMA_MIN_REUSE = 128


def fuse_accumulations(instrs: tuple[Instr, ...], buffers: tuple[BufferInfo, ...],
                       flops: int) -> tuple[tuple[Instr, ...], frozenset[int]]:
    """(`instrs` with every accumulation `acc + a*b` of loaded a, b as `FMA(a, b, acc)`, the input
    buffers those loads read); positions of all instructions are unchanged. Unchanged (and no
    buffers) when the kernel's `flops` are under FMA_MIN_REUSE per element of those buffers."""
    uses: dict[int, list[int]] = {}
    for number, instr in enumerate(instrs):
        for src in instr.srcs:
            uses.setdefault(src, []).append(number)
    fused, bounded = list(instrs), set[int]()
    for number, instr in enumerate(instrs):
        operands = _accumulation(instrs, number, uses.get(number, []))
        if operands is None:
            continue
        sources = [_loaded_input(instrs, buffers, operand) for operand in operands[:2]]
        if None in sources:
            continue
        fused[number] = Instr(IROps.ALU, instr.dtype, operands, FusedOps.FMA)
        bounded.update(source for source in sources if source is not None)
    if not bounded or flops < FMA_MIN_REUSE * sum(buffers[index].size for index in bounded):
        return instrs, frozenset()
    return tuple(fused), frozenset(bounded)


def _accumulation(instrs: tuple[Instr, ...], number: int, users: list[int]) -> tuple[int, int, int] | None:
    """(a, b, acc) when instruction `number` is `acc + a*b` assigned back to acc, else None."""
    instr = instrs[number]
    if instr.op is not IROps.ALU or instr.arg is not BinaryOps.ADD or instr.dtype is None \
            or instr.dtype.scalar() not in FMA_BOUNDS or len(users) != 1:
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


def _loaded_input(instrs: tuple[Instr, ...], buffers: tuple[BufferInfo, ...], number: int) -> int | None:
    """The input buffer whose elements value `number` is (a LOAD, or a VECTORIZE of one value that
    is), else None. A masked LOAD also gives 0, which is within every bound."""
    instr = instrs[number]
    if instr.op is IROps.VECTORIZE and len(set(instr.srcs)) == 1:
        instr = instrs[instr.srcs[0]]
    if instr.op is not IROps.LOAD or instr.arg >= len(buffers) or buffers[instr.arg].is_output:
        return None
    return int(instr.arg)
