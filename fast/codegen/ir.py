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

Half floats (`float16`, `bfloat16`) are ordinary dtypes here; how they are stored and rounded per op
is the renderer's business. Vector dtypes are not produced yet: a SIMD renderer would add vector
CONST/LOAD/STORE/ALU instructions whose dtype is `dt.vec(n)` (the verifier's dtype checks then
apply lane-wise) — see `fast/codegen/opt.py` for where the upcast decision lives.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

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
    parameters after the buffers, in order; `variables` are the matching shape-layer Variables.
    `flops` and `mem_bytes` are estimates for DEBUG=2 lines (symbolic sizes at their maximum)."""

    name: str
    instrs: tuple[Instr, ...]
    buffers: tuple[BufferInfo, ...]
    var_names: tuple[str, ...] = ()
    variables: tuple[Any, ...] = ()
    flops: int = 0
    mem_bytes: int = 0


class IRError(ValueError):
    """A malformed LinearProgram (a bug in lowering, never in user input)."""


INT64 = dtypes.int64
BOOL = dtypes.bool
VALUE_OPS = frozenset({IROps.DEFINE_VAR, IROps.CONST, IROps.LOOP, IROps.INDEX, IROps.LOAD, IROps.ALU,
                       IROps.DEFINE_ACC})
_PURE = frozenset({IROps.DEFINE_VAR, IROps.CONST, IROps.INDEX, IROps.LOAD, IROps.ALU})


def same_const(a: ConstType, b: ConstType) -> bool:
    """Constant identity: type-aware, NaN equals NaN, -0.0 differs from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------- printer

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
    """The dtype an ALU instruction must have, given its operand dtypes; IRError when ill-typed."""
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
    want = [INT64] + ([buf.dtype] if instr.op is IROps.STORE else [])
    if src_types not in (want, want + [BOOL]):
        raise IRError(f"{where}: operands {[t.name for t in src_types]}, expected {[t.name for t in want]}")
    if instr.op is IROps.STORE and not buf.is_output:
        raise IRError(f"{where}: buffer {instr.arg} is not an output")
    return buf.dtype if instr.op is IROps.LOAD else None


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
    if op in (IROps.CONST, IROps.DEFINE_ACC):
        if not isinstance(instr.dtype, DType) or not same_const(normalize_const(instr.arg, instr.dtype), instr.arg):
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

    Pure instructions (CONST, DEFINE_VAR, INDEX, LOAD, ALU) with equal (op, dtype, srcs, arg) are
    emitted once per visible scope; an instruction that reads an accumulator directly is never
    reused, because the accumulator's value changes with each ASSIGN.
    """

    def __init__(self) -> None:
        self.instrs: list[Instr] = []
        self._scopes: list[dict[tuple[Any, ...], int]] = [{}]
        self._loops: list[int] = []

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
        return self._emit(Instr(IROps.CONST, dtype, (), normalize_const(value, dtype)))

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

    def alu(self, op: Any, srcs: tuple[int, ...], to_dtype: DType | None = None) -> int:
        """An elementwise op; CAST/BITCAST need `to_dtype`. Folds all-constant operands exactly."""
        types = [self.dtype(src) for src in srcs]
        values = [self.const_value(src) for src in srcs]
        if op is TernaryOps.WHERE:
            if values[0] is not None:
                return srcs[1] if values[0] else srcs[2]
            dtype = types[1]
        elif op in (UnaryOps.CAST, UnaryOps.BITCAST):
            if to_dtype is None:
                raise IRError(f"alu {op.name}: needs a target dtype")
            dtype = to_dtype
            if types[0] == dtype:
                return srcs[0]
        else:
            dtype = result_dtype(op, types[0])
        if all(v is not None for v in values) and op is not TernaryOps.WHERE:
            folded: ConstType | None
            if op is UnaryOps.CAST:
                folded = cast_const(values[0], types[0], dtype)  # type: ignore[arg-type]
            elif op is UnaryOps.BITCAST:
                folded = bitcast_const(values[0], types[0], dtype)  # type: ignore[arg-type]
                if isinstance(folded, float) and math.isnan(folded):
                    folded = None  # a NaN literal would lose its payload bits
            else:
                folded = exec_alu(op, types[0], tuple(values))  # type: ignore[arg-type]
            if folded is not None:
                return self.const(folded, dtype)
        return self._emit(Instr(IROps.ALU, dtype, srcs, op))

    def load(self, buffer: int, dtype: DType, index: int, valid: int | None = None) -> int:
        """Read buffer[index]; with `valid`, read only where it is true (else 0)."""
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
        return self._emit(Instr(IROps.DEFINE_ACC, dtype, (), normalize_const(init, dtype)))

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
