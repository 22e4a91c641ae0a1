"""engine/prebuild.py: a schedule's missing libraries are built in parallel before it runs, each
source once, failures left to the items; and a cold CLANG realize goes through it."""
from __future__ import annotations

import importlib
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

import fast
from fast import config
from fast.engine import prebuild as prebuild_module
from fast.engine.realize import AST_KERNELS, PROGRAMS
from fast.ops import KernelOps


class _Compiler:
    def __init__(self, fail: str = "") -> None:
        self.built: list[str] = []
        self.threads: set[str] = set()
        self.fail = fail
        self.lock = threading.Lock()

    def compile_cached(self, source: str) -> bytes:
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


def test_nothing_is_built_with_one_worker_or_one_source_and_failures_are_left_to_items() -> None:
    compiler = _Compiler(fail="s1")
    assert prebuild_module.prebuild(_items(6), lambda item: (compiler, item.source), workers=1) == 0
    assert prebuild_module.prebuild(_items(1), lambda item: (compiler, item.source), workers=4) == 0
    assert prebuild_module.prebuild(_items(6), lambda item: (compiler, item.source), workers=2) == 3  # no raise

    def broken(item: Any) -> Any:
        raise ValueError("lowering failed")
    assert prebuild_module.prebuild(_items(6), broken, workers=2) == 0


def test_a_cold_clang_realize_builds_ahead(tmp_path: Path, monkeypatch: Any) -> None:
    counts: list[int] = []
    original = prebuild_module.prebuild

    def counting(*args: Any, **kwargs: Any) -> int:
        counts.append(original(*args, **kwargs))
        return counts[-1]
    monkeypatch.setattr(importlib.import_module("fast.engine.realize"), "prebuild", counting)
    saved, saved_ast = dict(PROGRAMS), dict(AST_KERNELS)
    PROGRAMS.clear()
    AST_KERNELS.clear()
    try:
        with config.override(cache_dir=str(tmp_path), threads=2):
            x = fast.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), "CLANG")
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
