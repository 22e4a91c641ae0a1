"""The renderer interface: a `LinearProgram` in, device source text out, capabilities as data.

`Renderer.options` is exactly the `RendererOptions` that `fast.codegen.lower(ast, options)` takes, so
lowering adapts to a backend by reading data (vector width and vector ops, how far to upcast/unroll,
whether kernels are split across threads), never by testing a device name.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, TernaryOps, UnaryOps

if TYPE_CHECKING:  # codegen imports this module for RendererOptions; keep the import one-way at runtime
    from fast.codegen.ir import LinearProgram

VECTOR_FLOATS: tuple[DType, ...] = (dtypes.float32, dtypes.float64)
VECTOR_INTS: tuple[DType, ...] = (dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64)
_FLOAT_OPS = (BinaryOps.ADD, BinaryOps.SUB, BinaryOps.MUL, BinaryOps.DIV, UnaryOps.NEG, BinaryOps.MAX,
              BinaryOps.CMPLT, BinaryOps.CMPEQ, TernaryOps.WHERE, TernaryOps.MULACC, UnaryOps.SQRT)
_INT_OPS = (BinaryOps.ADD, BinaryOps.SUB, BinaryOps.MUL, UnaryOps.NEG, BinaryOps.MAX, BinaryOps.CMPLT,
            BinaryOps.CMPEQ, TernaryOps.WHERE, BinaryOps.XOR, BinaryOps.DIV, BinaryOps.MOD, TernaryOps.MULACC)
_BOOL_OPS = (BinaryOps.ADD, BinaryOps.MUL, BinaryOps.MAX, BinaryOps.XOR, TernaryOps.WHERE)

#: (op, scalar dtype) pairs the CPU renderers emit on vectors (int DIV/MOD: constant divisor only).
CPU_VECTOR_OPS: frozenset[tuple[Any, DType]] = frozenset(
    [(op, dt) for dt in VECTOR_FLOATS for op in _FLOAT_OPS] + [(op, dt) for dt in VECTOR_INTS for op in _INT_OPS]
    + [(op, dtypes.bool) for op in _BOOL_OPS])
_SAME_WIDTH = ((dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32), (dtypes.float64, dtypes.int64),
               (dtypes.float64, dtypes.uint64), (dtypes.int32, dtypes.uint32), (dtypes.int64, dtypes.uint64))
#: (CAST or BITCAST, source, target) scalar dtype triples the CPU renderers emit on vectors.
CPU_VECTOR_CASTS: frozenset[tuple[Any, DType, DType]] = frozenset(
    [(UnaryOps.BITCAST, a, b) for a, b in _SAME_WIDTH] + [(UnaryOps.BITCAST, b, a) for a, b in _SAME_WIDTH]
    + [(UnaryOps.CAST, a, b) for a, b in _SAME_WIDTH if a != dtypes.float64 or b != dtypes.uint64]
    + [(UnaryOps.CAST, b, a) for a, b in _SAME_WIDTH]
    + [(UnaryOps.CAST, dtypes.float32, dtypes.float64), (UnaryOps.CAST, dtypes.float64, dtypes.float32)]
    + [(UnaryOps.CAST, dtypes.bool, dt) for dt in VECTOR_FLOATS + VECTOR_INTS]
    + [(UnaryOps.CAST, dt, dtypes.bool) for dt in VECTOR_FLOATS + VECTOR_INTS])


@dataclass(frozen=True)
class RendererOptions:
    """What a backend can do and how far lowering may unroll for it.

    - `vector_bytes`: the SIMD register width lowering aims for (0: no vector dtypes at all).
    - `vector_ops` / `vector_casts`: the ALU ops the renderer emits on vector operands (see
      fast/codegen/ir.py: anything else is split into lanes by the builder); `vector_memory`: the
      element dtypes it loads and stores as vectors.
    - `max_upcast`: copies an output axis may be upcast (unrolled) by; 1 disables upcasting.
    - `max_unroll`: a reduce axis at most this long is fully unrolled; 1 disables unrolling.
    - `max_unrolled_bodies`: cap on the number of copies of the kernel body (upcast x unroll).
    - `supports_threads`: the kernel takes two extra int64 parameters `core, cores` and runs only
      its share of the outermost GLOBAL loop (fast/codegen/lower.py); the runtime splits the launch.
    - `stream_min_bytes`: outputs of at least this many bytes that a kernel only writes get
      non-temporal vector stores (codegen/streaming.py); 0: the renderer has none.
    - `vector_registers`: SIMD registers of `vector_bytes` the target has; register tiles of
      accumulators (codegen/opt.py) use about half of them.
    - `fused_multiply_add`: float32/float64 sums of products accumulate with FMA, one rounding per
      step (codegen/fma.py); the renderer then renders `FusedOps.FMA` with the hardware instruction.
    - `prefetch`: row kernels prefetch their next row while finishing the current one
      (codegen/prefetch.py); the renderer renders `IROps.PREFETCH` as a cache hint.
    - `min_max`: the host has lane-wise float min/max instructions that compute exactly
      `a < b ? a : b` and `a > b ? a : b` (x86 MINPS/MAXPS: NaN and signed zeros included), so a C
      renderer may write `WHERE(a < b, a, b)` and `WHERE(a < b, b, a)` on float vectors with them.
    - `gemm`: matmul-shaped kernels may be lowered with packed panels in per-call scratch arrays
      and a register-tiled micro-kernel (codegen/gemm.py); the renderer declares
      `LinearProgram.scratch`. `cache_bytes`: the per-core (L2) cache a block of rows of A aims at.
    - `matrix_tiles`: the host has x86 AMX tiles with bfloat16 products (AMX-TILE, AMX-BF16), the
      process may use them, and the renderer writes `IROps.TILE`: float32 GEMMs may then run on
      tiles (codegen/gemm_tiles.py).
    - `lanes_by_halves`: the AND of a bool vector's lanes (a GEMM tile's bound flag) is written as
      log2(n) ANDs of shuffled halves rather than lane by lane (codegen/gemm_loops.py `all_lanes`):
      the better form depends on the compiler behind the renderer. GCC extracts each lane of a mask
      on its own (2% of `p @ v` lane by lane, session 21); LLVM turns the lane-by-lane AND into one
      mask test and the halves into mask-to-vector round trips (`p @ v` 1,047-1,060 us by halves,
      1,005-1,021 lane by lane, session 22).
    """

    vector_bytes: int = 0
    vector_ops: frozenset[tuple[Any, DType]] = frozenset()
    vector_casts: frozenset[tuple[Any, DType, DType]] = frozenset()
    vector_memory: frozenset[DType] = frozenset()
    max_upcast: int = 4
    max_unroll: int = 8
    max_unrolled_bodies: int = 32
    supports_threads: bool = False
    stream_min_bytes: int = 0
    vector_registers: int = 16
    fused_multiply_add: bool = False
    prefetch: bool = False
    min_max: bool = False
    gemm: bool = False
    cache_bytes: int = 1 << 20
    matrix_tiles: bool = False
    lanes_by_halves: bool = False

    @property
    def supports_vectors(self) -> bool:
        return self.vector_bytes > 0

    def lanes(self, dtype: DType) -> int:
        """Vector lanes of `dtype` in one register (1 when it is not loaded as vectors)."""
        if dtype not in self.vector_memory or self.vector_bytes < 2 * dtype.itemsize:
            return 1
        return self.vector_bytes // dtype.itemsize


def cpu_options(vector_bytes: int, threads: bool = True, stream_min_bytes: int = 0,
                fused_multiply_add: bool = False, prefetch: bool = False, min_max: bool = False,
                gemm: bool = True, cache_bytes: int = 1 << 20, matrix_tiles: bool = False) -> RendererOptions:
    """The options of a CPU renderer for a host whose SIMD registers have `vector_bytes` bytes
    (`stream_min_bytes`, `fused_multiply_add`, `prefetch`, `min_max`: see RendererOptions; all but
    `prefetch` only for hosts that have non-temporal vector stores, FMA and x86 min/max instructions).
    64-byte registers are AVX-512's, which has 32 of them; narrower ones are counted as 16 (AVX2,
    SSE; NEON's 32 are not counted on)."""
    return RendererOptions(vector_bytes=vector_bytes, vector_registers=32 if vector_bytes >= 64 else 16,
                           vector_ops=CPU_VECTOR_OPS if vector_bytes else frozenset(),
                           vector_casts=CPU_VECTOR_CASTS if vector_bytes else frozenset(),
                           vector_memory=frozenset(VECTOR_FLOATS + VECTOR_INTS) if vector_bytes else frozenset(),
                           max_upcast=4, max_unroll=8, supports_threads=threads,
                           stream_min_bytes=stream_min_bytes if vector_bytes else 0,
                           fused_multiply_add=fused_multiply_add, prefetch=prefetch,
                           min_max=min_max and vector_bytes > 0, gemm=gemm and vector_bytes > 0 and threads,
                           cache_bytes=cache_bytes, matrix_tiles=matrix_tiles and gemm and vector_bytes >= 64)


class Renderer(ABC):
    """Turns a lowered kernel into source text for one backend. Stateless apart from `options`."""

    options: RendererOptions = RendererOptions()

    def launch_dims(self, program: LinearProgram) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
        """(grid, block) sizes a GPU launches the rendered kernel with; None for CPU renderers."""
        return None

    @abstractmethod
    def render(self, program: LinearProgram) -> str:
        """Source text defining one function named `program.name` whose parameters are the buffers
        (in `program.buffers` order) followed by the int64 symbolic variables (`program.var_names`)."""
