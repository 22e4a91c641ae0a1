"""C renderer: a `LinearProgram` as one C11 function with no undefined behaviour.

Output: `void <name>(T0* restrict data0, ..., int64_t var...)`. Buffers handed to one kernel must
not overlap, except that an in-place kernel may read an element of its own output at exactly the
index it writes (the scheduler's assign contract).

How docs/semantics.md is kept (values in C):
- `bool` is `unsigned char` holding 0/1; loads normalise (`!= 0`), every bool-producing op gives 0/1.
- `float16`/`bfloat16` values are their `uint16_t` bit patterns, in memory and in variables. Each op
  decodes its operands to float, computes in float32 and encodes the result with round-to-nearest-even
  (software conversions below: subnormals, inf and NaN included; bfloat16 NaN -> quiet NaN).
- integer ADD/SUB/MUL/NEG/MULACC compute in `uint64_t` and convert back (wrap, never signed overflow);
  DIV/MOD are total (`x/0 = 0`, `x%0 = x`, `MIN/-1 = MIN`, `MIN%-1 = 0`); float -> int casts are
  range-checked in double (NaN/inf/out of range give 0); float MAX propagates NaN; bitcasts go
  through `memcpy`; MULACC on floats is `(a*b)+c` and is never contracted (compile with
  `-ffp-contract=off`, see runtime/clang.py). SQRT calls libm's correctly rounded `sqrtf`/`sqrt`.
  Lowering expands EXP2/LOG2/SIN of every float dtype into plain ALU code (codegen/transcendental.py,
  sine.py), so kernels never reach libm for them; the renderer still maps them to `exp2f`/`exp2`, ...
  for IR that holds them (hand-built IR in tests).
- index arithmetic is `int64_t`; floor division/modulo by a positive constant is exact for negative
  numerators; a masked load is `valid ? data[idx] : 0`, so memory is touched only where valid.
"""
from __future__ import annotations

import math
import re

import numpy as np

from fast.codegen.ir import IndexOps, Instr, IROps, LinearProgram, LoopKind
from fast.dtype import ConstType, DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps, float32_to_bfloat16_bits
from fast.renderer.base import Renderer, RendererOptions
from fast.renderer.c_vectors import SCALAR_CTYPES, VectorC

CTYPES: dict[DType, str] = SCALAR_CTYPES
HALVES = (dtypes.float16, dtypes.bfloat16)

_F16_HELPERS = """static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
  if (exponent == 0x1fu) bits = sign | 0x7f800000u | (mantissa << 13);
  else if (exponent != 0) bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  else { float value = (float)mantissa * 0x1p-24f; memcpy(&bits, &value, 4); bits |= sign; }
  float out; memcpy(&out, &bits, 4); return out;
}
static inline uint16_t f32_to_f16(float value) {
  uint32_t x; memcpy(&x, &value, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  /* NaN: keep the top payload bits, and keep it a NaN */
    uint32_t payload = (ax & 0x7fffffu) >> 13;
    return (uint16_t)(sign | 0x7c00u | (payload ? payload : 1u));
  }
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) return (uint16_t)(sign | ((ax + 0x0fffu + ((ax >> 13) & 1u) - 0x38000000u) >> 13));
  if (ax <= 0x33000000u) return (uint16_t)sign;
  uint32_t shift = 126u - (ax >> 23), mantissa = (ax & 0x7fffffu) | 0x800000u;
  uint32_t q = mantissa >> shift, rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  q += (rest > half) || (rest == half && (q & 1u));
  return (uint16_t)(sign | q);
}
"""
_BF16_HELPERS = """static inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16; float out; memcpy(&out, &bits, 4); return out;
}
static inline uint16_t f32_to_bf16(float value) {
  uint32_t x; memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
"""
_INDEX_HELPERS = """static inline int64_t idx_floordiv(int64_t a, int64_t b) { return a / b - ((a % b) < 0); }
static inline int64_t idx_floormod(int64_t a, int64_t b) { int64_t r = a % b; return r < 0 ? r + b : r; }
"""


def _suffix(dtype: DType) -> str:
    return dtype.name


def _int_helpers(dtype: DType) -> str:
    ctype, name = CTYPES[dtype], _suffix(dtype)
    if dtypes.is_unsigned(dtype):
        div, mod = "b == 0 ? 0 : a / b", "b == 0 ? a : a % b"
    else:
        div = f"b == 0 ? 0 : b == -1 ? ({ctype})(0 - (uint64_t)a) : ({ctype})(a / b)"
        mod = f"b == 0 ? a : b == -1 ? 0 : ({ctype})(a % b)"
    return (f"static inline {ctype} div_{name}({ctype} a, {ctype} b) {{ return {div}; }}\n"
            f"static inline {ctype} mod_{name}({ctype} a, {ctype} b) {{ return {mod}; }}\n")


def _float_helpers(ctype: str) -> str:
    return (f"static inline {ctype} max_{ctype}({ctype} a, {ctype} b) "
            "{ return a != a ? a : b != b ? b : a > b ? a : b; }\n")


def _cast_bounds(dtype: DType) -> tuple[str, str]:
    """C conditions on double `x` that hold exactly when trunc(x) fits integer `dtype` (NaN fails both)."""
    bits = 8 * dtype.itemsize
    if dtypes.is_unsigned(dtype):
        return "x > -1.0", f"x < 0x1p{bits}"
    if bits == 64:  # -2^63 - 1 is not a double; nothing lies strictly between it and -2^63
        return "x >= -0x1p63", "x < 0x1p63"
    return f"x > {-(1 << (bits - 1)) - 1}.0", f"x < 0x1p{bits - 1}"


def _cast_helper(dtype: DType) -> str:
    low, high = _cast_bounds(dtype)
    ctype = CTYPES[dtype]
    return f"static inline {ctype} f2i_{_suffix(dtype)}(double x) {{ return ({low} && {high}) ? ({ctype})x : 0; }}\n"


def _bitcast_helper(source: DType, target: DType) -> str:
    return (f"static inline {CTYPES[target]} bitcast_{_suffix(source)}_{_suffix(target)}({CTYPES[source]} x) "
            f"{{ {CTYPES[target]} y; memcpy(&y, &x, sizeof y); return y; }}\n")


def render_const(value: ConstType, dtype: DType) -> str:
    """An exact C literal of `dtype`'s C type (half floats as their bit pattern)."""
    if dtype == dtypes.bool:
        return "1" if value else "0"
    if dtype in HALVES:
        bits = int(np.array(value, np.float16).view(np.uint16)) if dtype == dtypes.float16 \
            else float32_to_bfloat16_bits(float(value))
        return f"((uint16_t)0x{bits:04x})"
    if dtypes.is_int(dtype):
        if dtype == dtypes.int64 and value == dtypes.min(dtypes.int64):
            return "(-9223372036854775807LL - 1)"
        literal = f"{value}ULL" if dtype == dtypes.uint64 else f"{value}LL"
        return literal if dtype == dtypes.int64 else f"(({CTYPES[dtype]}){literal})"
    value = float(value)
    cast = "(float)" if dtype == dtypes.float32 else "(double)"
    if math.isnan(value):
        return f"{cast}NAN"
    if math.isinf(value):
        return f"{cast}{'-' if value < 0 else ''}INFINITY"
    # repr is the shortest decimal that reads back as this double; the value is exact in `dtype`, so
    # the compiler's correctly rounded parse of it (as float for the f suffix) gives the same value
    return repr(value) + ("f" if dtype == dtypes.float32 else "")


class _Kernel:
    """Renders one program; `helpers` collects the helper functions the body needs."""

    def __init__(self, program: LinearProgram, register_bytes: int = 0) -> None:
        self.program, self.register_bytes = program, register_bytes
        self.streams = 0  # non-temporal stores emitted: the kernel then ends with a store fence
        self.names: dict[int, str] = {}
        self.helpers: dict[str, str] = {}
        self.lines: list[str] = []
        self.vectors = VectorC(self.need)

    def ctype(self, dtype: DType) -> str:
        return CTYPES[dtype] if dtype.count == 1 else self.vectors.ctype(dtype)

    def need(self, name: str, source: str) -> str:
        self.helpers.setdefault(name, source)
        return name

    def decode(self, dtype: DType, expr: str) -> str:
        """`expr` as a C float/double/integer value of the compute type (half -> float)."""
        if dtype not in HALVES:
            return expr
        self.need(dtype.name, _F16_HELPERS if dtype == dtypes.float16 else _BF16_HELPERS)
        return f"{'f16' if dtype == dtypes.float16 else 'bf16'}_to_f32({expr})"

    def encode(self, dtype: DType, expr: str) -> str:
        """A float expression rounded to `dtype` (identity for non-half dtypes)."""
        if dtype not in HALVES:
            return expr
        self.need(dtype.name, _F16_HELPERS if dtype == dtypes.float16 else _BF16_HELPERS)
        return f"f32_to_{'f16' if dtype == dtypes.float16 else 'bf16'}({expr})"

    def int_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        ctype = CTYPES[dtype]
        wrapping = {BinaryOps.ADD: "+", BinaryOps.SUB: "-", BinaryOps.MUL: "*"}
        if op in wrapping:
            return f"({ctype})((uint64_t){a[0]} {wrapping[op]} (uint64_t){a[1]})"  # type: ignore[index]
        if op is UnaryOps.NEG:
            return f"({ctype})(0 - (uint64_t){a[0]})"
        if op is TernaryOps.MULACC:
            return f"({ctype})((uint64_t){a[0]} * (uint64_t){a[1]} + (uint64_t){a[2]})"
        if op in (BinaryOps.DIV, BinaryOps.MOD):
            self.need(f"divmod_{dtype.name}", _int_helpers(dtype))
            return f"{'div' if op is BinaryOps.DIV else 'mod'}_{_suffix(dtype)}({a[0]}, {a[1]})"
        if op is BinaryOps.MAX:
            return f"({a[0]} > {a[1]} ? {a[0]} : {a[1]})"
        if op is BinaryOps.XOR:
            return f"({ctype})({a[0]} ^ {a[1]})"
        raise ValueError(f"C renderer: {op} is not defined for {dtype.name}")

    def bool_alu(self, op: object, a: list[str]) -> str:
        table = {BinaryOps.ADD: "({0} | {1})", BinaryOps.MUL: "({0} & {1})", BinaryOps.MAX: "({0} | {1})",
                 BinaryOps.MOD: "({0} & !{1})", BinaryOps.XOR: "({0} ^ {1})", TernaryOps.MULACC: "(({0} & {1}) | {2})"}
        if op not in table:
            raise ValueError(f"C renderer: {op} is not defined for bool")
        return table[op].format(*a)  # type: ignore[index]

    def float_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        """The op on decoded operands, rounded to `dtype` (half: every rounding step explicit)."""
        ctype = "double" if dtype == dtypes.float64 else "float"
        x = [self.decode(dtype, arg) for arg in a]
        libm = {UnaryOps.EXP2: "exp2", UnaryOps.LOG2: "log2", UnaryOps.SIN: "sin", UnaryOps.SQRT: "sqrt"}
        infix = {BinaryOps.ADD: "+", BinaryOps.SUB: "-", BinaryOps.MUL: "*", BinaryOps.DIV: "/"}
        if op in libm:
            expr = f"{libm[op]}{'f' if ctype == 'float' else ''}({x[0]})"  # type: ignore[index]
        elif op in infix:
            expr = f"({x[0]} {infix[op]} {x[1]})"  # type: ignore[index]
        elif op is UnaryOps.NEG:
            expr = f"(-{x[0]})"
        elif op is BinaryOps.MAX:
            expr = f"{self.need(f'max_{ctype}', _float_helpers(ctype))}({x[0]}, {x[1]})"
        elif op is TernaryOps.MULACC:
            product = self.encode(dtype, f"({x[0]} * {x[1]})")
            expr = f"({self.decode(dtype, product)} + {x[2]})"
        else:
            raise ValueError(f"C renderer: {op} is not defined for {dtype.name}")
        return self.encode(dtype, expr)

    def cast(self, source: DType, target: DType, arg: str) -> str:
        value = self.decode(source, arg)
        if target == dtypes.bool:
            return f"({value} != 0)"
        if dtypes.is_int(target):
            if dtypes.is_float(source):
                return f"{self.need(f'f2i_{target.name}', _cast_helper(target))}((double){value})"
            return f"({CTYPES[target]}){value}"
        if target in HALVES:
            return self.encode(target, value if source == dtypes.float32 or source in HALVES else f"(float){value}")
        return f"({CTYPES[target]}){value}"

    def alu(self, instr: Instr, src_types: list[DType], a: list[str]) -> str:
        op, dtype = instr.arg, src_types[-1]
        if op is TernaryOps.WHERE:
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if op is UnaryOps.CAST:
            return self.cast(src_types[0], instr.dtype, a[0])  # type: ignore[arg-type]
        if op is UnaryOps.BITCAST:
            source, target = src_types[0], instr.dtype
            name = f"bitcast_{_suffix(source)}_{_suffix(target)}"  # type: ignore[arg-type]
            return f"{self.need(name, _bitcast_helper(source, target))}({a[0]})"  # type: ignore[arg-type]
        if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ):
            x = [self.decode(dtype, arg) for arg in a]
            if dtype == dtypes.bool and op is BinaryOps.CMPLT:
                return f"(!{x[0]} & {x[1]})"
            return f"({x[0]} {'<' if op is BinaryOps.CMPLT else '=='} {x[1]})"
        if dtype == dtypes.bool:
            return self.bool_alu(op, a)
        if dtypes.is_float(dtype):
            return self.float_alu(op, dtype, a)
        return self.int_alu(op, dtype, a)

    def index(self, op: IndexOps, a: list[str]) -> str:
        if op in (IndexOps.FLOORDIV, IndexOps.FLOORMOD):
            self.need("index", _INDEX_HELPERS)
            return f"idx_floor{'div' if op is IndexOps.FLOORDIV else 'mod'}({a[0]}, {a[1]})"
        symbol = {IndexOps.ADD: "+", IndexOps.MUL: "*", IndexOps.NONNEG_DIV: "/", IndexOps.NONNEG_MOD: "%",
                  IndexOps.CMPLT: "<", IndexOps.AND: "&"}[op]
        return f"({a[0]} {symbol} {a[1]})"

    def statement(self, number: int, instr: Instr) -> str | None:
        """The C statement for one instruction (None for inlined values), recording its name."""
        a = [self.names[src] for src in instr.srcs]
        types = [self.program.instrs[src].dtype for src in instr.srcs]
        op, name = instr.op, f"v{number}"
        if op is IROps.CONST:
            dtype: DType = instr.dtype  # type: ignore[assignment]
            literal = render_const(instr.arg, dtype.scalar())
            self.names[number] = literal if dtype.count == 1 else self.vectors.literal([literal] * dtype.count, dtype)
            return None
        if op is IROps.DEFINE_VAR:
            self.names[number] = f"var{self.program.var_names.index(instr.arg)}"
            return None
        if op is IROps.LOOP:
            name = ("gidx" if instr.arg is LoopKind.GLOBAL else "ridx") + str(number)
            self.names[number] = name
            return f"for (int64_t {name} = {a[0]}; {name} < {a[1]}; {name}++) {{"
        if op is IROps.ENDLOOP:
            return "}"
        if op is IROps.STORE:
            return self.store(instr, types[1], a)  # type: ignore[arg-type]
        if op is IROps.ASSIGN:
            return f"{a[0]} = {a[1]};"
        if op is IROps.DEFINE_ACC:
            self.names[number] = f"acc{number}"
            literal = render_const(instr.arg, instr.dtype.scalar())  # type: ignore[union-attr]
            if instr.dtype.count > 1:  # type: ignore[union-attr]
                literal = self.vectors.literal([literal] * instr.dtype.count, instr.dtype)  # type: ignore
            return f"{self.ctype(instr.dtype)} acc{number} = {literal};"  # type: ignore[arg-type]
        expr = self.expression(instr, types, a)  # type: ignore[arg-type]
        self.names[number] = name
        return f"const {self.ctype(instr.dtype)} {name} = {expr};"  # type: ignore[arg-type]

    def store(self, instr: Instr, value_type: DType, a: list[str]) -> str:
        """A STORE: scalar, vector, or streamed vector (codegen/streaming.py), under its `valid`."""
        pointer = f"&data{instr.arg}[{a[0]}]"
        target = f"data{instr.arg}[{a[0]}] = {a[1]};" if value_type.count == 1 else None
        if target is None and instr.arg in self.program.streamed:
            target = self.vectors.stream(value_type, pointer, a[1], self.register_bytes)
            self.streams += target is not None
        if target is None:
            target = self.vectors.store(value_type, pointer, a[1])
        return f"if ({a[2]}) {target}" if len(a) == 3 else target

    def expression(self, instr: Instr, types: list[DType], a: list[str]) -> str:
        """The C expression of a value instruction (LOAD, INDEX, ALU, VECTORIZE, GEP)."""
        dtype: DType = instr.dtype  # type: ignore[assignment]
        if instr.op is IROps.LOAD:
            if dtype.count > 1:
                return self.vectors.load(dtype, f"&data{instr.arg}[{a[0]}]", a[1] if len(a) == 2 else None)
            element = f"data{instr.arg}[{a[0]}]"
            element = f"({element} != 0)" if dtype == dtypes.bool else element
            return f"({a[1]} ? {element} : 0)" if len(a) == 2 else element
        if instr.op is IROps.INDEX:
            return self.index(instr.arg, a)
        if instr.op is IROps.VECTORIZE:
            return self.vectors.literal(a, dtype)
        if instr.op is IROps.GEP:
            return self.vectors.gep(types[0], a[0], instr.arg)
        if dtype.count > 1:
            source = types[1] if instr.arg is TernaryOps.WHERE else types[0]
            return self.vectors.alu(instr.arg, dtype, source, a)
        return self.alu(instr, types, a)

    def source(self) -> str:
        depth = 1
        for number, instr in enumerate(self.program.instrs):
            line = self.statement(number, instr)
            if line is None:
                continue
            depth -= line == "}"
            self.lines.append("  " * depth + line)
            depth += line.endswith("{")
        params = [f"{CTYPES[b.dtype]}* restrict data{b.idx}" for b in self.program.buffers]
        params += [f"int64_t var{i}" for i in range(len(self.program.var_names))]
        comments = "".join(f"/* var{i} = {n} */\n" for i, n in enumerate(self.program.var_names)
                           if re.fullmatch(r"[A-Za-z0-9_]+", n))
        head = "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n"
        fence = "\n  _mm_sfence();" if self.streams else ""  # streamed values visible to every thread
        return (head + "".join(self.helpers.values()) + comments
                + f"void {self.program.name}({', '.join(params) or 'void'}) {{\n"
                + "\n".join(self.lines) + fence + "\n}\n")


class CRenderer(Renderer):
    """C11 (with GCC/clang vector extensions for vector values) for the CLANG runtime."""

    def __init__(self, options: RendererOptions | None = None) -> None:
        self.options = options if options is not None else RendererOptions(max_upcast=4, max_unroll=8)

    def render(self, program: LinearProgram) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", program.name):
            raise ValueError(f"C renderer: kernel name {program.name!r} is not a C identifier")
        return _Kernel(program, self.options.vector_bytes).source()
