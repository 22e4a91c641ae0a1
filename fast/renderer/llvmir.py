"""LLVM IR renderer: a `LinearProgram` as one LLVM function with no undefined behaviour and no poison.

Output: `define void @<name>(ptr %data0, ..., i64 %var0, ...)`, the same parameter order and value
semantics as the C renderer (fast/renderer/c.py), so LLVM and CLANG agree bit for bit on every op x
dtype (transcendentals too: lowering expands them into ALU code). Pointers carry no `noalias` (an
in-place kernel may read its own output) and accesses are `align 1` (views may sit at any byte offset).

How docs/semantics.md is kept:
- values: `bool` is `i1` (stored as an `i8` 0/1; loads normalise with `!= 0`); `float16`/`bfloat16`
  are `i16` bit patterns; each op decodes them to float, computes in float32 and encodes with
  round-to-nearest-even in integer code (`@f32_to_f16`, `@f32_to_bf16`: the C helpers' algorithms;
  these and the other helper functions are in fast/renderer/llvm_helpers.py).
- integers: `add/sub/mul` carry no `nsw/nuw`, so they wrap. `sdiv/srem/udiv/urem` get a divisor of 1
  substituted (by `select`, before the division) for 0 and -1, then the documented result is
  selected: `x/0 = 0`, `x%0 = x`, `x/-1 = 0-x` (so `MIN/-1 = MIN`), `x%-1 = 0`.
- float -> int: the double value is replaced by 0.0 unless trunc(x) fits the target (ordered
  compares, so NaN fails), then `fptosi/fptoui` (never poison); out of range / NaN / inf give 0,
  like the C helpers `f2i_*`.
- float MAX: NaN if either operand is NaN (`fcmp uno`), else `a > b ? a : b` (never `maxnum`);
  CMPLT/CMPEQ are `fcmp olt/oeq` (false on NaN); no fast-math flags anywhere; MULACC is `fmul`
  then `fadd` (never `fma`/`fmuladd`, and without `contract` flags LLVM does not fuse them). The
  IR's own `FusedOps.FMA` (codegen/fma.py: float sums of products) is the `llvm.fma` intrinsic.
- SQRT is the `llvm.sqrt` intrinsic, on vectors too (the correctly rounded instruction); EXP2/LOG2/SIN, which lowering
  expands into ALU code for every float dtype, map to the `llvm.exp2/log2/sin` intrinsics only in
  IR that still holds them (hand-built IR in tests).
- index arithmetic is i64; masked loads and stores branch around the access (the address is only
  computed and dereferenced on the valid path); GEPs are plain (never `inbounds`).
- accumulators are `alloca`s in the entry block (promoted to registers by the optimiser).
- vectors (fast/renderer/llvm_vectors.py): `<N x T>` values with the same semantics lane by lane;
  a vector LOAD/STORE is one `align 1` access of N consecutive elements (masked: all or none).
- streamed outputs (codegen/streaming.py): a vector STORE of 16, 32 or 64 bytes (at most the
  register width) tests its address; aligned, it is a `!nontemporal` store with that alignment,
  else the plain `align 1` store. Such a kernel ends with `llvm.x86.sse.sfence`.
"""
from __future__ import annotations

import re

import numpy as np

from fast.codegen.ir import FusedOps, IndexOps, Instr, IROps, LinearProgram
from fast.dtype import ConstType, DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps, float32_to_bfloat16_bits, wrap_int
from fast.renderer.base import Renderer, RendererOptions, cpu_options
from fast.renderer.llvm_helpers import (
    BF16_HELPERS,
    F16_HELPERS,
    VALUE_TYPES,
    cast_helper,
    divmod_helpers,
    float_max_helper,
)
from fast.renderer.llvm_vectors import VectorEmitter, float_literal, llvm_type, splat, zero

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


class _Kernel:
    """Renders one program. `names[n]` is the token of instruction n's value (a literal or `%...`)."""

    def __init__(self, program: LinearProgram, register_bytes: int = 0) -> None:
        self.program, self.register_bytes = program, register_bytes
        self.streams = 0  # non-temporal stores emitted: the kernel then ends with a store fence
        self.prefetches = 0  # PREFETCH hints emitted: the module then declares llvm.prefetch
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

    # -- memory
    def address(self, buffer: int, index: str, lanes: int) -> tuple[str, str]:
        """(memory type, pointer token) of `lanes` elements from `index` of buffer `buffer` (plain GEP of
        the element type, no inbounds; a bool element is an i8, `lanes > 1` makes a vector type)."""
        dtype = self.program.memory(buffer).dtype
        element = "i8" if dtype == dtypes.bool else VALUE_TYPES[dtype]
        memory = element if lanes == 1 else f"<{lanes} x {element}>"
        return memory, self.value(f"getelementptr {element}, ptr %data{buffer}, i64 {index}")

    def load(self, number: int, instr: Instr, a: list[str]) -> str:
        """buffer[index] (a vector dtype: that many consecutive elements); with a validity operand the
        access happens only on the valid branch, else the value is zero."""
        dtype: DType = instr.dtype  # type: ignore[assignment]
        if len(a) == 2:
            before, taken, done = self.block, f"M{number}.load", f"M{number}.done"
            self.emit(f"br i1 {a[1]}, label %{taken}, label %{done}")
            self.label(taken)
        memory, pointer = self.address(instr.arg, a[0], dtype.count)
        element = self.value(f"load {memory}, ptr {pointer}, align 1")
        if dtype.scalar() == dtypes.bool:
            element = self.value(f"icmp ne {memory} {element}, {zero(dtype)}")
        if len(a) == 1:
            return element
        self.emit(f"br label %{done}")
        self.label(done)
        return self.value(f"phi {llvm_type(dtype)} [ {element}, %{taken} ], [ {render_const(0, dtype)}, %{before} ]")

    def prefetch(self, number: int, instr: Instr, a: list[str]) -> None:
        """A PREFETCH: `llvm.prefetch` (a read, kept in every cache level, data), only on the valid branch."""
        if len(a) == 2:
            taken, done = f"P{number}.prefetch", f"P{number}.done"
            self.emit(f"br i1 {a[1]}, label %{taken}, label %{done}")
            self.label(taken)
        _, pointer = self.address(instr.arg, a[0], 1)
        self.emit(f"call void @llvm.prefetch.p0(ptr {pointer}, i32 0, i32 3, i32 1)")
        self.prefetches += 1
        if len(a) == 2:
            self.emit(f"br label %{done}")
            self.label(done)

    def store(self, number: int, instr: Instr, a: list[str]) -> None:
        if len(a) == 3:
            taken, done = f"S{number}.store", f"S{number}.done"
            self.emit(f"br i1 {a[2]}, label %{taken}, label %{done}")
            self.label(taken)
        dtype: DType = self.program.instrs[instr.srcs[1]].dtype  # type: ignore[assignment]
        memory, pointer = self.address(instr.arg, a[0], dtype.count)
        value = a[1]
        if dtype.scalar() == dtypes.bool:
            value = self.value(f"zext {llvm_type(dtype)} {value} to {memory}")
        size = dtype.scalar().itemsize * dtype.count
        if instr.arg in self.program.streamed and dtype.count > 1 and dtype.scalar() != dtypes.bool \
                and size in (16, 32, 64) and size <= self.register_bytes:
            self.streamed_store(number, memory, value, pointer, size)
        else:
            self.emit(f"store {memory} {value}, ptr {pointer}, align 1")
        if len(a) == 3:
            self.emit(f"br label %{done}")
            self.label(done)

    def streamed_store(self, number: int, memory: str, value: str, pointer: str, size: int) -> None:
        """Non-temporal when `pointer` is aligned to `size` bytes, else a plain store."""
        address = self.value(f"ptrtoint ptr {pointer} to i64")
        offset = self.value(f"and i64 {address}, {size - 1}")
        aligned = self.value(f"icmp eq i64 {offset}, 0")
        stream, plain, after = f"S{number}.stream", f"S{number}.plain", f"S{number}.after"
        self.emit(f"br i1 {aligned}, label %{stream}, label %{plain}")
        self.label(stream)
        self.emit(f"store {memory} {value}, ptr {pointer}, align {size}, !nontemporal !0")
        self.emit(f"br label %{after}")
        self.label(plain)
        self.emit(f"store {memory} {value}, ptr {pointer}, align 1")
        self.emit(f"br label %{after}")
        self.label(after)
        self.streams += 1

    # -- control flow and instructions
    def loop(self, number: int, a: list[str]) -> None:
        counter, head = f"%loop{number}", f"L{number}.head"
        before = self.block
        self.emit(f"br label %{head}")
        self.label(head)
        self.emit(f"{counter} = phi i64 [ {a[0]}, %{before} ], [ {counter}.next, %L{number}.latch ]")
        more = self.value(f"icmp slt i64 {counter}, {a[1]}")
        self.emit(f"br i1 {more}, label %L{number}.body, label %L{number}.exit")
        self.label(f"L{number}.body")
        self.names[number] = counter

    def end_loop(self, loop: int) -> None:
        self.emit(f"br label %L{loop}.latch")
        self.label(f"L{loop}.latch")
        self.emit(f"%loop{loop}.next = add i64 %loop{loop}, 1")
        self.emit(f"br label %L{loop}.head")
        self.label(f"L{loop}.exit")

    def statement(self, number: int, instr: Instr) -> None:
        """Emit one instruction, recording the token of its value in `names`."""
        op, dtype = instr.op, instr.dtype
        if op is IROps.CONST:
            self.names[number] = render_const(instr.arg, dtype)  # type: ignore[arg-type]
        elif op is IROps.DEFINE_VAR:
            self.names[number] = f"%var{self.program.var_names.index(instr.arg)}"
        elif op is IROps.DEFINE_ACC:
            self.names[number] = f"%acc{number}"
            self.allocas.append(f"  %acc{number} = alloca {llvm_type(dtype)}")  # type: ignore[arg-type]
            self.emit(f"store {llvm_type(dtype)} {render_const(instr.arg, dtype)}, ptr %acc{number}")  # type: ignore
        elif op is IROps.ENDLOOP:
            self.end_loop(instr.srcs[0])
        elif op is IROps.ASSIGN:
            acc_type = llvm_type(self.program.instrs[instr.srcs[0]].dtype)  # type: ignore[arg-type]
            self.emit(f"store {acc_type} {self.operand(instr.srcs[1])}, ptr {self.names[instr.srcs[0]]}")
        else:
            self.computed(number, instr, [self.operand(src) for src in instr.srcs])

    def computed(self, number: int, instr: Instr, a: list[str]) -> None:
        """Emit an instruction whose operands `a` are ready (accumulators already read)."""
        op = instr.op
        types: list[DType] = [self.program.instrs[src].dtype for src in instr.srcs]  # type: ignore[misc]
        if op is IROps.LOOP:
            self.loop(number, a)
        elif op is IROps.STORE:
            self.store(number, instr, a)
        elif op is IROps.PREFETCH:
            self.prefetch(number, instr, a)
        elif op is IROps.LOAD:
            self.names[number] = self.load(number, instr, a)
        elif op is IROps.INDEX:
            divisor_is_const = self.program.instrs[instr.srcs[-1]].op is IROps.CONST
            self.names[number] = self.index(instr.arg, divisor_is_const, a)
        elif op is IROps.VECTORIZE:
            self.names[number] = self.vectors.vectorize(instr.dtype, a)  # type: ignore[arg-type]
        elif op is IROps.GEP:
            self.names[number] = self.vectors.gep(types[0], a[0], instr.arg)
        else:
            self.names[number] = self.alu(instr, types, a)

    def source(self) -> str:
        for scratch in self.program.scratch:  # private to this call (codegen/gemm.py)
            element = "i8" if scratch.dtype == dtypes.bool else VALUE_TYPES[scratch.dtype]
            self.allocas.append(f"  %data{scratch.idx} = alloca {element}, i64 {scratch.size}, align 64")
        for number, instr in enumerate(self.program.instrs):
            self.statement(number, instr)
        params = [f"ptr %data{b.idx}" for b in self.program.buffers]
        params += [f"i64 %var{i}" for i in range(len(self.program.var_names))]
        comments = "".join(f"; var{i} = {n}\n" for i, n in enumerate(self.program.var_names)
                           if re.fullmatch(r"[A-Za-z0-9_]+", n))
        fence = ["  call void @llvm.x86.sse.sfence()"] if self.streams else []  # visible to every thread
        body = "\n".join(["entry:", *self.allocas, *self.lines, *fence, "  ret void"])
        streaming = "declare void @llvm.x86.sse.sfence()\n!0 = !{i32 1}\n" if self.streams else ""
        if self.prefetches:
            streaming += "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)\n"
        return ("".join(self.helpers.values()) + comments
                + f"define void @{self.program.name}({', '.join(params)}) #1 {{\n{body}\n}}\n"
                + "attributes #0 = { alwaysinline nounwind }\nattributes #1 = { nounwind }\n" + streaming)


class LLVMIRRenderer(Renderer):
    """LLVM IR text for the LLVM runtime (llvmlite). `options` say what lowering may give it: by default
    scalar code only (upcast axes become unrolled scalar code, no thread parameters); with
    `cpu_options(vector_bytes)` the vector instructions of fast/codegen/ir.py (fast/renderer/llvm_vectors.py)."""

    def __init__(self, options: RendererOptions | None = None) -> None:
        self.options = options if options is not None else cpu_options(0, threads=False)

    def render(self, program: LinearProgram) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", program.name):
            raise ValueError(f"LLVM renderer: kernel name {program.name!r} is not an identifier")
        return _Kernel(program, self.options.vector_bytes).source()
