"""The linear IR between lowering and rendering: instructions, a builder, a printer, a verifier.

A `LinearProgram` is a frozen tuple of `Instr`; an instruction's value is named by its position in
that tuple (printed `%N`). Instructions come in source order: a value is defined before it is used,
and a value defined inside a `LOOP` is visible only until the matching `ENDLOOP` (C block scope).

Instruction set (`IROps`):
- `DEFINE_VAR`  arg: variable name; int64. A symbolic shape variable (a kernel parameter).
- `CONST`       arg: the value, normalised to `dtype` (`ops.normalize_const`). Renderers inline it.
- `LOOP`        srcs: (start, end) int64, end exclusive; arg: `LoopKind`; its value is the counter.
- `ENDLOOP`     srcs: (loop,); closes the innermost open loop. No value.
- `INDEX`       arg: `IndexOps`; int64 index arithmetic (or bool for CMPLT/AND). Never overflows:
                lowering only builds sums of products of loop counters, shape variables and strides.
- `LOAD`        arg: buffer idx; srcs: (index,) or (index, valid). With `valid`, the element is read
                only when valid is true, else the value is 0 (renderers must not touch memory then).
- `ALU`         arg: an elementwise op (`UnaryOps`/`BinaryOps`/`TernaryOps`) with the semantics of
                docs/semantics.md for operands of dtype T; CAST/BITCAST convert to `dtype`; or
                `FusedOps.FMA` (a*b + c rounded once; float32/float64), which only lowering makes
                (codegen/fma.py: float SUM accumulations on renderers with `fused_multiply_add`).
- `DEFINE_ACC`  arg: initial value; a mutable accumulator. Reading it gives its current value.
- `ASSIGN`      srcs: (acc, value); acc := value. No value.
- `STORE`       arg: buffer idx (an output); srcs: (index, value) or (index, value, valid).
- `PREFETCH`    arg: buffer idx; srcs: (index,) or (index, valid). No value, no effect on any value: a
                hint that the cache line holding buffer[index] is read soon (codegen/prefetch.py).
                `index` is in bounds whenever `valid` holds; renderers touch nothing otherwise and
                may render it as nothing at all.
- `VECTORIZE`   srcs: n scalar values of one dtype T; its value is the vector `T.vec(n)` of them.
- `GEP`         srcs: (vector,); arg: lane number; its value is that lane (a scalar).
- `SHUFFLE`     srcs: (a, b), two vectors of one dtype `T.vec(n)`; arg: a tuple of n lane numbers in
                [0, 2n) (i < n: lane i of a; n + i: lane i of b); its value is the `T.vec(n)` of those
                lanes. Only the GEMM lowering makes it (codegen/gemm_loops.py, the transposing pack).
- `TILE`        arg: `(TileOps.X, *numbers)`; srcs: () or (index,). No value. The matrix tile registers
                of x86 AMX (eight tiles, each 16 rows of 64 bytes; `TileOps` lists the forms): only
                the GEMM lowering makes them (codegen/gemm_tiles.py), only for renderers with
                `RendererOptions.matrix_tiles`. A LOAD/STORE form names a buffer and a row stride in
                its elements; the lowering keeps every row it touches within the buffer.

Vectors: a value whose dtype has `count > 1` is a vector of that many lanes. CONST of a vector dtype
is its scalar `arg` in every lane; ALU on vectors works lane by lane with the scalar semantics (every
operand has the same lane count; WHERE's condition is `bool.vec(n)`); a vector LOAD reads the `n`
consecutive elements starting at `index` (all or none, by the scalar `valid`); a vector STORE writes
them; a vector DEFINE_ACC holds one accumulator per lane. `IRBuilder` (codegen/builder.py) only
emits a vector ALU op that the renderer lists in `RendererOptions.vector_ops` / `vector_casts`
(integer DIV/MOD on vectors only with a CONST divisor that is neither 0 nor -1); any other op on
vectors is split into lanes (GEP, scalar ops, VECTORIZE). Half floats (`float16`, `bfloat16`) are
ordinary dtypes here; how they are stored and rounded per op is the renderer's business.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from fast.dtype import ConstType, DType, dtypes
from fast.ops import (
    OpEnum,
)


class IROps(Enum):
    DEFINE_VAR = auto(); CONST = auto(); LOOP = auto(); ENDLOOP = auto(); INDEX = auto()  # noqa: E702
    LOAD = auto(); ALU = auto(); DEFINE_ACC = auto(); ASSIGN = auto(); STORE = auto()  # noqa: E702
    VECTORIZE = auto(); GEP = auto(); PREFETCH = auto(); SHUFFLE = auto(); TILE = auto()  # noqa: E702


class TileOps(Enum):
    """The forms of an `IROps.TILE` instruction, by their arg tuples (t, c, a, b: tile numbers 0-7):
    - `(CONFIG,)`: every tile 16 rows x 64 bytes (palette 1); before any other form in the kernel;
    - `(ZERO, t)`: tile t := 0;
    - `(LOAD, t, buffer, stride)`, srcs (index,): row r of tile t := the 64 bytes at
      buffer[index + r * stride] (stride in the buffer's elements);
    - `(DOT, c, a, b)`: float32 tile c (16 x 16) += a (16 rows x 32 bfloat16) x b (16 rows of 16
      column pairs: b[k // 2][n][k % 2]); products exact, sums rounded to nearest float32, subnormal
      inputs and results read and written as zero (the hardware's TDPBF16PS);
    - `(STORE, t, buffer, stride)`, srcs (index,): the 64 bytes of row r of tile t to
      buffer[index + r * stride];
    - `(RELEASE,)`: the tiles are free again; after the last other form."""

    CONFIG = auto(); ZERO = auto(); LOAD = auto(); DOT = auto(); STORE = auto(); RELEASE = auto()  # noqa: E702


#: Tile registers, rows per tile and bytes per row (`TileOps.CONFIG`).
TILE_REGISTERS, TILE_ROWS, TILE_ROW_BYTES = 8, 16, 64


def tile_fields(program: LinearProgram, instr: Instr) -> dict[str, int]:
    """A TILE instruction's numbers by name, for the renderers' per-form templates: `t`, `c`, `a`, `b`
    (tile numbers), `buffer` and `row_bytes` (the LOAD and STORE forms' stride in bytes)."""
    form, *numbers = instr.arg
    if form in (TileOps.LOAD, TileOps.STORE):
        tile, buffer, stride = numbers
        return {"t": tile, "buffer": buffer, "row_bytes": stride * program.memory(buffer).dtype.itemsize}
    return dict(zip(("c", "a", "b") if form is TileOps.DOT else ("t",), numbers, strict=False))


def tile_config_bytes() -> tuple[int, ...]:
    """The 64-byte tile configuration `TileOps.CONFIG` loads: palette 1, start row 0, then per tile
    its bytes per row (16-bit) and its rows, every tile 16 rows x 64 bytes."""
    header = [1] + [0] * 15
    columns = [byte for _ in range(TILE_REGISTERS) for byte in (TILE_ROW_BYTES & 0xFF, TILE_ROW_BYTES >> 8)]
    rows = [TILE_ROWS] * TILE_REGISTERS
    return tuple(header + columns + [0] * (32 - len(columns)) + rows + [0] * (16 - len(rows)))


class FusedOps(OpEnum):
    """ALU ops of the IR that are no graph op. FMA(a, b, c): a*b + c with one rounding, operands
    and result float32 or float64 (codegen/fma.py is its only maker)."""

    FMA = auto()


class IndexOps(Enum):
    """int64 index arithmetic. FLOORDIV/FLOORMOD round toward -inf; their divisor is a positive CONST.

    NONNEG_DIV/NONNEG_MOD are the same operations when lowering proved the numerator >= 0 and the
    divisor > 0 (the divisor may then be symbolic; renderers may use plain truncating division).
    CMPLT gives bool; AND takes and gives bool.
    """

    ADD = auto(); MUL = auto(); FLOORDIV = auto(); FLOORMOD = auto()  # noqa: E702
    NONNEG_DIV = auto(); NONNEG_MOD = auto(); CMPLT = auto(); AND = auto()  # noqa: E702


class LoopKind(Enum):
    """GLOBAL loops walk output axes (iterations independent: a threaded runtime may split the
    outermost one); REDUCE loops walk reduced axes (iterations update accumulators in order)."""

    GLOBAL = auto(); REDUCE = auto()  # noqa: E702


@dataclass(frozen=True)
class Instr:
    op: IROps
    dtype: DType | None
    srcs: tuple[int, ...] = ()
    arg: Any = None


@dataclass(frozen=True)
class BufferInfo:
    """Kernel parameter `idx`: element dtype, whether the kernel writes it, and `size`, the number
    of elements the kernel may touch (the buffer must hold at least that many)."""

    idx: int
    dtype: DType
    is_output: bool
    size: int


@dataclass(frozen=True)
class LinearProgram:
    """A lowered kernel. `buffers[i].idx == i` (outputs first); `var_names` are the int64 kernel
    parameters after the buffers, in order; `variables` are the shape-layer Variables of the first
    `len(variables)` of them. `flops` and `mem_bytes` are estimates for DEBUG=2 lines (symbolic sizes
    at their maximum). `threaded`: the last two parameters are `core~, cores~` (0 <= core < cores);
    the kernel then runs only its share of the outermost GLOBAL loop, so launching it once per core
    value covers every output exactly once, and the values do not depend on `cores`.
    `const_slots`: the `const_slots` var_names right after the shape variables carry the bit
    patterns of the kernel's constants (codegen/const_args.py); 0 when constants are inline.
    `streamed`: output buffers that the kernel never loads and whose vector STOREs may bypass the
    caches (non-temporal); a renderer that streams them ends the kernel with a store fence
    (codegen/streaming.py). Which values land where never depends on it.
    `bounded_inputs`: input buffers whose loads feed fused multiply-adds (codegen/fma.py); the
    program may run only when each of their elements is below `FMA_BOUNDS[dtype]` in magnitude
    (the engine checks, engine/fma_guard.py); empty for a program without FMA.
    `scratch`: arrays private to one call of the kernel (one per thread share), numbered after the
    buffers (`scratch[i].idx == len(buffers) + i`, `size` elements, aligned to 64 bytes, contents
    undefined until stored): the packed panels of a matmul (codegen/gemm.py). Not parameters.
    `chunks_per_thread`: how many `core~` chunks per thread a threaded launch should cut the kernel
    into (runtime/launch.py), 0 for the runtime's default; a kernel whose chunks each repeat set-up
    work (a GEMM packing B) asks for 1. Never changes values.
    `paths`, `split_counts`: which optimizations the lowering took, a record for coverage and tools
    (codegen/paths.py); nothing reads them to run the kernel."""

    name: str
    instrs: tuple[Instr, ...]
    buffers: tuple[BufferInfo, ...]
    var_names: tuple[str, ...] = ()
    variables: tuple[Any, ...] = ()
    flops: int = 0
    mem_bytes: int = 0
    threaded: bool = False
    const_slots: int = 0
    streamed: frozenset[int] = frozenset()
    bounded_inputs: tuple[int, ...] = ()
    scratch: tuple[BufferInfo, ...] = ()
    chunks_per_thread: int = 0
    paths: frozenset[str] = frozenset()
    split_counts: tuple[int, ...] = ()

    def memory(self, idx: int) -> BufferInfo:
        """The kernel parameter or scratch array that LOAD/STORE/PREFETCH `idx` names."""
        return self.buffers[idx] if idx < len(self.buffers) else self.scratch[idx - len(self.buffers)]

    @property
    def memory_count(self) -> int:
        """Buffers plus scratch arrays: the valid LOAD/STORE indices are 0..memory_count-1."""
        return len(self.buffers) + len(self.scratch)


class IRError(ValueError):
    """A malformed LinearProgram (a bug in lowering, never in user input)."""


INT64 = dtypes.int64
BOOL = dtypes.bool
VALUE_OPS = frozenset({IROps.DEFINE_VAR, IROps.CONST, IROps.LOOP, IROps.INDEX, IROps.LOAD, IROps.ALU,
                       IROps.DEFINE_ACC, IROps.VECTORIZE, IROps.GEP, IROps.SHUFFLE})
_PURE = frozenset({IROps.DEFINE_VAR, IROps.CONST, IROps.INDEX, IROps.LOAD, IROps.ALU, IROps.VECTORIZE, IROps.GEP,
                   IROps.SHUFFLE})


def same_const(a: ConstType, b: ConstType) -> bool:
    """Constant identity: type-aware, NaN equals NaN, -0.0 differs from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------- printer

def eliminate_dead_code(instrs: tuple[Instr, ...]) -> tuple[Instr, ...]:
    """Drop pure instructions whose value nobody uses (left behind by lane splitting), renumbering
    the rest. Loads are pure (they never trap: masked loads read nothing when invalid)."""
    used = [False] * len(instrs)
    for number in range(len(instrs) - 1, -1, -1):
        instr = instrs[number]
        if instr.op not in _PURE or used[number]:
            used[number] = True
            for src in instr.srcs:
                used[src] = True
    renumber: dict[int, int] = {}
    kept: list[Instr] = []
    for number, instr in enumerate(instrs):
        if used[number]:
            renumber[number] = len(kept)
            kept.append(Instr(instr.op, instr.dtype, tuple(renumber[src] for src in instr.srcs), instr.arg))
    return tuple(kept)


def format_instr(number: int, instr: Instr) -> str:
    dtype = instr.dtype.name if instr.dtype is not None else ""
    arg = instr.arg.name if isinstance(instr.arg, Enum) else instr.arg
    if isinstance(instr.arg, DType):
        arg = instr.arg.name
    if instr.op in (IROps.LOAD, IROps.STORE, IROps.PREFETCH):
        arg = f"data{instr.arg}"
    if instr.op is IROps.TILE:
        arg = " ".join([instr.arg[0].name.lower(), *map(str, instr.arg[1:])])
    srcs = " ".join(f"%{src}" for src in instr.srcs)
    head = f"%{number} = " if instr.op in VALUE_OPS else ""
    parts = [part for part in (instr.op.name.lower(), dtype, "" if arg is None else str(arg), srcs) if part]
    return head + " ".join(parts)


def format_program(program: LinearProgram) -> str:
    """Readable text: a header with the buffers, then one instruction per line, indented by loop."""
    bufs = ", ".join(f"data{b.idx}:{b.dtype.name}[{b.size}]{' out' if b.is_output else ''}"
                     f"{' streamed' if b.idx in program.streamed else ''}" for b in program.buffers)
    lines = [f"kernel {program.name}({bufs}{''.join(', ' + v for v in program.var_names)})"
             f"  flops~{program.flops} bytes~{program.mem_bytes}"]
    depth = 1
    for number, instr in enumerate(program.instrs):
        if instr.op is IROps.ENDLOOP:
            depth -= 1
        lines.append("  " * depth + format_instr(number, instr))
        if instr.op is IROps.LOOP:
            depth += 1
    return "\n".join(lines)
