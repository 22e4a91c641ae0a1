"""What every runtime provides: memory (`Allocator`), a cached `Compiler`, loaded `Program`s, and
`Compiled`, the device record that bundles them (data, not branches: `CLANG`, `CLANG:1`, ... are
`Compiled` values sharing one allocator, renderer, compiler and loader).

Contracts:
- `Allocator.alloc(nbytes, zeroed=True) -> handle` (zero-filled unless `zeroed` is False, when the
  caller overwrites every byte before reading any; 64-byte aligned for host memory: runtime/host.py),
  `free(handle, nbytes=None)`,
  `copyin(handle, src: memoryview)`, `copyout(dest: memoryview, handle)` (sizes must match exactly),
  `offset(handle, byte_offset, nbytes) -> handle`: a zero-copy view sharing the parent's memory.
- `Compiler.compile_cached(src) -> bytes`: the compiled library, from the on-disk cache under
  `config.get().cache_dir` keyed by sha256(compiler identity, flags, source) when present; writes are
  atomic (temp file in the same directory + `os.replace`) so parallel processes can share the cache.
  `config.get().disable_compile_cache` bypasses the cache entirely.
  `Compiler.is_cached(src)`: whether `compile_cached(src)` would only read the disk (never compiles).
- `Compiled.runtime(function_name, lib, launch_dims) -> Program`, `launch_dims` being what
  `Renderer.launch_dims(program)` gave for the kernel (None on CPUs: they ignore it; a GPU's
  (grid, block) sizes); `Program(*handles, vals=(), wait=False)` runs the
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

from fast import config
from fast.renderer.base import Renderer


class Allocator(ABC):
    """Device memory. Handles are opaque to callers; only the device's own programs read them."""

    @abstractmethod
    def alloc(self, nbytes: int, zeroed: bool = True) -> Any: ...

    @abstractmethod
    def free(self, handle: Any, nbytes: int | None = None) -> None: ...

    @abstractmethod
    def copyin(self, handle: Any, src: memoryview) -> None: ...

    @abstractmethod
    def copyout(self, dest: memoryview, handle: Any) -> None: ...

    @abstractmethod
    def offset(self, handle: Any, byte_offset: int, nbytes: int) -> Any: ...


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
    #: `compile_cached` may run on other threads while the caller goes on (engine/prebuild.py):
    #: it touches no state of this process that lowering uses and releases the GIL while it works
    #: (CLANG: a compiler process per source; LLVM: llvmlite's C calls, on a context of their own).
    parallel_builds = False

    @abstractmethod
    def identity(self) -> str: ...

    @abstractmethod
    def compile(self, src: str) -> bytes: ...

    def cache_key(self, src: str) -> str:
        return hashlib.sha256(f"{self.identity()}\0{src}".encode()).hexdigest()

    def _invoke(self, src: str) -> bytes:
        COMPILE_COUNTER.add(compiles=1)
        return self.compile(src)

    def _cache_path(self, src: str) -> str:
        return os.path.join(config.get().cache_dir, self.cache_namespace, self.cache_key(src) + ".bin")

    def is_cached(self, src: str) -> bool:
        """Whether the library for `src` is in the disk cache (False with the cache disabled)."""
        return not config.get().disable_compile_cache and os.path.exists(self._cache_path(src))

    def store(self, src: str, lib: bytes) -> None:
        """Put `lib` in the disk cache as the library of `src` (nothing with the cache disabled): a
        library built elsewhere that holds `src`'s kernel (runtime/clang_batch.py)."""
        if not config.get().disable_compile_cache:
            atomic_write(self._cache_path(src), lib)

    def compile_cached(self, src: str) -> bytes:
        """The library for `src`, compiled at most once per (identity, source) across processes."""
        if config.get().disable_compile_cache:
            return self._invoke(src)
        path = self._cache_path(src)
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


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Compiled:
    """A device: how to allocate, render, compile and load. Two names may share every part.
    `can_run()`: whether this process can allocate and run on it (False for CUDA without a driver,
    whose kernels can still be rendered and compiled ahead of time). `remote`: another MPI rank owns
    the device (docs/mpi.md): its allocator hands out placeholders and the engine runs none of its work."""

    name: str
    allocator: Allocator
    renderer: Renderer
    compiler: Compiler
    runtime: Callable[[str, bytes, Any], Program]
    can_run: Callable[[], bool] = _always
    remote: bool = False
