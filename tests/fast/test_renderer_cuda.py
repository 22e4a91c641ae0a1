"""The CUDA C renderer (fast/renderer/cuda.py, grid.py): its dialect (the C renderer's code, other data),
which loops become grid-stride loops and why, the launch_dims rules, NVRTC compiling its kernels for
sm_80 and sm_90 (no FMA contraction in the PTX), and hand-built loop structures run on the CPU
emulation (tests/fast/cuda_emulation.py) under many launches. Values: tests/fast/test_cuda_emulated.py."""
from __future__ import annotations

import re

import numpy as np
import pytest
from cuda_emulation import EmulatedProgram, EmulationCompiler, launching, nvrtc
from kernel_values import lowered_kernels, private_cache
from test_row_kernels import layernorm, softmax

import fast
from fast import BinaryOps, ReduceOps, TernaryOps, UnaryOps, dtypes
from fast.codegen import verify
from fast.codegen.builder import IRBuilder
from fast.codegen.ir import BufferInfo, IndexOps, IROps, LinearProgram, LoopKind
from fast.renderer.base import cpu_options
from fast.renderer.c import CRenderer
from fast.renderer.cuda import BLOCK, MAX_GRID, SYMBOLIC_GRID, CUDARenderer, cuda_options, launch_config
from fast.renderer.grid import GridMap, grid_map
from fast.runtime.host import HostAllocator

F32, I64 = dtypes.float32, dtypes.int64
FIRST_THREAD_ONLY = "if ((int64_t)blockIdx.x != 0 || (int64_t)threadIdx.x != 0) return;"
RENDERER = CUDARenderer()
FOUND = nvrtc()
NO_NVRTC = "NVRTC is not installed (fast.runtime.nvrtc finds no library): CUDA sources cannot be compiled here"


def programs(out) -> list[LinearProgram]:
    """The lowered kernels that realizing `out` would run, for CUDA."""
    return lowered_kernels(out, RENDERER.options)


def only(out) -> LinearProgram:
    (program,) = programs(out)
    return program


def x_of(shape, dtype=np.float32):
    return fast.from_numpy(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape), "CLANG")


# ---------------------------------------------------------------- dialect and options

def test_options_are_scalar_one_output_per_thread_and_unthreaded():
    options = cuda_options()
    assert options.vector_bytes == 0 and not options.supports_vectors and options.max_upcast == 1
    assert not options.supports_threads and options.stream_min_bytes == 0
    x = x_of((64, 300))
    for out in (x.e(BinaryOps.MUL, x), x.r(ReduceOps.SUM, (1,)), x.r(ReduceOps.SUM, (0,)), softmax(x)):
        for program in programs(out):
            assert not program.threaded and not program.streamed
            assert all(instr.dtype is None or instr.dtype.count == 1 for instr in program.instrs)


def test_the_dialect_is_cuda_c_without_headers():
    x = x_of((5, 7))
    program = only(x.e(BinaryOps.MUL, x).cast(dtypes.float16).e(BinaryOps.MAX, x.cast(dtypes.float16)))
    source = RENDERER.render(program)
    block = RENDERER.launch_dims(program)[1][0]
    assert "#include" not in source and "static inline" not in source and "_mm_" not in source
    assert "typedef long long int64_t;" in source and "#define NAN __int_as_float(0x7fc00000)" in source
    assert f'extern "C" __global__ void __launch_bounds__({block}) {program.name}(uint16_t* __restrict__ data0, ' \
           "float* __restrict__ data1)" in source
    assert "static __device__ __forceinline__ uint16_t f32_to_f16(float value)" in source
    assert "((int64_t)blockIdx.x * (int64_t)blockDim.x + (int64_t)threadIdx.x)" in source
    body = source[source.index("__global__"):]
    assert "int32_t" not in body and not re.search(r"\bint \b|\bunsigned\b|\blong\b", body)


def test_cuda_and_c_share_every_statement():
    """Without grid-stride loops (a full reduction runs on one thread) the CUDA body is the C body
    behind one guard: the same statements, so the same semantics, by construction."""
    x = x_of((6, 5), np.int32)
    program = only(x.e(BinaryOps.DIV, x.const(-3)).e(BinaryOps.MOD, x).cast(dtypes.bfloat16).r(ReduceOps.SUM, (0, 1)))
    assert grid_map(program).single
    cuda, c = RENDERER.render(program), CRenderer(cuda_options()).render(program)
    cuda_body, c_body = cuda[cuda.index("__global__"):].split("\n")[1:], c[c.index("void "):].split("\n")[1:]
    assert cuda_body[0] == "  " + FIRST_THREAD_ONLY and cuda_body[1:] == c_body
    assert c.startswith("#include <stdint.h>") and f"void {program.name}(uint16_t* restrict data0" in c


def test_vector_programs_are_refused():
    x = x_of((64, 64))
    (program,) = lowered_kernels(x.e(BinaryOps.MUL, x), cpu_options(32))
    assert any(instr.dtype is not None and instr.dtype.count > 1 for instr in program.instrs)
    with pytest.raises(ValueError, match="vector values"):
        RENDERER.render(program)


# ---------------------------------------------------------------- which loops map to the grid

def test_perfectly_nested_output_loops_flatten_into_one_grid_stride_loop():
    x = x_of((3, 5, 7)).permute((2, 0, 1))  # a permuted view: three output loops
    program = only(x.e(BinaryOps.ADD, x))
    loops = [number for number, instr in enumerate(program.instrs) if instr.op is IROps.LOOP]
    grid = grid_map(program)
    assert grid.groups == (tuple(loops),) and len(loops) == 3 and grid.count == 105
    source = RENDERER.render(program)
    ends = " * ".join(f"{program.instrs[program.instrs[loop].srcs[1]].arg}LL" for loop in loops)
    assert source.count("for (") == 1 and f"flat{loops[0]} < {ends}; flat{loops[0]} +=" in source
    assert all(f"const int64_t gidx{loop} = " in source for loop in loops)


def test_reductions_map_their_outputs_and_keep_the_reduce_loop_in_the_thread():
    x = x_of((40, 300))
    program = only(x.r(ReduceOps.SUM, (1,)))
    grid = grid_map(program)
    (group,) = grid.groups
    assert program.instrs[group[0]].arg is LoopKind.GLOBAL and grid.count == 40
    reduce_loops = [i for i in program.instrs if i.op is IROps.LOOP and i.arg is LoopKind.REDUCE]
    assert reduce_loops and RENDERER.render(program).count("for (") == 1 + len(reduce_loops)


def test_row_kernels_map_rows_and_a_single_row_stays_on_one_thread():
    """Softmax reads back what its reduce loop stored: a row stays on one thread; with one row there
    is no row loop, and the work outside (the reduces, the stores) must not be repeated by threads."""
    for build in (softmax, layernorm):
        rows = only(build(x_of((4, 100))))
        grid = grid_map(rows)
        assert len(grid.groups) == 1 and grid.count == 4
        assert len(grid.groups[0]) == 1  # the row loop only: the STORE loop over the row is not folded in
        single = only(build(x_of((1, 100))))
        assert grid_map(single).single and RENDERER.launch_dims(single) == ((1, 1, 1), (1, 1, 1))
        assert FIRST_THREAD_ONLY in RENDERER.render(single)


def _chunked(chunks: int, rows: int, cols: int) -> LinearProgram:
    """out[j] = sum over rows of a[r][j], walked in chunks outside the output loop, each chunk adding
    into what the previous ones left in `out` (the shape lowering gives vectorized column sums)."""
    b = IRBuilder()
    zero = b.const(0, I64)
    chunk = b.loop(zero, b.const(chunks, I64), LoopKind.REDUCE)
    column = b.loop(zero, b.const(cols, I64), LoopKind.GLOBAL)
    earlier = b.load(0, F32, column, b.index(IndexOps.CMPLT, zero, chunk))
    acc = b.define_acc(0.0, F32)
    row = b.loop(zero, b.const(rows, I64), LoopKind.REDUCE)
    first = b.index(IndexOps.MUL, chunk, b.const(rows, I64))
    flat_row = b.index(IndexOps.ADD, first, row)
    position = b.index(IndexOps.ADD, b.index(IndexOps.MUL, flat_row, b.const(cols, I64)), column)
    b.assign(acc, b.alu(BinaryOps.ADD, (acc, b.load(1, F32, position))))
    b.end_loop()
    b.store(0, column, b.alu(BinaryOps.ADD, (earlier, acc)))
    b.end_loop()
    b.end_loop()
    buffers = (BufferInfo(0, F32, True, cols), BufferInfo(1, F32, False, chunks * rows * cols))
    return LinearProgram("chunked", tuple(b.instrs), buffers)


def _unsafe_programs() -> dict[str, LinearProgram]:
    """Programs whose outermost GLOBAL loop must not be split (grid.py's rules)."""
    def program(name: str, body) -> LinearProgram:
        b = IRBuilder()
        body(b, b.const(0, I64), b.const(8, I64))
        return LinearProgram(name, tuple(b.instrs), (BufferInfo(0, F32, True, 8), BufferInfo(1, F32, False, 8)))

    def shared_acc(b, zero, eight):  # an accumulator defined outside the loop, updated inside
        acc = b.define_acc(0.0, F32)
        i = b.loop(zero, eight, LoopKind.GLOBAL)
        b.assign(acc, b.alu(BinaryOps.ADD, (acc, b.load(1, F32, i))))
        b.store(0, i, acc)
        b.end_loop()

    def store_outside(b, zero, eight):
        i = b.loop(zero, eight, LoopKind.GLOBAL)
        b.store(0, i, b.load(1, F32, i))
        b.end_loop()
        b.store(0, zero, b.load(0, F32, b.const(7, I64)))

    def starts_at_one(b, zero, eight):
        i = b.loop(b.const(1, I64), eight, LoopKind.GLOBAL)
        b.store(0, i, b.load(1, F32, i))
        b.end_loop()

    def loop_outside(b, zero, eight):  # a reduce every thread would repeat
        acc = b.define_acc(0.0, F32)
        r = b.loop(zero, eight, LoopKind.REDUCE)
        b.assign(acc, b.alu(BinaryOps.ADD, (acc, b.load(1, F32, r))))
        b.end_loop()
        i = b.loop(zero, eight, LoopKind.GLOBAL)
        b.store(0, i, b.alu(BinaryOps.SUB, (b.load(1, F32, i), acc)))
        b.end_loop()
    return {name: program(name, body) for name, body in (("shared_acc", shared_acc), ("store_outside", store_outside),
                                                         ("starts_at_one", starts_at_one),
                                                         ("loop_outside", loop_outside))}


def test_unsafe_loops_are_not_split():
    for name, program in _unsafe_programs().items():
        verify(program)
        assert grid_map(program).single, name
        assert RENDERER.launch_dims(program) == ((1, 1, 1), (1, 1, 1)), name
    chunked = _chunked(4, 8, 10)
    (inner,) = [n for n, instr in enumerate(chunked.instrs) if instr.op is IROps.LOOP and instr.arg is LoopKind.GLOBAL]
    assert grid_map(chunked).groups == ((inner,),)  # the GLOBAL loop inside the chunk loop is split


@pytest.fixture(scope="module")
def emulation(tmp_path_factory):
    with private_cache(tmp_path_factory):
        yield EmulationCompiler()


def run_emulated(compiler, program: LinearProgram, inputs: list[np.ndarray]) -> np.ndarray:
    """Render, compile and run `program` (one output, then `inputs`) with its launch_dims (or the
    launch `launching` sets); the output array."""
    verify(program)
    kernel = EmulatedProgram(program.name, compiler.compile_cached(RENDERER.render(program)),
                             RENDERER.launch_dims(program))
    allocator, out = HostAllocator(), np.full(program.buffers[0].size, np.nan, program.buffers[0].dtype.np)
    handles = []
    for array in [out, *inputs]:
        handles.append(allocator.alloc(array.nbytes))
        allocator.copyin(handles[-1], array.data.cast("B"))
    kernel(*handles)
    allocator.copyout(out.data.cast("B"), handles[0])
    return out


@pytest.mark.parametrize("launch", [None, (1, 1), (2, 3), (7, 32), (100, 64)])
def test_chunked_sums_run_each_column_on_one_thread(emulation, launch):
    """Chunk by chunk, a column's partial sum goes through the output; the thread that reads it back
    is the one that wrote it, whatever the launch."""
    chunks, rows, cols = 4, 8, 37
    data = np.random.default_rng(1).integers(-8, 8, (chunks * rows, cols)).astype(np.float32)
    with launching(*(launch or (None, None)), reverse=launch is not None and launch[0] % 2 == 1):
        got = run_emulated(emulation, _chunked(chunks, rows, cols), [data.reshape(-1)])
    np.testing.assert_array_equal(got, data.sum(0))


@pytest.mark.parametrize("name", ["shared_acc", "store_outside", "loop_outside"])
def test_unsafe_kernels_give_their_one_thread_values_under_any_launch(emulation, name):
    program = _unsafe_programs()[name]
    data = np.arange(1, 9, dtype=np.float32)
    want = run_emulated(emulation, program, [data])
    for launch in ((4, 2), (1, 1), (3, 1)):
        with launching(*launch, reverse=True):
            np.testing.assert_array_equal(run_emulated(emulation, program, [data]), want)
    if name == "shared_acc":
        np.testing.assert_array_equal(want, np.cumsum(data))


# ---------------------------------------------------------------- launch_dims

@pytest.mark.parametrize("count, dims", [(0, (1, 32)), (1, (1, 32)), (33, (1, 64)), (256, (1, 256)),
                                         (1000, (4, 256)), (2048 * 256 + 1, (MAX_GRID, 256)),
                                         (10**12, (MAX_GRID, 256))])
def test_launch_config_of_constant_trip_counts(count, dims):
    grid, block = launch_config(GridMap(((1,),), count))
    assert (grid[0], block[0]) == dims and grid[1:] == block[1:] == (1, 1)
    assert block[0] % 32 == 0 and (grid[0] * block[0] >= count or grid[0] == MAX_GRID)


def test_launch_config_of_symbolic_and_single_kernels():
    assert launch_config(GridMap(((1,),), None)) == ((SYMBOLIC_GRID, 1, 1), (BLOCK, 1, 1))
    assert launch_config(GridMap((), None)) == ((1, 1, 1), (1, 1, 1))


def test_launch_dims_of_lowered_kernels_and_their_launch_bounds():
    n = fast.Variable("n", 1, 1000)
    window = x_of((1000, 3)).shrink(((0, n.bind(10)), (0, 3)))
    x = x_of((1000, 30))
    cases = [(x.e(BinaryOps.MUL, x), ((118, 1, 1), (256, 1, 1))),
             (x.r(ReduceOps.MAX, (1,)), ((4, 1, 1), (256, 1, 1))),
             (x_of((5,)).e(UnaryOps.NEG), ((1, 1, 1), (32, 1, 1))),
             (window.e(BinaryOps.ADD, window), ((SYMBOLIC_GRID, 1, 1), (BLOCK, 1, 1))),
             (x_of((7, 3)).r(ReduceOps.SUM, (0, 1)), ((1, 1, 1), (1, 1, 1)))]
    for out, dims in cases:
        program = only(out)
        assert RENDERER.launch_dims(program) == dims, program.name
        assert f"__launch_bounds__({dims[1][0]}) {program.name}(" in RENDERER.render(program)


# ---------------------------------------------------------------- NVRTC

def _helper_heavy_kernels() -> list[LinearProgram]:
    """Kernels that need every helper: half conversions, integer DIV/MOD and float -> int casts of
    every integer dtype, bitcasts, NaN-propagating MAX, floor division of indices, SQRT, MULACC."""
    x = fast.from_numpy(np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6), "CLANG")
    kernels = []
    for dtype in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                  dtypes.int64, dtypes.uint64, dtypes.bool):
        y = x.cast(dtype)
        mixed = y.e(BinaryOps.MAX, y) if dtype == dtypes.bool else y.e(BinaryOps.DIV, y).e(BinaryOps.MOD, y)
        kernels.append(only(mixed.cast(dtypes.float64).e(BinaryOps.MAX, x.cast(dtypes.float64))))
    for dtype in (dtypes.float16, dtypes.bfloat16, dtypes.float64):
        y = x.cast(dtype)
        kernels.append(only(y.e(TernaryOps.MULACC, y, y).e(UnaryOps.SQRT).e(UnaryOps.EXP2).cast(dtypes.int64, True)
                            if dtype == dtypes.float64 else y.e(TernaryOps.MULACC, y, y).e(UnaryOps.SQRT)))
    flipped = x.pad(((1, 0), (0, 2))).reshape((5, 8)).stride((-1, 2)).reshape((20,)).reshape((4, 5)).permute((1, 0))
    kernels.append(only(flipped.e(BinaryOps.MUL, flipped)))
    kernels.append(only(x.e(BinaryOps.MUL, x).e(BinaryOps.ADD, x)))
    return kernels


@pytest.mark.skipif(FOUND is None, reason=NO_NVRTC)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_every_helper_and_never_fuses_multiply_add(arch):
    compile_cuda = FOUND[0]  # type: ignore[index]
    for program in _helper_heavy_kernels():
        ptx = compile_cuda(RENDERER.render(program), arch).ptx.decode()
        assert ".entry " + program.name in ptx or f".entry {program.name}(" in ptx
        assert "fma." not in ptx, program.name  # --fmad=false: a*b+c stays two roundings


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")  # run_emulated's NaN fill
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_max_is_an_unsigned_comparison_with_the_sign_bit_flipped(emulation, dtype):
    """NVRTC 13.0's optimized build got max over a row of negated int32s wrong when MAX was written
    `a > b ? a : b` (row [57, 17, 49]: 17, not -17, on an H200; right with -G): CUDA writes integer MAX
    as an unsigned comparison with the sign bit flipped (0 for unsigned types), the C renderer keeps
    the plain form. Values here come from the emulation (g++); on a GPU the conformance suite checks."""
    rows = np.array([[57, 17, 49], [65, 26, -77], [60, -25, -32], [0, -1, 1]])
    if np.issubdtype(dtype, np.unsignedinteger):
        rows = np.abs(rows)
    data = rows.astype(dtype)
    x = fast.from_numpy(data, "CLANG")
    program = only(x.e(BinaryOps.MUL, x.const(-1)).r(ReduceOps.MAX, (1,)))
    bits = np.dtype(dtype).itemsize * 8
    bias = 0 if np.issubdtype(dtype, np.unsignedinteger) else 1 << (bits - 1)
    source = RENDERER.render(program)
    assert f"^ {bias:#x}ull) >" in source
    assert "ull) >" not in CRenderer(cuda_options()).render(program)
    want = (data * np.array(-1).astype(dtype)).max(1)  # (modular for unsigned types, as x.const(-1) is)
    np.testing.assert_array_equal(run_emulated(emulation, program, [data.reshape(-1)]).reshape(-1), want)
