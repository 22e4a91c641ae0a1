"""Compile-only CUDA checking (`python -m conformance --cuda-archs sm_80,sm_90`), no GPU needed.

Every kernel the candidate compiles while the suite runs its programs on the CPU devices is also
lowered with the CUDA renderer's options, rendered as CUDA C and compiled with NVRTC for each
architecture (`fast.engine.compile.compile_kernel` with an `NVRTCCompiler` per architecture; the
scheduler never looks at device names, so these are the kernels the same programs would run on
CUDA). A kernel NVRTC rejects raises inside the candidate's realize, so the program fails like any
other disagreement, with NVRTC's log in the detail. Values are still compared on the CPU devices;
running the CUDA kernels needs a GPU (`--devices CUDA`).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

#: Kernels compiled so far in this process, per architecture.
COMPILED: Counter[str] = Counter()


def install(archs: tuple[str, ...]) -> None:
    """Compile every kernel the candidate compiles from now on for CUDA too, for each of `archs`
    (`sm_80`, ...). Imports fast only here: the suite also runs candidates that are not fast."""
    from fast.engine.compile import compile_kernel
    from fast.engine.realize import COMPILE_OBSERVERS
    from fast.runtime.nvrtc import NVRTCCompiler

    compilers = [(arch, NVRTCCompiler(arch)) for arch in archs]

    def compile_for_cuda(ast: Any, device: str, const_params: bool) -> None:
        for arch, compiler in compilers:
            compile_kernel(ast, "CUDA", const_params, compiler)
            COMPILED[arch] += 1

    COMPILE_OBSERVERS.append(compile_for_cuda)


def coverage_keys() -> Counter[str]:
    """The counts as coverage keys (`cuda:<arch>`), merged across workers like coverage."""
    return Counter({f"cuda:{arch}": count for arch, count in COMPILED.items()})


def summary(counts: Counter[str] | dict[str, int], archs: tuple[str, ...]) -> str:
    """One line for the report: kernels compiled per architecture."""
    parts = ", ".join(f"{arch} {counts.get(f'cuda:{arch}', 0)}" for arch in archs)
    return f"CUDA compile-only: kernels compiled with NVRTC per architecture: {parts}"
