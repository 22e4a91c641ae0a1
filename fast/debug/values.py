"""Values moved between `fast` and `reference`: read a buffer's value, build a realized copy of it.

A `Value` is what `to_numpy` shows (bfloat16 as float32 holding the bfloat16 values), plus, for a
MultiLazyBuffer, every shard's own Value (non-real shards included), its axis and real flags, so a copy
has the same layout. `materialize(pkg, value)` builds a realized buffer of `pkg` holding exactly those
bits (bfloat16 through its bit pattern, so NaN payloads survive).

`DiskMap` gives `fast` copies of DISK buffers files of their own in a temporary folder (in memory
where /dev/shm exists): compare never
writes a file of the user's. Every allocation on a `fast` DISK device maps its file from byte 0, so two
values materialized onto one DISK device would alias (the second overwriting the first, as it did for
every weight of a safetensors file): a DiskMap instead gives each value it materializes a byte range
of its own in the mapped file (`DiskMap.reserve`), and the value is a zero-copy view of that range.
"""
from __future__ import annotations

import itertools
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from fast.engine.fusion import is_identity_view
from fast.engine.readback import READ_OBSERVERS, _readable_on_host
from fast.engine.realize import realize
from fast.graph.node import LazyBuffer
from fast.runtime import mpi

DeviceMap = Callable[[str], str]  # a device name -> the name compare uses for it (DiskMap)


def same_device(name: str) -> str:
    return name


@dataclass(frozen=True, eq=False)
class Value:
    """A buffer's value: `array` as `to_numpy` gives it, `dtype` by name, `device` (a tuple for a multi
    buffer); for a multi buffer also `shards` (each shard's Value), `axis` and `real`."""

    array: np.ndarray
    dtype: str
    device: str | tuple[str, ...]
    shards: tuple[Value, ...] | None = None
    axis: int | None = None
    real: tuple[bool, ...] = ()

    def __repr__(self) -> str:
        return f"Value({self.dtype}{list(self.array.shape)} on {self.device})"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(size) for size in self.array.shape)


def _stored(pkg: ModuleType, obj: Any) -> np.ndarray:
    """`to_numpy(obj)`; for a realized `reference` buffer (not bfloat16), its stored array itself: reference
    never changes an array it has handed out (a write replaces its storage's bytes), so no copy is needed."""
    if pkg.__name__ == "reference" and not hasattr(obj, "lbs") and obj.dtype.name != "bfloat16":
        pkg.realize(obj)
        stored = obj.realized
        if stored is not None and not stored.flags.writeable:
            return np.asarray(stored)
    if pkg.__name__ == "fast" and ((stored := _fast_stored(obj)) is not None or
                                   (stored := _fast_view_stored(obj)) is not None):
        return stored
    return np.asarray(pkg.to_numpy(obj))


def _plain_base(obj: Any) -> bool:
    """Whether `obj` is a realized `fast` base buffer of this rank whose Buffer holds exactly its
    elements (int shape, not bfloat16): its bytes can be read directly."""
    return isinstance(obj, LazyBuffer) and obj.base is obj and obj.realized is not None \
        and obj.dtype.name != "bfloat16" and mpi.is_mine(obj.device) \
        and all(isinstance(size, int) for size in obj.shape) and obj.realized.size == math.prod(obj.shape)


def _fast_stored(obj: Any) -> np.ndarray | None:
    """The bytes of a realized `fast` base buffer of this rank, or of a view reading all of one in
    order (a reshape: what `to_numpy` reads it as), copied out once (`to_numpy` copies them twice: a
    large value read for every node adds up), or None where `to_numpy` must read it."""
    if _plain_base(obj):
        return obj.realized.as_numpy().reshape(obj.shape)
    if not isinstance(obj, LazyBuffer) or obj.base is obj or not _plain_base(obj.base) \
            or not all(isinstance(size, int) for size in obj.shape) or not is_identity_view(obj, obj.base):
        return None
    stored = obj.base.realized
    return None if stored is None else stored.as_numpy().reshape(obj.shape)


def _fast_view_stored(obj: Any) -> np.ndarray | None:
    """A `fast` view (or unrealized buffer) read as `to_numpy` reads it (realized, then through its
    host-readable copy, engine/readback.py) but copied out once, not twice; None where `to_numpy`
    must read it (shards, bfloat16, symbolic or zero sizes, another rank's buffer)."""
    if not isinstance(obj, LazyBuffer) or obj.dtype.name == "bfloat16" or not mpi.is_mine(obj.device) \
            or not all(isinstance(size, int) for size in obj.shape) or not math.prod(obj.shape):
        return None
    for observe in READ_OBSERVERS:
        observe(obj)
    realize(obj)
    readable = _readable_on_host(obj)
    realize(readable)
    return _fast_stored(readable)


def read_reusing(obj: Any, pool: dict[tuple[str, int], np.ndarray]) -> Value | None:
    """A realized `fast` base buffer's value copied into an array of `pool` (one per dtype and size,
    reused: a large value read for every node would otherwise be fresh memory each time): valid only
    until the next read of that size. None where `read` must be used."""
    if not _plain_base(obj):
        return None
    shape = obj.shape
    key = (obj.dtype.name, obj.realized.size)
    if key not in pool:
        pool[key] = np.empty(obj.realized.size, dtype=obj.realized.dtype.storage_np)
    array = pool[key]
    if array.nbytes:
        obj.realized.copyout(array.view(np.uint8).data)
    return Value(array.reshape(shape), obj.dtype.name, obj.device)


def read(pkg: ModuleType, obj: Any) -> Value:
    """The value of a realized (or realizable) buffer of `pkg`; a multi buffer with its shards."""
    array = _stored(pkg, obj)
    if not hasattr(obj, "lbs"):
        return Value(array, obj.dtype.name, obj.device)
    shards = tuple(Value(pkg.to_numpy(lb), lb.dtype.name, lb.device) for lb in obj.lbs)
    return Value(array, obj.dtype.name, tuple(obj.device), shards, obj.axis, tuple(obj.real))


def _storage(value: Value) -> tuple[np.ndarray, bool]:
    """(array to hand to from_numpy, whether it holds bfloat16 bits to bitcast)."""
    if value.dtype == "bfloat16":
        bits = np.array(value.array, dtype=np.float32, order="C").view(np.uint32) >> 16
        return bits.astype(np.uint16), True
    # no copy of a C-contiguous array: both packages' from_numpy copy what they are given
    return np.asarray(value.array, order="C"), False  # (not ascontiguousarray: it makes 0-d arrays 1-d)


def materialize(pkg: ModuleType, value: Value, devices: DeviceMap = same_device) -> Any:
    """A realized buffer (or multi buffer) of `pkg` holding exactly `value`, on `devices(device)`."""
    if value.shards is not None:
        shards = [materialize(pkg, shard, devices) for shard in value.shards]
        return pkg.MultiLazyBuffer(shards, value.axis, list(value.real))
    array, bf16 = _storage(value)
    device = devices(value.device) if isinstance(value.device, str) else value.device
    if isinstance(devices, DiskMap) and isinstance(device, str) and device.startswith("DISK:") and value.array.size:
        return _disk_range(pkg, value, array, device, devices)
    out = pkg.from_numpy(array, device)
    if bf16:
        out = out.cast(pkg.dtypes.bfloat16, bitcast=True)
        pkg.realize(out)
    return out


def _disk_range(pkg: ModuleType, value: Value, array: np.ndarray, device: str, devices: DiskMap) -> Any:
    """`value` written into a byte range of its own of `device`'s file (`devices.reserve`), as a realized
    zero-copy view of those bytes: nothing else materialized on that device shares them."""
    data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    start = devices.reserve(device, data.nbytes)
    whole = pkg.LazyBuffer.loadop(pkg.LoadOps.EMPTY, (start + data.nbytes,), pkg.dtypes.uint8, device)
    part = whole.shrink(((start, start + data.nbytes),)).contiguous()
    pkg.realize(part)
    if part.base is not part or part.realized is None:
        raise RuntimeError(f"materialize: bytes [{start}, {start + data.nbytes}) of {device} are not a zero-copy view")
    part.base.realized.copyin(memoryview(data.data))
    dtype = getattr(pkg.dtypes, value.dtype)
    out = part if dtype == pkg.dtypes.uint8 else part.cast(dtype, bitcast=True)
    out = out.reshape(value.shape)
    pkg.realize(out)
    return out


def scratch_folder() -> str | None:
    """Where DiskMap's files go: /dev/shm when it is a writable folder (memory: a DISK write syncs its
    bytes to stable storage, which compare's throwaway copies do not need), else the default temporary
    folder (None)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class DiskMap:
    """Maps `DISK:<path>` to `DISK:<temporary folder>/<n>` (one file per original path); other
    device names are unchanged. `reserve` hands out disjoint byte ranges of a mapped file (module
docstring). `close()` removes the folder."""

    def __init__(self) -> None:
        self.folder: str | None = None
        self.names: dict[str, str] = {}
        self.counter = itertools.count()
        self.used: dict[str, int] = {}  # mapped device -> bytes handed out by `reserve`

    def __call__(self, device: str) -> str:
        if not device.startswith("DISK:"):
            return device
        if device not in self.names:
            if self.folder is None:
                self.folder = tempfile.mkdtemp(prefix="fast-debug-", dir=scratch_folder())
            self.names[device] = f"DISK:{os.path.join(self.folder, str(next(self.counter)))}"
        return self.names[device]

    def reserve(self, device: str, nbytes: int) -> int:
        """The first byte of `nbytes` bytes of mapped DISK `device` that no earlier reservation holds
        (64-byte aligned)."""
        start = -(-self.used.get(device, 0) // 64) * 64
        self.used[device] = start + nbytes
        return start

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
