"""The CLANG runtime: aligned host memory and views, the compile cache and its counter, loading and
running programs, device records."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fast
from fast import config
from fast.codegen import lower
from fast.codegen.ir import IROps
from fast.dtype import dtypes
from fast.engine.schedule import lazy_buffers, plan_schedule
from fast.ops import BinaryOps, BufferOps, KernelOps, LazyOp, MemBuffer
from fast.runtime import cpu
from fast.runtime.base import COMPILE_COUNTER, Compiled
from fast.runtime.clang import (
    BASE_FLAGS,
    ClangCompiler,
    ClangProgram,
    compile_flags,
    compiler_path,
    create,
    is_gcc,
)
from fast.runtime.host import HostAllocator
from fast.shape.shapetracker import ShapeTracker

SOURCE = "#include <stdint.h>\nvoid add_one(int32_t* restrict data0, int64_t n) { for (int64_t i = 0; i < n; i++) " \
         "data0[i] += 1; }\n"


@pytest.fixture
def cache_dir(tmp_path):
    with config.override(cache_dir=str(tmp_path / "cache"), disable_compile_cache=False):
        yield tmp_path / "cache"


def test_allocations_are_aligned_zeroed_and_copy_exactly():
    allocator = HostAllocator()
    for nbytes in (0, 1, 13, 4096):
        handle = allocator.alloc(nbytes)
        assert handle.address % 64 == 0 and handle.nbytes == nbytes
        assert bytes(allocator.as_memoryview(handle)) == bytes(nbytes)
    handle = allocator.alloc(16)
    data = np.arange(4, dtype=np.float32)
    allocator.copyin(handle, data.data)
    back = np.zeros(4, np.float32)
    allocator.copyout(back.data, handle)
    np.testing.assert_array_equal(back, data)
    with pytest.raises(ValueError, match="copyin"):
        allocator.copyin(handle, np.zeros(3, np.float32).data)
    with pytest.raises(ValueError, match="alloc"):
        allocator.alloc(-1)


def test_offset_views_share_memory_and_outlive_free():
    allocator = HostAllocator()
    base = allocator.alloc(32)
    allocator.copyin(base, np.arange(8, dtype=np.int32).data)
    view = allocator.offset(base, 8, 12)
    assert view.address == base.address + 8
    out = np.zeros(3, np.int32)
    allocator.copyout(out.data, view)
    np.testing.assert_array_equal(out, [2, 3, 4])
    with pytest.raises(ValueError, match="outside"):
        allocator.offset(base, 24, 12)
    allocator.free(base, 32)
    with pytest.raises(ValueError, match="after free"):
        _ = base.address
    allocator.copyout(out.data, view)  # the view keeps the memory alive
    np.testing.assert_array_equal(out, [2, 3, 4])


def test_kernel_writes_through_a_buffer_view_at_a_byte_offset(cache_dir):
    device = create("CLANG")
    st = ShapeTracker.from_shape((3,))
    x = LazyOp(BufferOps.LOAD, (), MemBuffer(1, dtypes.int32, st))
    ast = LazyOp(KernelOps.SINK, (LazyOp(BufferOps.STORE, (LazyOp(BinaryOps.MUL, (x, x)),),
                                         MemBuffer(0, dtypes.int32, st)),))
    program = lower(ast, device.renderer.options)
    kernel = device.runtime(program.name, device.compiler.compile_cached(device.renderer.render(program)))
    base = device.allocator.alloc(40)
    device.allocator.copyin(base, np.arange(10, dtype=np.int32).data)
    seconds = kernel(device.allocator.offset(base, 4, 12), device.allocator.offset(base, 24, 12), wait=True)
    assert isinstance(seconds, float) and seconds >= 0
    assert kernel(device.allocator.offset(base, 28, 12), device.allocator.offset(base, 12, 12)) is None
    out = np.zeros(10, np.int32)
    device.allocator.copyout(out.data, base)
    np.testing.assert_array_equal(out, [0, 36, 49, 64, 4, 5, 6, 4096, 16, 25])


def test_same_source_compiles_once_and_the_disk_cache_serves_fresh_compilers(cache_dir):
    before = COMPILE_COUNTER.snapshot()
    first = ClangCompiler().compile_cached(SOURCE)
    second = ClangCompiler().compile_cached(SOURCE)
    after = COMPILE_COUNTER.snapshot()
    assert first == second
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (1, 2, 1)
    entries = [name for _, _, names in os.walk(cache_dir) for name in names]
    assert len([name for name in entries if name.endswith(".bin")]) == 1
    assert not [name for name in entries if name.startswith(".tmp-")]
    with config.override(disable_compile_cache=True):
        ClangCompiler().compile_cached(SOURCE)
        ClangCompiler().compile_cached(SOURCE)
    assert COMPILE_COUNTER.snapshot()[0] - after[0] == 2 and COMPILE_COUNTER.snapshot()[1] == after[1]
    plain_key = ClangCompiler().cache_key(SOURCE)
    assert ClangCompiler().cache_key(SOURCE.replace("+= 1", "+= 2")) != plain_key
    with config.override(ubsan=True):
        assert ClangCompiler().cache_key(SOURCE) != plain_key


def test_parallel_processes_share_the_cache_safely(cache_dir):
    script = ("import sys; from fast import config; from fast.runtime.clang import ClangCompiler\n"
              "with config.override(cache_dir=sys.argv[1]):\n"
              f"    lib = ClangCompiler().compile_cached({SOURCE!r})\n"
              "print(len(lib))")
    root = Path(__file__).resolve().parents[2]
    workers = [subprocess.Popen([sys.executable, "-c", script, str(cache_dir)], stdout=subprocess.PIPE, text=True,
                                cwd=root) for _ in range(3)]
    sizes = {worker.communicate(timeout=120)[0].strip() for worker in workers}
    assert all(worker.returncode == 0 for worker in workers) and len(sizes) == 1
    program = ClangProgram("add_one", ClangCompiler().compile_cached(SOURCE))
    allocator = HostAllocator()
    handle = allocator.alloc(12)
    program(handle, vals=(2,))
    out = np.zeros(3, np.int32)
    allocator.copyout(out.data, handle)
    np.testing.assert_array_equal(out, [1, 1, 0])


def test_compile_errors_and_missing_kernels_are_runtime_errors(cache_dir):
    with pytest.raises(RuntimeError, match="failed"):
        ClangCompiler().compile_cached("this is not C")
    lib = ClangCompiler().compile_cached(SOURCE)
    with pytest.raises(RuntimeError, match="no kernel named"):
        ClangProgram("missing", lib)
    with pytest.raises(TypeError, match="CLANG buffers"):
        ClangProgram("add_one", lib)(np.zeros(4))  # type: ignore[arg-type]


def test_compiler_choice_and_flags_are_data():
    assert set(BASE_FLAGS) >= {"-O2", "-ffp-contract=off", "-shared", "-fPIC"}
    assert not any("fast-math" in flag or "march" in flag for flag in BASE_FLAGS)
    with config.override(cc="/bin/definitely-not-a-compiler"):
        assert compiler_path() == "/bin/definitely-not-a-compiler"
        with pytest.raises(RuntimeError, match="cannot run"):
            ClangCompiler().identity()
    with config.override(ubsan=True):
        assert any(flag.startswith("-fsanitize=undefined") for flag in compile_flags(compiler_path()))
    assert not any("sanitize" in flag for flag in compile_flags(compiler_path()))


def test_devices_are_records_sharing_one_runtime():
    first, second = create("CLANG"), create("CLANG:1")
    assert isinstance(first, Compiled) and (first.name, second.name) == ("CLANG", "CLANG:1")
    assert first.allocator is second.allocator and first.compiler is second.compiler
    assert first.renderer is second.renderer and first.runtime is second.runtime
    assert first.renderer.options.vector_bytes == cpu.vector_bytes() and first.renderer.options.supports_threads
    for bad in ("LLVM", "CLANG:x", "clang"):
        with pytest.raises(ValueError, match="CLANG"):
            create(bad)


# ---------------------------------------------------------------- GCC bug 110381 (see fast/runtime/clang.py)

FLIPPED_SUM = """#include <stdint.h>
void flipped_sum(float* restrict data0, float* restrict data1) {
  float acc = 0.0f;
  for (int64_t i = 0; i < 4; i++) {
    acc = acc + data1[i * 6 + 5]; acc = acc + data1[i * 6 + 4]; acc = acc + data1[i * 6 + 3];
    acc = acc + data1[i * 6 + 2]; acc = acc + data1[i * 6 + 1]; acc = acc + data1[i * 6];
  }
  data0[0] = acc;
}
"""


def test_gcc_gets_the_vectorizer_workaround():
    path = compiler_path()
    flags = compile_flags(path)
    assert ("-fno-tree-vectorize" in flags) == is_gcc(path)
    with config.override(ubsan=True):
        assert set(compile_flags(path)) > set(flags)  # sanitizers add to the flags, never replace them


def test_the_kernel_gcc_miscompiled_sums_correctly_with_our_flags(cache_dir):
    """The standalone kernel from the report (what lowering emits for a flipped 4x6 float32 sum):
    GCC 12.2 -O2 without the workaround returns 326 instead of 276."""
    program = ClangProgram("flipped_sum", ClangCompiler().compile_cached(FLIPPED_SUM))
    allocator = HostAllocator()
    out, data = allocator.alloc(4), allocator.alloc(24 * 4)
    allocator.copyin(data, memoryview(np.arange(24, dtype=np.float32).view(np.uint8)))
    program(out, data)
    result = np.empty(1, np.float32)
    allocator.copyout(memoryview(result.view(np.uint8)), out)
    assert result[0] == 276.0


@pytest.mark.parametrize("noopt", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_flipped_and_strided_reductions_match_numpy(noopt, dtype):
    rng = np.random.default_rng(3)
    for shape, steps, axes in [((4, 6), (1, -1), (0, 1)), ((8, 8), (1, -1), (0, 1)),
                               ((2, 3, 4), (-1, 1, -1), (0, 1, 2)), ((2, 3, 4), (2, 1, -1), (0, 1, 2)),
                               ((4, 6), (-1, -2), (1,)), ((3, 8), (1, -2), (0, 1))]:
        array = rng.integers(-50, 50, size=shape).astype(dtype)
        view = array[tuple(slice(None, None, step) for step in steps)]
        with config.override(noopt=noopt):
            got = fast.to_numpy(fast.from_numpy(array, "CLANG").stride(steps).r(fast.ReduceOps.SUM, axes))
        assert np.array_equal(got, view.sum(axis=axes, keepdims=True).astype(dtype)), (shape, steps, axes)


def test_unrolled_bool_to_uint8_sum_is_not_miscompiled():
    """Conformance found: GCC 12's SLP vectorizer summed four (uint8_t)(b != 0) terms as 252, not 4."""
    import fast

    zeros = fast.from_numpy(np.zeros(4, np.float16), "CLANG")
    equal = zeros.e(fast.BinaryOps.CMPEQ, zeros)
    fast.realize(equal)  # a realized bool buffer, read by its own (unrolled) reduce kernel
    total = equal.cast(fast.dtypes.uint8).r(fast.ReduceOps.SUM, (0,))
    assert fast.to_numpy(total).tolist() == [4]


# ---------------------------------------------------------------- GCC 12.2 + AVX-512 constant stores

def _programs(out: "fast.LazyBuffer") -> list:
    """The lowered CLANG kernels that realizing `out` runs."""
    options = fast.Device["CLANG"].renderer.options
    steps = plan_schedule(lazy_buffers((out,)))
    return [lower(step.item.ast, options) for step in steps if step.item.ast.op is KernelOps.SINK]


def _constant_lanes(dtype, lanes: int, values: list[float]) -> "fast.LazyBuffer":
    """One elementwise kernel whose value is the constant vector `values` then zeros up to `lanes`
    (a sum of padded one-element constants, which the C compiler folds into one constant)."""
    total = None
    for position, value in enumerate(values):
        one = fast.LazyBuffer.loadop(fast.LoadOps.CONST, (1,), dtype, "CLANG", arg=value)
        one = one.pad(((position, lanes - 1 - position),))
        total = one if total is None else total.e(BinaryOps.ADD, one)
    assert total is not None
    return total


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64])
def test_constant_vectors_with_zero_high_lanes_are_stored_whole(dtype):
    """Every vector width this host's C kernels use, every even count of leading constant lanes:
    the stored vector keeps its zero lanes (no `memcpy` of vectors: renderer/c_vectors.py)."""
    lanes = max(2, cpu.vector_bytes() // dtype.itemsize)
    for filled in range(2, lanes, 2):
        for other in (2.0, 3.0):  # {x, x, ..., 0, 0} and {x, y, x, y, ..., 0, 0}
            values = [2.0, other] * (filled // 2)
            (program,) = _programs(_constant_lanes(dtype, lanes, values))
            assert [i.op for i in program.instrs].count(IROps.STORE) == 1  # one vector, one kernel
            got = fast.to_numpy(_constant_lanes(dtype, lanes, values))
            want = np.array(values + [0.0] * (lanes - filled), dtype=dtype.np)
            np.testing.assert_array_equal(got, want, err_msg=f"{filled} of {lanes} lanes")


def test_programs_sharing_one_binary_keep_their_own_argument_types(cache_dir: Path) -> None:
    """Sources that differ only in a parameter the body never uses can compile to the same bytes, so
    two programs share one loaded library; each declares its own argument types (a kernel read
    through ctypes' shared per-library function object broke on the other's arity)."""
    body = "{ for (int64_t i = 0; i < 4; i++) data0[i] += 1; }\n"
    one = "#include <stdint.h>\nvoid bump(int32_t* restrict data0) " + body
    two = "#include <stdint.h>\nvoid bump(int32_t* restrict data0, int32_t* restrict data1) " + body
    compiler = ClangCompiler()
    binaries = compiler.compile(one), compiler.compile(two)
    if binaries[0] != binaries[1]:
        pytest.skip("this C compiler's output differs for the two sources, so nothing is shared")
    first, second = ClangProgram("bump", binaries[0]), ClangProgram("bump", binaries[1])
    allocator = HostAllocator()
    memory = [allocator.alloc(16) for _ in range(2)]
    for _ in range(3):
        first(memory[0])
        second(memory[0], memory[1])
    values = np.frombuffer(allocator.as_memoryview(memory[0]), np.int32)
    np.testing.assert_array_equal(values, [6, 6, 6, 6])
