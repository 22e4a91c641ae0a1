"""The DISK runtime: buffers that are memory-mapped files (SPEC §1, §4, §7). Load, store and views only.

`DISK:<path>` names the file at `<path>`. Every allocation on a DISK device maps that file from byte
0 (two buffers on one DISK device alias the same bytes, as two views of the same file do), so
writing a buffer writes the file and an `EMPTY` buffer realized on DISK reads what the file holds.

Allocator contract (see fast/runtime/base.py), with the DISK specifics:
- `alloc(nbytes)` creates the file when missing and extends it with zero bytes to at least
  `nbytes` (it never truncates: existing contents are the point of DISK), then maps its first
  `nbytes` bytes read/write, shared with the file. Unlike host memory, the bytes are *not* zeroed.
- `offset(handle, byte_offset, nbytes)` is a zero-copy sub-range of the same mapping.
- `copyin`/`copyout` copy exactly `handle.nbytes` bytes through memoryviews (sizes must match).
- `free(handle)` releases one user of the mapping; each handle (from `alloc` or `offset`) is one
  user, released by `free` or when the handle is garbage collected. The file is unmapped when the
  last user is gone (views keep the mapping alive, as with host memory). Using a freed handle is
  a ValueError, never a read of unmapped memory.

DISK cannot compute: its renderer, compiler and program loader raise RuntimeError naming the
device as soon as anything tries to lower, render, compile or load a kernel for it (the graph layer
normally refuses compute on DISK when the graph is built; this is the backstop).
"""
from __future__ import annotations

import mmap
import os
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from fast.renderer.base import Renderer, RendererOptions
from fast.runtime.base import Allocator, Compiled, Compiler, Program

if TYPE_CHECKING:
    from fast.codegen.ir import LinearProgram

PREFIX = "DISK:"


def _cannot_compute(device: str, what: str) -> NoReturn:
    raise RuntimeError(f"{device}: cannot {what} a kernel: DISK supports loads, copies and views only, "
                       "no compute")


class DiskMapping:
    """One read/write shared mapping of the first `nbytes` bytes of `path`, counting its users.

    Invariant: `mapped` is the live `mmap.mmap` (None for a zero-byte mapping or once unmapped)
    while `users > 0`; it is closed exactly once, when `users` drops to zero.
    """

    def __init__(self, path: str, nbytes: int) -> None:
        self.path, self.nbytes, self.users = path, nbytes, 0
        self.closed = False
        self.mapped: mmap.mmap | None = None
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(descriptor).st_size < nbytes:
                os.ftruncate(descriptor, nbytes)
            if nbytes:
                self.mapped = mmap.mmap(descriptor, nbytes, access=mmap.ACCESS_WRITE)
        finally:
            os.close(descriptor)

    def acquire(self) -> None:
        if self.closed:
            raise ValueError(f"DISK:{self.path}: mapping used after it was unmapped")
        self.users += 1

    def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            self.close()

    def close(self) -> None:
        """Unmap now (an outside memoryview still exporting the map keeps it until it is released)."""
        self.closed = True
        mapped, self.mapped = self.mapped, None
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:  # exported elsewhere: CPython unmaps when the last export goes
                pass


@dataclass(eq=False)
class DiskMemory:
    """`nbytes` bytes at byte `start` of `mapping`; one user of the mapping until freed or collected."""

    mapping: DiskMapping
    start: int
    nbytes: int
    release: weakref.finalize | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.mapping.acquire()
        self.release = weakref.finalize(self, self.mapping.release)
        self.release.atexit = False

    @property
    def freed(self) -> bool:
        return self.release is None or not self.release.alive

    def check_live(self, opname: str) -> None:
        if self.freed:
            raise ValueError(f"{opname}: DISK:{self.mapping.path} buffer used after free")


class DiskAllocator(Allocator):
    """Memory-mapped views of the file `path` (see the module docstring for the contract)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def alloc(self, nbytes: int, zeroed: bool = True) -> DiskMemory:
        """Map `nbytes` of the file (its bytes as they are on disk: `zeroed` does not apply)."""
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise ValueError(f"alloc: nbytes must be a non-negative int, got {nbytes!r}")
        try:
            mapping = DiskMapping(self.path, nbytes)
        except (OSError, ValueError) as error:
            raise RuntimeError(f"alloc: cannot map {nbytes} bytes of DISK:{self.path}: {error}") from error
        return DiskMemory(mapping, 0, nbytes)

    def free(self, handle: DiskMemory, nbytes: int | None = None) -> None:
        """Release this handle's use of the mapping (idempotent; `nbytes` is accepted and ignored)."""
        if handle.release is not None:
            handle.release()

    def offset(self, handle: DiskMemory, byte_offset: int, nbytes: int) -> DiskMemory:
        handle.check_live("offset")
        if byte_offset < 0 or nbytes < 0 or byte_offset + nbytes > handle.nbytes:
            raise ValueError(f"offset: bytes [{byte_offset}, {byte_offset + nbytes}) are outside a "
                             f"{handle.nbytes}-byte DISK:{self.path} buffer")
        return DiskMemory(handle.mapping, handle.start + byte_offset, nbytes)

    def copyin(self, handle: DiskMemory, src: memoryview) -> None:
        handle.check_live("copyin")
        with memoryview(src) as given, given.cast("B") as source:
            if source.nbytes != handle.nbytes:
                raise ValueError(f"copyin: source has {source.nbytes} bytes, DISK:{self.path} buffer has "
                                 f"{handle.nbytes}")
            mapped = handle.mapping.mapped
            if handle.nbytes and mapped is not None:
                mapped[handle.start:handle.start + handle.nbytes] = source

    def copyout(self, dest: memoryview, handle: DiskMemory) -> None:
        handle.check_live("copyout")
        with memoryview(dest) as given, given.cast("B") as target:
            if target.nbytes != handle.nbytes:
                raise ValueError(f"copyout: destination has {target.nbytes} bytes, DISK:{self.path} buffer "
                                 f"has {handle.nbytes}")
            mapped = handle.mapping.mapped
            if handle.nbytes and mapped is not None:
                with memoryview(mapped) as whole, whole[handle.start:handle.start + handle.nbytes] as part:
                    target[:] = part


class DiskRenderer(Renderer):
    """Refuses every kernel (reading `options` is the first step of lowering one)."""

    def __init__(self, device: str) -> None:
        self.device = device

    @property
    def options(self) -> RendererOptions:  # type: ignore[override]
        _cannot_compute(self.device, "lower")

    def render(self, program: LinearProgram) -> str:
        _cannot_compute(self.device, "render")


class DiskCompiler(Compiler):
    """Refuses every source, before any cache lookup."""

    cache_namespace = "disk"

    def __init__(self, device: str) -> None:
        self.device = device

    def identity(self) -> str:
        _cannot_compute(self.device, "compile")

    def compile(self, src: str) -> bytes:
        _cannot_compute(self.device, "compile")

    def compile_cached(self, src: str) -> bytes:
        _cannot_compute(self.device, "compile")


def create(device_name: str) -> Compiled:
    """The `Compiled` for `DISK:<path>`: a file-mapping allocator and parts that refuse compute."""
    if not isinstance(device_name, str) or not device_name.startswith(PREFIX) or len(device_name) == len(PREFIX):
        raise ValueError(f"disk.create: {device_name!r} is not a DISK device name (expected DISK:<path>)")

    def runtime(function_name: str, lib: bytes) -> Program:
        _cannot_compute(device_name, f"load {function_name!r} as")

    return Compiled(device_name, DiskAllocator(device_name[len(PREFIX):]), DiskRenderer(device_name),
                    DiskCompiler(device_name), runtime)
