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
                docs/semantics.md for operands of dtype T; CAST/BITCAST convert to `dtype`.
- `DEFINE_ACC`  arg: initial value; a mutable accumulator. Reading it gives its current value.
- `ASSIGN`      srcs: (acc, value); acc := value. No value.
- `STORE`       arg: buffer idx (an output); srcs: (index, value) or (index, value, valid).
- `VECTORIZE`   srcs: n scalar values of one dtype T; its value is the vector `T.vec(n)` of them.
- `GEP`         srcs: (vector,); arg: lane number; its value is that lane (a scalar).

Vectors: a value whose dtype has `count > 1` is a vector of that many lanes. CONST of a vector dtype
is its scalar `arg` in every lane; ALU on vectors works lane by lane with the scalar semantics (every
operand has the same lane count; WHERE's condition is `bool.vec(n)`); a vector LOAD reads the `n`
consecutive elements starting at `index` (all or none, by the scalar `valid`); a vector STORE writes
them; a vector DEFINE_ACC holds one accumulator per lane. `IRBuilder` only emits a vector ALU op that
the renderer lists in `RendererOptions.vector_ops` / `vector_casts` (integer DIV/MOD on vectors only
with a CONST divisor that is neither 0 nor -1); any other op on vectors is split into lanes (GEP,
scalar ops, VECTORIZE). Half floats (`float16`, `bfloat16`) are ordinary dtypes here; how they are
stored and rounded per op is the renderer's business.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from fast.dtype import FLOATS as FLOAT_DTYPES
from fast.dtype import ConstType, DType, dtypes
from fast.ops import (
    BinaryOps,
    TernaryOps,
    UnaryOps,
    bitcast_const,
    cast_const,
    exec_alu,
    normalize_const,
    result_dtype,
    supports,
)


class IROps(Enum):
    DEFINE_VAR = auto(); CONST = auto(); LOOP = auto(); ENDLOOP = auto(); INDEX = auto()  # noqa: E702
    LOAD = auto(); ALU = auto(); DEFINE_ACC = auto(); ASSIGN = auto(); STORE = auto()  # noqa: E702
    VECTORIZE = auto(); GEP = auto()  # noqa: E702


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
    patterns of the kernel's constants (codegen/const_args.py); 0 when constants are inline."""

    name: str
    instrs: tuple[Instr, ...]
    buffers: tuple[BufferInfo, ...]
    var_names: tuple[str, ...] = ()
    variables: tuple[Any, ...] = ()
    flops: int = 0
    mem_bytes: int = 0
    threaded: bool = False
    const_slots: int = 0


class IRError(ValueError):
    """A malformed LinearProgram (a bug in lowering, never in user input)."""


INT64 = dtypes.int64
BOOL = dtypes.bool
VALUE_OPS = frozenset({IROps.DEFINE_VAR, IROps.CONST, IROps.LOOP, IROps.INDEX, IROps.LOAD, IROps.ALU,
                       IROps.DEFINE_ACC, IROps.VECTORIZE, IROps.GEP})
_PURE = frozenset({IROps.DEFINE_VAR, IROps.CONST, IROps.INDEX, IROps.LOAD, IROps.ALU, IROps.VECTORIZE, IROps.GEP})


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
    if instr.op in (IROps.LOAD, IROps.STORE):
        arg = f"data{instr.arg}"
    srcs = " ".join(f"%{src}" for src in instr.srcs)
    head = f"%{number} = " if instr.op in VALUE_OPS else ""
    parts = [part for part in (instr.op.name.lower(), dtype, "" if arg is None else str(arg), srcs) if part]
    return head + " ".join(parts)


def format_program(program: LinearProgram) -> str:
    """Readable text: a header with the buffers, then one instruction per line, indented by loop."""
    bufs = ", ".join(f"data{b.idx}:{b.dtype.name}[{b.size}]{' out' if b.is_output else ''}"
                     for b in program.buffers)
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
    arity = 1 if isinstance(op, UnaryOps) else 2 if isinstance(op, BinaryOps) else 3
    if len(src_types) != arity or len(set(src_types)) != 1 or not supports(op, src_types[0]):
        raise IRError(f"{where}: operands {[t.name for t in src_types]}")
    return BOOL if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ) else src_types[0]


def _memory_dtype(program: LinearProgram, where: str, instr: Instr, src_types: list[DType]) -> DType | None:
    """LOAD: (int64 index[, bool valid]) -> the buffer dtype; STORE: (index, value[, valid]) to an output."""
    if not 0 <= instr.arg < len(program.buffers):
        raise IRError(f"{where}: unknown buffer {instr.arg}")
    buf = program.buffers[instr.arg]
    lanes = instr.dtype.count if instr.op is IROps.LOAD and instr.dtype is not None \
        else src_types[1].count if instr.op is IROps.STORE and len(src_types) > 1 else 1
    element = buf.dtype.vec(lanes)
    want = [INT64] + ([element] if instr.op is IROps.STORE else [])
    if src_types not in (want, want + [BOOL]):
        raise IRError(f"{where}: operands {[t.name for t in src_types]}, expected {[t.name for t in want]}")
    if instr.op is IROps.STORE and not buf.is_output:
        raise IRError(f"{where}: buffer {instr.arg} is not an output")
    return element if instr.op is IROps.LOAD else None


def _expected_dtype(program: LinearProgram, number: int, instr: Instr, src_types: list[DType]) -> DType | None:
    op, where = instr.op, f"%{number} {instr.op.name.lower()}"
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


# ---------------------------------------------------------------- builder

_INDEX_FOLD: dict[IndexOps, Any] = {
    IndexOps.ADD: lambda a, b: a + b, IndexOps.MUL: lambda a, b: a * b,
    IndexOps.FLOORDIV: lambda a, b: a // b, IndexOps.FLOORMOD: lambda a, b: a % b,
    IndexOps.NONNEG_DIV: lambda a, b: a // b, IndexOps.NONNEG_MOD: lambda a, b: a % b,
    IndexOps.CMPLT: lambda a, b: a < b, IndexOps.AND: lambda a, b: a and b,
}


class IRBuilder:
    """Appends instructions with constant folding and scope-aware common-subexpression reuse.

    Pure instructions (CONST, DEFINE_VAR, INDEX, LOAD, ALU, VECTORIZE, GEP) with equal (op, dtype,
    srcs, arg) are emitted once per visible scope; an instruction that reads an accumulator directly
    is never reused, because the accumulator's value changes with each ASSIGN.

    `vector_ops` / `vector_casts` (from `RendererOptions`) say which ALU ops the renderer emits on
    vectors; `alu` splits any other op on vector operands into lanes.
    """

    def __init__(self, vector_ops: frozenset[tuple[Any, DType]] = frozenset(),
                 vector_casts: frozenset[tuple[Any, DType, DType]] = frozenset()) -> None:
        self.instrs: list[Instr] = []
        self._scopes: list[dict[tuple[Any, ...], int]] = [{}]
        self._loops: list[int] = []
        self.vector_ops, self.vector_casts = vector_ops, vector_casts

    def _emit(self, instr: Instr) -> int:
        reads_acc = any(self.instrs[src].op is IROps.DEFINE_ACC for src in instr.srcs)
        key_arg = repr(instr.arg) if instr.op is IROps.CONST else instr.arg
        key = (instr.op, instr.dtype, instr.srcs, key_arg)
        if instr.op in _PURE and not reads_acc:
            for scope in reversed(self._scopes):
                if key in scope:
                    return scope[key]
        self.instrs.append(instr)
        if instr.op in _PURE and not reads_acc:
            self._scopes[-1][key] = len(self.instrs) - 1
        return len(self.instrs) - 1

    def const_value(self, ref: int) -> ConstType | None:
        instr = self.instrs[ref]
        return instr.arg if instr.op is IROps.CONST else None  # type: ignore[no-any-return]

    def dtype(self, ref: int) -> DType:
        dtype = self.instrs[ref].dtype
        if dtype is None:
            raise IRError(f"%{ref} {self.instrs[ref].op.name.lower()} has no value")
        return dtype

    def const(self, value: ConstType, dtype: DType) -> int:
        """A constant of `dtype` (a vector dtype broadcasts the value to every lane)."""
        return self._emit(Instr(IROps.CONST, dtype, (), normalize_const(value, dtype.scalar())))

    def define_var(self, name: str) -> int:
        return self._emit(Instr(IROps.DEFINE_VAR, INT64, (), name))

    def index(self, op: IndexOps, left: int, right: int) -> int:
        """int64 arithmetic (bool for CMPLT/AND), folded when constant or trivially simplifiable."""
        a, b = self.const_value(left), self.const_value(right)
        if a is not None and b is not None:
            value = _INDEX_FOLD[op](a, b)
            return self.const(value, BOOL if op in (IndexOps.CMPLT, IndexOps.AND) else INT64)
        identity = {IndexOps.ADD: 0, IndexOps.MUL: 1, IndexOps.AND: True}.get(op)
        if identity is not None:
            if b == identity or a == identity:
                return left if b == identity else right
            if (op is IndexOps.MUL and 0 in (a, b)) or (op is IndexOps.AND and False in (a, b)):
                return left if a is not None else right
        if b == 1 and op in (IndexOps.FLOORDIV, IndexOps.NONNEG_DIV):
            return left
        out = BOOL if op in (IndexOps.CMPLT, IndexOps.AND) else INT64
        return self._emit(Instr(IROps.INDEX, out, (left, right), op))

    # -- vectors
    def vectorize(self, lanes: list[int]) -> int:
        """The vector of these scalar values (one lane each); a single value is returned as is."""
        if len(lanes) == 1:
            return lanes[0]
        values = [self.const_value(lane) for lane in lanes]
        dtype = self.dtype(lanes[0])
        if values[0] is not None and all(v is not None and same_const(v, values[0]) for v in values):
            return self.const(values[0], dtype.vec(len(lanes)))
        gathered = [self.instrs[lane] for lane in lanes]
        if all(g.op is IROps.GEP and g.srcs == gathered[0].srcs and g.arg == k for k, g in enumerate(gathered)) \
                and self.dtype(gathered[0].srcs[0]).count == len(lanes):
            return gathered[0].srcs[0]
        return self._emit(Instr(IROps.VECTORIZE, dtype.vec(len(lanes)), tuple(lanes)))

    def broadcast(self, ref: int, lanes: int) -> int:
        """A scalar value repeated in `lanes` lanes (vectors are returned unchanged)."""
        if lanes == 1 or self.dtype(ref).count > 1:
            return ref
        return self.vectorize([ref] * lanes)

    def gep(self, ref: int, lane: int) -> int:
        """Lane `lane` of a vector value (a scalar value is the same in every lane)."""
        instr, dtype = self.instrs[ref], self.dtype(ref)
        if dtype.count == 1:
            return ref
        if instr.op is IROps.CONST:
            return self.const(instr.arg, dtype.scalar())
        if instr.op is IROps.VECTORIZE:
            return instr.srcs[lane]
        return self._emit(Instr(IROps.GEP, dtype.scalar(), (ref,), lane))

    def _vector_supported(self, op: Any, srcs: tuple[int, ...], to_dtype: DType | None) -> bool:
        scalars = [self.dtype(src).scalar() for src in srcs]
        if op in (UnaryOps.CAST, UnaryOps.BITCAST):
            return (op, scalars[0], to_dtype) in self.vector_casts
        if op in (BinaryOps.DIV, BinaryOps.MOD) and scalars[0] not in FLOAT_DTYPES:
            divisor = self.const_value(srcs[1])
            return (op, scalars[0]) in self.vector_ops and divisor is not None and divisor not in (0, -1)
        return (op, scalars[1 if op is TernaryOps.WHERE else 0]) in self.vector_ops

    def _vector_alu(self, op: Any, srcs: tuple[int, ...], to_dtype: DType | None, lanes: int) -> int:
        """An ALU op with at least one vector operand: one vector instruction when the renderer
        supports it, else one scalar op per lane gathered with VECTORIZE."""
        target = to_dtype.scalar() if to_dtype is not None else None
        if target is not None and self.dtype(srcs[0]).scalar() == target:
            return srcs[0]
        if all(self.const_value(src) is not None for src in srcs):
            folded = self.alu(op, tuple(self.gep(src, 0) for src in srcs), target)
            if self.const_value(folded) is not None:
                return self.broadcast(folded, lanes)
        if op is TernaryOps.WHERE and self.const_value(srcs[0]) is not None:
            return self.broadcast(srcs[1] if self.const_value(srcs[0]) else srcs[2], lanes)
        if self._vector_supported(op, srcs, target):
            vectors = tuple(self.broadcast(src, lanes) for src in srcs)
            scalar_types = [self.dtype(src).scalar() for src in srcs]
            dtype = target if target is not None else \
                scalar_types[1] if op is TernaryOps.WHERE else result_dtype(op, scalar_types[0])
            return self._emit(Instr(IROps.ALU, dtype.vec(lanes), vectors, op))
        return self.vectorize([self.alu(op, tuple(self.gep(src, k) for src in srcs), target) for k in range(lanes)])

    def alu(self, op: Any, srcs: tuple[int, ...], to_dtype: DType | None = None) -> int:
        """An elementwise op; CAST/BITCAST need `to_dtype` (scalar or the vector dtype). Folds
        all-constant operands exactly; vector operands go through `_vector_alu`."""
        lanes = max(self.dtype(src).count for src in srcs)
        if lanes > 1:
            return self._vector_alu(op, srcs, to_dtype, lanes)
        types = [self.dtype(src) for src in srcs]
        values = [self.const_value(src) for src in srcs]
        if op is TernaryOps.WHERE:
            if values[0] is not None:
                return srcs[1] if values[0] else srcs[2]
            dtype = types[1]
        elif op in (UnaryOps.CAST, UnaryOps.BITCAST):
            if to_dtype is None:
                raise IRError(f"alu {op.name}: needs a target dtype")
            dtype = to_dtype.scalar()
            if types[0] == dtype:
                return srcs[0]
        else:
            dtype = result_dtype(op, types[0])
        if all(v is not None for v in values) and op is not TernaryOps.WHERE:
            folded = self._fold(op, types[0], dtype, values)  # type: ignore[arg-type]
            if folded is not None:
                return self.const(folded, dtype)
        return self._emit(Instr(IROps.ALU, dtype, srcs, op))

    @staticmethod
    def _fold(op: Any, source: DType, dtype: DType, values: list[ConstType]) -> ConstType | None:
        """The constant result of `op` on constant operands, or None when it must not be folded."""
        if op is UnaryOps.CAST:
            return cast_const(values[0], source, dtype)
        if op is UnaryOps.BITCAST:
            folded = bitcast_const(values[0], source, dtype)
            return None if isinstance(folded, float) and math.isnan(folded) else folded  # keep NaN payload bits
        return exec_alu(op, source, tuple(values))

    def load(self, buffer: int, dtype: DType, index: int, valid: int | None = None) -> int:
        """Read buffer[index] (a vector dtype reads that many consecutive elements); with `valid`,
        read only where it is true (else 0)."""
        if valid is not None and self.const_value(valid) is not None:
            if not self.const_value(valid):
                return self.const(0, dtype)
            valid = None
        srcs = (index,) if valid is None else (index, valid)
        return self._emit(Instr(IROps.LOAD, dtype, srcs, buffer))

    def store(self, buffer: int, index: int, value: int, valid: int | None = None) -> None:
        if valid is not None and self.const_value(valid) is not None:
            if not self.const_value(valid):
                return
            valid = None
        self._emit(Instr(IROps.STORE, None, (index, value) if valid is None else (index, value, valid), buffer))

    def define_acc(self, init: ConstType, dtype: DType) -> int:
        return self._emit(Instr(IROps.DEFINE_ACC, dtype, (), normalize_const(init, dtype.scalar())))

    def assign(self, acc: int, value: int) -> None:
        self._emit(Instr(IROps.ASSIGN, None, (acc, value)))

    def loop(self, start: int, end: int, kind: LoopKind) -> int:
        ref = self._emit(Instr(IROps.LOOP, INT64, (start, end), kind))
        self._loops.append(ref)
        self._scopes.append({})
        return ref

    def end_loop(self) -> None:
        self._emit(Instr(IROps.ENDLOOP, None, (self._loops.pop(),)))
        self._scopes.pop()
