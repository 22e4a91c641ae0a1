"""runtime/llvm_build.py: the LLVM helper process compiles the bytes this process would, reports
invalid IR as the in-process compile does, and a dead helper costs only a fallback: LLVMCompiler
then compiles here."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fast
from fast.engine.compile import render_kernel
from fast.runtime import llvm, llvm_build


@pytest.fixture(scope="module")
def source() -> str:
    x = fast.from_numpy(np.arange(64, dtype=np.float32).reshape(8, 8), "LLVM")
    return render_kernel(fast.schedule(x.e(fast.UnaryOps.SQRT).r(fast.ReduceOps.SUM, (1,)))[-1].ast, "LLVM")[1]


def test_the_helper_compiles_the_bytes_of_this_process(source: str) -> None:
    helper = llvm_build.Helper(llvm.machine_settings())
    try:
        assert helper.compile(source) == llvm.LLVMCompiler().compile(source)
        with pytest.raises(RuntimeError, match="LLVM: invalid IR"):
            helper.compile("define void @broken(")
        assert helper.compile(source) == llvm.LLVMCompiler().compile(source), "it goes on after an error"
    finally:
        helper.close()
    assert helper.process.returncode == 0, "EOF on its stdin ends it"
    with pytest.raises(llvm_build.HelperError):
        helper.compile(source)


def _compile_while_busy(source: str) -> bytes:
    """LLVMCompiler.compile on another thread while this thread holds the in-process compile lock,
    released after a moment (a compile that needs it then gets it)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        with llvm._HERE:
            future = pool.submit(llvm.LLVMCompiler().compile, source)
            threading.Event().wait(0.5)
        return future.result(timeout=60)


def test_a_busy_process_sends_the_compile_to_its_helper_and_falls_back_when_it_died(source: str) -> None:
    alone = llvm.LLVMCompiler().compile(source)
    assert _compile_while_busy(source) == alone
    helper = llvm_build.shared_helper(llvm.machine_settings())
    assert helper is not None and helper.process.poll() is None, "the helper started and is alive"
    helper.process.kill()
    helper.process.wait()
    assert _compile_while_busy(source) == alone  # the dead helper is dropped, the compile runs here
    llvm_build.close_helpers()
