"""The verifier of the linear IR (fast/codegen/ir.py describes the instruction set): scoping (a
value defined before use, loops nested and closed) and the dtype of every instruction. `verify`
raises IRError, a bug in lowering, never in user input; lowering runs it on every program it makes.
"""
from __future__ import annotations

from fast.codegen.ir import (
    BOOL,
    INT64,
    TILE_REGISTERS,
    VALUE_OPS,
    FusedOps,
    IndexOps,
    Instr,
    IRError,
    IROps,
    LinearProgram,
    LoopKind,
    TileOps,
    same_const,
)
from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps, normalize_const, supports


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


