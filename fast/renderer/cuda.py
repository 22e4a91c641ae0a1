"""CUDA C renderer: a `LinearProgram` as one `extern "C" __global__` function for NVRTC.

The C renderer (renderer/c.py) writes it: CUDA C differs from C only in `CUDA_DIALECT`, a value, so
every rule of docs/semantics.md is the C renderer's rule, unchanged (half floats as uint16 bit
patterns with the software conversions, total integer division, range-checked float -> int casts,
NaN-propagating MAX, bitcasts through `memcpy`, int64 indices), but for integer MAX, written as an
unsigned comparison with the sign bit flipped (`CUDA_DIALECT.int_max`: NVRTC 13.0 miscompiled the
plain form). NVRTC compiles it with
`--fmad=false --ftz=false --prec-div=true --prec-sqrt=true` (runtime/nvrtc.py): no FMA contraction
(MULACC is two roundings), subnormals kept, IEEE division and square root, like the C compilers' flags.

The dialect: no headers (NVRTC has no standard library), so the prelude typedefs the fixed-width
integers and defines `NAN` and `INFINITY` from their bit patterns (`__int_as_float`); `memcpy`,
`sqrtf`, `sqrt` (and `exp2f`, `log2f`, `sinf`, ... for hand-built IR) are NVRTC builtins. Buffers are
`__restrict__` pointers, helpers `static __device__ __forceinline__`. There are no vector types
(`cuda_options`: `vector_bytes=0`), no CPU thread parameters and no streaming stores.

Threads: the outermost GLOBAL loops become grid-stride loops over `blockIdx.x * blockDim.x +
threadIdx.x` with stride `gridDim.x * blockDim.x`, in int64 (renderer/grid.py: which loops, why it
is safe, perfectly nested output loops flattened into one), so every launch size computes every
output exactly once and the same values; a kernel with no such loop runs on thread 0 of block 0.
A large reduction into few outputs (a full reduction, or at most `MAX_BLOCK_OUTPUTS` outputs of at
least `MIN_BLOCK_REDUCE` iterations each) is spread over the threads of a block instead: `LANES`
partial lanes in `__shared__` memory, combined in a fixed tree after `__syncthreads()` (grid.py
`BlockReduce`, rendered by c_grid.py), so its value does not depend on the block size either; its
outputs go to blocks. `CUDARenderer.launch_dims(program)` is the launch the runtime uses, a pure
function of the program (`launch_config`), and `__launch_bounds__` names its block size.
"""
from __future__ import annotations

from fast.codegen.ir import LinearProgram
from fast.renderer.base import Renderer, RendererOptions
from fast.renderer.c import CDialect
from fast.renderer.c_grid import render_grid
from fast.renderer.grid import LANES, MAX_BLOCK_OUTPUTS, MIN_BLOCK_REDUCE, GridMap, grid_map

CUDA_PRELUDE = """typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define NAN __int_as_float(0x7fc00000)
#define INFINITY __int_as_float(0x7f800000)
"""

CUDA_DIALECT = CDialect(
    prelude=CUDA_PRELUDE,
    kernel_head='extern "C" __global__ void __launch_bounds__({threads}) ',
    restrict="__restrict__",
    helper="static __device__ __forceinline__",
    vectors=False,
    store_fence="",  # never used: cuda_options has no streaming stores
    thread="(int64_t)threadIdx.x",
    threads="(int64_t)blockDim.x",
    block="(int64_t)blockIdx.x",
    blocks="(int64_t)gridDim.x",
    barrier="__syncthreads();",
    shared="__shared__",
    # integer MAX compared as unsigned with the sign bit flipped: NVRTC 13.0's optimized build turned
    # max(-a, max(-b, -c)) written as `x > y ? x : y` into a wrong value (int32 row [57, 17, 49]: 17,
    # not -17; right with -G or ptxas -O0), and this form it compiles right
    int_max="((({utype}){0} ^ {bias}) > (({utype}){1} ^ {bias}) ? {0} : {1})",
)

#: Threads per block of a kernel whose parallel loops have at least this many iterations, and of a
#: block reduction (one thread per partial lane).
BLOCK = LANES
#: Blocks at most: the loops are grid-stride loops, so a larger count only costs more iterations per
#: thread. 2048 blocks of 256 threads fill an H100/H200 (132 SMs x 2048 resident threads) twice.
MAX_GRID = 2048
#: Blocks of a kernel whose trip count is symbolic (unknown until launch; the grid must not depend
#: on the binding, or one binding's launch would differ from another's for the same binary).
SYMBOLIC_GRID = 512
WARP = 32

Dims = tuple[tuple[int, int, int], tuple[int, int, int]]
__all__ = ["BLOCK", "CUDA_DIALECT", "CUDARenderer", "LANES", "MAX_BLOCK_OUTPUTS", "MAX_GRID", "MIN_BLOCK_REDUCE",
           "SYMBOLIC_GRID", "cuda_options", "launch_config"]


def cuda_options() -> RendererOptions:
    """What lowering may do for CUDA (see RendererOptions).

    - no vectors (`vector_bytes=0`): NVRTC has no GCC vector extensions, and a GPU thread gains
      little from them: its neighbours in the warp form the vector;
    - `max_upcast=1`: one output per thread iteration. Upcasting gives a thread several consecutive
      outputs, so the 32 threads of a warp would touch addresses `upcast` elements apart instead of
      32 consecutive ones (uncoalesced accesses cost more than the unrolling saves);
    - `max_unroll=8`: short reduce axes are still unrolled (no loop overhead; accesses unchanged);
    - no CPU threads (`core, cores` parameters) and no streaming stores."""
    return RendererOptions(vector_bytes=0, max_upcast=1, max_unroll=8, max_unrolled_bodies=8,
                           supports_threads=False, stream_min_bytes=0)


def launch_config(grid: GridMap) -> Dims:
    """((blocks, 1, 1), (threads, 1, 1)) for a kernel mapped by `grid`.

    - no grid-stride loop: one thread (the kernel body is guarded to thread 0 anyway);
    - constant trip count `n`: blocks of `BLOCK` threads (fewer, rounded up to a warp, when `n` is
      smaller), `ceil(n / threads)` blocks, capped at `MAX_GRID` (at least 1, also for `n == 0`);
    - symbolic trip count: `SYMBOLIC_GRID` blocks of `BLOCK` threads;
    - a block reduction: blocks of `BLOCK` threads, one per output (capped at `MAX_GRID`; one block
      for a full reduction)."""
    if grid.single:
        return (1, 1, 1), (1, 1, 1)
    if grid.block_reduce is not None:
        return (min(MAX_GRID, max(1, grid.count or 1)), 1, 1), (BLOCK, 1, 1)
    if grid.count is None:
        return (SYMBOLIC_GRID, 1, 1), (BLOCK, 1, 1)
    threads = min(BLOCK, max(WARP, -(-grid.count // WARP) * WARP))
    blocks = min(MAX_GRID, max(1, -(-grid.count // threads)))
    return (blocks, 1, 1), (threads, 1, 1)


class CUDARenderer(Renderer):
    """CUDA C for NVRTC (module docstring); `launch_dims` gives the launch the kernel is made for."""

    def __init__(self, options: RendererOptions | None = None) -> None:
        self.options = options if options is not None else cuda_options()

    def launch_dims(self, program: LinearProgram) -> Dims:
        return launch_config(grid_map(program))

    def render(self, program: LinearProgram) -> str:
        grid = grid_map(program)
        threads = launch_config(grid)[1][0]
        return render_grid(program, CUDA_DIALECT, grid, threads)
