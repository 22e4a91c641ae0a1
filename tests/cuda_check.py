"""Compile-only CUDA for every kernel the tests compile (used by tests/conftest.py; no GPU needed).

Each kernel a test compiles, for any device, is also rendered for CUDA (`fast.engine.compile.
render_kernel`; a kernel AST already rendered in this process is skipped), and the CUDA sources are
compiled with NVRTC for each of `ARCHS`: after a test, once `BATCH` sources are waiting, and at the
end of the session for the rest. A kernel NVRTC rejects makes a test fail (an error at its
teardown) with NVRTC's log, the numbered source and the test that built the kernel.

Cost: one NVRTC call costs about as much fixed work as compiling one small kernel (measured: 0.078 s
per kernel alone, 0.029 s in calls of 40), so sources are compiled together, each inside a namespace
of its own (the same text, with `extern "C"` dropped so that equal kernel names in different
namespaces stay apart). When a call fails, its kernels are compiled one by one as they are, so the
error names the kernel. The checks bypass the compile counter and the disk cache: tests that count
compiles or use private caches see only their own devices' compiles.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

ARCHS = ("sm_80", "sm_90")
BATCH = 40

_LOCK = threading.Lock()
_PENDING: list[tuple[str, str]] = []  # (CUDA source, the test that built its kernel)
_RENDERED: set[Any] = set()  # kernel keys already rendered
_SOURCES: set[str] = set()  # CUDA sources already queued
_CURRENT = [""]  # the running test's node id


def set_current_test(nodeid: str) -> None:
    _CURRENT[0] = nodeid


def render_for_cuda(ast: Any, device: str, const_params: bool) -> None:
    """A `realize.COMPILE_OBSERVERS` entry: queue the CUDA source of a kernel just compiled (kernels
    are compiled from lane threads too, hence the lock)."""
    from fast.codegen.const_args import kernel_keys
    from fast.engine.compile import render_kernel

    key = (kernel_keys(ast), const_params)
    with _LOCK:
        if key in _RENDERED:
            return
        _RENDERED.add(key)
    _, source = render_kernel(ast, "CUDA", const_params)
    queue_source(source)


def queue_source(source: str) -> None:
    """Queue a CUDA source for NVRTC (once per process): also what the CUDA emulation compiles."""
    with _LOCK:
        if source not in _SOURCES:
            _SOURCES.add(source)
            _PENDING.append((source, _CURRENT[0]))


def take_pending(at_least: int = 1) -> list[tuple[str, str]]:
    """The queued (source, test) pairs when at least `at_least` are queued (then no longer queued)."""
    with _LOCK:
        if len(_PENDING) < at_least:
            return []
        taken = list(_PENDING)
        _PENDING.clear()
    return taken


def check_sources(pending: Sequence[tuple[str, str]], archs: Sequence[str] = ARCHS) -> None:
    """Compile every source with NVRTC for every arch; CudaCompileError (naming the test that built
    the kernel) for the first one rejected."""
    from fast.runtime.nvrtc import CudaCompileError, compile_cuda

    for start in range(0, len(pending), BATCH):
        batch = pending[start:start + BATCH]
        for arch in archs:
            try:
                compile_cuda(batched([source for source, _ in batch]), arch)
            except CudaCompileError:
                for source, test in batch:
                    try:
                        compile_cuda(source, arch)
                    except CudaCompileError as error:
                        raise CudaCompileError(f"a kernel built by {test or 'a fixture'}: {error}") from error
                raise


def batched(sources: Sequence[str]) -> str:
    """One translation unit holding every source in a namespace of its own."""
    head = 'extern "C" '
    return "".join(f"namespace fast_check_{number} {{\n{source.replace(head, '')}\n}}\n"
                   for number, source in enumerate(sources))
