"""The host CPU, detected at run time: SIMD width, compiler flags for it, and how many threads to use.

Nothing here is assumed from the build machine: `features()` reads the flags the kernel reports for
this CPU (`/proc/cpuinfo` on Linux; elsewhere only the architecture's baseline is assumed), and the C
compiler flags and renderer vector width follow from them. Both are part of the compile cache key
(the flags through `ClangCompiler.identity`, the width through the rendered source), so a cached
library built for AVX-512 is never loaded on a machine without it.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import resource
import threading

from fast import config
from fast.renderer.base import RendererOptions, cpu_options

#: (cpuinfo flags that must all be present, vector register bytes, C compiler flags), best first.
_X86_LEVELS: tuple[tuple[frozenset[str], int, tuple[str, ...]], ...] = (
    (frozenset({"avx512f", "avx512vl", "avx512dq", "avx512bw", "avx2", "fma"}), 64,
     ("-mavx2", "-mfma", "-mavx512f", "-mavx512vl", "-mavx512dq", "-mavx512bw")),
    (frozenset({"avx2", "fma"}), 32, ("-mavx2", "-mfma")),
)


@functools.lru_cache(maxsize=1)
def features() -> frozenset[str]:
    """The CPU feature flags of this machine (lower-case names as /proc/cpuinfo prints them)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _level() -> tuple[int, tuple[str, ...]]:
    """(register width in bytes, C flags) of the widest SIMD level this host has."""
    if not _is_x86():
        return 16, ()  # aarch64 NEON and other 128-bit baselines
    flags = features()
    for required, width, cflags in _X86_LEVELS:
        if required <= flags:
            return width, cflags
    return 16, ()  # SSE2 is part of x86-64


def vector_bytes() -> int:
    """The SIMD register width kernels are vectorized for (0 with NOOPT=1)."""
    return 0 if config.get().noopt else _level()[0]


def c_flags() -> tuple[str, ...]:
    """C compiler flags that enable the detected SIMD level (never -march=native)."""
    return () if config.get().noopt else _level()[1]


#: Outputs at least this large are written with non-temporal stores where the host has them
#: (codegen/streaming.py): above the private caches of two cores (2 MiB of L2 each on a Sapphire
#: Rapids, 512 KiB on Zen 3); a VM's shared last-level cache is shared with its neighbours, so it is
#: not counted on. 8 MiB until session 20: on its Sapphire Rapids VM, 4 MiB streams the MiniLM
#: forward's 6 MiB outputs too (the linears', the layer norms', `p @ v`'s, the embedding gather's),
#: and the forward's kernels (DEBUG=2, fastest of 8, two pairs of runs) took 212.2-212.6 ms against
#: 218.7-219.0: the 24 384 -> 384 linears 50.2-50.4 against 56.3-56.6, `p @ v` 8.18-8.22 against
#: 8.60-8.61, `q @ k.T` (its inputs now come from memory) 7.74-7.78 against 7.49-7.51; `take` of
#: 4,096 rows 0.272-0.280 ms against 0.308-0.321; 1024 x 1024 products within noise.
STREAM_MIN_BYTES = 4 << 20


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def stream_min_bytes() -> int:
    """`RendererOptions.stream_min_bytes` for this host: x86 (SSE2 and up stream every vector size
    we use) gets STREAM_MIN_BYTES, other hosts and NOOPT=1 get 0 (no streaming stores)."""
    return STREAM_MIN_BYTES if _is_x86() and not config.get().noopt else 0


def fused_multiply_add() -> bool:
    """Whether kernels may use FMA instructions (`RendererOptions.fused_multiply_add`): an x86 host
    whose detected SIMD level compiles with -mfma (AVX2 + FMA and up), and not NOOPT=1. Other hosts
    keep separate multiplies and adds (their FMA would be a libm call without the flag)."""
    return "-mfma" in c_flags()


@functools.lru_cache(maxsize=1)
def core_cache_bytes() -> int:
    """The largest cache private to one core (L2 on current x86 and Arm cores), from sysfs; 512 KiB
    when it cannot be read. Matmul blocks of rows aim at it (codegen/gemm.py)."""
    best = 0
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(name for name in os.listdir(root) if name.startswith("index")):
            with open(f"{root}/{entry}/shared_cpu_list") as handle:
                shared = handle.read().strip()
            with open(f"{root}/{entry}/size") as handle:
                text = handle.read().strip().upper()
            size = int(text.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            if "," not in shared and "-" not in shared:  # one core only: private
                best = max(best, size)
    except (OSError, ValueError):
        return 512 << 10
    return best or 512 << 10


#: Stack a thread that runs kernels needs: a GEMM keeps its packed panels on the stack (codegen/gemm.py
#: SCRATCH_BYTES plus half the core's cache for packed A), a few MiB.
KERNEL_STACK_BYTES = 8 << 20


def ensure_kernel_stacks() -> None:
    """Make threads created from now on get at least `KERNEL_STACK_BYTES` of stack (called before
    fast creates its worker and pool threads). Changes nothing where the platform default already
    gives that much (Linux: the stack rlimit, 8 MiB by default)."""
    current = threading.stack_size()
    if current == 0:
        soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
        if soft == resource.RLIM_INFINITY or soft >= KERNEL_STACK_BYTES:
            return
    if current < KERNEL_STACK_BYTES:
        threading.stack_size(KERNEL_STACK_BYTES)


#: Linux x86-64: the arch_prctl system call and its request for permission to use a state component
#: (XFEATURE_XTILEDATA, 18: the tiles' data), which a process needs before its first tile instruction.
_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18


@functools.lru_cache(maxsize=1)
def matrix_tiles() -> bool:
    """Whether kernels may use AMX tiles with bfloat16 products: an x86-64 Linux host whose CPU reports
    `amx_tile` and `amx_bf16`, with AVX-512 kernels, MATRIX_TILES not 0 and not NOOPT=1, and the
    kernel granting this process the tiles' state (asked once, here; refused on kernels before 5.16)."""
    settings = config.get()
    if settings.noopt or not settings.matrix_tiles or not _is_x86() or platform.system() != "Linux":
        return False
    if not {"amx_tile", "amx_bf16"} <= features() or vector_bytes() < 64:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)) == 0
    except (OSError, AttributeError):
        return False


def renderer_options() -> RendererOptions:
    """The options of the CPU renderers (CLANG, LLVM) for this host: its vector width, streaming
    stores, FMA and matrix tiles as detected above; row kernels prefetch their next row and x86 hosts
    render compare-and-select clamps with min/max instructions, unless NOOPT=1."""
    optimized = not config.get().noopt
    return cpu_options(vector_bytes(), stream_min_bytes=stream_min_bytes(), fused_multiply_add=fused_multiply_add(),
                       prefetch=optimized, min_max=optimized and _is_x86(), cache_bytes=core_cache_bytes(),
                       matrix_tiles=matrix_tiles())


def available_cores() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def thread_count() -> int:
    """Threads a large CPU kernel is split across: THREADS when set (at least 1), else every core."""
    wanted = config.get().threads
    return max(1, wanted) if wanted > 0 else available_cores()
