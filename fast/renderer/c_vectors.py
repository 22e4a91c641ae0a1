"""Vector values in the C renderer: GCC/clang vector extensions (`__attribute__((vector_size))`).

Representation (lane-wise the same values as the scalar C code, docs/semantics.md):
- a vector of dtype T with n lanes is `v<T>x<n>`, n elements of T's C type (half floats as uint16);
- a bool vector is a mask `vmaskx<n>` of int32 lanes holding -1 (true) or 0 (false); comparisons of
  64-bit lanes give 64-bit masks that are narrowed with `__builtin_convertvector` (-1 stays -1);
- selects are bitwise on the integer view of the lanes (C has no vector `?:`);
- integer ADD/SUB/MUL/NEG/MULACC run on the unsigned view (wraps, never signed overflow); DIV/MOD on
  vectors always have a constant divisor other than 0 and -1 (fast/codegen/ir.py), so plain `/` `%`
  are defined; float -> int casts zero the lanes whose truncation does not fit before converting;
- loads and stores go through a pointer to the vector type declared `aligned(1), may_alias` (any
  alignment, no aliasing assumptions: the way GCC's and clang's own unaligned intrinsics are
  written); a streamed store (codegen/streaming.py) is an x86 non-temporal store when its address
  is aligned to the vector size, else the same plain store. Never `memcpy` of a whole vector: GCC
  turns a 32- or 64-byte memcpy into a store of a 256/512-bit *integer*, and GCC 12.2 with AVX-512
  enabled then stores a constant one, such as {x, x, x, 0} of 64-bit lanes, as a broadcast of x (its
  const_wide_int -> broadcast conversion forgets the implicit zero high words; runtime/clang.py).
"""
from __future__ import annotations

from collections.abc import Callable

from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps
from fast.renderer import c_x86

SCALAR_CTYPES: dict[DType, str] = {
    dtypes.bool: "unsigned char", dtypes.int8: "int8_t", dtypes.uint8: "uint8_t", dtypes.int16: "int16_t",
    dtypes.uint16: "uint16_t", dtypes.int32: "int32_t", dtypes.uint32: "uint32_t", dtypes.int64: "int64_t",
    dtypes.uint64: "uint64_t", dtypes.float16: "uint16_t", dtypes.bfloat16: "uint16_t", dtypes.float32: "float",
    dtypes.float64: "double",
}
_BY_WIDTH = {1: (dtypes.int8, dtypes.uint8), 2: (dtypes.int16, dtypes.uint16), 4: (dtypes.int32, dtypes.uint32),
             8: (dtypes.int64, dtypes.uint64)}
# float -> int casts: C conditions on lane `x` that hold exactly when trunc(x) fits (NaN fails both)
_FIT = {(dtypes.float32, dtypes.int32): ("-0x1p31f", ">=", "0x1p31f"),
        (dtypes.float32, dtypes.uint32): ("-1.0f", ">", "0x1p32f"),
        (dtypes.float64, dtypes.int64): ("-0x1p63", ">=", "0x1p63"),
        (dtypes.float64, dtypes.uint64): ("-1.0", ">", "0x1p64")}


#: x86 float vector registers by (element bytes, vector bytes): (vector type, intrinsic name pattern
#: with `{}` for the operation: `fmadd`, `min`, `max`). FMA on 32-byte vectors needs -mfma, anything
#: on 64-byte ones -mavx512f (the flags of the SIMD levels that have vectors of that size).
#: `_mm_min_ps(a, b)` is `a < b ? a : b` lane by lane and `_mm_max_ps(a, b)` is `a > b ? a : b`,
#: exactly (a NaN or two zeros give b).
_X86_FLOATS = {(4, 16): ("__m128", "_mm_{}_ps"), (4, 32): ("__m256", "_mm256_{}_ps"),
               (4, 64): ("__m512", "_mm512_{}_ps"), (8, 16): ("__m128d", "_mm_{}_pd"),
               (8, 32): ("__m256d", "_mm256_{}_pd"), (8, 64): ("__m512d", "_mm512_{}_pd")}
#: The preprocessor macro that says the compiler targets x86's lane-wise square root of a vector size.
_X86_SQRT_FEATURES = {16: "__SSE2__", 32: "__AVX__", 64: "__AVX512F__"}
#: x86 non-temporal stores by vector bytes: (integer vector type, intrinsic). SSE2 has the 16-byte
#: one; the 32- and 64-byte ones need the AVX / AVX-512 flags that vectors of that size imply.
_STREAMS = {16: ("__m128i", "_mm_stream_si128"), 32: ("__m256i", "_mm256_stream_si256"),
            64: ("__m512i", "_mm512_stream_si512")}


def vector_name(dtype: DType) -> str:
    """The typedef name of a vector dtype."""
    scalar = dtype.scalar()
    return f"vmaskx{dtype.count}" if scalar == dtypes.bool else f"v{scalar.name}x{dtype.count}"


def typedef(dtype: DType) -> str:
    scalar = dtype.scalar()
    lane = "int32_t" if scalar == dtypes.bool else SCALAR_CTYPES[scalar]
    size = 4 if scalar == dtypes.bool else scalar.itemsize
    return f"typedef {lane} {vector_name(dtype)} __attribute__((vector_size({size * dtype.count})));\n"


def memory_typedef(dtype: DType) -> str:
    """The typedef of `dtype`'s vectors as they are read and written in memory: any alignment,
    aliasing anything (`<vector name>_u`)."""
    lane, size = SCALAR_CTYPES[dtype.scalar()], dtype.scalar().itemsize * dtype.count
    return f"typedef {lane} {vector_name(dtype)}_u __attribute__((vector_size({size}), aligned(1), may_alias));\n"


def int_view(dtype: DType, signed: bool = True) -> DType:
    """The integer vector dtype with the lanes of `dtype` (bool: the int32 mask itself)."""
    scalar = dtype.scalar()
    if scalar == dtypes.bool:
        return dtypes.int32.vec(dtype.count)
    return _BY_WIDTH[scalar.itemsize][0 if signed else 1].vec(dtype.count)


class VectorC:
    """Vector expressions for one kernel; `need(name, source)` registers typedefs and helpers."""

    def __init__(self, need: Callable[[str, str], str]) -> None:
        self.need = need

    def ctype(self, dtype: DType) -> str:
        self.need(f"typedef {vector_name(dtype)}", typedef(dtype))
        return vector_name(dtype)

    def mask_of(self, dtype: DType, expr: str) -> str:
        """A comparison result on lanes of `dtype` as a bool vector (int32 mask)."""
        mask = self.ctype(dtypes.bool.vec(dtype.count))
        if dtype.scalar().itemsize == 4:
            return f"({mask})({expr})"
        self.ctype(int_view(dtype))
        return f"__builtin_convertvector({expr}, {mask})"

    def widen_mask(self, mask: str, dtype: DType) -> str:
        """A bool vector as a mask of `dtype`'s lane width (for selects)."""
        view = self.ctype(int_view(dtype))
        return mask if dtype.scalar().itemsize == 4 or dtype.scalar() == dtypes.bool \
            else f"__builtin_convertvector({mask}, {view})"

    def select(self, mask: str, a: str, b: str, dtype: DType) -> str:
        """Lane-wise `mask ? a : b` for values of vector dtype `dtype`."""
        vtype, view = self.ctype(dtype), self.ctype(int_view(dtype))
        wide = self.widen_mask(mask, dtype)
        return f"(({vtype})(({wide} & ({view}){a}) | (~{wide} & ({view}){b})))"

    def literal(self, lanes: list[str], dtype: DType) -> str:
        if dtype.scalar() == dtypes.bool:
            lanes = [f"-(int32_t)({lane})" for lane in lanes]
        return f"(({self.ctype(dtype)}){{{', '.join(lanes)}}})"

    def memory_ctype(self, dtype: DType) -> str:
        """The unaligned, may-alias vector type loads and stores go through (module docstring)."""
        self.ctype(dtype)
        self.need(f"typedef {vector_name(dtype)}_u", memory_typedef(dtype))
        return f"{vector_name(dtype)}_u"

    def load(self, dtype: DType, pointer: str, valid: str | None) -> str:
        vtype, memory = self.ctype(dtype), self.memory_ctype(dtype)
        ctype = SCALAR_CTYPES[dtype.scalar()]
        self.need(f"vload {vtype}", f"static inline {vtype} vload_{vtype}(const {ctype}* p) "
                  f"{{ return *(const {memory}*)p; }}\n")
        expr = f"vload_{vtype}({pointer})"
        return expr if valid is None else f"({valid} ? {expr} : ({vtype}){{0}})"

    def store(self, dtype: DType, pointer: str, value: str) -> str:
        vtype, memory = self.ctype(dtype), self.memory_ctype(dtype)
        ctype = SCALAR_CTYPES[dtype.scalar()]
        self.need(f"vstore {vtype}", f"static inline void vstore_{vtype}({ctype}* p, {vtype} v) "
                  f"{{ *({memory}*)p = v; }}\n")
        return f"vstore_{vtype}({pointer}, {value});"

    def stream(self, dtype: DType, pointer: str, value: str, register_bytes: int) -> str | None:
        """A non-temporal store of `value` (a plain store when `pointer` is not aligned to the vector's
        size), or None when no x86 instruction fits (vector size unknown or above `register_bytes`)."""
        size = dtype.scalar().itemsize * dtype.count
        if size not in _STREAMS or size > register_bytes or dtype.scalar() == dtypes.bool:
            return None
        vtype, memory, (itype, intrinsic) = self.ctype(dtype), self.memory_ctype(dtype), _STREAMS[size]
        ctype = SCALAR_CTYPES[dtype.scalar()]
        self.need("x86", c_x86.PRELUDE)
        aligned = c_x86.either(c_x86.stream_builtin(size, "p", "v"), f"{intrinsic}(({itype}*)p, ({itype})v);", "    ")
        self.need(f"vstream {vtype}", f"static inline void vstream_{vtype}({ctype}* p, {vtype} v) {{\n"
                  f"  if (((uintptr_t)p & {size - 1}) == 0) {{{aligned}  }}\n"
                  f"  else *({memory}*)p = v;\n}}\n")
        fence = c_x86.either("__builtin_ia32_sfence();", "_mm_sfence();")
        self.need("vstream fence", f"static inline void vstream_fence(void) {{{fence}}}\n")  # the kernel's end
        return f"vstream_{vtype}({pointer}, {value});"

    def fma(self, dtype: DType, a: list[str], register_bytes: int) -> str:
        """FusedOps.FMA on float32/float64 vectors: the x86 FMA intrinsic of the vector's size when
        it fits a register (`_mm512_fmadd_ps`, ...: the C compiler has no generic vector FMA), else
        libm's `fmaf`/`fma` lane by lane. Either way one rounding per lane."""
        itemsize, vtype = dtype.scalar().itemsize, self.ctype(dtype)
        size = itemsize * dtype.count
        if (itemsize, size) in _X86_FLOATS and size <= register_bytes:
            itype, intrinsic = _X86_FLOATS[(itemsize, size)]
            self.need("x86", c_x86.PRELUDE)
            body = c_x86.either(f"return ({vtype}){c_x86.builtin('fmadd', itemsize, size, ['a', 'b', 'c'])};",
                                f"return ({vtype}){intrinsic.format('fmadd')}(({itype})a, ({itype})b, ({itype})c);")
        else:
            scalar = "fma" if itemsize == 8 else "fmaf"
            body = f"return ({vtype}){{{', '.join(f'{scalar}(a[{i}], b[{i}], c[{i}])' for i in range(dtype.count))}}};"
        head = f"static inline {vtype} vfma_{vtype}({vtype} a, {vtype} b, {vtype} c)"
        self.need(f"vfma {vtype}", f"{head} {{ {body} }}\n")
        return f"vfma_{vtype}({a[0]}, {a[1]}, {a[2]})"

    def sqrt(self, dtype: DType, a: list[str]) -> str:
        """SQRT on float32/float64 vectors: x86's lane-wise SQRTPS/SQRTPD of the vector's size where
        the compiler targets it (the preprocessor checks), else libm's `sqrtf`/`sqrt` lane by lane;
        correctly rounded either way, so the bits are the same."""
        itemsize, vtype = dtype.scalar().itemsize, self.ctype(dtype)
        size, scalar = itemsize * dtype.count, "sqrt" if itemsize == 8 else "sqrtf"
        lanes = f"return ({vtype}){{{', '.join(f'{scalar}(a[{i}])' for i in range(dtype.count))}}};"
        body = f" {lanes} "  # no register of that size: libm only
        if (itemsize, size) in _X86_FLOATS:
            itype, intrinsic = _X86_FLOATS[(itemsize, size)]
            self.need("x86", c_x86.PRELUDE)
            x86 = c_x86.either(f"return ({vtype}){c_x86.builtin('sqrt', itemsize, size, ['a'])};",
                               f"return ({vtype}){intrinsic.format('sqrt')}(({itype})a);")
            body = f"\n#if defined(__x86_64__) && defined({_X86_SQRT_FEATURES[size]}){x86}#else\n  {lanes}\n#endif\n"
        self.need(f"vsqrt {vtype}", f"static inline {vtype} vsqrt_{vtype}({vtype} a) {{{body}}}\n")
        return f"vsqrt_{vtype}({a[0]})"

    def min_max(self, which: str, dtype: DType, a: list[str], register_bytes: int) -> str | None:
        """`a[0] < a[1] ? a[0] : a[1]` (`which` "min") or `a[0] > a[1] ? a[0] : a[1]` ("max") on
        float32/float64 vectors with the x86 instruction that computes exactly that, when one
        register holds the vector; None otherwise (the caller writes a select)."""
        itemsize, vtype = dtype.scalar().itemsize, self.ctype(dtype)
        size = itemsize * dtype.count
        if dtype.scalar() not in (dtypes.float32, dtypes.float64) or (itemsize, size) not in _X86_FLOATS \
                or size > register_bytes:
            return None
        itype, intrinsic = _X86_FLOATS[(itemsize, size)]
        self.need("x86", c_x86.PRELUDE)
        name = f"v{which}_select_{vtype}"
        body = c_x86.either(f"return ({vtype}){c_x86.builtin(which, itemsize, size, ['a', 'b'])};",
                            f"return ({vtype}){intrinsic.format(which)}(({itype})a, ({itype})b);")
        self.need(name, f"static inline {vtype} {name}({vtype} a, {vtype} b) {{ {body} }}\n")
        return f"{name}({a[0]}, {a[1]})"

    def shuffle(self, dtype: DType, operands: list[str], lanes: tuple[int, ...]) -> str:
        """Lanes of two vectors of `dtype` (IROps.SHUFFLE): `__builtin_shufflevector` where the compiler
        has it (clang, GCC 12 and later), else GCC's `__builtin_shuffle` with a mask vector."""
        vtype, mask = self.ctype(dtype), self.ctype(int_view(dtype))
        self.need("vshuffle", "#if defined(__clang__) || __GNUC__ >= 12\n"
                              "#define VSHUFFLE(mask, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)\n"
                              "#else\n"
                              "#define VSHUFFLE(mask, a, b, ...) __builtin_shuffle(a, b, (mask){__VA_ARGS__})\n"
                              "#endif\n")
        return f"(({vtype})VSHUFFLE({mask}, {operands[0]}, {operands[1]}, {', '.join(map(str, lanes))}))"

    def gep(self, dtype: DType, vector: str, lane: int) -> str:
        return f"({vector}[{lane}] != 0)" if dtype.scalar() == dtypes.bool else f"{vector}[{lane}]"

    def alu(self, op: object, out: DType, src: DType, a: list[str]) -> str:
        """One vector ALU op (`src`: the operand dtype, the value dtype for WHERE)."""
        if op is TernaryOps.WHERE:
            return self.select(a[0], a[1], a[2], src)
        if op is UnaryOps.CAST:
            return self.cast(src, out, a[0])
        if op is UnaryOps.BITCAST:
            return f"(({self.ctype(out)}){a[0]})"
        if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ):
            if src.scalar() == dtypes.bool and op is BinaryOps.CMPLT:
                return f"(~{a[0]} & {a[1]})"
            return self.mask_of(src, f"({a[0]} {'<' if op is BinaryOps.CMPLT else '=='} {a[1]})")
        if src.scalar() == dtypes.bool:
            return self.bool_alu(op, a)
        if dtypes.is_float(src.scalar()):
            return self.float_alu(op, src, a)
        return self.int_alu(op, src, a)

    def bool_alu(self, op: object, a: list[str]) -> str:
        symbol = {BinaryOps.ADD: "|", BinaryOps.MAX: "|", BinaryOps.MUL: "&", BinaryOps.XOR: "^"}
        if op not in symbol:
            raise ValueError(f"C renderer: vector {op} is not defined for bool")
        return f"({a[0]} {symbol[op]} {a[1]})"  # type: ignore[index]

    def float_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        infix = {BinaryOps.ADD: "+", BinaryOps.SUB: "-", BinaryOps.MUL: "*", BinaryOps.DIV: "/"}
        if op in infix:
            return f"({a[0]} {infix[op]} {a[1]})"  # type: ignore[index]
        if op is UnaryOps.NEG:
            return f"(-{a[0]})"
        if op is TernaryOps.MULACC:
            return f"(({a[0]} * {a[1]}) + {a[2]})"
        if op is BinaryOps.MAX:
            vtype, view = self.ctype(dtype), self.ctype(int_view(dtype))
            self.need(f"vmax {vtype}", f"static inline {vtype} vmax_{vtype}({vtype} a, {vtype} b) {{\n"
                      f"  {view} m = (a > b) | (a != a);\n"
                      f"  return ({vtype})((m & ({view})a) | (~m & ({view})b));\n}}\n")
            return f"vmax_{vtype}({a[0]}, {a[1]})"
        raise ValueError(f"C renderer: vector {op} is not defined for {dtype.name}")

    def int_alu(self, op: object, dtype: DType, a: list[str]) -> str:
        vtype, unsigned = self.ctype(dtype), self.ctype(int_view(dtype, signed=False))
        wrapping = {BinaryOps.ADD: "+", BinaryOps.SUB: "-", BinaryOps.MUL: "*"}
        if op in wrapping:
            return f"(({vtype})(({unsigned}){a[0]} {wrapping[op]} ({unsigned}){a[1]}))"  # type: ignore[index]
        if op is UnaryOps.NEG:
            return f"(({vtype})(-({unsigned}){a[0]}))"
        if op is TernaryOps.MULACC:
            return f"(({vtype})(({unsigned}){a[0]} * ({unsigned}){a[1]} + ({unsigned}){a[2]}))"
        if op in (BinaryOps.DIV, BinaryOps.MOD):  # constant divisor, never 0 or -1 (IR contract)
            return f"({a[0]} {'/' if op is BinaryOps.DIV else '%'} {a[1]})"
        if op is BinaryOps.XOR:
            return f"({a[0]} ^ {a[1]})"
        if op is BinaryOps.MAX:
            return self.select(self.mask_of(dtype, f"({a[0]} > {a[1]})"), a[0], a[1], dtype)
        raise ValueError(f"C renderer: vector {op} is not defined for {dtype.name}")

    def cast(self, source: DType, target: DType, value: str) -> str:
        """Lane-wise CAST with the scalar rules (float -> int: lanes that do not fit become 0)."""
        src, dst = source.scalar(), target.scalar()
        vtarget = self.ctype(target)
        if dst == dtypes.bool:
            return self.mask_of(source, f"({value} != 0)")
        if src == dtypes.bool:
            return f"__builtin_convertvector(-{value}, {vtarget})"
        if src.itemsize == dst.itemsize and dtypes.is_int(src) and dtypes.is_int(dst):
            return f"(({vtarget}){value})"
        if dtypes.is_float(src) and dtypes.is_int(dst):
            low, compare, high = _FIT[(src, dst)]
            fits = self.mask_of(source, f"(({value} {compare} {low}) & ({value} < {high}))")
            zero = f"(({self.ctype(source)}){{0}})"
            return f"__builtin_convertvector({self.select(fits, value, zero, source)}, {vtarget})"
        return f"__builtin_convertvector({value}, {vtarget})"
