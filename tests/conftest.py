"""Shared fixtures: ``impl`` is the package under test (value tests run once per implementation)."""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import cuda_check  # noqa: E402  (tests/cuda_check.py)


@pytest.fixture(scope="session", params=["reference", "fast"])
def impl(request: pytest.FixtureRequest) -> ModuleType:
    """The implementation package (``reference``; the lead adds ``fast``)."""
    return importlib.import_module(request.param)



# ---------------------------------------------------------------- compile-only CUDA for every kernel
# Every kernel a test compiles is also compiled for CUDA with NVRTC, for sm_80 and sm_90, when the
# test ends (tests/cuda_check.py): no GPU is needed, NVRTC comes with the test extra (pyproject.toml).
def pytest_configure(config: pytest.Config) -> None:
    from fast.engine.realize import COMPILE_OBSERVERS
    from fast.runtime.nvrtc import nvrtc_available

    if not nvrtc_available():
        raise pytest.UsageError("NVRTC was not found: the tests compile every kernel for CUDA too; install the "
                                "test extra (pip install -e '.[test]', which brings the nvidia-cuda-nvrtc wheel)")
    if cuda_check.render_for_cuda not in COMPILE_OBSERVERS:
        COMPILE_OBSERVERS.append(cuda_check.render_for_cuda)


@pytest.fixture(autouse=True)
def kernels_compile_for_cuda(request: pytest.FixtureRequest, cuda_check_at_session_end: None) -> Iterator[None]:
    """After each test: once enough are waiting, the kernels built so far compile for CUDA with
    NVRTC (tests/cuda_check.py)."""
    cuda_check.set_current_test(request.node.nodeid)
    yield
    cuda_check.check_sources(cuda_check.take_pending(at_least=cuda_check.BATCH))
    cuda_check.set_current_test("")


@pytest.fixture(scope="session")
def cuda_check_at_session_end() -> Iterator[None]:
    """The kernels still waiting when the session ends compile for CUDA with NVRTC."""
    yield
    cuda_check.check_sources(cuda_check.take_pending())
