"""Every environment variable `fast` reads, read once, here. Nothing else reads the environment.

Tests change behaviour by building a `Config` and passing it (or by `override`), never by
mutating os.environ in the middle of logic.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    try:
        return int(raw) if raw != "" else default
    except ValueError as error:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from error


def _nonnegative_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    if value < 0:
        raise ValueError(f"environment variable {name}={value} must be 0 or more")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    try:
        value = float(raw) if raw != "" else default
    except ValueError as error:
        raise ValueError(f"environment variable {name}={raw!r} is not a number") from error
    if not value > 0:
        raise ValueError(f"environment variable {name}={raw!r} must be a positive number of seconds")
    return value


@dataclass(frozen=True)
class Config:
    """A snapshot of the configuration. Defaults match SPEC.md."""

    debug: int = 0
    lazycache: bool = True
    split_reduceop: bool = True
    reduceop_split_threshold: int = 32768
    reduceop_split_size: int = 22
    ring: int = 1
    noopt: bool = False
    default_device: str = "CLANG"
    cache_dir: str = os.path.join(tempfile.gettempdir(), "fast-cache")
    disable_compile_cache: bool = False
    ubsan: bool = False
    dump_ir: str = ""  # comma-separated stage names whose output is printed (see engine/realize.py)
    cc: str = ""  # C compiler override; empty: clang if installed, else cc
    threads: int = 0  # THREADS: cap on the threads one CPU kernel uses; 0: every available core
    parallel_min_work: int = 1 << 21  # a CPU kernel with less estimated work (bytes + flops) runs on one thread
    worker_spin_us: int = 2000  # WORKER_SPIN_US: how long an idle kernel-share worker polls before sleeping
    worker_spin_max_us: int = 100000  # WORKER_SPIN_MAX_US: ... at most, when the gaps between jobs are short
    parallel_devices: bool = True  # PARALLEL_DEVICES: items on different devices run concurrently (engine/parallel.py)
    parallel_devices_min_work: int = 1 << 20  # ... only when two devices' items each touch this many bytes
    program_cache_size: int = 1024  # PROGRAM_CACHE_SIZE: compiled kernels kept per process (LRU, engine/programs.py)
    alloc_cache_mb: int = 1024  # ALLOC_CACHE_MB: freed host memory kept for reuse (runtime/host.py); 0: off
    alloc_poison: bool = False  # ALLOC_POISON: fill memory handed out unzeroed with 0xFF bytes (debugging)
    host_huge_pages: bool = False  # HOST_HUGE_PAGES: advise huge pages for large CPU buffers (runtime/host.py)
    graph: bool = False  # GRAPH: write a picture of each realize's lazy graph and kernels (fast/debug/hooks.py)
    graph_dir: str = os.path.join(tempfile.gettempdir(), "fast-graphs")  # GRAPH_DIR: where GRAPH=1 writes them
    nvrtc_path: str = ""  # NVRTC_PATH: libnvrtc.so (or its directory) to use first (runtime/nvrtc.py search order)
    cuda_path: str = ""  # CUDA_PATH: a CUDA toolkit root; its lib64 is searched for NVRTC
    cuda_home: str = ""  # CUDA_HOME: the same, searched after CUDA_PATH
    mpi_timeout: float = 60.0  # MPI_TIMEOUT: seconds a blocking MPI transfer waits before raising (docs/mpi.md)
    cuda_arch: str = "sm_90"  # CUDA_ARCH: NVRTC target (sm_XY) when no CUDA driver says the GPU's own (runtime/cuda.py)
    xp_tape: bool = True  # FAST_XP_TAPE=0: no call replay of uncaptured fast.xp code (fast/xp/_tape.py)
    matrix_tiles: bool = True  # MATRIX_TILES=0: float32 matmuls never use AMX tiles (codegen/gemm_tiles.py)

    def __hash__(self) -> int:
        """Cached: the configuration is part of every schedule-replay key (engine/replay.py)."""
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, name) for name in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", cached)
        return cached

    @staticmethod
    def from_env(env: Mapping[str, str]) -> Config:
        """Read the configuration from a mapping shaped like os.environ."""
        default_device = next((d for d in ("CUDA", "LLVM", "CLANG") if _int(env, d, 0)), "CLANG")
        return Config(
            debug=_int(env, "DEBUG", 0),
            lazycache=bool(_int(env, "LAZYCACHE", 1)),
            split_reduceop=bool(_int(env, "SPLIT_REDUCEOP", 1)),
            reduceop_split_threshold=_int(env, "REDUCEOP_SPLIT_THRESHOLD", 32768),
            reduceop_split_size=_int(env, "REDUCEOP_SPLIT_SIZE", 22),
            ring=_int(env, "RING", 1),
            noopt=bool(_int(env, "NOOPT", 0)),
            default_device=default_device,
            cache_dir=env.get("FAST_CACHE_DIR", "") or Config.cache_dir,
            disable_compile_cache=bool(_int(env, "DISABLE_COMPILER_CACHE", 0)),
            ubsan=bool(_int(env, "UBSAN", 0)),
            dump_ir=env.get("DUMP_IR", ""),
            cc=env.get("CC", ""),
            threads=_int(env, "THREADS", 0),
            parallel_min_work=_int(env, "PARALLEL_MIN_WORK", 1 << 21),
            worker_spin_us=_nonnegative_int(env, "WORKER_SPIN_US", 2000),
            worker_spin_max_us=_nonnegative_int(env, "WORKER_SPIN_MAX_US", 100000),
            parallel_devices=bool(_int(env, "PARALLEL_DEVICES", 1)),
            parallel_devices_min_work=_int(env, "PARALLEL_DEVICES_MIN_WORK", 1 << 20),
            program_cache_size=_int(env, "PROGRAM_CACHE_SIZE", 1024),
            alloc_cache_mb=_int(env, "ALLOC_CACHE_MB", 1024),
            alloc_poison=bool(_int(env, "ALLOC_POISON", 0)),
            host_huge_pages=bool(_int(env, "HOST_HUGE_PAGES", 0)),
            graph=bool(_int(env, "GRAPH", 0)),
            graph_dir=env.get("GRAPH_DIR", "") or Config.graph_dir,
            nvrtc_path=env.get("NVRTC_PATH", ""),
            cuda_path=env.get("CUDA_PATH", ""),
            cuda_home=env.get("CUDA_HOME", ""),
            cuda_arch=env.get("CUDA_ARCH", "") or Config.cuda_arch,
            mpi_timeout=_float(env, "MPI_TIMEOUT", 60.0),
            xp_tape=bool(_int(env, "FAST_XP_TAPE", 1)),
            matrix_tiles=bool(_int(env, "MATRIX_TILES", 1)),
        )


CONFIG: Config = Config.from_env(os.environ)
# Called with no argument just before `override` replaces the configuration, and again before it
# restores it (fast.xp's call replay builds the graphs it deferred under the configuration they were
# taped under: fast/xp/_tape.py).
CHANGE_HOOKS: list[Callable[[], None]] = []


def get() -> Config:
    """The configuration in force."""
    return CONFIG


@contextmanager
def override(**changes: object) -> Iterator[Config]:
    """Temporarily replace fields of the configuration (for tests and benchmarks)."""
    global CONFIG
    previous = CONFIG
    changed = replace(CONFIG, **changes)  # type: ignore[arg-type]
    for hook in CHANGE_HOOKS:
        hook()
    CONFIG = changed
    try:
        yield CONFIG
    finally:
        for hook in CHANGE_HOOKS:
            hook()
        CONFIG = previous
