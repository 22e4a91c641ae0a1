"""Device names, the registry, and Buffer (allocation, copies, views, reference counts, versions).

Buffers run on a tiny numpy-backed fake allocator registered by monkeypatching the registry, so no
runtime module is needed.
"""
from __future__ import annotations

import gc
import sys
import types

import numpy as np
import pytest

from fast import config
from fast.device import Buffer, Device
from fast.dtype import dtypes


class FakeAllocator:
    """Handles are (backing uint8 array, byte offset, nbytes); records allocations and frees."""

    def __init__(self) -> None:
        self.allocated: list[int] = []
        self.freed: list[int] = []

    def alloc(self, nbytes: int, zeroed: bool = True) -> tuple[np.ndarray, int, int]:
        self.allocated.append(nbytes)
        return (np.zeros(nbytes, np.uint8), 0, nbytes)

    def free(self, handle: tuple[np.ndarray, int, int], nbytes: int) -> None:
        self.freed.append(nbytes)

    def copyin(self, handle: tuple[np.ndarray, int, int], src: memoryview) -> None:
        backing, offset, nbytes = handle
        backing[offset:offset + nbytes] = np.frombuffer(src, np.uint8)

    def copyout(self, dest: memoryview, handle: tuple[np.ndarray, int, int]) -> None:
        backing, offset, nbytes = handle
        dest[:] = backing[offset:offset + nbytes].tobytes()

    def offset(self, handle: tuple[np.ndarray, int, int], byte_offset: int, nbytes: int) -> tuple[np.ndarray, int, int]:
        return (handle[0], handle[1] + byte_offset, nbytes)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeAllocator:
    allocator = FakeAllocator()
    monkeypatch.setattr(Device, "opened", {"CLANG": types.SimpleNamespace(allocator=allocator)})
    return allocator


@pytest.mark.parametrize(("name", "canonical"), [
    ("CLANG", "CLANG"), ("CLANG:0", "CLANG"), ("CLANG:1", "CLANG:1"), ("LLVM:0", "LLVM"), ("LLVM:12", "LLVM:12"),
    ("CUDA", "CUDA"), ("CUDA:3", "CUDA:3"), ("CUDA:007", "CUDA:7"), ("DISK:/tmp/x", "DISK:/tmp/x"),
    ("DISK:a:b", "DISK:a:b"),
])
def test_canonicalize_valid(name: str, canonical: str) -> None:
    assert Device.canonicalize(name) == canonical


@pytest.mark.parametrize("name", ["clang", "CPU", "CLANG:", "CLANG:-1", "CLANG:a", "CLANG:1:2", "DISK:", "DISK",
                                  "", " CLANG", "CLANG:１", "GPU:0"])
def test_canonicalize_invalid_names_the_device(name: str) -> None:
    with pytest.raises(ValueError, match="device") as info:
        Device.canonicalize(name)
    assert repr(name) in str(info.value)


def test_canonicalize_rejects_non_strings() -> None:
    with pytest.raises(ValueError, match="string"):
        Device.canonicalize(3)  # type: ignore[arg-type]


def test_default_follows_config() -> None:
    with config.override(default_device="LLVM"):
        assert Device.DEFAULT == "LLVM"
    with config.override(default_device="CLANG"):
        assert Device.DEFAULT == "CLANG"


def test_getitem_imports_runtime_module_once_per_canonical_name(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    module = types.ModuleType("fast.runtime.cuda")

    def create(name: str) -> types.SimpleNamespace:
        created.append(name)
        return types.SimpleNamespace(name=name)

    module.create = create  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fast.runtime.cuda", module)
    monkeypatch.setattr(Device, "opened", {})
    first = Device["CUDA:0"]
    assert Device["CUDA"] is first and first.name == "CUDA"
    assert Device["CUDA:2"].name == "CUDA:2"
    assert created == ["CUDA", "CUDA:2"]
    with pytest.raises(ValueError, match="NPU"):
        Device["NPU"]


def test_buffer_allocation_is_lazy(fake: FakeAllocator) -> None:
    buffer = Buffer("CLANG:0", 6, dtypes.int32)
    assert buffer.device == "CLANG" and buffer.nbytes == 24 and not buffer.is_allocated()
    assert fake.allocated == []
    buffer.allocate()
    assert buffer.is_allocated() and fake.allocated == [24]
    buffer.allocate()
    assert fake.allocated == [24]


def test_copyin_copyout_and_as_numpy_copies(fake: FakeAllocator) -> None:
    data = np.arange(6, dtype=np.int32)
    buffer = Buffer("CLANG", 6, dtypes.int32).copyin(data.data)
    data[0] = 100
    out = buffer.as_numpy()
    assert out.dtype == np.int32 and out.tolist() == [0, 1, 2, 3, 4, 5]
    out[1] = 50
    assert buffer.as_numpy()[1] == 1
    dest = bytearray(24)
    buffer.copyout(memoryview(dest))
    assert np.frombuffer(dest, np.int32).tolist() == [0, 1, 2, 3, 4, 5]


def test_bfloat16_storage_is_uint16(fake: FakeAllocator) -> None:
    buffer = Buffer("CLANG", 2, dtypes.bfloat16).copyin(np.array([0x3F80, 0xC000], np.uint16).data)
    out = buffer.as_numpy()
    assert out.dtype == np.uint16 and out.tolist() == [0x3F80, 0xC000]


def test_copy_size_mismatch_and_unallocated_copyout(fake: FakeAllocator) -> None:
    buffer = Buffer("CLANG", 4, dtypes.float32)
    with pytest.raises(ValueError, match="copyin: 8 bytes"):
        buffer.copyin(memoryview(bytearray(8)))
    with pytest.raises(RuntimeError, match="not allocated"):
        buffer.copyout(memoryview(bytearray(16)))
    with pytest.raises(ValueError, match="copyout: 4 bytes"):
        buffer.allocate().copyout(memoryview(bytearray(4)))


def test_view_shares_memory_at_byte_offset(fake: FakeAllocator) -> None:
    base = Buffer("CLANG", 8, dtypes.int32).copyin(np.arange(8, dtype=np.int32).data)
    view = base.view(3, dtypes.int32, 8)
    assert view.base is base and view.offset == 8 and view.as_numpy().tolist() == [2, 3, 4]
    view.copyin(np.array([-1, -2, -3], np.int32).data)
    assert base.as_numpy().tolist() == [0, 1, -1, -2, -3, 5, 6, 7]
    inner = view.view(2, dtypes.uint8, 4)
    assert inner.base is base and inner.offset == 12
    assert inner.as_numpy().tolist() == [0xFE, 0xFF]
    assert fake.allocated == [32]


def test_view_bounds_and_offset_errors(fake: FakeAllocator) -> None:
    base = Buffer("CLANG", 4, dtypes.int32)
    with pytest.raises(ValueError, match="exceeds"):
        base.view(2, dtypes.int32, 12)
    with pytest.raises(ValueError, match="without a base"):
        Buffer("CLANG", 4, dtypes.int32, offset=4)
    with pytest.raises(ValueError, match="non-negative"):
        Buffer("CLANG", -1, dtypes.int32)


def test_refcount_frees_at_zero(fake: FakeAllocator) -> None:
    buffer = Buffer("CLANG", 4, dtypes.float32).allocate()
    buffer.ref(1)
    buffer.ref(1)
    buffer.ref(-1)
    assert buffer.is_allocated() and fake.freed == []
    buffer.ref(-1)
    assert not buffer.is_allocated() and fake.freed == [16]
    with pytest.raises(RuntimeError, match="negative"):
        buffer.ref(-1)


def test_base_outlives_its_views(fake: FakeAllocator) -> None:
    base = Buffer("CLANG", 4, dtypes.int32).copyin(np.arange(4, dtype=np.int32).data)
    base.ref(1)
    view = base.view(2, dtypes.int32, 8)
    view.ref(1)
    assert base.refcount == 2
    base.ref(-1)
    del base
    gc.collect()
    assert view.as_numpy().tolist() == [2, 3] and fake.freed == []
    view.ref(-1)
    assert fake.freed == []  # the view object is still alive
    del view
    gc.collect()
    assert fake.freed == [16]


def test_unreferenced_buffer_freed_when_collected(fake: FakeAllocator) -> None:
    buffer = Buffer("CLANG", 2, dtypes.int64).allocate()
    del buffer
    gc.collect()
    assert fake.freed == [16]


def test_version_is_shared_with_views(fake: FakeAllocator) -> None:
    base = Buffer("CLANG", 4, dtypes.int32)
    view = base.view(1, dtypes.int32, 4)
    assert base.version == view.version == 0
    view.bump_version()
    assert base.version == view.version == 1
