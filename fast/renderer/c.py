"""C renderer: a `LinearProgram` as one C11 function with no undefined behaviour, and the code it
shares with other C dialects (CUDA C: renderer/cuda.py) through `CDialect`, a value.

Output: `void <name>(T0* restrict data0, ..., int64_t var...)`. Buffers handed to one kernel must
not overlap, except that an in-place kernel may read an element of its own output at exactly the
index it writes (the scheduler's assign contract).

What a dialect decides (`CDialect`, data: the renderer never tests a device): the prelude (C headers,
or typedefs where there are none), the function head and pointer qualifier, the qualifiers of helper
functions, whether vector extensions exist, the store fence of streamed kernels, and the names of a
GPU's thread and block indices. With those, renderer/c_grid.py renders the loops that `grid_map`
(renderer/grid.py) gives to GPU threads through the hooks of `_Kernel` (`prologue`, `before`,
`loop`, `end_loop`); here every loop is a plain counted loop (CPU kernels: threads get shares of the
outermost GLOBAL loop through `core, cores`). Everything about values below holds for every dialect.

How docs/semantics.md is kept (values in C):
- `bool` is `unsigned char` holding 0/1; loads normalise (`!= 0`), every bool-producing op gives 0/1.
- `float16`/`bfloat16` values are their `uint16_t` bit patterns, in memory and in variables. Each op
  decodes its operands to float, computes in float32 and encodes the result with round-to-nearest-even
  (software conversions below: subnormals, inf and NaN included; bfloat16 NaN -> quiet NaN).
- integer ADD/SUB/MUL/NEG/MULACC compute in `uint64_t` and convert back (wrap, never signed overflow);
  DIV/MOD are total (`x/0 = 0`, `x%0 = x`, `MIN/-1 = MIN`, `MIN%-1 = 0`); float -> int casts are
  range-checked in double (NaN/inf/out of range give 0); float MAX propagates NaN; bitcasts go
  through `memcpy`; MULACC on floats is `(a*b)+c` and is never contracted (compile with
  `-ffp-contract=off`, see runtime/clang.py); the IR's own `FusedOps.FMA` (codegen/fma.py: float
  sums of products) is `fmaf`/`fma`, or an x86 FMA intrinsic on vectors (fast/renderer/c_vectors.py).
  SQRT calls libm's correctly rounded `sqrtf`/`sqrt`; on vectors x86's SQRTPS/SQRTPD where the
  compiler targets them (the same bits), else `sqrtf`/`sqrt` lane by lane.
  Lowering expands EXP2/LOG2/SIN of every float dtype into plain ALU code (codegen/transcendental.py,
  sine.py), so kernels never reach libm for them; the renderer still maps them to `exp2f`/`exp2`, ...
  for IR that holds them (hand-built IR in tests).
- index arithmetic is `int64_t`; floor division/modulo by a positive constant is exact for negative
  numerators; a masked load is `valid ? data[idx] : 0`, so memory is touched only where valid.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from fast.codegen.ir import FusedOps, IndexOps, Instr, IROps, LinearProgram, LoopKind
from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps
from fast.renderer.base import Renderer, RendererOptions
from fast.renderer.c_helpers import (
    BF16_HELPERS,
    CTYPES,
    F16_HELPERS,
    HALVES,
    INDEX_HELPERS,
    bitcast_helper,
    cast_helper,
    division_helpers,
    float_max_helper,
    render_const,
    suffix,
)
from fast.renderer.c_tiles import TILE_TARGET, tile_prelude, tile_statement, uses_tiles
from fast.renderer.c_vectors import VectorC

__all__ = ["CTYPES", "HALVES", "CDialect", "C_DIALECT", "CRenderer", "check_renderable", "render_c", "render_const"]
_HELPER_PREFIX = re.compile(r"^static inline ", re.MULTILINE)

@dataclass(frozen=True)
class CDialect:
    """What differs between the C dialects `_Kernel` writes (module docstring).

    - `prelude`: text before the helpers (headers, typedefs, macros);
    - `kernel_head`: text before the kernel's name, `{threads}` standing for the block size;
    - `restrict`: the no-alias qualifier of buffer pointers;
    - `helper`: the qualifiers replacing `static inline` on helper functions;
    - `vectors`: GCC/clang vector extensions are available (else vector dtypes are an error);
    - `store_fence`: the statement ending a kernel that streamed stores;
    - `prefetch`: the statement hinting that `{pointer}` is read soon ("": PREFETCH renders nothing);
    - `int_max`: an integer MAX of `{0}` and `{1}` (`{utype}`: the unsigned type of the operands'
      width, `{bias}`: its sign bit for a signed type, else 0);
    - GPU dialects only (renderer/c_grid.py), int64 expressions: `thread` (this thread in its
      block), `threads` (threads per block), `block` (this block), `blocks` (blocks in the grid);
      `barrier`: the statement that waits for every thread of the block; `shared`: the qualifier of
      memory shared by a block."""

    prelude: str
    kernel_head: str
    restrict: str
    helper: str
    vectors: bool
    store_fence: str
    prefetch: str = ""
    int_max: str = "({0} > {1} ? {0} : {1})"
    thread: str = ""
    threads: str = ""
    block: str = ""
    blocks: str = ""
    barrier: str = ""
    shared: str = ""


C_DIALECT = CDialect(prelude="#include <stdint.h>\n#include <string.h>\n#include <math.h>\n", kernel_head="void ",
                     restrict="restrict", helper="static inline", vectors=True, store_fence="vstream_fence();",
                     prefetch="__builtin_prefetch({pointer}, 0, 3);")


class _Kernel:
    """Renders one program in one dialect; `helpers` collects the helper functions the body needs.
    `threads`: the block size the kernel head promises (`{threads}` of `CDialect.kernel_head`).
    Hooks for other loop structures (renderer/c_grid.py): `prologue` (lines opening the body),
    `before(number)` (lines before instruction `number`; `len(instrs)`: before the body closes),
    `loop`, `end_loop`; `folded`: loops that are not rendered (no line for their ENDLOOP)."""

    folded: frozenset[int] = frozenset()

    def __init__(self, program: LinearProgram, register_bytes: int = 0, dialect: CDialect = C_DIALECT,
                 threads: int = 1, min_max: bool = False) -> None:
        self.program, self.register_bytes, self.dialect, self.threads = program, register_bytes, dialect, threads
        self.min_max = min_max  # RendererOptions.min_max: float vector clamps as min/max instructions
        self.streams = 0  # non-temporal stores emitted: the kernel then ends with a store fence
        self.names: dict[int, str] = {}
        self.helpers: dict[str, str] = {}
        self.lines: list[str] = []
        self.vectors = VectorC(self.need)

    def ctype(self, dtype: DType) -> str:
        return CTYPES[dtype] if dtype.count == 1 else self.vectors.ctype(dtype)

    def need(self, name: str, source: str) -> str:
        """Register helper `source` (its `static inline` functions get the dialect's qualifiers)."""
        if name not in self.helpers:
            helper = self.dialect.helper
            self.helpers[name] = source if helper == "static inline" else _HELPER_PREFIX.sub(helper + " ", source)
        return name

    def decode(self, dtype: DType, expr: str) -> str:
        """`expr` as a C float/double/integer value of the compute type (half -> float)."""
        if dtype not in HALVES:
            return expr
        self.need(dtype.name, F16_HELPERS if dtype == dtypes.float16 else BF16_HELPERS)
        return f"{'f16' if dtype == dtypes.float16 else 'bf16'}_to_f32({expr})"

    def encode(self, dtype: DType, expr: str) -> str:
        """A float expression rounded to `dtype` (identity for non-half dtypes)."""
        if dtype not in HALVES:
            return expr
        self.need(dtype.name, F16_HELPERS if dtype == dtypes.float16 else BF16_HELPERS)
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
            self.need(f"divmod_{dtype.name}", division_helpers(dtype))
            return f"{'div' if op is BinaryOps.DIV else 'mod'}_{suffix(dtype)}({a[0]}, {a[1]})"
        if op is BinaryOps.MAX:
            unsigned = ctype if ctype.startswith("u") else f"u{ctype}"
            bias = 0 if ctype.startswith("u") else 1 << (8 * dtype.itemsize - 1)
            return self.dialect.int_max.format(a[0], a[1], utype=unsigned, bias=f"{bias:#x}ull")
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
            expr = f"{self.need(f'max_{ctype}', float_max_helper(ctype))}({x[0]}, {x[1]})"
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
                return f"{self.need(f'f2i_{target.name}', cast_helper(target))}((double){value})"
            return f"({CTYPES[target]}){value}"
        if target in HALVES:
            return self.encode(target, value if source == dtypes.float32 or source in HALVES else f"(float){value}")
        return f"({CTYPES[target]}){value}"

    def alu(self, instr: Instr, src_types: list[DType], a: list[str]) -> str:
        op, dtype = instr.arg, src_types[-1]
        if op is TernaryOps.WHERE:
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if op is FusedOps.FMA:  # libm's fma/fmaf: one rounding (an instruction with -mfma)
            return f"{'fma' if dtype == dtypes.float64 else 'fmaf'}({a[0]}, {a[1]}, {a[2]})"
        if op is UnaryOps.CAST:
            return self.cast(src_types[0], instr.dtype, a[0])  # type: ignore[arg-type]
        if op is UnaryOps.BITCAST:
            source, target = src_types[0], instr.dtype
            name = f"bitcast_{suffix(source)}_{suffix(target)}"  # type: ignore[arg-type]
            return f"{self.need(name, bitcast_helper(source, target))}({a[0]})"  # type: ignore[arg-type]
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
            self.need("index", INDEX_HELPERS)
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
            return self.loop(number, instr, a)
        if op is IROps.ENDLOOP:
            return None if instr.srcs[0] in self.folded else self.end_loop(instr.srcs[0])
        if op is IROps.STORE:
            return self.store(instr, types[1], a)  # type: ignore[arg-type]
        if op is IROps.PREFETCH:
            return self.prefetch(instr, a)
        if op is IROps.TILE:
            return tile_statement(self.program, instr, a)
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

    def loop(self, number: int, instr: Instr, a: list[str]) -> str | None:
        """A LOOP: a counted loop (None: no line)."""
        name = ("gidx" if instr.arg is LoopKind.GLOBAL else "ridx") + str(number)
        self.names[number] = name
        return f"for (int64_t {name} = {a[0]}; {name} < {a[1]}; {name}++) {{"

    def end_loop(self, loop: int) -> str | None:
        """The ENDLOOP of `loop` (None: no line)."""
        return "}"

    def prologue(self) -> list[str]:
        return []

    def before(self, number: int) -> list[str]:
        return []

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

    def prefetch(self, instr: Instr, a: list[str]) -> str | None:
        """A PREFETCH: the dialect's cache hint, only where `valid` holds (None: the dialect has none)."""
        if not self.dialect.prefetch:
            return None
        hint = self.dialect.prefetch.format(pointer=f"&data{instr.arg}[{a[0]}]")
        return f"if ({a[1]}) {hint}" if len(a) == 2 else hint

    def expression(self, instr: Instr, types: list[DType], a: list[str]) -> str:
        """The C expression of a value instruction (LOAD, INDEX, ALU, VECTORIZE, GEP, SHUFFLE)."""
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
        if instr.op is IROps.SHUFFLE:
            return self.vectors.shuffle(dtype, a, instr.arg)
        if dtype.count > 1 and instr.arg is FusedOps.FMA:
            return self.vectors.fma(dtype, a, self.register_bytes)
        if dtype.count > 1 and instr.arg is UnaryOps.SQRT:
            return self.vectors.sqrt(dtype, a)
        if dtype.count > 1 and instr.arg is TernaryOps.WHERE and self.min_max:
            chosen = self.min_max_select(instr, dtype)
            if chosen is not None:
                return chosen
        if dtype.count > 1:
            source = types[1] if instr.arg is TernaryOps.WHERE else types[0]
            return self.vectors.alu(instr.arg, dtype, source, a)
        return self.alu(instr, types, a)

    def min_max_select(self, instr: Instr, dtype: DType) -> str | None:
        """A vector WHERE(p < q, p, q) as min(p, q), WHERE(p < q, q, p) as max(q, p) (the same
        lanes, NaN and signed zeros included: RendererOptions.min_max); None for any other WHERE."""
        condition = self.program.instrs[instr.srcs[0]]
        if condition.op is not IROps.ALU or condition.arg is not BinaryOps.CMPLT:
            return None
        low, high = condition.srcs
        chosen = instr.srcs[1:]
        if chosen == (low, high):
            return self.vectors.min_max("min", dtype, [self.names[low], self.names[high]], self.register_bytes)
        if chosen == (high, low):
            return self.vectors.min_max("max", dtype, [self.names[high], self.names[low]], self.register_bytes)
        return None

    def source(self) -> str:
        dialect, depth = self.dialect, 1
        instrs = self.program.instrs
        for number in range(len(instrs) + 1):
            texts = [*self.before(number), self.statement(number, instrs[number]) if number < len(instrs) else None]
            for line in [line for text in texts if text is not None for line in text.split("\n")]:
                depth -= line == "}"
                self.lines.append("  " * depth + line)
                depth += line.endswith("{")
        self.lines[:0] = ["  " + line for line in self.prologue()]
        self.lines[:0] = [f"  {CTYPES[b.dtype]} data{b.idx}[{b.size}] __attribute__((aligned(64)));"
                          for b in self.program.scratch]  # private to this call (codegen/gemm.py)
        params = [f"{CTYPES[b.dtype]}* {dialect.restrict} data{b.idx}" for b in self.program.buffers]
        params += [f"int64_t var{i}" for i in range(len(self.program.var_names))]
        comments = "".join(f"/* var{i} = {n} */\n" for i, n in enumerate(self.program.var_names)
                           if re.fullmatch(r"[A-Za-z0-9_]+", n))
        fence = f"\n  {dialect.store_fence}" if self.streams else ""  # streamed values visible to every thread
        head = dialect.kernel_head.format(threads=self.threads)
        tiles = uses_tiles(self.program)
        prelude = dialect.prelude + (tile_prelude() if tiles else "")
        head = TILE_TARGET + head if tiles else head
        return (prelude + "".join(self.helpers.values()) + comments
                + f"{head}{self.program.name}({', '.join(params) or 'void'}) {{\n"
                + "\n".join(self.lines) + fence + "\n}\n")


class CRenderer(Renderer):
    """C11 (with GCC/clang vector extensions for vector values) for the CLANG runtime."""

    def __init__(self, options: RendererOptions | None = None) -> None:
        self.options = options if options is not None else RendererOptions(max_upcast=4, max_unroll=8)

    def render(self, program: LinearProgram) -> str:
        return render_c(program, C_DIALECT, self.options.vector_bytes, self.options.min_max)


def check_renderable(program: LinearProgram, dialect: CDialect) -> None:
    """ValueError when `program` cannot be written in `dialect` (its name, or vectors without them)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", program.name):
        raise ValueError(f"C renderer: kernel name {program.name!r} is not a C identifier")
    if not dialect.vectors and any(instr.dtype is not None and instr.dtype.count > 1 for instr in program.instrs):
        raise ValueError(f"C renderer: {program.name} has vector values, which this C dialect cannot express")
    if not dialect.vectors and program.scratch:
        raise ValueError(f"C renderer: {program.name} has scratch arrays, which this C dialect does not get")


def render_c(program: LinearProgram, dialect: CDialect, register_bytes: int = 0, min_max: bool = False) -> str:
    """`program` as one function of `dialect`, every loop a plain loop (`min_max`: RendererOptions)."""
    check_renderable(program, dialect)
    return _Kernel(program, register_bytes, dialect, min_max=min_max).source()
