"""What every runtime provides: memory (`Allocator`), a cached `Compiler`, loaded `Program`s, and
`Compiled`, the device record that bundles them (data, not branches: `CLANG`, `CLANG:1`, ... are
`Compiled` values sharing one allocator, renderer, compiler and loader).

Contracts:
- `Allocator.alloc(nbytes) -> handle` (zero-filled, 64-byte aligned for host memory),
  `free(handle, nbytes=None)`,
  `copyin(handle, src: memoryview)`, `copyout(dest: memoryview, handle)` (sizes must match exactly),
  `offset(handle, byte_offset, nbytes) -> handle`: a zero-copy view sharing the parent's memory.
- `Compiler.compile_cached(src) -> bytes`: the compiled library, from the on-disk cache under
  `config.get().cache_dir` keyed by sha256(compiler identity, flags, source) when present; writes are
  atomic (temp file in the same directory + `os.replace`) so parallel processes can share the cache.
  `config.get().disable_compile_cache` bypasses the cache entirely.
- `Compiled.runtime(function_name, lib) -> Program`; `Program(*handles, vals=(), wait=False)` runs the
  kernel with the buffers in kernel-parameter order and the symbolic variable values, and returns
  the elapsed seconds when `wait` is true (else None).
- `COMPILE_COUNTER` counts actual compiler invocations and cache lookups/hits for this process.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fast import config
from fast.renderer.base import Renderer


class Allocator(ABC):
    """Device memory. Handles are opaque to callers; only the device's own programs read them."""

    @abstractmethod
    def alloc(self, nbytes: int) -> Any: ...

    @abstractmethod
    def free(self, handle: Any, nbytes: int | None = None) -> None: ...

    @abstractmethod
    def copyin(self, handle: Any, src: memoryview) -> None: ...

    @abstractmethod
    def copyout(self, dest: memoryview, handle: Any) -> None: ...

    @abstractmethod
    def offset(self, handle: Any, byte_offset: int, nbytes: int) -> Any: ...


@dataclass(eq=False)
class HostMemory:
    """`nbytes` of host memory at byte `start` of `owner`, the whole raw allocation (shared by every
    view made with `offset`, so a view keeps the memory alive). `owner` is None once freed."""

    owner: np.ndarray | None
    start: int
    nbytes: int

    def window(self) -> np.ndarray:
        if self.owner is None:
            raise ValueError("HostMemory: buffer used after free")
        return self.owner[self.start:self.start + self.nbytes]

    @property
    def address(self) -> int:
        if self.owner is None:
            raise ValueError("HostMemory: buffer used after free")
        return int(self.owner.ctypes.data) + self.start


class HostAllocator(Allocator):
    """64-byte aligned, zero-filled host memory backed by numpy byte arrays."""

    alignment = 64

    def alloc(self, nbytes: int) -> HostMemory:
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"alloc: nbytes must be a non-negative int, got {nbytes!r}")
        raw = np.zeros(nbytes + self.alignment, dtype=np.uint8)
        return HostMemory(raw, (-int(raw.ctypes.data)) % self.alignment, nbytes)

    def free(self, handle: HostMemory, nbytes: int | None = None) -> None:
        """Release the handle (its views keep the memory alive; `nbytes` is accepted and ignored)."""
        handle.owner = None

    def as_memoryview(self, handle: HostMemory) -> memoryview:
        """Zero-copy byte view of the memory (host devices only)."""
        return handle.window().data

    def copyin(self, handle: HostMemory, src: memoryview) -> None:
        source = memoryview(src).cast("B")
        if source.nbytes != handle.nbytes:
            raise ValueError(f"copyin: source has {source.nbytes} bytes, buffer has {handle.nbytes}")
        self.as_memoryview(handle)[:] = source

    def copyout(self, dest: memoryview, handle: HostMemory) -> None:
        target = memoryview(dest).cast("B")
        if target.nbytes != handle.nbytes:
            raise ValueError(f"copyout: destination has {target.nbytes} bytes, buffer has {handle.nbytes}")
        target[:] = self.as_memoryview(handle)

    def offset(self, handle: HostMemory, byte_offset: int, nbytes: int) -> HostMemory:
        if handle.owner is None:
            raise ValueError("offset: buffer used after free")
        if byte_offset < 0 or nbytes < 0 or byte_offset + nbytes > handle.nbytes:
            raise ValueError(f"offset: bytes [{byte_offset}, {byte_offset + nbytes}) are outside a "
                             f"{handle.nbytes}-byte buffer")
        return HostMemory(handle.owner, handle.start + byte_offset, nbytes)


class Program(Protocol):
    def __call__(self, *handles: Any, vals: Sequence[int] = (), wait: bool = False) -> float | None: ...


@dataclass
class CompileCounter:
    """Process-wide counts: `compiles` (the compiler actually ran), `cache_lookups`, `cache_hits`."""

    compiles: int = 0
    cache_lookups: int = 0
    cache_hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, compiles: int = 0, lookups: int = 0, hits: int = 0) -> None:
        with self.lock:
            self.compiles += compiles
            self.cache_lookups += lookups
            self.cache_hits += hits

    def snapshot(self) -> tuple[int, int, int]:
        with self.lock:
            return self.compiles, self.cache_lookups, self.cache_hits


COMPILE_COUNTER = CompileCounter()


def atomic_write(path: str, data: bytes) -> None:
    """Write `data` to `path` so readers see either nothing or the whole file."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    descriptor, temp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temp_path, path)
    except BaseException:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        raise


class Compiler(ABC):
    """Source -> library bytes. Subclasses give `identity()` (everything besides the source that
    decides the output: compiler path and version, flags) and `compile(src)`."""

    cache_namespace = "compiler"

    @abstractmethod
    def identity(self) -> str: ...

    @abstractmethod
    def compile(self, src: str) -> bytes: ...

    def cache_key(self, src: str) -> str:
        return hashlib.sha256(f"{self.identity()}\0{src}".encode()).hexdigest()

    def _invoke(self, src: str) -> bytes:
        COMPILE_COUNTER.add(compiles=1)
        return self.compile(src)

    def compile_cached(self, src: str) -> bytes:
        """The library for `src`, compiled at most once per (identity, source) across processes."""
        settings = config.get()
        if settings.disable_compile_cache:
            return self._invoke(src)
        path = os.path.join(settings.cache_dir, self.cache_namespace, self.cache_key(src) + ".bin")
        COMPILE_COUNTER.add(lookups=1)
        try:
            with open(path, "rb") as handle:
                lib = handle.read()
            COMPILE_COUNTER.add(hits=1)
            return lib
        except FileNotFoundError:
            pass
        lib = self._invoke(src)
        atomic_write(path, lib)
        return lib


@dataclass(frozen=True)
class Compiled:
    """A device: how to allocate, render, compile and load. Two names may share every part."""

    name: str
    allocator: Allocator
    renderer: Renderer
    compiler: Compiler
    runtime: Callable[[str, bytes], Program]
