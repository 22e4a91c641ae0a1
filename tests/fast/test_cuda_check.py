"""The compile-only CUDA check every test runs under (tests/cuda_check.py, tests/conftest.py)."""
from __future__ import annotations

import cuda_check
import numpy as np
import pytest

import fast
from fast import BinaryOps, ReduceOps
from fast.runtime.nvrtc import CudaCompileError

GOOD = 'typedef long long int64_t;\nextern "C" __global__ void k(float* a, int64_t n) { if (n > 0) a[0] = 1.0f; }\n'


def test_kernels_with_one_name_compile_together_in_namespaces() -> None:
    other = GOOD.replace("1.0f", "2.0f")
    cuda_check.check_sources([(GOOD, "first"), (other, "second")])
    assert cuda_check.batched([GOOD, other]).count("namespace fast_check_") == 2
    assert 'extern "C"' not in cuda_check.batched([GOOD])


def test_a_kernel_nvrtc_rejects_fails_naming_the_test_that_built_it() -> None:
    broken = GOOD.replace("1.0f", "undefined_name")
    with pytest.raises(CudaCompileError, match="(?s)tests/builder.py::test_x.*undefined_name"):
        cuda_check.check_sources([(GOOD, "tests/other.py::test_y"), (broken, "tests/builder.py::test_x")])


def test_every_kernel_a_test_compiles_is_queued_for_nvrtc(request: pytest.FixtureRequest) -> None:
    shape = (3, 1019)  # a shape no other test uses: a kernel compiled now, for this test
    x = fast.from_numpy(np.ones(shape, np.float32), "CLANG")
    out = x.e(BinaryOps.MUL, x.const(3.0)).r(ReduceOps.MAX, (1,))
    np.testing.assert_array_equal(fast.to_numpy(out), np.full((3, 1), 3.0, np.float32))
    queued = [(source, test) for source, test in cuda_check._PENDING if "1019" in source]
    checked = [source for source in cuda_check._SOURCES if "1019" in source and "__global__" in source]
    assert checked, "the kernel's CUDA source was never queued for NVRTC"
    assert all(test == request.node.nodeid for _, test in queued)
