"""The conformance suite on emulated CUDA devices: `python tests/cuda_conformance.py --devices CUDA ...`.

Every conformance worker first puts emulated `CUDA`, `CUDA:1`, ... devices into `fast`'s registry
(tests/fast/cuda_emulation.py: the CUDA renderer's source compiled with g++ behind a small shim, run
on the CPU, blocks and threads in turn, barriers as fibers), so the random programs' kernels are the
CUDA renderer's kernels, compared with `reference` value for value. It checks what the renderer
writes (grid-stride loops, block reductions, the C semantics in CUDA's dialect), not NVRTC's code
generation or the GPU's memory model: CI's `--cuda-archs` slice compiles kernels with NVRTC, and
`bench/gpu_check.sh` runs them on a GPU. Arguments are the conformance command line's.
"""
from __future__ import annotations

import os
import sys
from typing import Any

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
EMULATED = ("CUDA", "CUDA:1", "CUDA:2", "CUDA:3")


def _emulation_on_path() -> None:
    """The emulation's modules importable, and the repository root too: with tests/ on the path
    alone, `reference` would resolve to the tests/reference folder (a namespace package)."""
    for path in (ROOT, TESTS, os.path.join(TESTS, "fast")):
        if path not in sys.path:
            sys.path.append(path)


def install_emulated_devices() -> None:
    """Put the emulated CUDA devices into this process's `fast` registry."""
    _emulation_on_path()
    import cuda_emulation

    from fast.device import Device

    for name in EMULATED:
        Device.opened[name] = cuda_emulation.emulated_device(name)


def worker_main(*args: Any, **kwargs: Any) -> None:
    """`conformance.runner._worker_main`, after installing the emulated devices in this worker."""
    install_emulated_devices()
    from conformance import runner

    # a spawned worker imported conformance afresh: its `_worker_main` is the original
    original = getattr(runner, "original_worker_main", runner._worker_main)
    original(*args, **kwargs)


def main(argv: list[str]) -> int:
    from conformance import runner
    from conformance.__main__ import main as conformance_main

    runner.original_worker_main = runner._worker_main  # type: ignore[attr-defined]
    runner._worker_main = worker_main  # workers are spawned: they import this module by name
    install_emulated_devices()  # here too: the CLI checks every device runs before starting workers
    return conformance_main(argv)


if __name__ == "__main__":
    _emulation_on_path()
    sys.exit(main(sys.argv[1:]))
