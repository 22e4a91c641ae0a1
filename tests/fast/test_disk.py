"""The DISK device: buffers that are memory-mapped files (SPEC §1, §4, §7).

Covers the allocator (fast/runtime/disk.py) directly, then the flows through the lazy layer and the
engine: numpy -> DISK -> numpy, the file's bytes, views copied to CLANG (consecutive and not: SPEC §7
trap), the shape-changing bitcast of a DISK slice (SPEC §7 trap), zero-copy contiguous, compute
refused with RuntimeError, and assign into a DISK buffer. Values are compared with numpy and with
`reference` where its API allows. Every test uses its own file under tmp_path.
"""
from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

import fast
import reference
from fast.device import Device
from fast.dtype import dtypes
from fast.engine.realize import compile_item
from fast.ops import BufferOps, KernelOps, LazyOp, LoadOps, MemBuffer, UnaryOps
from fast.runtime.base import Compiled
from fast.runtime.disk import DiskAllocator, DiskMemory, create
from fast.shape.shapetracker import ShapeTracker


def disk(tmp_path: Path, name: str = "data.bin") -> str:
    return f"DISK:{tmp_path / name}"


def file_bytes(device: str) -> bytes:
    return Path(device[len("DISK:"):]).read_bytes()


def both(tmp_path: Path, array: np.ndarray, build, name: str = "data.bin") -> tuple[np.ndarray, np.ndarray]:
    """`build(impl, lazy_buffer_on_disk)` run in fast and in reference; both results as numpy."""
    results = []
    for impl in (fast, reference):
        source = impl.from_numpy(array, disk(tmp_path, f"{impl.__name__}-{name}"))
        results.append(impl.to_numpy(build(impl, source)))
    return results[0], results[1]


# ---------------------------------------------------------------- the allocator


def test_alloc_creates_extends_and_never_truncates(tmp_path):
    path = tmp_path / "f.bin"
    allocator = DiskAllocator(str(path))
    first = allocator.alloc(10)
    assert path.stat().st_size == 10
    allocator.copyin(first, memoryview(bytes(range(1, 11))))
    wider = allocator.alloc(16)  # extends with zeros, keeps the existing bytes
    back = bytearray(16)
    allocator.copyout(memoryview(back), wider)
    assert bytes(back) == bytes(range(1, 11)) + bytes(6)
    narrow = allocator.alloc(4)  # a smaller mapping never truncates the file
    assert path.stat().st_size == 16 and narrow.nbytes == 4
    assert path.read_bytes() == bytes(range(1, 11)) + bytes(6)


def test_offset_views_are_zero_copy_subranges(tmp_path):
    allocator = DiskAllocator(str(tmp_path / "f.bin"))
    whole = allocator.alloc(32)
    view = allocator.offset(allocator.offset(whole, 8, 16), 4, 8)  # bytes [12, 20) of the file
    allocator.copyin(view, memoryview(b"ABCDEFGH"))
    back = bytearray(32)
    allocator.copyout(memoryview(back), whole)
    assert bytes(back) == bytes(12) + b"ABCDEFGH" + bytes(12)
    assert (tmp_path / "f.bin").read_bytes() == bytes(back)
    with pytest.raises(ValueError, match="outside"):
        allocator.offset(whole, 30, 4)
    with pytest.raises(ValueError, match="5 bytes"):
        allocator.copyin(view, memoryview(b"12345"))
    with pytest.raises(ValueError, match="3 bytes"):
        allocator.copyout(memoryview(bytearray(3)), view)


def test_copies_accept_typed_memoryviews(tmp_path):
    allocator = DiskAllocator(str(tmp_path / "f.bin"))
    handle = allocator.alloc(24)
    data = np.arange(6, dtype=np.float32)
    allocator.copyin(handle, data.data)
    back = np.zeros(6, np.float32)
    allocator.copyout(back.data, handle)
    np.testing.assert_array_equal(back, data)


def test_free_unmaps_when_the_last_user_is_gone(tmp_path):
    allocator = DiskAllocator(str(tmp_path / "f.bin"))
    base = allocator.alloc(8)
    view = allocator.offset(base, 2, 4)
    mapping = base.mapping
    allocator.free(base)
    allocator.free(base)  # idempotent
    assert not mapping.closed and mapping.users == 1  # the view keeps the mapping alive
    allocator.copyin(view, memoryview(b"wxyz"))
    with pytest.raises(ValueError, match="after free"):
        allocator.copyout(memoryview(bytearray(8)), base)
    del view
    gc.collect()
    assert mapping.closed and mapping.mapped is None and mapping.users == 0
    assert (tmp_path / "f.bin").read_bytes() == b"\0\0wxyz\0\0"


def test_zero_byte_allocations(tmp_path):
    allocator = DiskAllocator(str(tmp_path / "empty.bin"))
    handle = allocator.alloc(0)
    allocator.copyin(handle, memoryview(b""))
    allocator.copyout(memoryview(bytearray()), handle)
    assert (tmp_path / "empty.bin").exists() and isinstance(allocator.offset(handle, 0, 0), DiskMemory)


def test_alloc_errors_name_the_file(tmp_path):
    with pytest.raises(RuntimeError, match="missing-dir"):
        DiskAllocator(str(tmp_path / "missing-dir" / "f.bin")).alloc(4)
    with pytest.raises(ValueError, match="-1"):
        DiskAllocator(str(tmp_path / "f.bin")).alloc(-1)


def test_create_and_registry(tmp_path):
    name = disk(tmp_path)
    device = Device[name]
    assert isinstance(device, Compiled) and device.name == name
    assert isinstance(device.allocator, DiskAllocator) and device.allocator.path == str(tmp_path / "data.bin")
    for bad in ("CLANG", "DISK:", "disk:/x"):
        with pytest.raises(ValueError, match="DISK"):
            create(bad)


# ---------------------------------------------------------------- no compute on DISK


def test_device_parts_refuse_to_compile(tmp_path):
    name = disk(tmp_path)
    device = Device[name]
    for attempt in (lambda: device.renderer.options, lambda: device.compiler.compile_cached("int x;"),
                    lambda: device.compiler.compile("int x;"), lambda: device.runtime("k", b"")):
        with pytest.raises(RuntimeError, match="DISK"):
            attempt()
    st = ShapeTracker.from_shape((4,))
    load = LazyOp(BufferOps.LOAD, (), MemBuffer(1, dtypes.float32, st))
    ast = LazyOp(KernelOps.SINK, (LazyOp(BufferOps.STORE, (load,), MemBuffer(0, dtypes.float32, st)),))
    with pytest.raises(RuntimeError) as caught:
        compile_item(ast, name)
    assert name in str(caught.value)


@pytest.mark.parametrize("impl", [fast, reference], ids=["fast", "reference"])
def test_compute_on_disk_raises_runtime_error(tmp_path, impl):
    lb = impl.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), disk(tmp_path))
    attempts = [lambda: lb.e(impl.BinaryOps.ADD, lb), lambda: lb.e(impl.UnaryOps.NEG),
                lambda: lb.r(impl.ReduceOps.SUM, (1,)), lambda: lb.cast(impl.dtypes.int32), lambda: lb.const(1.0)]
    for attempt in attempts:
        with pytest.raises(RuntimeError, match="DISK"):
            attempt()


# ---------------------------------------------------------------- flows through the lazy layer


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint16, np.float16, np.int64, np.bool_, np.float64])
def test_round_trip_and_file_bytes(tmp_path, dtype):
    rng = np.random.default_rng(0)
    array = (rng.standard_normal((3, 5)) * 50).astype(dtype)
    name = disk(tmp_path)
    lb = fast.from_numpy(array, name)
    assert lb.device == name and lb.is_realized()
    assert file_bytes(name) == array.tobytes()
    out = fast.to_numpy(lb)
    assert out.dtype == array.dtype and out.shape == array.shape
    np.testing.assert_array_equal(out, array)
    np.testing.assert_array_equal(reference.to_numpy(reference.from_numpy(array, name)), array)


def test_empty_on_disk_reads_an_existing_file(tmp_path):
    array = np.arange(12, dtype=np.int32)
    (tmp_path / "data.bin").write_bytes(array.tobytes())
    lb = fast.LazyBuffer.loadop(LoadOps.EMPTY, (3, 4), dtypes.int32, disk(tmp_path))
    np.testing.assert_array_equal(fast.to_numpy(lb), array.reshape(3, 4))


def test_copy_from_clang_writes_the_file(tmp_path):
    array = np.arange(10, dtype=np.int16) * 7 - 20
    name = disk(tmp_path)
    copied = fast.from_numpy(array, "CLANG").e(UnaryOps.NEG).copy_to_device(name)
    np.testing.assert_array_equal(fast.to_numpy(copied), -array)
    assert file_bytes(name) == (-array).tobytes()


@pytest.mark.parametrize("arg", [((1, 3), (0, 6)), ((0, 4), (2, 5)), ((3, 4), (5, 6))])
def test_shrink_copied_to_clang(tmp_path, arg):
    array = np.arange(24, dtype=np.float32).reshape(4, 6) * 1.5
    fast_out, ref_out = both(tmp_path, array, lambda impl, lb: lb.shrink(arg).copy_to_device("CLANG"))
    expected = array[arg[0][0]:arg[0][1], arg[1][0]:arg[1][1]]
    np.testing.assert_array_equal(fast_out, expected)
    np.testing.assert_array_equal(ref_out, expected)


VIEWS = {
    "permute": (lambda lb: lb.permute((1, 0, 2)), lambda a: a.transpose(1, 0, 2)),
    "stride": (lambda lb: lb.stride((1, -1, 2)), lambda a: a[:, ::-1, ::2]),
    "shrink-middle-axis": (lambda lb: lb.shrink(((1, 3), (1, 3), (0, 4))), lambda a: a[1:3, 1:3]),
    "shrink-permute": (lambda lb: lb.shrink(((0, 4), (1, 2), (1, 3))).permute((2, 0, 1)),
                       lambda a: a[:, 1:2, 1:3].transpose(2, 0, 1)),
    "flip-all": (lambda lb: lb.stride((-1, -1, -1)), lambda a: a[::-1, ::-1, ::-1]),
}


@pytest.mark.parametrize("case", sorted(VIEWS))
def test_non_consecutive_view_copied_to_clang(tmp_path, case):
    move, numpy_move = VIEWS[case]
    array = np.arange(48, dtype=np.int32).reshape(4, 3, 4) - 10
    fast_out, ref_out = both(tmp_path, array, lambda impl, lb: move(lb).copy_to_device("CLANG"))
    np.testing.assert_array_equal(fast_out, numpy_move(array))
    np.testing.assert_array_equal(ref_out, numpy_move(array))


def test_non_consecutive_copy_moves_only_the_covering_bytes(tmp_path):
    array = np.arange(400, dtype=np.float32).reshape(100, 4)
    lb = fast.from_numpy(array, disk(tmp_path))
    view = lb.shrink(((10, 20), (1, 3)))  # rows 10..19, columns 1..2: elements 41 .. 78 of the file
    copied = view.copy_to_device("CLANG")
    copies = [item for item in fast.schedule(copied) if item.ast.op is LoadOps.COPY]
    assert [item.ast.arg for item in copies] == [(78 - 41 + 1) * 4]
    np.testing.assert_array_equal(fast.to_numpy(copied), array[10:20, 1:3])


def test_to_numpy_of_a_non_consecutive_disk_view(tmp_path):
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    fast_out, ref_out = both(tmp_path, array, lambda impl, lb: lb.permute((1, 0)).stride((-1, 1)))
    np.testing.assert_array_equal(fast_out, array.T[::-1])
    np.testing.assert_array_equal(ref_out, array.T[::-1])


def test_shape_changing_bitcast_of_a_disk_slice(tmp_path):
    array = np.arange(16, dtype=np.uint8) * 17
    fast_out, ref_out = both(tmp_path, array, lambda impl, lb: lb.shrink(((4, 12),)).cast(impl.dtypes.int32, True))
    expected = array[4:12].view(np.int32)
    assert fast_out.shape == (2,) and fast_out.dtype == np.int32
    np.testing.assert_array_equal(fast_out, expected)
    np.testing.assert_array_equal(ref_out, expected)


@pytest.mark.parametrize(("source", "target", "arg"), [
    (np.uint8, "int16", ((1, 3), (0, 8))),
    (np.int32, "uint8", ((2, 4), (0, 8))),
    (np.float32, "float16", ((0, 1), (0, 8))),
    (np.int16, "int64", ((1, 2), (0, 8))),
])
def test_shape_changing_bitcast_of_2d_slices(tmp_path, source, target, arg):
    array = (np.arange(32) * 37 - 300).astype(source).reshape(4, 8)
    fast_lb = fast.from_numpy(array, disk(tmp_path)).shrink(arg).cast(getattr(fast.dtypes, target), True)
    ref_lb = reference.from_numpy(array, disk(tmp_path)).shrink(arg).cast(getattr(reference.dtypes, target), True)
    expected = array[arg[0][0]:arg[0][1]].view(np.dtype(target))
    assert fast_lb.shape == ref_lb.shape == expected.shape
    assert fast.to_numpy(fast_lb).tobytes() == reference.to_numpy(ref_lb).tobytes() == expected.tobytes()
    assert fast.to_numpy(fast_lb.copy_to_device("CLANG")).tobytes() == expected.tobytes()


def test_contiguous_of_a_consecutive_disk_view_is_a_zero_copy_view(tmp_path):
    array = np.arange(24, dtype=np.float32).reshape(4, 6)
    lb = fast.from_numpy(array, disk(tmp_path))
    window = lb.shrink(((1, 3), (0, 6))).contiguous()
    assert window.base.op is LoadOps.VIEW
    fast.realize(window)
    realized = window.base.realized
    assert realized is not None and realized.base is lb.base.realized and realized.offset == 6 * 4
    assert realized.handle.mapping is lb.base.realized.handle.mapping
    np.testing.assert_array_equal(fast.to_numpy(window), array[1:3])



def test_the_file_is_unmapped_once_no_lazy_buffer_needs_it(tmp_path):
    lb = fast.from_numpy(np.arange(8, dtype=np.int32), disk(tmp_path))
    window = lb.shrink(((2, 6),)).contiguous()
    fast.realize(window)
    stored = lb.base.realized
    assert stored is not None
    mapping = stored.handle.mapping
    del lb, stored
    gc.collect()
    assert not mapping.closed  # the VIEW still reads it
    np.testing.assert_array_equal(fast.to_numpy(window), [2, 3, 4, 5])
    del window
    gc.collect()
    assert mapping.closed and mapping.users == 0

def test_same_itemsize_bitcast_on_disk_is_a_view(tmp_path):
    array = np.array([1.0, -2.5, np.inf, 0.0], dtype=np.float32)
    fast_out, ref_out = both(tmp_path, array, lambda impl, lb: lb.cast(impl.dtypes.uint32, bitcast=True))
    np.testing.assert_array_equal(fast_out, array.view(np.uint32))
    np.testing.assert_array_equal(ref_out, array.view(np.uint32))


def test_assign_into_a_disk_buffer_writes_the_file(tmp_path):
    name = disk(tmp_path)
    old, new = np.zeros(8, dtype=np.int32), np.arange(8, dtype=np.int32) * 3 - 5
    results = []
    for impl in (fast, reference):
        target = impl.from_numpy(old, name)
        assigned = target.assign(impl.from_numpy(new, "CLANG").copy_to_device(name))
        impl.realize(assigned)
        results.append(impl.to_numpy(target))
    np.testing.assert_array_equal(results[0], new)
    np.testing.assert_array_equal(results[1], new)
    assert file_bytes(name) == new.tobytes()


def test_assign_into_a_disk_window_leaves_the_rest_of_the_file(tmp_path):
    name = disk(tmp_path)
    old = np.arange(12, dtype=np.int16)
    lb = fast.from_numpy(old, name)
    window = lb.shrink(((4, 8),)).contiguous()
    fast.realize(window)
    fast.realize(window.assign(fast.from_numpy(np.full(4, -1, np.int16), "CLANG").copy_to_device(name)))
    expected = old.copy()
    expected[4:8] = -1
    assert file_bytes(name) == expected.tobytes()
    np.testing.assert_array_equal(fast.to_numpy(lb), expected)



STRIDED_BITCASTS = {  # name: (movement on a (4, 8) uint8 DISK buffer, the same in numpy, target dtype)
    "trap-rows-and-bytes": (lambda lb: lb.shrink(((1, 3), (2, 6))), lambda a: a[1:3, 2:6], "uint32"),
    "right-half": (lambda lb: lb.shrink(((0, 4), (4, 8))), lambda a: a[:, 4:8], "int16"),
    "flipped-rows": (lambda lb: lb.stride((-1, 1)).shrink(((0, 3), (0, 8))), lambda a: a[::-1][:3], "int16"),
    "every-other-row": (lambda lb: lb.stride((2, 1)), lambda a: a[::2], "uint64"),
    "permuted-same-size": (lambda lb: lb.permute((1, 0)), lambda a: a.T, "int8"),
}


@pytest.mark.parametrize("case", sorted(STRIDED_BITCASTS))
def test_shape_changing_bitcast_of_a_non_consecutive_disk_slice(tmp_path, case):
    move, numpy_move, target = STRIDED_BITCASTS[case]
    array = (np.arange(32) * 29).astype(np.uint8).reshape(4, 8)
    fast_out, ref_out = both(tmp_path, array, lambda impl, lb: move(lb).cast(getattr(impl.dtypes, target), True))
    expected = np.ascontiguousarray(numpy_move(array)).view(np.dtype(target))
    assert fast_out.shape == ref_out.shape == expected.shape
    np.testing.assert_array_equal(fast_out, expected)
    np.testing.assert_array_equal(ref_out, expected)


def test_bitcast_that_no_disk_view_can_express_raises_runtime_error(tmp_path):
    lb = fast.from_numpy(np.arange(24, dtype=np.uint8).reshape(4, 6), disk(tmp_path))
    with pytest.raises(RuntimeError, match="DISK"):  # rows 6 bytes apart cannot be int32 strides
        lb.shrink(((0, 4), (0, 4))).cast(dtypes.int32, bitcast=True)
