"""Running rendered CUDA kernels on the CPU, for value tests on machines without a GPU (test code only).

The CUDA C of `fast.renderer.cuda.CUDARenderer` is compiled as C++ by `g++` with `SHIM` in front:
the CUDA keywords become nothing (`__global__`, `__device__`, `__launch_bounds__(n)`, ...), the
CUDA builtins the renderer uses get host definitions (`threadIdx`, `blockIdx`, `blockDim`, `gridDim`
as thread-local structs, `__int_as_float`, the math functions as GCC builtins), and an entry point
generated from the kernel's signature runs the kernel once per (block, thread) of the launch, one
after another: `fast_emu_launch(buffers, values, grid, block, reverse)`. A kernel that uses
`__syncthreads()` (a block reduction) gets `FIBERS` linked in: its blocks run one after another,
each thread of a block as a fiber that runs until its next barrier (`__shared__` is `static
thread_local`: one array per OS thread, used by one block at a time; the fiber scheduler's state is
thread-local too, so lanes of a multi-device schedule may launch emulated kernels concurrently,
even the same kernel library loaded for two devices). Flags as the C devices use
(`-ffp-contract=off`: no FMA contraction, like NVRTC's `--fmad=false`), at `-O1`.

What it proves: the CUDA source is valid C++ with the C renderer's semantics, and its grid-stride
loops cover every output exactly once whatever the launch: `launching(grid, block, reverse)` runs
kernels with another launch than `launch_dims` (a tiny grid, odd blocks, threads in reverse order),
and results must not change. Threads run one after another, so a kernel whose threads wrote the
same element (or read one another's outputs) would show a result that depends on the launch or the
order. What it cannot prove: anything about the GPU's memory model or NVRTC's code generation.

`emulated_cuda(cache_dir)` puts such a device into `fast.device.Device.opened` (the registry's door
for fakes) and removes it afterwards, dropping every kernel cached for CUDA names on the way in and
out (engine/realize.py's PROGRAMS and AST_KERNELS, engine/replay.py's templates), so emulated
kernels never reach other tests. Everything else is the engine's own path: realize -> lower ->
`CUDARenderer.render` -> compile -> `launch_dims` -> run.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import cuda_check  # tests/cuda_check.py (tests/conftest.py puts tests/ on sys.path)

from fast import config
from fast.device import Device
from fast.renderer.cuda import CUDARenderer
from fast.runtime.base import Compiled, Compiler
from fast.runtime.clang import load_library
from fast.runtime.host import HostAllocator, HostMemory
from fast.runtime.nvrtc import compile_cuda, nvrtc_available, nvrtc_version

realize = importlib.import_module("fast.engine.realize")  # the module (fast.engine exports a function of that name)
replay = importlib.import_module("fast.engine.replay")
FLAGS = ("-x", "c++", "-std=c++17", "-O1", "-ffp-contract=off", "-fno-strict-aliasing", "-fno-math-errno",
         "-shared", "-fPIC")

SHIM = r"""#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
struct fast_emu_dim3 { unsigned x, y, z; };
static thread_local fast_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define memcpy __builtin_memcpy
#define sqrtf __builtin_sqrtf
#define sqrt __builtin_sqrt
#define exp2f __builtin_exp2f
#define exp2 __builtin_exp2
#define log2f __builtin_log2f
#define log2 __builtin_log2
#define sinf __builtin_sinf
#define sin __builtin_sin
static inline float __int_as_float(int x) { float f; __builtin_memcpy(&f, &x, 4); return f; }
static inline double __longlong_as_double(long long x) { double f; __builtin_memcpy(&f, &x, 8); return f; }
extern "C" void fast_emu_barrier(void);
static inline void __syncthreads() { fast_emu_barrier(); }
"""

#: A second translation unit, linked only into kernels that use `__syncthreads()`: every block runs
#: as one fiber (ucontext) per CUDA thread on the calling OS thread. A round resumes each unfinished
#: fiber once (its thread index restored first), and each runs to its next barrier or to its end; a
#: round that ends with some fibers at a barrier and others finished is a barrier not every thread
#: reached (an error, as on a GPU). Deterministic, and the threads' order can be reversed.
FIBERS = r"""#include <memory>
#include <ucontext.h>
#include <vector>
extern "C" void fast_emu_thread(void**, const long long*, unsigned, unsigned, unsigned, unsigned);
extern "C" void fast_emu_set_thread(unsigned);
namespace {
struct Fiber { ucontext_t context; bool done = false; };
const unsigned long STACK = 1ul << 16;  /* bytes per fiber, allocated once per launch and never cleared */
thread_local ucontext_t scheduler;
thread_local std::vector<Fiber>* fibers;
thread_local Fiber* current;
thread_local void** launch_buffers;
thread_local const long long* launch_values;
thread_local unsigned launch_grid, launch_block, launch_b;
void run(int t) {
  fast_emu_thread(launch_buffers, launch_values, launch_grid, launch_block, launch_b, (unsigned)t);
  (*fibers)[t].done = true;
}
}
extern "C" void fast_emu_barrier(void) { swapcontext(&current->context, &scheduler); }
extern "C" int fast_emu_cooperative_launch(void** buffers, const long long* values, unsigned grid, unsigned block,
                                           int reverse) {
  launch_buffers = buffers; launch_values = values; launch_grid = grid; launch_block = block;
  std::vector<std::unique_ptr<char[]>> stacks;
  for (unsigned t = 0; t < block; t++) stacks.emplace_back(new char[STACK]);
  for (unsigned i = 0; i < grid; i++) {
    launch_b = reverse ? grid - 1 - i : i;
    std::vector<Fiber> block_fibers(block);
    fibers = &block_fibers;
    for (unsigned t = 0; t < block; t++) {
      Fiber& fiber = block_fibers[t];
      getcontext(&fiber.context);
      fiber.context.uc_stack.ss_sp = stacks[t].get();
      fiber.context.uc_stack.ss_size = STACK;
      fiber.context.uc_link = &scheduler;
      makecontext(&fiber.context, (void (*)())run, 1, (int)t);
    }
    for (;;) {
      unsigned finished = 0;
      for (unsigned j = 0; j < block; j++) {
        unsigned t = reverse ? block - 1 - j : j;
        if (block_fibers[t].done) { finished++; continue; }
        current = &block_fibers[t];
        fast_emu_set_thread(t);
        swapcontext(&scheduler, &current->context);
        finished += block_fibers[t].done;
      }
      if (finished == block) break;
      if (finished != 0) return 1;
    }
  }
  return 0;
}
"""

_HEAD = re.compile(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(([^)]*)\) \{')


def entry_points(source: str) -> str:
    """C++ after the kernel: `fast_emu_bounds` (its `__launch_bounds__`), `fast_emu_thread` (one
    thread of a launch) and `fast_emu_launch` (every thread, forwards or in reverse order)."""
    heads = _HEAD.findall(source)
    if len(heads) != 1:
        raise ValueError(f"cuda emulation: expected one kernel head, found {len(heads)}")
    bounds, name, params = heads[0]
    args, buffers, values = [], 0, 0
    for param in [] if params.strip() == "void" else params.split(", "):
        if "*" in param:
            args.append(f"({param[:param.index('*') + 1]})buffers[{buffers}]")
            buffers += 1
        else:
            args.append(f"(int64_t)values[{values}]")
            values += 1
    return f"""
extern "C" const unsigned fast_emu_bounds = {bounds};
extern "C" void fast_emu_set_thread(unsigned t) {{ threadIdx = {{t, 0, 0}}; }}
extern "C" void fast_emu_thread(void** buffers, const long long* values, unsigned grid, unsigned block,
                                unsigned b, unsigned t) {{
  gridDim = {{grid, 1, 1}}; blockDim = {{block, 1, 1}}; blockIdx = {{b, 0, 0}}; threadIdx = {{t, 0, 0}};
  {name}({', '.join(args)});
}}
extern "C" void fast_emu_launch(void** buffers, const long long* values, unsigned grid, unsigned block, int reverse) {{
  for (unsigned i = 0; i < grid; i++)
    for (unsigned j = 0; j < block; j++)
      fast_emu_thread(buffers, values, grid, block, reverse ? grid - 1 - i : i, reverse ? block - 1 - j : j);
}}
"""


def nvrtc() -> tuple[Callable[[str, str], Any], tuple[int, int]] | None:
    """(fast.runtime.nvrtc.compile_cuda, NVRTC's version), or None when NVRTC is not installed."""
    return (compile_cuda, nvrtc_version()) if nvrtc_available() else None


def cooperative(source: str) -> bool:
    """Whether the kernel's threads wait for each other (`__syncthreads`): it then runs as fibers."""
    return "__syncthreads()" in source


class EmulationCompiler(Compiler):
    """CUDA source -> a host shared library (module docstring), cached like every compiler; each
    source is queued for NVRTC as well (tests/cuda_check.py: compiled for sm_80 and sm_90 in batches,
    an error fails a test)."""

    cache_namespace = "cuda-emulation"

    def identity(self) -> str:
        path = shutil.which("g++")
        if path is None:
            raise RuntimeError("cuda emulation: no g++ on PATH")
        version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
        shim = hashlib.sha256((SHIM + FIBERS).encode()).hexdigest()
        return f"{path}\n{version}\n{' '.join(FLAGS)}\n{shim}"

    def compile(self, src: str) -> bytes:
        cuda_check.queue_source(src)  # NVRTC compiles it for sm_80 and sm_90 too (tests/cuda_check.py)
        unit = SHIM + src + entry_points(src)
        with tempfile.TemporaryDirectory(prefix="fast-cuda-emu-") as directory:
            source_path, library_path = os.path.join(directory, "kernel.cpp"), os.path.join(directory, "kernel.so")
            sources = [source_path]
            with open(source_path, "w") as handle:
                handle.write(unit)
            if cooperative(src):
                sources.append(os.path.join(directory, "fibers.cpp"))
                with open(sources[-1], "w") as handle:
                    handle.write(FIBERS)
            command = ["g++", *FLAGS, "-o", library_path, *sources, "-lm"]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"cuda emulation: g++ failed:\n{result.stderr}\n--- source ---\n{unit}")
            with open(library_path, "rb") as handle:
                return handle.read()


@dataclass(frozen=True)
class Launch:
    """One emulated launch: the kernel, the grid and block it ran with, and `launch_dims`' answer."""

    name: str
    grid: int
    block: int
    dims: Any


_OVERRIDE: dict[str, Any] = {}
LAUNCHES: list[Launch] = []


@contextmanager
def launching(grid: int | None = None, block: int | None = None, reverse: bool = False) -> Iterator[None]:
    """Kernels launched inside run with this grid / block size (None: `launch_dims`' own; a block
    is cut to the kernel's `__launch_bounds__`) and, with `reverse`, their blocks and threads in
    reverse order."""
    saved = dict(_OVERRIDE)
    _OVERRIDE.update(grid=grid, block=block, reverse=reverse)
    try:
        yield
    finally:
        _OVERRIDE.clear()
        _OVERRIDE.update(saved)


class EmulatedProgram:
    """An emulated kernel: `program(*handles, vals=(), wait=False)` as every runtime's Program.
    Refuses what a GPU refuses: a block larger than the kernel's `__launch_bounds__` or 1024
    threads, an empty grid, launch dims that are not ((grid, 1, 1), (block, 1, 1)).
    `launch_dims` None (callers that bypass the engine): 3 blocks of `__launch_bounds__` threads,
    a launch the kernel is not made for (it must not matter)."""

    def __init__(self, name: str, lib: bytes, launch_dims: Any = None) -> None:
        self.library = load_library(lib)
        self.bounds = ctypes.c_uint.in_dll(self.library, "fast_emu_bounds").value
        launch_dims = ((3, 1, 1), (self.bounds, 1, 1)) if launch_dims is None else launch_dims
        (grid, *rest_grid), (block, *rest_block) = launch_dims
        if rest_grid != [1, 1] or rest_block != [1, 1] or grid < 1 or block < 1:
            raise RuntimeError(f"cuda emulation: {name}: launch dims {launch_dims} are not 1-D")
        self.name, self.dims = name, launch_dims
        self.function = self.library.fast_emu_launch
        self.function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_int]
        self.function.restype = None
        self.cooperative = hasattr(self.library, "fast_emu_cooperative_launch")
        if self.cooperative:
            self.fibers = self.library.fast_emu_cooperative_launch
            self.fibers.argtypes = self.function.argtypes
            self.fibers.restype = ctypes.c_int

    def __call__(self, *handles: HostMemory, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        grid = _OVERRIDE.get("grid") or self.dims[0][0]
        block = min(_OVERRIDE["block"], self.bounds) if _OVERRIDE.get("block") else self.dims[1][0]
        if not 1 <= block <= min(self.bounds, 1024) or not 1 <= grid < 2**31:
            raise RuntimeError(f"cuda emulation: {self.name}: cannot launch {grid} x {block} threads "
                               f"(__launch_bounds__({self.bounds}))")
        buffers = (ctypes.c_void_p * max(1, len(handles)))(*[handle.address for handle in handles])
        values = (ctypes.c_longlong * max(1, len(vals)))(*[int(value) for value in vals])
        LAUNCHES.append(Launch(self.name, grid, block, self.dims))
        start = time.perf_counter()
        reverse = int(bool(_OVERRIDE.get("reverse")))
        if not self.cooperative:
            self.function(buffers, values, grid, block, reverse)
        elif self.fibers(buffers, values, grid, block, reverse) != 0:
            raise RuntimeError(f"cuda emulation: {self.name}: some threads of a block never reached a barrier")
        return time.perf_counter() - start if wait else None


def emulated_device(name: str = "CUDA") -> Compiled:
    """A CUDA device whose kernels run on the CPU: host memory, the real renderer, g++."""
    return Compiled(name, HostAllocator(), CUDARenderer(), EmulationCompiler(), EmulatedProgram)


def forget_kernels(names: Sequence[str]) -> None:
    """Drop every kernel the engine cached for the devices `names` (and every replay template)."""
    with realize._CACHE_LOCK:
        for key in [key for key in realize.PROGRAMS if key[1] in names]:
            del realize.PROGRAMS[key]
        for key in [key for key in realize.AST_KERNELS if key[1] in names]:
            del realize.AST_KERNELS[key]
    with replay.TEMPLATES.lock:
        replay.TEMPLATES.clear()


@contextmanager
def emulated_cuda(cache_dir: str | None = None, names: Sequence[str] = ("CUDA",)) -> Iterator[dict[str, Compiled]]:
    """The devices `names` emulated on the CPU inside the block (compiling into `cache_dir`, or the
    configured cache directory when None), the registry and the kernel caches as they were
    afterwards (module docstring)."""
    saved = {name: Device.opened.get(name) for name in names}
    devices = {name: emulated_device(name) for name in names}
    forget_kernels(names)
    Device.opened.update(devices)
    try:
        with config.override(cache_dir=cache_dir or config.get().cache_dir):
            yield devices
    finally:
        forget_kernels(names)
        for name, device in saved.items():
            if device is None:
                Device.opened.pop(name, None)
            else:
                Device.opened[name] = device
