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
- Durability: `copyin` returns only once the bytes it wrote are on stable storage (msync with
  MS_SYNC of the pages written, which the kernel turns into a data sync of that file range), and a
  file `alloc` creates or extends is fsynced (a created file's directory too) before it is mapped.
  So once `realize` of anything that writes a DISK buffer (an assign, a copy, `from_numpy`) returns,
  its bytes survive a crash or a power loss.
- Read-only files: a file that exists without write permission (no write bit in its mode, honoured
  even for root, or no write access for this process) is mapped read-only. It can be read and
  viewed; `copyin` into it raises PermissionError before writing a byte, and `alloc` past its end
  raises (the file cannot be extended).
- `DISK_READ_COUNTER` counts the bytes `copyout` copied out of DISK mappings, process-wide: what a
  copy from DISK to another device actually read (tests and the bench check that a copy of one
  tensor of a large file reads that tensor's bytes only).
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
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from fast.renderer.base import Renderer, RendererOptions
from fast.runtime.base import Allocator, Compiled, Compiler, Program

if TYPE_CHECKING:
    from fast.codegen.ir import LinearProgram

PREFIX = "DISK:"


def _cannot_compute(device: str, what: str) -> NoReturn:
    raise RuntimeError(f"{device}: cannot {what} a kernel: DISK supports loads, copies and views only, "
                       "no compute")


class ReadCounter:
    """Process-wide count of the bytes copied out of DISK mappings (`copyout`), thread-safe.

    Invariant: `total` only grows, by exactly the size of each completed `copyout`.
    """

    def __init__(self) -> None:
        self.total = 0
        self._lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.total += nbytes

    def snapshot(self) -> int:
        """The bytes read so far (subtract two snapshots to measure one operation)."""
        with self._lock:
            return self.total


DISK_READ_COUNTER = ReadCounter()


def read_only(path: str) -> bool:
    """True when `path` exists and may not be written: its mode has no write bit (honoured even for
    root, who could write it anyway) or this process has no write access."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not mode & 0o222 or not os.access(path, os.W_OK)


def fsync_directory(path: str) -> None:
    """fsync the directory holding `path`, so a new entry in it is durable (best effort where a
    platform cannot open directories)."""
    try:
        descriptor = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _open_writable(path: str, nbytes: int) -> int:
    """A read/write descriptor of `path`, created and/or extended with zeros to `nbytes` when needed;
    what changed the file's size or existence is fsynced (a new file's directory too)."""
    try:
        descriptor, created = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        descriptor, created = os.open(path, os.O_RDWR), False
    try:
        extended = os.fstat(descriptor).st_size < nbytes
        if extended:
            os.ftruncate(descriptor, nbytes)
        if created or extended:
            os.fsync(descriptor)
        if created:
            fsync_directory(path)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


class DiskMapping:
    """One shared mapping of the first `nbytes` bytes of `path` (read/write, or read-only when the file
    may not be written: `writable`), counting its users.

    Invariant: `mapped` is the live `mmap.mmap` (None for a zero-byte mapping or once unmapped)
    while `users > 0`; it is closed exactly once, when `users` drops to zero.
    """

    def __init__(self, path: str, nbytes: int) -> None:
        self.path, self.nbytes, self.users = path, nbytes, 0
        self.closed = False
        self.mapped: mmap.mmap | None = None
        self.writable = not read_only(path)
        if self.writable:
            descriptor = _open_writable(path, nbytes)
        else:
            descriptor = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(descriptor).st_size
            if size < nbytes:
                raise PermissionError(f"DISK:{path} is read-only and holds {size} bytes: cannot extend it to {nbytes}")
            if nbytes:
                access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
                self.mapped = mmap.mmap(descriptor, nbytes, access=access)
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
        """Write `src` into the handle's bytes and msync them: on stable storage when this returns.
        PermissionError (nothing written) when the file is read-only."""
        handle.check_live("copyin")
        with memoryview(src) as given, given.cast("B") as source:
            if source.nbytes != handle.nbytes:
                raise ValueError(f"copyin: source has {source.nbytes} bytes, DISK:{self.path} buffer has "
                                 f"{handle.nbytes}")
            if not handle.mapping.writable:
                raise PermissionError(f"copyin: DISK:{self.path} is read-only (no write permission); "
                                      f"none of the {handle.nbytes} bytes was written")
            mapped = handle.mapping.mapped
            if handle.nbytes and mapped is not None:
                mapped[handle.start:handle.start + handle.nbytes] = source
                page = handle.start - handle.start % mmap.PAGESIZE  # msync starts on a page boundary
                mapped.flush(page, handle.start + handle.nbytes - page)

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
                DISK_READ_COUNTER.add(handle.nbytes)


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

    def runtime(function_name: str, lib: bytes, launch_dims: Any = None) -> Program:
        _cannot_compute(device_name, f"load {function_name!r} as")

    return Compiled(device_name, DiskAllocator(device_name[len(PREFIX):]), DiskRenderer(device_name),
                    DiskCompiler(device_name), runtime)
