"""engine/prebuild.py: a schedule's missing libraries are built on other threads before it runs,
each source once and as soon as it is known (while later kernels are still lowered), sources in the
disk cache not at all, failures left to the items; a cold CLANG or LLVM realize goes through it;
LLVM libraries built on several threads are the bytes built on one."""
from __future__ import annotations

import importlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import fast
from fast import config
from fast.engine import prebuild as prebuild_module
from fast.engine import program_store
from fast.engine.compile import render_kernel
from fast.engine.realize import AST_KERNELS, PROGRAMS
from fast.ops import KernelOps
from fast.runtime.llvm import LLVMCompiler


class _Compiler:
    def __init__(self, fail: str = "", cached: tuple[str, ...] = ()) -> None:
        self.built: list[str] = []
        self.threads: set[str] = set()
        self.fail = fail
        self.cached = cached
        self.lock = threading.Lock()
        self.started = threading.Event()

    def is_cached(self, source: str) -> bool:
        return source in self.cached

    def compile_cached(self, source: str) -> bytes:
        self.started.set()
        time.sleep(0.05)
        with self.lock:
            self.built.append(source)
            self.threads.add(threading.current_thread().name)
        if source == self.fail:
            raise RuntimeError("compiler error")
        return b""


def _items(count: int) -> list[Any]:
    return [SimpleNamespace(ast=SimpleNamespace(op=KernelOps.SINK), source=f"s{i % 3}") for i in range(count)]


def test_each_missing_source_is_built_once_on_several_threads() -> None:
    compiler = _Compiler()
    built = prebuild_module.prebuild(_items(6), lambda item: (compiler, item.source), workers=3)
    assert built == 3 and sorted(compiler.built) == ["s0", "s1", "s2"]
    assert len(compiler.threads) >= 2


def test_nothing_is_built_with_one_worker_or_cached_and_failures_are_left_to_items() -> None:
    compiler = _Compiler(fail="s1", cached=("s2",))
    assert prebuild_module.prebuild(_items(6), lambda item: (compiler, item.source), workers=1) == 0
    assert prebuild_module.prebuild(_items(6), lambda item: (compiler, item.source), workers=2) == 2  # no raise
    assert sorted(compiler.built) == ["s0", "s1"], "a source in the disk cache is not built"

    def broken(item: Any) -> Any:
        raise ValueError("lowering failed")
    assert prebuild_module.prebuild(_items(6), broken, workers=2) == 0


def test_a_build_starts_while_later_kernels_are_still_lowered() -> None:
    compiler, waited = _Compiler(), []

    def pending(item: Any) -> Any:
        if item.source == "s2":  # the last new kernel: the first one's build has begun meanwhile
            waited.append(compiler.started.wait(timeout=10))
        return compiler, item.source
    assert prebuild_module.prebuild(_items(3), pending, workers=2) == 3
    assert waited == [True]


def _llvm_sources() -> list[str]:
    x = fast.from_numpy(np.arange(64, dtype=np.float32).reshape(8, 8), "LLVM")
    graphs = [x.e(fast.UnaryOps.SQRT), x.r(fast.ReduceOps.SUM, (1,)),
              x.e(fast.BinaryOps.MUL, x).r(fast.ReduceOps.MAX, (0,))]
    return [render_kernel(fast.schedule(graph)[-1].ast, "LLVM")[1] for graph in graphs]


def test_llvm_libraries_built_on_threads_are_the_bytes_built_on_one() -> None:
    compiler, sources = LLVMCompiler(), _llvm_sources()
    alone = [compiler.compile(source) for source in sources]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(compiler.compile, sources * 2))
    assert together == alone * 2


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_a_cold_realize_builds_ahead(device: str, tmp_path: Path, monkeypatch: Any) -> None:
    counts: list[int] = []
    original = prebuild_module.prebuild

    def counting(*args: Any, **kwargs: Any) -> int:
        counts.append(original(*args, **kwargs))
        return counts[-1]
    monkeypatch.setattr(importlib.import_module("fast.engine.realize"), "prebuild", counting)
    saved, saved_ast = dict(PROGRAMS), dict(AST_KERNELS)
    PROGRAMS.clear()
    AST_KERNELS.clear()
    program_store.clear_memo()
    try:
        with config.override(cache_dir=str(tmp_path), threads=2):
            x = fast.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), device)
            total = x.r(fast.ReduceOps.SUM, (1,)).expand((3, 4)).e(fast.BinaryOps.MUL, x.e(fast.UnaryOps.SQRT))
            got = fast.to_numpy(total.contiguous().r(fast.ReduceOps.MAX, (0,)))
    finally:
        PROGRAMS.clear()
        AST_KERNELS.clear()
        PROGRAMS.update(saved)
        AST_KERNELS.update(saved_ast)
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(got, (values.sum(1, keepdims=True) * np.sqrt(values)).max(0, keepdims=True), rtol=1e-6)
    assert max(counts) >= 2
