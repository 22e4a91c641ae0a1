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
    BinaryOps,
    OpEnum,
    TernaryOps,
    UnaryOps,
    normalize_const,
    supports,
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


# ---------------------------------------------------------------- verifier

def _alu_result(number: int, instr: Instr, src_types: list[DType]) -> DType:
    """The dtype an ALU instruction must have, given its operand dtypes; IRError when ill-typed.
    Vector operands are checked lane-wise: every operand has the same lane count."""
    lanes = {t.count for t in src_types}
    if len(lanes) != 1 or (instr.dtype is not None and instr.dtype.count != src_types[0].count):
        raise IRError(f"%{number} alu {getattr(instr.arg, 'name', instr.arg)}: lane counts "
                      f"{[t.count for t in src_types]} -> {instr.dtype}")
    count = src_types[0].count
    if count > 1:
        scalar_instr = Instr(instr.op, instr.dtype.scalar() if instr.dtype is not None else None, instr.srcs, instr.arg)
        return _alu_result(number, scalar_instr, [t.scalar() for t in src_types]).vec(count)
    op = instr.arg
    where = f"%{number} alu {getattr(op, 'name', op)}"
    if op in (UnaryOps.CAST, UnaryOps.BITCAST):
        if len(src_types) != 1 or not isinstance(instr.dtype, DType):
            raise IRError(f"{where}: needs one operand and a target dtype")
        if op is UnaryOps.BITCAST and (instr.dtype.itemsize != src_types[0].itemsize
                                       or BOOL in (instr.dtype, src_types[0])):
            raise IRError(f"{where}: cannot bitcast {src_types[0].name} to {instr.dtype.name}")
        return instr.dtype
    if op is TernaryOps.WHERE:
        if len(src_types) != 3 or src_types[0] != BOOL or src_types[1] != src_types[2]:
            raise IRError(f"{where}: operands {[t.name for t in src_types]}")
        return src_types[1]
    if op is FusedOps.FMA:
        if len(src_types) != 3 or len(set(src_types)) != 1 or src_types[0] not in (dtypes.float32, dtypes.float64):
            raise IRError(f"{where}: operands {[t.name for t in src_types]}")
        return src_types[0]
    arity = 1 if isinstance(op, UnaryOps) else 2 if isinstance(op, BinaryOps) else 3
    if len(src_types) != arity or len(set(src_types)) != 1 or not supports(op, src_types[0]):
        raise IRError(f"{where}: operands {[t.name for t in src_types]}")
    return BOOL if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ) else src_types[0]


def _memory_dtype(program: LinearProgram, where: str, instr: Instr, src_types: list[DType]) -> DType | None:
    """LOAD: (int64 index[, bool valid]) -> the buffer dtype; STORE: (index, value[, valid]) to an output."""
    if not 0 <= instr.arg < program.memory_count:
        raise IRError(f"{where}: unknown buffer {instr.arg}")
    buf = program.memory(instr.arg)
    lanes = instr.dtype.count if instr.op is IROps.LOAD and instr.dtype is not None \
        else src_types[1].count if instr.op is IROps.STORE and len(src_types) > 1 else 1
    element = buf.dtype.vec(lanes)
    want = [INT64] + ([element] if instr.op is IROps.STORE else [])
    if src_types not in (want, want + [BOOL]):
        raise IRError(f"{where}: operands {[t.name for t in src_types]}, expected {[t.name for t in want]}")
    if instr.op is IROps.STORE and not buf.is_output and instr.arg < len(program.buffers):
        raise IRError(f"{where}: buffer {instr.arg} is not an output")
    return element if instr.op is IROps.LOAD else None


def _shuffle_dtype(where: str, instr: Instr, src_types: list[DType]) -> DType:
    """The dtype of a SHUFFLE: its operands' (two vectors of one dtype, n lane numbers in [0, 2n))."""
    lanes = instr.arg
    if len(src_types) != 2 or src_types[0] != src_types[1] or src_types[0].count == 1 \
            or not isinstance(lanes, tuple) or len(lanes) != src_types[0].count \
            or not all(isinstance(lane, int) and 0 <= lane < 2 * len(lanes) for lane in lanes):
        raise IRError(f"{where}: lanes {lanes!r} of {[t.name for t in src_types]}")
    return src_types[0]


def _check_tile(program: LinearProgram, where: str, instr: Instr, src_types: list[DType]) -> None:
    """A TILE instruction: a known form, tile numbers in range, LOAD/STORE with a buffer and an index."""
    arg = instr.arg
    shapes = {TileOps.CONFIG: 0, TileOps.RELEASE: 0, TileOps.ZERO: 1, TileOps.DOT: 3, TileOps.LOAD: 3, TileOps.STORE: 3}
    form = arg[0] if isinstance(arg, tuple) and arg else None
    if form not in shapes or len(arg) != 1 + shapes[form] or not all(isinstance(x, int) for x in arg[1:]):
        raise IRError(f"{where}: malformed {arg!r}")
    memory = form in (TileOps.LOAD, TileOps.STORE)
    tiles = arg[1:2] if memory else arg[1:]
    if not all(0 <= t < TILE_REGISTERS for t in tiles) or src_types != ([INT64] if memory else []):
        raise IRError(f"{where}: tiles {tiles}, operands {[t.name for t in src_types]}")
    if memory and (not 0 <= arg[2] < program.memory_count or arg[3] <= 0):
        raise IRError(f"{where}: buffer {arg[2]}, stride {arg[3]}")
    if form is TileOps.STORE and arg[2] < len(program.buffers) and not program.buffers[arg[2]].is_output:
        raise IRError(f"{where}: buffer {arg[2]} is not an output")


def _expected_dtype(program: LinearProgram, number: int, instr: Instr, src_types: list[DType]) -> DType | None:
    op, where = instr.op, f"%{number} {instr.op.name.lower()}"
    if op is IROps.TILE:
        _check_tile(program, where, instr, src_types)
        return None
    if op is IROps.PREFETCH:
        if not 0 <= instr.arg < program.memory_count or src_types not in ([INT64], [INT64, BOOL]):
            raise IRError(f"{where}: buffer {instr.arg}, operands {[t.name for t in src_types]}")
        return None
    if op in (IROps.LOAD, IROps.STORE):
        return _memory_dtype(program, where, instr, src_types)
    if op is IROps.INDEX:
        ins, out = {IndexOps.AND: (BOOL, BOOL), IndexOps.CMPLT: (INT64, BOOL)}.get(instr.arg, (INT64, INT64))
        if src_types != [ins, ins]:
            raise IRError(f"{where} {instr.arg}: operands {[t.name for t in src_types]}")
        divisor = program.instrs[instr.srcs[1]]
        if instr.arg in (IndexOps.FLOORDIV, IndexOps.FLOORMOD) and (divisor.op is not IROps.CONST or divisor.arg <= 0):
            raise IRError(f"{where}: divisor %{instr.srcs[1]} is not a positive constant")
        if instr.arg in (IndexOps.NONNEG_DIV, IndexOps.NONNEG_MOD) and divisor.op is IROps.CONST and divisor.arg <= 0:
            raise IRError(f"{where}: divisor %{instr.srcs[1]} is not positive")
        return out
    if op is IROps.ALU:
        return _alu_result(number, instr, src_types)
    if op is IROps.VECTORIZE:
        if len(src_types) < 2 or len(set(src_types)) != 1 or src_types[0].count != 1:
            raise IRError(f"{where}: needs two or more scalar operands of one dtype")
        return src_types[0].vec(len(src_types))
    if op is IROps.GEP:
        if len(src_types) != 1 or not 0 <= instr.arg < src_types[0].count or src_types[0].count == 1:
            raise IRError(f"{where}: lane {instr.arg} of {[t.name for t in src_types]}")
        return src_types[0].scalar()
    if op is IROps.SHUFFLE:
        return _shuffle_dtype(where, instr, src_types)
    if op in (IROps.CONST, IROps.DEFINE_ACC):
        if not isinstance(instr.dtype, DType) or not same_const(normalize_const(instr.arg, instr.dtype.scalar()),
                                                                instr.arg):
            raise IRError(f"{where}: value {instr.arg!r} is not a normalised {instr.dtype}")
        return instr.dtype
    if op is IROps.DEFINE_VAR:
        if instr.arg not in program.var_names:
            raise IRError(f"{where}: variable {instr.arg!r} is not a kernel parameter")
        return INT64
    if op is IROps.LOOP:
        if src_types != [INT64, INT64] or not isinstance(instr.arg, LoopKind):
            raise IRError(f"{where}: needs int64 start, end and a LoopKind")
        return INT64
    if op is IROps.ASSIGN:
        if program.instrs[instr.srcs[0]].op is not IROps.DEFINE_ACC or src_types[0] != src_types[1]:
            raise IRError(f"{where}: target must be an accumulator of the value's dtype")
        return None
    return None  # ENDLOOP: checked by the scope walk


def verify(program: LinearProgram) -> None:
    """Check scoping (defined before use, loops nested and closed) and dtypes; raise IRError."""
    if [b.idx for b in program.buffers] != list(range(len(program.buffers))):
        raise IRError(f"{program.name}: buffer indices {[b.idx for b in program.buffers]} are not 0..n-1")
    alive: set[int] = set()
    scopes: list[list[int]] = [[]]
    open_loops: list[int] = []
    for number, instr in enumerate(program.instrs):
        for src in instr.srcs:
            if src not in alive:
                raise IRError(f"%{number} {instr.op.name.lower()}: operand %{src} is not defined here")
        if instr.op is IROps.ENDLOOP:
            if not open_loops or instr.srcs != (open_loops[-1],):
                raise IRError(f"%{number} endloop: does not close the innermost open loop")
            open_loops.pop()
            alive.difference_update(scopes.pop())
            continue
        src_types = [program.instrs[src].dtype for src in instr.srcs]
        if any(t is None for t in src_types):
            raise IRError(f"%{number} {instr.op.name.lower()}: an operand has no value")
        expected = _expected_dtype(program, number, instr, src_types)  # type: ignore[arg-type]
        if expected != instr.dtype:
            raise IRError(f"%{number} {instr.op.name.lower()}: dtype {instr.dtype} but operands give {expected}")
        if instr.op is IROps.LOOP:  # the counter lives inside its own loop
            open_loops.append(number)
            scopes.append([])
        if instr.op in VALUE_OPS:
            alive.add(number)
            scopes[-1].append(number)
    if open_loops:
        raise IRError(f"{program.name}: loops {open_loops} are never closed")


