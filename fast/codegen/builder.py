"""`IRBuilder`: appends instructions of the linear IR (fast/codegen/ir.py) with constant folding,
scope-aware common-subexpression reuse, and vector ops split into lanes where the renderer has no
vector form of them."""
from __future__ import annotations

import math
from typing import Any

from fast.codegen.ir import _PURE, BOOL, INT64, FusedOps, IndexOps, Instr, IRError, IROps, LoopKind, TileOps, same_const
from fast.dtype import FLOATS as FLOAT_DTYPES
from fast.dtype import ConstType, DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps, bitcast_const, cast_const, exec_alu, normalize_const, result_dtype

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

    def shuffle(self, a: int, b: int, lanes: tuple[int, ...]) -> int:
        """The vector of lanes `lanes` of a and b, both of one vector dtype with n lanes (lane i < n
        of a, lane n + i of b: IROps.SHUFFLE)."""
        return self._emit(Instr(IROps.SHUFFLE, self.dtype(a), (a, b), tuple(lanes)))

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

    def _known_valid(self, valid: int | None) -> int | bool | None:
        """A memory access's validity folded: None (always valid), False (never) or the bool value."""
        if valid is None or self.const_value(valid) is None:
            return valid
        return None if self.const_value(valid) else False

    def fma(self, a: int, b: int, c: int) -> int:
        """a*b + c rounded once (`FusedOps.FMA`), for renderers with `fused_multiply_add` only: float32
        or float64 operands of one scalar dtype, scalars broadcast to the lanes of a vector operand."""
        lanes = max(self.dtype(src).count for src in (a, b, c))
        srcs = tuple(self.broadcast(src, lanes) for src in (a, b, c))
        dtype = self.dtype(srcs[0])
        if dtype.scalar() not in (dtypes.float32, dtypes.float64) or any(self.dtype(src) != dtype for src in srcs):
            raise IRError(f"fma: operands {[self.dtype(src).name for src in srcs]} are not one float32/float64 dtype")
        return self._emit(Instr(IROps.ALU, dtype, srcs, FusedOps.FMA))

    def load(self, buffer: int, dtype: DType, index: int, valid: int | None = None) -> int:
        """Read buffer[index] (a vector dtype reads that many consecutive elements); with `valid`,
        read only where it is true (else 0)."""
        valid = self._known_valid(valid)
        if valid is False:
            return self.const(0, dtype)
        srcs = (index,) if valid is None else (index, valid)
        return self._emit(Instr(IROps.LOAD, dtype, srcs, buffer))

    def store(self, buffer: int, index: int, value: int, valid: int | None = None) -> None:
        valid = self._known_valid(valid)
        if valid is False:
            return
        self._emit(Instr(IROps.STORE, None, (index, value) if valid is None else (index, value, valid), buffer))

    def prefetch(self, buffer: int, index: int, valid: int | None = None) -> None:
        """A hint that buffer[index] is read soon; `index` must be in bounds wherever `valid` holds."""
        valid = self._known_valid(valid)
        if valid is False:
            return
        self._emit(Instr(IROps.PREFETCH, None, (index,) if valid is None else (index, valid), buffer))

    def tile(self, form: TileOps, *numbers: int, index: int | None = None) -> None:
        """A TILE instruction (codegen/ir.py `TileOps`): `index` for the LOAD and STORE forms."""
        self._emit(Instr(IROps.TILE, None, () if index is None else (index,), (form, *numbers)))

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
