"""The CLANG runtime: C from `CRenderer`, compiled by the system C compiler, loaded with ctypes.

Compiler: `config.get().cc` if set, else `clang` if on PATH, else `cc`. Flags (`compile_flags()`):
`-std=c11 -O2 -shared -fPIC -ffp-contract=off -fno-math-errno` (plus `-fno-tree-vectorize` for
GCC), linked with `-lm`.
- `-ffp-contract=off`: `a*b+c` is never fused by the compiler (MULACC is specified unfused); the
  one fused multiply-add is the IR's explicit `FusedOps.FMA` (codegen/fma.py), rendered as `fmaf`
  or an FMA intrinsic.
- `-fno-math-errno`: libm calls need not set errno, so `sqrtf` becomes one instruction. It changes no
  value (IEEE results are the same); we never read errno.
- never `-ffast-math` or `-march=native` (values must be IEEE). The SIMD level detected at run time
  (`fast/runtime/cpu.py`: `-mavx2 -mfma`, or also `-mavx512f/vl/dq/bw`) is added; it is part of the
  compiler identity, so the cache never hands a library to a machine without those instructions.
  With AVX-512 enabled, GCC 12.2 stores a constant 256/512-bit *integer* whose high 64-bit words
  are zero, such as a vector {x, x, x, 0} of 64-bit lanes (or {a, b, a, b, a, b, 0, 0} of 32-bit
  ones) that a `memcpy` turned into an integer store, as a broadcast of x: its const_wide_int ->
  broadcast conversion forgets the implicit zero words (found by the conformance suite with a
  padded float64 constant). The C renderer never copies a vector with `memcpy` (it stores through
  `aligned(1), may_alias` vector pointers: renderer/c_vectors.py), so GCC 12 gets AVX-512 too;
  tests/fast/test_runtime_clang.py stores such constants through every vector type.
- GCC only: `-fno-tree-vectorize` (loop and basic-block vectorizers off). GCC 12's vectorizers
  miscompile two kinds of kernel we generate. (1) The basic-block (SLP) vectorizer summed four
  `(uint8_t)(data1[i] != 0)` terms of an unrolled bool->uint8 SUM as 252 instead of 4: it kept the
  vector compare's all-ones lanes (-1) instead of 0/1 (found by the conformance suite; reproduced
  standalone at -O2, correct at -O1 and with -fno-tree-slp-vectorize). (2) The loop vectorizer
  miscompiles in-order (strict IEEE) float reductions whose loads it groups in permuted order,
  e.g. a reduce over a flipped axis that
  lowering unrolled: `acc += a[6*i+5]; acc += a[6*i+4]; ... acc += a[6*i]` summed a flipped 4x6
  float32 array to 326 instead of 276 with GCC 12.2 at -O2 (correct at -O0/-O1 and with this flag),
  by merging the load permutation into the fold-left reduction and counting some elements twice.
  This is GCC bug 110381 ("preserve SLP permutation with in-order reductions"), not undefined
  behaviour in our C: the kernel is in bounds, has no signed overflow, and its two `restrict`
  pointers are distinct buffers. tests/fast/test_runtime_clang.py keeps both kernels (and sweeps
  flipped/strided float reductions against numpy) so a regression shows. Cost: GCC-built kernels
  are scalar; clang (preferred when installed) keeps its vectorizers.
- `config.get().ubsan` adds `-fsanitize=undefined,float-cast-overflow -fno-sanitize-recover=all`
  (GCC's libubsan is loaded with the library; float-cast-overflow is not in GCC's `undefined`
  group). For clang, whose UB runtime is not linked into shared objects, it adds
  `-fsanitize-trap=undefined` instead: any UB traps (the process dies) rather than printing.

Libraries are written once to a content-addressed file (`<cache_dir>/clang-lib/<sha256>.so`, or a
per-process temp dir when the compile cache is disabled) and loaded with one `ctypes.CDLL` per file,
kept alive for the life of the process. Large kernels run on several threads (fast/runtime/launch.py).
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from fast import config
from fast.renderer.base import RendererOptions
from fast.renderer.c import CRenderer
from fast.renderer.c_tiles import TILE_TARGET, tile_prelude
from fast.runtime import cpu
from fast.runtime.base import Compiled, Compiler, atomic_write
from fast.runtime.host import HostAllocator, HostMemory
from fast.runtime.host import addresses as host_addresses
from fast.runtime.workers import NativeCall

BASE_FLAGS: tuple[str, ...] = ("-std=c11", "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno")


def compiler_path() -> str:
    """The C compiler to run (see the module docstring); RuntimeError when there is none."""
    chosen = config.get().cc or shutil.which("clang") or shutil.which("cc")
    if not chosen:
        raise RuntimeError("CLANG: no C compiler found (install clang or cc, or set CC)")
    return chosen


@functools.lru_cache(maxsize=16)
def compiler_version(path: str) -> str:
    """`<path> --version` output (part of the cache key)."""
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, check=False, timeout=60)
    except OSError as error:
        raise RuntimeError(f"CLANG: cannot run C compiler {path!r}: {error}") from error
    return result.stdout.strip()


GCC_FLAGS: tuple[str, ...] = ("-fno-tree-vectorize",)  # GCC 12 vectorizer miscompiles (module docstring)


def is_gcc(path: str) -> bool:
    """Whether the compiler at `path` is GCC (clang also answers to `cc`/`gcc` on some systems, so the
    `--version` text decides: GCC's names the Free Software Foundation, clang's says clang)."""
    version = compiler_version(path).lower()
    return "clang" not in version and ("free software foundation" in version or "gcc" in version)


def compile_flags(path: str) -> tuple[str, ...]:
    """Every flag the compiler at `path` gets (module docstring), the detected SIMD level included."""
    clang = "clang" in compiler_version(path).lower()
    simd = cpu.c_flags()
    flags = (*BASE_FLAGS, *simd) if not is_gcc(path) else (*BASE_FLAGS, *simd, *GCC_FLAGS)
    if not config.get().ubsan:
        return flags
    if clang:
        return (*flags, "-fsanitize=undefined", "-fsanitize-trap=undefined")
    return (*flags, "-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all")


class ClangCompiler(Compiler):
    """C source -> shared-library bytes; the identity covers compiler path, version and flags."""

    cache_namespace = "clang"
    parallel_builds = True  # one compiler process per source

    def identity(self) -> str:
        path = compiler_path()
        return f"{path}\n{compiler_version(path)}\n{' '.join(compile_flags(path))}"

    def compile(self, src: str) -> bytes:
        path = compiler_path()
        with tempfile.TemporaryDirectory(prefix="fast-cc-") as directory:
            source_path, library_path = os.path.join(directory, "kernel.c"), os.path.join(directory, "kernel.so")
            with open(source_path, "w") as handle:
                handle.write(src)
            command = [path, *compile_flags(path), "-o", library_path, source_path, "-lm"]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"CLANG: {' '.join(command)} failed ({result.returncode}):\n{result.stderr}\n"
                                   f"--- source ---\n{src}")
            with open(library_path, "rb") as handle:
                return handle.read()


_LIBRARIES: dict[str, ctypes.CDLL] = {}


@functools.lru_cache(maxsize=1)
def _private_library_dir() -> str:
    return tempfile.mkdtemp(prefix="fast-lib-")


def load_library(lib: bytes) -> ctypes.CDLL:
    """The loaded library with these bytes (written to a content-addressed file on first use)."""
    settings = config.get()
    directory = _private_library_dir() if settings.disable_compile_cache \
        else os.path.join(settings.cache_dir, "clang-lib")
    path = os.path.join(directory, hashlib.sha256(lib).hexdigest() + ".so")
    if path not in _LIBRARIES:
        if not os.path.exists(path):
            atomic_write(path, lib)
        _LIBRARIES[path] = ctypes.CDLL(path)
    return _LIBRARIES[path]


class ClangProgram:
    """One kernel function: `program(*handles, vals=(), wait=False) -> seconds | None`."""

    def __init__(self, name: str, lib: bytes, launch_dims: Any = None) -> None:
        """`launch_dims` is None for CPU kernels (Compiled.runtime's contract); it is ignored."""
        self.name = name
        self.library = load_library(lib)
        try:
            self.function = self.library[name]  # a function object of its own (getattr shares one per library)
        except AttributeError as error:
            raise RuntimeError(f"CLANG: the library has no kernel named {name!r}") from error
        self.function.restype = None
        self.address = ctypes.cast(self.function, ctypes.c_void_p).value or 0
        self.arity: tuple[int, int] | None = None  # (buffers, ints) that `function.argtypes` declares

    def native_call(self, handles: Sequence[HostMemory], vals: Sequence[int]) -> NativeCall:
        """This kernel's call on `handles` with `vals` as a function address and int64 words (for a
        worker's native loop: runtime/workers.py)."""
        return NativeCall(self.address, (*host_addresses(self.name, "CLANG", handles), *map(int, vals)))

    def __call__(self, *handles: HostMemory, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        addresses = host_addresses(self.name, "CLANG", handles)
        values = [value if type(value) is int else int(value) for value in vals] if vals else ()
        if self.arity != (len(addresses), len(values)):  # ctypes then converts the ints in C
            self.function.argtypes = [ctypes.c_void_p] * len(addresses) + [ctypes.c_int64] * len(values)
            self.arity = (len(addresses), len(values))
        if not wait:
            self.function(*addresses, *values)
            return None
        start = time.perf_counter()
        self.function(*addresses, *values)
        return time.perf_counter() - start


#: A kernel with tiles as the C renderer writes them (renderer/c_tiles.py), for `compiles_tiles`.
_TILE_PROBE = "#include <stdint.h>\n" + tile_prelude() + (
    TILE_TARGET + "void probe(float* restrict out, uint16_t* restrict a) {\n"
    "  _tile_loadconfig(fast_tile_config);\n  _tile_zero(0);\n  _tile_loadd(1, a, 64);\n"
    "  _tile_loadd(2, a, 64);\n  _tile_dpbf16ps(0, 1, 2);\n  _tile_stored(0, out, 64);\n  _tile_release();\n}\n")


@functools.lru_cache(maxsize=1)
def compiles_tiles() -> bool:
    """Whether the C compiler builds a kernel with AMX tiles (GCC 11 and clang 12 on): asked once per
    process, only on hosts that have the tiles (`cpu.matrix_tiles`)."""
    try:
        path = compiler_path()
        with tempfile.TemporaryDirectory(prefix="fast-cc-") as directory:
            source = os.path.join(directory, "probe.c")
            with open(source, "w") as handle:
                handle.write(_TILE_PROBE)
            command = [path, *compile_flags(path), "-o", os.path.join(directory, "probe.so"), source]
            return subprocess.run(command, capture_output=True, check=False).returncode == 0
    except (OSError, RuntimeError):
        return False


def renderer_options() -> RendererOptions:
    """The host's CPU renderer options, with matrix tiles only where the C compiler builds them, and
    bool lanes ANDed by halves (`RendererOptions.lanes_by_halves`: what GCC compiles best)."""
    options = cpu.renderer_options()
    return dataclasses.replace(options, matrix_tiles=options.matrix_tiles and compiles_tiles(), lanes_by_halves=True)


_ALLOCATOR = HostAllocator()
_RENDERER = CRenderer(renderer_options())
_COMPILER = ClangCompiler()


def create(device_name: str) -> Compiled:
    """The `Compiled` for `CLANG` or `CLANG:N`; every such device shares the same parts."""
    kind, _, number = device_name.partition(":")
    if kind != "CLANG" or (number and not number.isdigit()):
        raise ValueError(f"clang.create: {device_name!r} is not a CLANG device name")
    return Compiled(device_name, _ALLOCATOR, _RENDERER, _COMPILER, ClangProgram)
