"""safetensors over DISK, what only `fast` has (issue 10): the DISK runtime's read counter proves a copy of
one tensor reads that tensor's bytes only (a 1 GiB sparse file), writes into DISK are msynced before
`realize` returns, read-only files map read-only, and `fast` and `reference` write identical files.
The behaviour both packages share is tested in tests/reference/test_ref_safetensors.py.
"""
from __future__ import annotations

import json
import mmap
import stat
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fast
import reference
from fast.runtime.disk import DISK_READ_COUNTER, DiskAllocator

GIB = 1 << 30


def sparse_file(path: Path, small: np.ndarray, total: int) -> None:
    """A safetensors file of `total` bytes: tensor "small" first, then "big" (uint8) filling the rest,
    which stays a hole in the file (never written)."""
    def header(big: int) -> bytes:
        text = json.dumps({"small": {"dtype": "F32", "shape": list(small.shape), "data_offsets": [0, small.nbytes]},
                           "big": {"dtype": "U8", "shape": [big], "data_offsets": [small.nbytes, small.nbytes + big]}})
        return text.encode().ljust(256)
    big = total - 8 - len(header(0)) - small.nbytes
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", 256) + header(big) + small.tobytes())
        handle.truncate(total)


def test_copying_one_kib_tensor_of_a_1_gib_sparse_file_reads_only_that_tensor(tmp_path):
    small = np.random.default_rng(0).standard_normal(256).astype(np.float32)  # 1 KiB
    path = tmp_path / "weights.safetensors"
    sparse_file(path, small, GIB)
    assert path.stat().st_size == GIB
    before = DISK_READ_COUNTER.snapshot()
    loaded = fast.safe_load(path)
    assert DISK_READ_COUNTER.snapshot() == before  # the header is read with plain file I/O, not through DISK
    assert loaded["big"].shape == (GIB - 8 - 256 - 1024,)
    copied = loaded["small"].copy_to_device("CLANG")
    fast.realize(copied)
    assert DISK_READ_COUNTER.snapshot() - before == small.nbytes == 1024
    np.testing.assert_array_equal(fast.to_numpy(copied), small)
    window = loaded["big"].shrink(((GIB // 2, GIB // 2 + 4096),)).copy_to_device("CLANG")
    start = DISK_READ_COUNTER.snapshot()
    assert not fast.to_numpy(window).any() and DISK_READ_COUNTER.snapshot() - start == 4096


def test_the_read_counter_counts_what_copyout_copies(tmp_path):
    allocator = DiskAllocator(str(tmp_path / "f.bin"))
    handle = allocator.alloc(100)
    before = DISK_READ_COUNTER.snapshot()
    allocator.copyin(handle, memoryview(bytes(range(100))))
    assert DISK_READ_COUNTER.snapshot() == before  # writes do not count
    out = bytearray(30)
    allocator.copyout(memoryview(out), allocator.offset(handle, 10, 30))
    assert bytes(out) == bytes(range(10, 40)) and DISK_READ_COUNTER.snapshot() - before == 30


class FlushRecorder:
    """Stands in for a DiskMapping's mmap in copyin: forwards writes and records each msync (flush)."""

    def __init__(self, mapped: mmap.mmap) -> None:
        self.mapped, self.flushes = mapped, list[tuple[int, int]]()

    def __setitem__(self, key: Any, value: Any) -> None:
        self.mapped[key] = value

    def flush(self, offset: int, size: int) -> None:
        self.flushes.append((offset, size))
        self.mapped.flush(offset, size)


@pytest.mark.parametrize(("start", "count"), [(0, 9000), (4100, 100), (8191, 2)])
def test_realize_of_an_assign_into_disk_msyncs_the_written_bytes(tmp_path, start, count):
    name = f"DISK:{tmp_path / 'd.bin'}"
    target = fast.from_numpy(np.zeros(9000, np.uint8), name)
    window = target.shrink(((start, start + count),)).contiguous()
    fast.realize(window)
    mapping = target.base.realized.handle.mapping
    recorder = mapping.mapped = FlushRecorder(mapping.mapped)
    try:
        new = np.arange(count, dtype=np.uint8) + 1
        fast.realize(window.assign(fast.from_numpy(new, "CLANG").copy_to_device(name)))
    finally:
        mapping.mapped = recorder.mapped
    assert len(recorder.flushes) == 1
    offset, size = recorder.flushes[0]
    assert offset % mmap.PAGESIZE == 0 and offset <= start and offset + size == start + count
    assert (tmp_path / "d.bin").read_bytes()[start:start + count] == new.tobytes()


def test_a_read_only_disk_file_maps_read_only(tmp_path):
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(range(16)))
    path.chmod(stat.S_IRUSR)
    name = f"DISK:{path}"
    try:
        lb = fast.LazyBuffer.loadop(fast.LoadOps.EMPTY, (16,), fast.dtypes.uint8, name)
        assert fast.to_numpy(lb).tolist() == list(range(16))
        with pytest.raises(PermissionError, match="read-only"):
            fast.realize(lb.assign(fast.from_numpy(np.zeros(16, np.uint8), "CLANG").copy_to_device(name)))
        with pytest.raises(PermissionError, match="read-only"):
            fast.from_numpy(np.zeros(4, np.uint8), name)
        assert path.read_bytes() == bytes(range(16))
        with pytest.raises(RuntimeError, match="cannot extend"):
            fast.realize(fast.LazyBuffer.loadop(fast.LoadOps.EMPTY, (32,), fast.dtypes.uint8, name))
        assert path.stat().st_size == 16
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_fast_and_reference_write_identical_files(tmp_path):
    arrays = {"w": np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4), "i": np.arange(5, dtype=np.int64),
              "m": np.array([True, False]), "h": np.array([0.5, -1.0], dtype=np.float16)}
    for impl in (fast, reference):
        tensors = {name: impl.from_numpy(array, "CLANG") for name, array in arrays.items()}
        tensors["b"] = impl.from_numpy(np.array([0x3F80, 0x7FC1], np.uint16), "CLANG").cast(impl.dtypes.bfloat16, True)
        impl.safe_save(tmp_path / f"{impl.__name__}.safetensors", tensors, {"note": "ü"})
    assert (tmp_path / "fast.safetensors").read_bytes() == (tmp_path / "reference.safetensors").read_bytes()


def test_loading_a_file_saved_from_disk_tensors(tmp_path):
    """safe_save of tensors that are themselves lazy views of another file (load, edit, save elsewhere)."""
    first = tmp_path / "a.safetensors"
    fast.safe_save(first, {"x": fast.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3), "CLANG")})
    loaded = fast.safe_load(first)
    fast.safe_save(tmp_path / "b.safetensors", {"x": loaded["x"], "xt": loaded["x"].permute((1, 0))})
    again = fast.safe_load(tmp_path / "b.safetensors")
    np.testing.assert_array_equal(fast.to_numpy(again["xt"]), np.arange(6).reshape(2, 3).T)
