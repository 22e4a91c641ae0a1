"""The LLVM device itself: the public API on LLVM against CLANG, copies between CLANG and LLVM devices,
the object-file cache and its counter, kernels sharing a name in the JIT, errors. Its kernels:
tests/fast/test_llvm.py."""
import numpy as np
import pytest

pytest.importorskip("llvmlite")

from kernel_values import const, load, private_cache, sink  # noqa: E402

import fast  # noqa: E402
from fast import BinaryOps, ReduceOps, TernaryOps, UnaryOps, config, dtypes  # noqa: E402
from fast.codegen import lower  # noqa: E402
from fast.ops import LazyOp  # noqa: E402
from fast.runtime import llvm  # noqa: E402
from fast.runtime.base import COMPILE_COUNTER  # noqa: E402
from fast.runtime.host import HostAllocator  # noqa: E402

I32 = dtypes.int32


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    """LLVM, compiling into a private cache."""
    with private_cache(tmp_path_factory):
        yield llvm.create("LLVM")


def test_public_api_runs_graphs_on_llvm_like_clang():
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-4, 4, (3, 4, 5)).astype(np.float32), rng.uniform(0.5, 4, (3, 4, 5)).astype(np.float32)

    def graph(device: str):
        a, b = fast.from_numpy(x, device), fast.from_numpy(y, device)
        mixed = a.e(BinaryOps.MUL, b).e(TernaryOps.MULACC, a, b).e(BinaryOps.MAX, b.e(UnaryOps.SQRT))
        reduced = mixed.permute((2, 0, 1)).stride((-1, 1, 2)).pad(((0, 1), (1, 0), (0, 0))).r(ReduceOps.SUM, (0,))
        halves = a.cast(dtypes.float16).e(BinaryOps.DIV, b.cast(dtypes.float16)).cast(dtypes.int8)
        return fast.to_numpy(reduced), fast.to_numpy(halves)

    with np.errstate(all="ignore"):
        on_llvm, on_clang = graph("LLVM"), graph("CLANG")
    for mine, theirs in zip(on_llvm, on_clang, strict=True):
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8))
    expected = np.maximum(x * y * x + y, np.sqrt(y)).transpose(2, 0, 1)[::-1, :, ::2]
    np.testing.assert_allclose(on_llvm[0], np.pad(expected, ((0, 1), (1, 0), (0, 0))).sum(0, keepdims=True),
                               rtol=1e-5)


def test_copies_between_clang_and_llvm_devices():
    data = np.arange(24, dtype=np.int16).reshape(4, 6) - 12
    start = fast.from_numpy(data, "CLANG")
    on_llvm = start.copy_to_device("LLVM:1").e(BinaryOps.MUL, fast.from_numpy(data, "LLVM:1"))
    back = on_llvm.shrink(((1, 3), (0, 6))).copy_to_device("CLANG").e(UnaryOps.NEG)
    assert on_llvm.device == "LLVM:1" and back.device == "CLANG"
    np.testing.assert_array_equal(fast.to_numpy(back), -(data * data)[1:3])
    np.testing.assert_array_equal(fast.to_numpy(on_llvm.copy_to_device("LLVM")), data * data)
    assert fast.Device["LLVM:1"].allocator is fast.Device["LLVM"].allocator
    assert isinstance(fast.Device["LLVM"].allocator, HostAllocator)


def test_object_files_are_cached_on_disk_and_counted(tmp_path):
    device = llvm.create("LLVM")
    ast = sink((0, I32, 5, LazyOp(BinaryOps.ADD, (load(1, I32, 5), load(1, I32, 5)))))
    source = device.renderer.render(lower(ast, device.renderer.options))
    with config.override(cache_dir=str(tmp_path), disable_compile_cache=False):
        before = COMPILE_COUNTER.snapshot()
        first = llvm.LLVMCompiler().compile_cached(source)
        second = llvm.LLVMCompiler().compile_cached(source)
        after = COMPILE_COUNTER.snapshot()
        header = len(llvm.LIBRARY_MAGIC) + 16
        assert first == second and first.startswith(llvm.LIBRARY_MAGIC) and first[header:header + 4] == b"\x7fELF"
        assert tuple(b - a for a, b in zip(before, after, strict=True)) == (1, 2, 1)
        assert [path.suffix for path in (tmp_path / "llvm").iterdir()] == [".bin"]
        assert llvm.LLVMCompiler().cache_key(source) != llvm.LLVMCompiler().cache_key(source + "\n")
        with config.override(disable_compile_cache=True):
            llvm.LLVMCompiler().compile_cached(source)
        assert COMPILE_COUNTER.snapshot()[0] == after[0] + 1
    handles = [device.allocator.alloc(20), device.allocator.alloc(20)]
    device.allocator.copyin(handles[1], np.arange(5, dtype=np.int32).data.cast("B"))
    program = llvm.LLVMProgram(lower(ast, device.renderer.options).name, second)
    assert isinstance(program(*handles, wait=True), float)
    out = np.zeros(5, np.int32)
    device.allocator.copyout(out.data.cast("B"), handles[0])
    np.testing.assert_array_equal(out, np.arange(5) * 2)


def test_kernels_sharing_a_name_live_side_by_side_in_the_jit(device):
    """Different kernels with one name (E_5) load into the one engine and each runs its own code."""
    x = np.arange(5, dtype=np.int32)
    kernels = []
    for constant in (3, 40, 500):
        ast = sink((0, I32, 5, LazyOp(BinaryOps.ADD, (load(1, I32, 5), const(constant, I32, 5)))))
        program = lower(ast, device.renderer.options)
        source = device.renderer.render(program)
        kernels.append((constant, device.runtime(program.name, device.compiler.compile_cached(source))))
    assert len({kernel.name for _, kernel in kernels}) == 1 and len({kernel.address for _, kernel in kernels}) == 3
    allocator = device.allocator
    source_handle = allocator.alloc(20)
    allocator.copyin(source_handle, x.data.cast("B"))
    for constant, kernel in kernels:
        out_handle, out = allocator.alloc(20), np.zeros(5, np.int32)
        kernel(out_handle, source_handle)
        allocator.copyout(out.data.cast("B"), out_handle)
        np.testing.assert_array_equal(out, x + constant)


def test_errors_are_exceptions_naming_the_problem(tmp_path):
    with config.override(cache_dir=str(tmp_path)):
        with pytest.raises(RuntimeError, match="invalid IR"):
            llvm.LLVMCompiler().compile_cached("define void @k( {")
        lib = llvm.LLVMCompiler().compile_cached("define void @k() {\nentry:\n  ret void\n}\n")
    with pytest.raises(RuntimeError, match="no kernel named"):
        llvm.LLVMProgram("missing", lib)
    with pytest.raises(TypeError, match="LLVM"):
        llvm.LLVMProgram("k", lib)(np.zeros(4))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="not produced by LLVMCompiler"):
        llvm.LLVMProgram("k", b"\x7fELF" + bytes(64))
    for bad in ("CLANG", "LLVM:x", "llvm"):
        with pytest.raises(ValueError, match="LLVM"):
            llvm.create(bad)
