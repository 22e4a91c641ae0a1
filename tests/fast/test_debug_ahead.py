"""compare's kernels built ahead (fast/debug/ahead.py) in a few compiler runs (fast/runtime/clang_batch.py):
with an empty kernel cache every kernel compare runs is built on the builder's threads before it runs,
the stored libraries run their own kernels, and the report is the one compare gives without building
ahead, planted bug included. Speed is not asserted."""
from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fast
from fast import config
from fast.debug import ahead
from fast.runtime import clang_batch
from fast.runtime.clang import ClangCompiler, load_library
from tests.fast.test_debug import planted, program, render_mul


@pytest.fixture
def empty_cache(tmp_path: Path) -> Iterator[Path]:
    """A kernel cache folder of its own, this process's kernel caches emptied (restored afterwards)."""
    realize = importlib.import_module("fast.engine.realize")
    caches = [realize.PROGRAMS, realize.AST_KERNELS, importlib.import_module("fast.engine.replay").TEMPLATES]
    saved = [dict(cache) for cache in caches]
    memo = importlib.import_module("fast.engine.program_store").MEMO
    for cache in caches:
        cache.clear()
    try:
        with config.override(cache_dir=str(tmp_path), disable_compile_cache=False):
            yield tmp_path
    finally:
        for cache, before in zip(caches, saved, strict=True):
            cache.clear()
            cache.update(before)
        for key in [key for key in memo if key[0] == str(tmp_path)]:
            del memo[key]


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(thread name, kernels in the file) of every CLANG compiler run."""
    seen: list[tuple[str, int]] = []
    original = ClangCompiler.compile

    def compile(self: ClangCompiler, src: str) -> bytes:
        seen.append((threading.current_thread().name, src.count("\nvoid ")))
        return original(self, src)
    monkeypatch.setattr(ClangCompiler, "compile", compile)
    return seen


def small_graph() -> Any:
    """Constants, views of them, an expand, a reduce, a cast, a pad and a permute."""
    x = fast.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4) / 4 - 1, "CLANG")
    quarter = fast.LazyBuffer.loadop(fast.LoadOps.CONST, (), fast.dtypes.float32, "CLANG", 0.25)
    y = x.e(fast.BinaryOps.MUL, x.const(1.5)).e(fast.BinaryOps.ADD, quarter.reshape((1, 1)).expand((3, 4)))
    s = y.e(fast.BinaryOps.MUL, y).r(fast.ReduceOps.SUM, (0,)).e(fast.UnaryOps.SQRT)  # (1, 4)
    s = s.reshape((4, 1)).expand((4, 3)).r(fast.ReduceOps.SUM, (1,)).reshape((1, 4))
    z = y.permute((1, 0)).pad(((0, 1), (1, 0))).cast(fast.dtypes.int32)  # (5, 4)
    return z.r(fast.ReduceOps.MAX, (0,)).cast(fast.dtypes.float32).e(fast.BinaryOps.ADD, s)


def without_timing(report: Any) -> str:
    return "\n".join(line for line in str(report).splitlines() if "time per stage" not in line)


def without_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ahead.Builder, "submit", lambda self, items: [])
    monkeypatch.setattr(ahead, "alone_items", lambda runs: [])


def test_same_names_go_to_different_files_and_a_file_holds_each_prelude_once() -> None:
    head = "#include <math.h>\n"
    kernels = [clang_batch.Kernel("E_4", head + "void E_4(float* restrict data0) {\n  data0[0] = 1.0f;\n}\n"),
               clang_batch.Kernel("E_4", head + "void E_4(float* restrict data0) {\n  data0[0] = 2.0f;\n}\n"),
               clang_batch.Kernel("r_4", head + "static inline float two(void) {\n  return 2.0f;\n}\n"
                                         "void r_4(float* restrict data0) {\n  data0[0] = two();\n}\n")]
    files = clang_batch.batches(kernels)
    assert len(files) == 2 and all(len(batch.names) == len(batch.kernels) for batch in files)
    assert sorted(len(batch.kernels) for batch in files) == [1, 2]
    text = clang_batch.combine([kernels[0], kernels[2]])
    assert text.count("#include <math.h>") == 1 and text.count("static inline float two") == 1
    assert text.index("static inline") < text.index("void E_4(") < text.index("void r_4(")
    assert len(clang_batch.batches(kernels, parts=3)) == 3
    guarded = [clang_batch.Kernel(name, f"#if defined({macro})\n#include <math.h>\n#endif\nvoid {name}(void) {{\n}}\n")
               for name, macro in (("a", "X"), ("b", "Y"))]
    assert clang_batch.combine(guarded).count("#endif") == 2


def test_a_kernel_whose_library_would_not_load_does_not_fail_the_others(empty_cache: Path) -> None:
    compiler = ClangCompiler()
    good = clang_batch.Kernel("good", "void good(float* restrict data0) {\n  data0[0] = 1.0f;\n}\n")
    bad = clang_batch.Kernel("bad", "void no_such_function(void);\nvoid bad(void) {\n  no_such_function();\n}\n")
    clang_batch.build(compiler, [good, bad], 1)
    assert compiler.is_cached(good.source) and compiler.is_cached(bad.source)
    assert compiler.compile_cached(good.source) != compiler.compile_cached(bad.source)
    library = load_library(compiler.compile_cached(good.source))
    assert hasattr(library, "good") and not hasattr(library, "bad")


def test_libraries_built_together_run_their_own_kernels(empty_cache: Path, compiles: list[tuple[str, int]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a = fast.from_numpy(np.arange(8, dtype=np.float32), "CLANG")
    outs = [a.e(fast.BinaryOps.ADD, a.const(1.0)), a.e(fast.BinaryOps.MUL, a.const(3.0)),
            a.r(fast.ReduceOps.SUM, (0,)), a.e(fast.UnaryOps.NEG)]
    items = [item for out in outs for item in fast.schedule(out)]
    found = list(ahead.kernels(items))
    assert len(found) == 4
    assert clang_batch.build(found[0][0], [kernel for _, kernel in found], 2) >= 2
    assert compiles and max(count for _, count in compiles) >= 2
    monkeypatch.setattr(ClangCompiler, "compile", lambda self, src: pytest.fail("compiled again"))
    values = [fast.to_numpy(out) for out in outs]
    x = np.arange(8, dtype=np.float32)
    for got, want in zip(values, [x + 1, x * 3, x.sum(keepdims=False), -x], strict=True):
        np.testing.assert_array_equal(got, want)


def test_with_an_empty_cache_every_kernel_is_built_ahead(empty_cache: Path, compiles: list[tuple[str, int]]) -> None:
    report = fast.debug.compare(small_graph())
    assert report.first is None, str(report)
    assert compiles, "nothing was compiled"
    assert all(thread != "MainThread" for thread, _ in compiles), compiles
    assert any(count > 1 for _, count in compiles), compiles
    assert "ahead" in str(report)


def test_the_report_is_the_same_with_or_without_building_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports = []
    for build_ahead in (True, False):
        with config.override(cache_dir=str(tmp_path / str(build_ahead))), monkeypatch.context() as patch:
            if not build_ahead:
                without_ahead(patch)
            with fast.debug.trace():
                out = program(fast)
            reports.append(without_timing(fast.debug.compare(out)))
    assert reports[0] == reports[1]
    assert "every node agrees" in reports[0]


def test_a_planted_bug_is_named_the_same_with_or_without_building_ahead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports = []
    for build_ahead in (True, False):
        with config.override(cache_dir=str(tmp_path / str(build_ahead))), monkeypatch.context() as patch:
            if not build_ahead:
                without_ahead(patch)
            with planted(*render_mul()):
                with fast.debug.trace():
                    out = program(fast)
                report = fast.debug.compare(out)
        assert report.first is not None and (report.first.index, report.first.op) == (4, "MUL"), str(report)
        reports.append(without_timing(report))
    assert reports[0] == reports[1]
