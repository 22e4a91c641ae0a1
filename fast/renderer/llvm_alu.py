"""LLVM IR for the values of one kernel: `AluEmitter` emits `%tN = ...` lines and computes every ALU
op, cast, comparison and index operation with the semantics of fast/renderer/llvmir.py's docstring
(half floats decoded to float and encoded with round-to-nearest-even, wrapping integers, guarded
division, float MAX without `maxnum`, float -> int through the helpers of llvm_helpers.py, vectors
through llvm_vectors.py's `VectorEmitter`); llvmir.py's kernel adds memory and control flow.

Invariants:
- Every emitted value is a fresh `%tN`; `names[n]` is the token of instruction n's value (a literal
  or `%...`), and an accumulator is read (loaded) where it is used (`operand`).
- Each helper function or intrinsic declaration is emitted once per module (`need`), in first-use order.
- No fast-math flags, no `nsw`/`nuw`, no poison-producing conversion: every op is defined on every input.
"""
from __future__ import annotations

import numpy as np

from fast.codegen.ir import FusedOps, IndexOps, Instr, IROps, LinearProgram
from fast.dtype import ConstType, DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps, float32_to_bfloat16_bits, wrap_int
from fast.renderer.llvm_helpers import (
    BF16_HELPERS,
    F16_HELPERS,
    VALUE_TYPES,
    cast_helper,
    divmod_helpers,
    float_max_helper,
)
from fast.renderer.llvm_vectors import VectorEmitter, float_literal, llvm_type, splat

HALVES = (dtypes.float16, dtypes.bfloat16)
_SIGNED = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
_INTRINSICS = {UnaryOps.EXP2: "exp2", UnaryOps.LOG2: "log2", UnaryOps.SIN: "sin", UnaryOps.SQRT: "sqrt"}
_FLOAT_INFIX = {BinaryOps.ADD: "fadd", BinaryOps.SUB: "fsub", BinaryOps.MUL: "fmul", BinaryOps.DIV: "fdiv"}
_INT_INFIX = {BinaryOps.ADD: "add", BinaryOps.SUB: "sub", BinaryOps.MUL: "mul", BinaryOps.XOR: "xor"}

def render_const(value: ConstType, dtype: DType) -> str:
    """An exact LLVM literal of `dtype`'s value type (half floats as their signed i16 bit pattern); a
    vector dtype gets the splat of the scalar literal."""
    if dtype.count > 1:
        return splat(render_const(value, dtype.scalar()), dtype)
    if dtype == dtypes.bool:
        return "true" if value else "false"
    if dtype in HALVES:
        bits = int(np.array(value, np.float16).view(np.uint16)) if dtype == dtypes.float16 \
            else float32_to_bfloat16_bits(float(value))
        return str(wrap_int(bits, dtypes.int16))
    if dtypes.is_int(dtype):
        return str(wrap_int(int(value), _SIGNED[dtype.itemsize]))
    return float_literal(float(value))


class AluEmitter:
    """The values of one program being rendered: emission, half floats, ALU ops, casts, comparisons
    and index arithmetic (module docstring). `names[n]` is the token of instruction n's value."""

    def __init__(self, program: LinearProgram, register_bytes: int = 0) -> None:
        self.program, self.register_bytes = program, register_bytes
        self.streams = 0  # non-temporal stores emitted: the kernel then ends with a store fence
        self.prefetches = 0  # PREFETCH hints emitted: the module then declares llvm.prefetch
        self.tiles = False  # TILE instructions emitted: the module then declares the AMX intrinsics
        self.names: dict[int, str] = {}
        self.helpers: dict[str, str] = {}
        self.allocas: list[str] = []
        self.lines: list[str] = []
        self.block = "entry"
        self.temps = 0
        self.vectors = VectorEmitter(self.value)

    # -- emission
    def need(self, name: str, source: str) -> str:
        self.helpers.setdefault(name, source)
        return name

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def value(self, expr: str) -> str:
        """Emit `%tN = expr`; returns `%tN`."""
        self.temps += 1
        self.emit(f"%t{self.temps} = {expr}")
        return f"%t{self.temps}"

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def operand(self, src: int) -> str:
        """The token of `src`; an accumulator is read (loaded) at this point."""
        instr = self.program.instrs[src]
        if instr.op is IROps.DEFINE_ACC:
            return self.value(f"load {llvm_type(instr.dtype)}, ptr {self.names[src]}")  # type: ignore[arg-type]
        return self.names[src]

    # -- half floats
    def decode(self, dtype: DType, token: str) -> str:
        """`token` as a value of the compute type (half -> float; others unchanged)."""
        if dtype not in HALVES:
            return token
        prefix = "f16" if dtype == dtypes.float16 else "bf16"
        self.need(dtype.name, F16_HELPERS if dtype == dtypes.float16 else BF16_HELPERS)
        return self.value(f"call float @{prefix}_to_f32(i16 {token})")

    def encode(self, dtype: DType, token: str) -> str:
        """A compute-type value rounded to `dtype` (identity for non-half dtypes)."""
        if dtype not in HALVES:
            return token
        prefix = "f16" if dtype == dtypes.float16 else "bf16"
        self.need(dtype.name, F16_HELPERS if dtype == dtypes.float16 else BF16_HELPERS)
        return self.value(f"call i16 @f32_to_{prefix}(float {token})")

    # -- ALU
    def int_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        t = VALUE_TYPES[dtype]
        if op in _INT_INFIX:
            return self.value(f"{_INT_INFIX[op]} {t} {a[0]}, {a[1]}")  # type: ignore[index]
        if op is UnaryOps.NEG:
            return self.value(f"sub {t} 0, {a[0]}")
        if op is TernaryOps.MULACC:
            return self.value(f"add {t} {self.value(f'mul {t} {a[0]}, {a[1]}')}, {a[2]}")
        if op in (BinaryOps.DIV, BinaryOps.MOD):
            self.need(f"divmod_{dtype.name}", divmod_helpers(dtype))
            helper = f"{'div' if op is BinaryOps.DIV else 'mod'}_{dtype.name}"
            return self.value(f"call {t} @{helper}({t} {a[0]}, {t} {a[1]})")
        if op is BinaryOps.MAX:
            greater = self.value(f"icmp {'ugt' if dtypes.is_unsigned(dtype) else 'sgt'} {t} {a[0]}, {a[1]}")
            return self.value(f"select i1 {greater}, {t} {a[0]}, {t} {a[1]}")
        raise ValueError(f"LLVM renderer: {op} is not defined for {dtype.name}")

    def bool_alu(self, op: object, a: list[str]) -> str:
        if op in (BinaryOps.ADD, BinaryOps.MAX):
            return self.value(f"or i1 {a[0]}, {a[1]}")
        if op is BinaryOps.MUL:
            return self.value(f"and i1 {a[0]}, {a[1]}")
        if op is BinaryOps.XOR:
            return self.value(f"xor i1 {a[0]}, {a[1]}")
        if op is BinaryOps.MOD:
            return self.value(f"and i1 {a[0]}, {self.value(f'xor i1 {a[1]}, true')}")
        if op is TernaryOps.MULACC:
            return self.value(f"or i1 {self.value(f'and i1 {a[0]}, {a[1]}')}, {a[2]}")
        raise ValueError(f"LLVM renderer: {op} is not defined for bool")

    def float_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        """The op on decoded operands, rounded to `dtype` (half: every rounding step explicit)."""
        t = "double" if dtype == dtypes.float64 else "float"
        x = [self.decode(dtype, token) for token in a]
        if op in _INTRINSICS:
            name = f"llvm.{_INTRINSICS[op]}.{'f64' if t == 'double' else 'f32'}"  # type: ignore[index]
            self.need(name, f"declare {t} @{name}({t})\n")
            result = self.value(f"call {t} @{name}({t} {x[0]})")
        elif op in _FLOAT_INFIX:
            result = self.value(f"{_FLOAT_INFIX[op]} {t} {x[0]}, {x[1]}")  # type: ignore[index]
        elif op is UnaryOps.NEG:
            result = self.value(f"fneg {t} {x[0]}")
        elif op is BinaryOps.MAX:
            self.need(f"max_{t}", float_max_helper(t))
            result = self.value(f"call {t} @max_{t}({t} {x[0]}, {t} {x[1]})")
        elif op is TernaryOps.MULACC:
            product = self.decode(dtype, self.encode(dtype, self.value(f"fmul {t} {x[0]}, {x[1]}")))
            result = self.value(f"fadd {t} {product}, {x[2]}")
        else:
            raise ValueError(f"LLVM renderer: {op} is not defined for {dtype.name}")
        return self.encode(dtype, result)

    def to_int(self, source: DType, target: DType, token: str) -> str:
        """CAST to an integer dtype: floats through `@f2i_T`, bools zero-extended, ints wrapped."""
        t = VALUE_TYPES[target]
        if dtypes.is_float(source):
            value = self.decode(source, token)
            if source != dtypes.float64:
                value = self.value(f"fpext float {value} to double")
            return self.value(f"call {t} @{self.need(f'f2i_{target.name}', cast_helper(target))}(double {value})")
        if source == dtypes.bool:
            return self.value(f"zext i1 {token} to {t}")
        if source.itemsize == target.itemsize:
            return token
        if source.itemsize > target.itemsize:
            return self.value(f"trunc {VALUE_TYPES[source]} {token} to {t}")
        extend = "zext" if dtypes.is_unsigned(source) else "sext"
        return self.value(f"{extend} {VALUE_TYPES[source]} {token} to {t}")

    def to_float(self, source: DType, target: DType, token: str) -> str:
        """CAST to a float dtype: one rounding to float32/float64, then RNE to a half target."""
        compute = "double" if target == dtypes.float64 else "float"
        value = self.decode(source, token)
        if source == dtypes.bool or dtypes.is_int(source):
            convert = "uitofp" if source == dtypes.bool or dtypes.is_unsigned(source) else "sitofp"
            value = self.value(f"{convert} {VALUE_TYPES[source]} {value} to {compute}")
        elif source == dtypes.float64 and compute == "float":
            value = self.value(f"fptrunc double {value} to float")
        elif source != dtypes.float64 and compute == "double":
            value = self.value(f"fpext float {value} to double")
        return self.encode(target, value)

    def cast(self, source: DType, target: DType, token: str) -> str:
        if source == target:
            return token
        if target == dtypes.bool:
            if dtypes.is_float(source):
                t = "double" if source == dtypes.float64 else "float"
                return self.value(f"fcmp une {t} {self.decode(source, token)}, {float_literal(0.0)}")
            return self.value(f"icmp ne {VALUE_TYPES[source]} {token}, 0")
        if dtypes.is_int(target):
            return self.to_int(source, target, token)
        return self.to_float(source, target, token)

    def compare(self, op: object, dtype: DType, a: list[str]) -> str:
        if dtype == dtypes.bool and op is BinaryOps.CMPLT:
            return self.value(f"and i1 {self.value(f'xor i1 {a[0]}, true')}, {a[1]}")
        if dtypes.is_float(dtype):
            x, t = [self.decode(dtype, token) for token in a], "double" if dtype == dtypes.float64 else "float"
            return self.value(f"fcmp {'olt' if op is BinaryOps.CMPLT else 'oeq'} {t} {x[0]}, {x[1]}")
        predicate = "eq" if op is BinaryOps.CMPEQ else "ult" if dtypes.is_unsigned(dtype) else "slt"
        return self.value(f"icmp {predicate} {VALUE_TYPES[dtype]} {a[0]}, {a[1]}")

    def alu(self, instr: Instr, src_types: list[DType], a: list[str]) -> str:
        op, dtype, target = instr.arg, src_types[-1], instr.dtype
        if op is FusedOps.FMA:  # one rounding
            return self.vector_intrinsic("fma", dtype, a)
        if op is UnaryOps.SQRT and target is not None and target.count > 1:
            return self.vector_intrinsic("sqrt", target, a)
        if target is not None and target.count > 1:
            return self.vectors.alu(op, src_types, target, a)
        if op is TernaryOps.WHERE:
            return self.value(f"select i1 {a[0]}, {VALUE_TYPES[dtype]} {a[1]}, {VALUE_TYPES[dtype]} {a[2]}")
        if op is UnaryOps.CAST:
            return self.cast(src_types[0], target, a[0])  # type: ignore[arg-type]
        if op is UnaryOps.BITCAST:
            source_type, target_type = VALUE_TYPES[src_types[0]], VALUE_TYPES[target]  # type: ignore[index]
            return a[0] if source_type == target_type else self.value(f"bitcast {source_type} {a[0]} to {target_type}")
        if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ):
            return self.compare(op, dtype, a)
        if dtype == dtypes.bool:
            return self.bool_alu(op, a)
        if dtypes.is_float(dtype):
            return self.float_alu(op, dtype, a)
        return self.int_alu(op, dtype, a)

    def vector_intrinsic(self, name: str, dtype: DType, a: list[str]) -> str:
        """`llvm.<name>` on float32/float64 operands of `dtype` (scalar or vector), declared once:
        `fma` (one rounding) and `sqrt` (correctly rounded), lane-wise instructions on vectors."""
        t = llvm_type(dtype)
        lanes = f"v{dtype.count}" if dtype.count > 1 else ""
        full = f"llvm.{name}.{lanes}{'f64' if dtype.scalar() == dtypes.float64 else 'f32'}"
        self.need(full, f"declare {t} @{full}({', '.join([t] * len(a))})\n")
        return self.value(f"call {t} @{full}({', '.join(f'{t} {token}' for token in a)})")

    # -- index arithmetic
    def index(self, op: IndexOps, divisor_is_const: bool, a: list[str]) -> str:
        """i64 arithmetic. Floor division/modulo have a positive constant divisor (IR contract); a
        symbolic NONNEG divisor that is not positive at run time divides by 1 instead of trapping."""
        if op is IndexOps.CMPLT:
            return self.value(f"icmp slt i64 {a[0]}, {a[1]}")
        if op is IndexOps.AND:
            return self.value(f"and i1 {a[0]}, {a[1]}")
        if op in (IndexOps.ADD, IndexOps.MUL):
            return self.value(f"{'add' if op is IndexOps.ADD else 'mul'} i64 {a[0]}, {a[1]}")
        numerator, divisor = a
        if not divisor_is_const:
            divisor = self.value(f"select i1 {self.value(f'icmp sgt i64 {divisor}, 0')}, i64 {divisor}, i64 1")
        if op is IndexOps.NONNEG_DIV:
            return self.value(f"sdiv i64 {numerator}, {divisor}")
        remainder = self.value(f"srem i64 {numerator}, {divisor}")
        if op is IndexOps.NONNEG_MOD:
            return remainder
        negative = self.value(f"icmp slt i64 {remainder}, 0")
        if op is IndexOps.FLOORMOD:
            wrapped = self.value(f"add i64 {remainder}, {divisor}")
            return self.value(f"select i1 {negative}, i64 {wrapped}, i64 {remainder}")
        quotient = self.value(f"sdiv i64 {numerator}, {divisor}")
        return self.value(f"sub i64 {quotient}, {self.value(f'zext i1 {negative} to i64')}")
