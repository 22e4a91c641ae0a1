"""Lowered and rendered kernels kept on disk (fast/engine/program_store.py): a process whose cache is
warm lowers, renders and compiles nothing; keys change with the constants' bits, the renderer
options, the lowering settings and the code; unreadable files are misses; the in-process memo
answers as the file would, per cache folder."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fast
from fast import config
from fast.engine import kernel_cache, program_store
from fast.engine.realize import AST_KERNELS, PROGRAMS
from fast.renderer.base import cpu_options
from fast.runtime.base import COMPILE_COUNTER

DEVICES = ("CLANG", "LLVM")


@pytest.fixture()
def empty_process_caches() -> Iterator[None]:
    saved, saved_ast = dict(PROGRAMS), dict(AST_KERNELS)
    PROGRAMS.clear()
    AST_KERNELS.clear()
    program_store.clear_memo()
    yield
    PROGRAMS.clear()
    AST_KERNELS.clear()
    PROGRAMS.update(saved)
    AST_KERNELS.update(saved_ast)


def _graph(device: str, scale: float) -> Any:
    x = fast.from_numpy(np.arange(40, dtype=np.float32).reshape(5, 8), device)
    return x.e(fast.BinaryOps.MUL, x.const(scale)).r(fast.ReduceOps.SUM, (1,))


def _lowerings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = kernel_cache.lower

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(kernel_cache, "lower", counting)
    return calls


@pytest.mark.parametrize("device", DEVICES)
def test_a_warm_store_lowers_nothing(device: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     empty_process_caches: None) -> None:
    calls = _lowerings(monkeypatch)
    with config.override(cache_dir=str(tmp_path)):
        first = fast.to_numpy(_graph(device, 3.0))
        assert calls, "the cold store lowers"
        PROGRAMS.clear()
        AST_KERNELS.clear()  # as in a new process: only the disk remains
        program_store.clear_memo()
        calls.clear()
        compiles = COMPILE_COUNTER.snapshot()[0]
        again = fast.to_numpy(_graph(device, 3.0))
        assert not calls, "a warm store must not lower again"
        assert COMPILE_COUNTER.snapshot()[0] == compiles, "a warm cache must not compile again"
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, (np.arange(40, dtype=np.float32).reshape(5, 8) * 3.0).sum(1, keepdims=True))


def test_keys_follow_constants_options_and_settings() -> None:
    x = fast.from_numpy(np.ones((4, 4), np.float32), "CLANG")
    ast_one = fast.schedule(x.e(fast.BinaryOps.MUL, x.const(2.0)))[-1].ast
    ast_zero = fast.schedule(x.e(fast.BinaryOps.MUL, x.const(-2.0)))[-1].ast
    options, settings = cpu_options(32), ((False, 1), False)
    key = program_store.program_key(ast_one, "CRenderer", options, settings)
    assert key == program_store.program_key(ast_one, "CRenderer", cpu_options(32), settings)
    assert key != program_store.program_key(ast_zero, "CRenderer", options, settings)
    assert key != program_store.program_key(ast_one, "LLVMIRRenderer", options, settings)
    assert key != program_store.program_key(ast_one, "CRenderer", cpu_options(64), settings)
    assert key != program_store.program_key(ast_one, "CRenderer", options, ((True, 1), False))


def test_unreadable_entries_are_misses(tmp_path: Path) -> None:
    with config.override(cache_dir=str(tmp_path)):
        key = "ab" + "0" * 62
        Path(program_store._path(key)).parent.mkdir(parents=True)
        Path(program_store._path(key)).write_bytes(b"not a pickle")
        assert program_store.load(key) is None
        with config.override(disable_compile_cache=True):
            assert program_store.load(key) is None


def test_the_memo_answers_per_cache_folder_as_the_file_would(tmp_path: Path) -> None:
    x = fast.from_numpy(np.ones((4, 4), np.float32), "CLANG")
    ast = fast.schedule(x.e(fast.BinaryOps.ADD, x.const(1.0)))[-1].ast
    key = program_store.program_key(ast, "CRenderer", cpu_options(32), ((False, 1), False))
    program, source = kernel_cache.lower(ast, cpu_options(32)), "int kernel;"
    with config.override(cache_dir=str(tmp_path / "one")):
        program_store.save(key, program, source)
        Path(program_store._path(key)).unlink()
        assert program_store.load(key) == (program, source)  # kept in memory, not read again
    with config.override(cache_dir=str(tmp_path / "two")):
        assert program_store.load(key) is None, "another cache folder has its own contents"
    with config.override(cache_dir=str(tmp_path / "one"), disable_compile_cache=True):
        assert program_store.load(key) is None, "a disabled cache answers nothing, memo included"
    resume = program_store.suspend()
    with config.override(cache_dir=str(tmp_path / "one")):
        assert program_store.load(key) is None, "a suspended store answers nothing, memo included"
    resume()


def test_the_memo_keeps_the_newest_entries_within_its_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = fast.from_numpy(np.ones((4, 4), np.float32), "CLANG")
    program = kernel_cache.lower(fast.schedule(x.e(fast.BinaryOps.ADD, x.const(1.0)))[-1].ast, cpu_options(32))
    monkeypatch.setattr(program_store, "MEMO_SIZE", 3)
    monkeypatch.setattr(program_store, "MEMO_BYTES", 100)
    program_store.clear_memo()
    with config.override(cache_dir=str(tmp_path)):
        for number in range(5):
            program_store.save(f"{number:064x}", program, "s" * 10)
        assert [key for _, key in program_store.MEMO] == [f"{number:064x}" for number in (2, 3, 4)]
        program_store.save("f" * 64, program, "s" * 95)  # alone within the bytes bound
        assert [key for _, key in program_store.MEMO] == ["f" * 64]
        program_store.save("e" * 64, program, "s" * 200)  # beyond it: kept on disk only
        assert not program_store.MEMO and program_store.load("e" * 64) == (program, "s" * 200)
    program_store.clear_memo()


def test_stored_variables_hash_like_new_ones_in_another_process(tmp_path: Path) -> None:
    """A program keeps its shape Variables; pickled, they must not carry the hash of the process
    that stored them (str hashes are seeded per process), or run_schedule cannot find their values."""
    import pickle
    import subprocess
    import sys

    from fast.shape.symbolic import Variable

    n = Variable("n", 1, 10)
    hash(n)
    path = tmp_path / "n.pkl"
    path.write_bytes(pickle.dumps(n))
    script = (f"import pickle; from fast.shape.symbolic import Variable; n = pickle.load(open({str(path)!r}, 'rb')); "
              "print({Variable('n', 1, 10): 3}.get(n))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "PYTHONHASHSEED": "12345"})
    assert out.stdout.strip() == "3"
