"""Device names, the device registry, and `Buffer`: a typed span of device memory.

Invariants:
- A canonical device name is `KIND`, `KIND:N` (N >= 1), either followed by `@R` (R >= 0: the MPI
  rank owning the device, docs/mpi.md), for KIND in CLANG, LLVM, CUDA, or `DISK:<path>` (never a
  rank); `KIND:0` canonicalises to `KIND`, `@01` to `@1`. Nothing else is a device name (ValueError).
- `Device[name]` imports `fast.runtime.<kind lower-case>` and calls its `create(name without @R)`
  once per canonical name; the graph layer never touches a device until something is allocated.
  A name with `@R` is that device renamed; when R is not this process's rank its allocator holds
  placeholders (`Compiled.remote`); R outside the communicator is a ValueError naming the device.
- A `Buffer` is either a base (owns an allocation) or a view (`base` is another base `Buffer`, at a
  byte `offset`); a view never outlives the allocation it points into: it holds its base, and the
  base's memory is only freed when no view is alive and its reference count is zero.
- Allocation is lazy: nothing is allocated until `allocate()` (or `copyin`).
- `ref(delta)` counts lazy buffers that need the memory (a view forwards to its base). When the count
  drops back to zero (and no view is alive) the allocation is freed; an unreferenced Buffer frees its
  allocation when it is garbage collected.
- `version` counts realized assigns into the memory (shared by a base and all its views).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import re
import sys
from typing import Any, Protocol

import numpy as np

from fast import config
from fast.dtype import DType

COMPUTE_KINDS = ("CLANG", "LLVM", "CUDA")
_NUMBERED = re.compile(r"(CLANG|LLVM|CUDA)(?::([0-9]+))?(?:@([0-9]+))?", re.ASCII)


class Allocator(Protocol):
    """What `Buffer` needs from a device: raw memory handles."""

    def alloc(self, nbytes: int, zeroed: bool = True) -> Any: ...
    def free(self, handle: Any, nbytes: int) -> None: ...
    def copyin(self, handle: Any, src: memoryview) -> None: ...
    def copyout(self, dest: memoryview, handle: Any) -> None: ...
    def offset(self, handle: Any, byte_offset: int, nbytes: int) -> Any: ...


@functools.lru_cache(maxsize=1024)
def _canonical(name: str) -> str:
    if name.startswith("DISK:") and len(name) > len("DISK:"):
        return name
    match = _NUMBERED.fullmatch(name)
    if match is None:
        raise ValueError(f"unknown device {name!r} (expected CLANG, LLVM, CUDA[:N][@RANK] or DISK:<path>)")
    kind, number, rank = match.groups()
    local = kind if number is None or int(number) == 0 else f"{kind}:{int(number)}"
    return local if rank is None else f"{local}@{int(rank)}"


_CANONICAL_NAMES: dict[str, str] = {}  # names seen to be canonical (each its own canonical spelling)


class _DeviceRegistry:
    """The process-wide registry of opened devices (`Device`). Tests may put fakes in `opened`."""

    def __init__(self) -> None:
        self.opened: dict[str, Any] = {}

    @staticmethod
    def canonicalize(name: str) -> str:
        """The canonical spelling of a device name; ValueError naming it when it is not one."""
        if not isinstance(name, str):
            raise ValueError(f"device name must be a string, got {name!r}")
        canonical = _canonical(name)
        if canonical == name and len(_CANONICAL_NAMES) < 4096:
            _CANONICAL_NAMES[name] = name  # a Buffer of an already canonical name skips the parse
        return canonical

    @staticmethod
    def kind(name: str) -> str:
        """`CLANG`, `LLVM`, `CUDA` or `DISK` for a (possibly non-canonical) device name."""
        return _DeviceRegistry.canonicalize(name).split(":", 1)[0].split("@", 1)[0]

    @property
    def DEFAULT(self) -> str:  # noqa: N802  (public API name)
        """The default device, from the configuration in force (CLANG unless overridden)."""
        return self.canonicalize(config.get().default_device)

    def __getitem__(self, name: str) -> Any:
        device = self.opened.get(name) if type(name) is str else None  # keys are canonical names
        if device is not None:
            return device
        canonical = self.canonicalize(name)
        device = self.opened.get(canonical)
        if device is None:
            device = self.opened[canonical] = _open(canonical)
        return device


def _open(canonical: str) -> Any:
    """The device record for a canonical name (see the module docstring for names with `@R`)."""
    if "@" not in canonical or canonical.startswith("DISK:"):
        return importlib.import_module("fast.runtime." + Device.kind(canonical).lower()).create(canonical)
    from fast.runtime import mpi

    mpi.check_rank(canonical)
    local = Device[mpi.local_name(canonical)]
    if mpi.is_mine(canonical):
        return dataclasses.replace(local, name=canonical)
    return dataclasses.replace(local, name=canonical, allocator=mpi.RemoteAllocator(canonical), remote=True)


Device = _DeviceRegistry()


_interpreter_ending = sys.is_finalizing


class Buffer:
    """`size` elements of `dtype` on `device`; a view when `base` is given (at byte `offset`)."""

    def __init__(self, device: str, size: int, dtype: DType, base: Buffer | None = None,
                 offset: int = 0) -> None:
        if size < 0 or offset < 0:
            raise ValueError(f"Buffer: size {size} and offset {offset} must be non-negative")
        canonical = _CANONICAL_NAMES.get(device) if type(device) is str else None
        self.device = Device.canonicalize(device) if canonical is None else canonical
        self.size, self.dtype = size, dtype
        self._handle: Any = None
        self._allocator: Allocator | None = None
        self._refcount = self._live_views = self._version = self.offset = 0
        self._ever_referenced = False
        self._base: Buffer | None = None
        if base is not None:
            root = base.base
            self.offset = offset + base.offset
            if root.device != self.device:
                raise ValueError(f"Buffer view on {self.device} of a base on {root.device}")
            if self.offset + self.nbytes > root.nbytes:
                raise ValueError(f"Buffer view of {self.nbytes} bytes at offset {self.offset} "
                                 f"exceeds its base of {root.nbytes} bytes")
            self._base = root
            root._live_views += 1  # given back in __del__
        elif offset != 0:
            raise ValueError(f"Buffer: offset {offset} given without a base")

    @property
    def base(self) -> Buffer:
        """The Buffer that owns the allocation (self for a base)."""
        return self if self._base is None else self._base

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def allocator(self) -> Allocator:
        """The allocator holding this buffer's memory (the device's, until allocated)."""
        if self._allocator is not None:
            return self._allocator
        return Device[self.device].allocator  # type: ignore[no-any-return]

    @property
    def version(self) -> int:
        """How many assigns into this memory have been realized (shared with views)."""
        return (self._base or self)._version

    def bump_version(self) -> None:
        """Called by the engine once an assign into this memory has been realized."""
        self.base._version += 1

    @property
    def refcount(self) -> int:
        return self.base._refcount

    def ref(self, delta: int) -> None:
        """Add `delta` lazy-buffer references; frees the memory when they drop back to zero."""
        root = self._base or self
        root._refcount += delta
        if root._refcount < 0:
            raise RuntimeError(f"Buffer.ref: reference count of {root!r} went negative")
        if delta > 0:
            root._ever_referenced = True  # (a count above zero frees nothing)
        elif delta < 0:
            root._maybe_free()

    def _view_died(self) -> None:
        self._live_views -= 1
        self._maybe_free()

    def _maybe_free(self) -> None:
        if self._ever_referenced and self._refcount == 0 and self._live_views == 0:
            self.deallocate()

    def is_allocated(self) -> bool:
        return self._handle is not None

    @property
    def handle(self) -> Any:
        """The device handle of the allocation (RuntimeError when not allocated)."""
        if self._handle is None:
            raise RuntimeError(f"{self!r} is not allocated")
        return self._handle

    def allocate(self, zeroed: bool = True) -> Buffer:
        """Allocate (a view: allocate the base, zero-filled, then take a zero-copy sub-span). Idempotent.
        `zeroed=False`: the caller writes every byte before anything reads one (a kernel's output)."""
        if self._handle is not None:
            return self
        if self._base is not None:
            self._base.allocate()
            self._allocator = self._base.allocator
            self._handle = self._allocator.offset(self._base.handle, self.offset, self.nbytes)
            return self
        allocator = self._allocator = Device[self.device].allocator
        self._handle = allocator.alloc(self.size * self.dtype.itemsize, zeroed)
        return self

    def deallocate(self) -> None:
        """Free the allocation now (a view only forgets its handle)."""
        handle, allocator = self._handle, self._allocator
        self._handle = self._allocator = None
        if self._base is None and handle is not None and allocator is not None:
            allocator.free(handle, self.nbytes)

    def __del__(self) -> None:
        """A collected base frees its memory, a collected view gives back its hold on its base's (a
        `__del__`, not `weakref.finalize`: a Buffer is made per realized output, and finalize costs
        several times more). Nothing is done while the interpreter shuts down: memory goes with it."""
        if _interpreter_ending() or "_base" not in self.__dict__:  # (or __init__ raised early)
            return
        self.deallocate()
        if self._base is not None:
            self._base._view_died()

    def copyin(self, src: memoryview) -> Buffer:
        """Fill the buffer from host bytes (allocating it first if needed)."""
        data = src.cast("B") if src.format != "B" or src.ndim != 1 else src
        if data.nbytes != self.nbytes:
            raise ValueError(f"Buffer.copyin: {data.nbytes} bytes given for a buffer of {self.nbytes}")
        self.allocate(zeroed=False)  # every byte is written next
        self.allocator.copyin(self.handle, data)
        return self

    def copyout(self, dest: memoryview) -> memoryview:
        """Copy the buffer's bytes to host memory `dest` (nbytes long); the memory must exist."""
        data = dest.cast("B") if dest.format != "B" or dest.ndim != 1 else dest
        if data.nbytes != self.nbytes:
            raise ValueError(f"Buffer.copyout: {data.nbytes} bytes given for a buffer of {self.nbytes}")
        if self._base is not None and self._base.is_allocated():
            self.allocate()  # a view of allocated memory: taking its handle is free
        self.allocator.copyout(data, self.handle)
        return dest

    def as_numpy(self) -> np.ndarray:
        """A copy of the contents as a flat array of `dtype.storage_np` (uint16 for bfloat16)."""
        out = np.empty(self.size, dtype=self.dtype.storage_np)
        if self.nbytes:
            self.copyout(out.view(np.uint8).data)
        return out

    def view(self, size: int, dtype: DType, byte_offset: int) -> Buffer:
        """A zero-copy sub-buffer sharing this buffer's allocation."""
        return Buffer(self.device, size, dtype, base=self, offset=byte_offset)

    def __repr__(self) -> str:
        where = f" view@{self.offset}" if self._base is not None else ""
        return f"<Buffer {self.device} {self.size} {self.dtype.name}{where}>"
