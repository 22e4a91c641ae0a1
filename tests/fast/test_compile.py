"""fast.compile: the kernels a realize would run, compiled ahead of time, nothing allocated or run."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import fast
from fast import BinaryOps, LoadOps, ReduceOps, UnaryOps, config, dtypes
from fast.engine.realize import AST_KERNELS, PROGRAMS
from fast.engine.schedule import schedule
from fast.ops import KernelOps
from fast.runtime.base import COMPILE_COUNTER

CPU_DEVICES = ["CLANG", "LLVM"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A cache directory of this test's own, and no kernels left over from other tests."""
    saved = dict(PROGRAMS), dict(AST_KERNELS)
    PROGRAMS.clear()
    AST_KERNELS.clear()
    with config.override(cache_dir=str(tmp_path_factory.mktemp("cache")), disable_compile_cache=False):
        yield
    PROGRAMS.clear()
    PROGRAMS.update(saved[0])
    AST_KERNELS.clear()
    AST_KERNELS.update(saved[1])


def _softmax_then_sum(device: str) -> tuple[fast.LazyBuffer, np.ndarray]:
    values = np.linspace(-3, 3, 35, dtype=np.float32).reshape(5, 7)
    x = fast.from_numpy(values, device)
    shifted = x.e(BinaryOps.SUB, x.r(ReduceOps.MAX, (1,)).expand((5, 7)))
    exp = shifted.e(UnaryOps.EXP2)
    out = exp.e(BinaryOps.DIV, exp.r(ReduceOps.SUM, (1,)).expand((5, 7))).r(ReduceOps.SUM, (0,))
    shifted_np = np.exp2(values - values.max(axis=1, keepdims=True))
    return out, (shifted_np / shifted_np.sum(axis=1, keepdims=True)).sum(axis=0, keepdims=True)


@pytest.mark.parametrize("device", CPU_DEVICES)
def test_compile_lists_the_scheduled_kernels_in_order_and_runs_nothing(device: str) -> None:
    out, want = _softmax_then_sum(device)
    names = [item.ast for item in schedule(out) if item.ast.op is KernelOps.SINK]
    kernels = fast.compile(out)
    assert len(kernels) == len(names) >= 1
    assert all(kernel.device == device for kernel in kernels)
    assert not out.is_realized() and out.base.realized is None
    assert all(kernel.global_size is None and kernel.local_size is None for kernel in kernels)
    assert all(kernel.name in kernel.source and kernel.binary for kernel in kernels)
    header = 0 if device == "CLANG" else 26  # LLVM: LIBRARY_MAGIC and a source digest, then the object file
    assert all(kernel.binary[header:header + 4] == b"\x7fELF" for kernel in kernels)
    np.testing.assert_allclose(fast.to_numpy(out), want, rtol=1e-5)


@pytest.mark.parametrize("device", CPU_DEVICES)
def test_a_realize_after_compile_finds_the_code_compiled(device: str) -> None:
    out, want = _softmax_then_sum(device)
    compiles_before = COMPILE_COUNTER.snapshot()[0]
    kernels = fast.compile(out)
    assert COMPILE_COUNTER.snapshot()[0] - compiles_before == len(kernels) >= 1, "compile compiles each kernel"
    compiles_before = COMPILE_COUNTER.snapshot()[0]
    np.testing.assert_allclose(fast.to_numpy(out), want, rtol=1e-5)
    assert COMPILE_COUNTER.snapshot()[0] == compiles_before, "realize compiled again what compile compiled"


def test_compile_allocates_nothing_for_a_graph_on_empty_buffers() -> None:
    a = fast.LazyBuffer.loadop(LoadOps.EMPTY, (64, 3), dtypes.float16, "CLANG")
    b = fast.LazyBuffer.loadop(LoadOps.EMPTY, (64, 3), dtypes.float16, "CLANG")
    out = a.e(BinaryOps.MUL, b).cast(dtypes.float32).r(ReduceOps.SUM, (0,))
    kernels = fast.compile(out)
    assert len(kernels) == 1 and kernels[0].name.startswith("r_")
    assert a.base.realized is None or not a.base.realized.is_allocated()
    assert not out.is_realized()


def test_copies_are_not_kernels_and_each_kernel_names_its_device() -> None:
    x = fast.from_numpy(np.arange(10, dtype=np.int32), "CLANG")
    moved = x.e(BinaryOps.ADD, x).copy_to_device("LLVM")
    out = moved.e(BinaryOps.MUL, moved)
    kernels = fast.compile(out)
    assert [kernel.device for kernel in kernels] == ["CLANG", "LLVM"]
    np.testing.assert_array_equal(fast.to_numpy(out), (np.arange(10) * 2) ** 2)


def test_a_structure_seen_with_other_constants_compiles_its_parametrized_kernel() -> None:
    x = fast.from_numpy(np.arange(6, dtype=np.float32), "CLANG")
    first = x.e(BinaryOps.ADD, x.const(1.5))
    fast.realize(first)
    second = x.e(BinaryOps.ADD, x.const(2.5))
    (kernel,) = fast.compile(second)
    assert "2.5" not in kernel.source, "a parametrized kernel takes its constants as arguments"
    third = x.e(BinaryOps.ADD, x.const(1.5))
    (inline,) = fast.compile(third)
    assert "1.5" in inline.source
    np.testing.assert_array_equal(fast.to_numpy(second), np.arange(6, dtype=np.float32) + 2.5)


def test_compile_of_realized_buffers_is_empty() -> None:
    x = fast.from_numpy(np.ones(4, np.float32), "CLANG")
    assert fast.compile(x) == []
    with pytest.raises(TypeError):
        fast.compile(np.ones(3))  # type: ignore[arg-type]


def test_cuda_kernels_compile_ahead_of_time_without_a_gpu() -> None:
    from fast.runtime import cuda_driver

    a = fast.LazyBuffer.loadop(LoadOps.EMPTY, (1000, 37), dtypes.float32, "CUDA")
    b = fast.LazyBuffer.loadop(LoadOps.EMPTY, (1000, 37), dtypes.bfloat16, "CUDA")
    out = a.e(BinaryOps.MUL, b.cast(dtypes.float32)).r(ReduceOps.SUM, (1,))
    kernels = fast.compile(out)
    assert len(kernels) == 1 and kernels[0].device == "CUDA"
    kernel = kernels[0]
    assert '__global__' in kernel.source and kernel.name in kernel.source
    assert kernel.binary.startswith(b"\x7fELF") or kernel.binary.startswith(b"//")  # a cubin, or PTX
    assert kernel.global_size is not None and kernel.local_size is not None
    assert f"__launch_bounds__({kernel.local_size[0]})" in kernel.source
    if not cuda_driver.driver_available():  # compiled, but not runnable here
        with pytest.raises(RuntimeError, match="no CUDA driver"):
            fast.realize(out)
