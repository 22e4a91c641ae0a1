"""SQRT on float vectors (renderer/base.py CPU_VECTOR_OPS): CLANG writes x86's SQRTPS/SQRTPD of the
vector's size where the compiler targets it (else libm lane by lane), LLVM the `llvm.sqrt` vector
intrinsic. Square roots are correctly rounded, so every lane must equal numpy's bits (NaN where
numpy has NaN), on special values, awkward sizes and views, whatever the thread count."""
from __future__ import annotations

import numpy as np
import pytest

import fast
from fast import UnaryOps, config
from fast.codegen.ir import IROps
from fast.dtype import dtypes
from fast.renderer.base import cpu_options
from fast.renderer.c import CRenderer
from fast.renderer.c_vectors import VectorC
from fast.renderer.llvmir import LLVMIRRenderer
from fast.runtime import cpu
from tests.fast.kernel_values import lowered_kernels

DEVICES = ["CLANG", "LLVM"]


def _values(np_dtype: type, size: int) -> np.ndarray:
    info = np.finfo(np_dtype)
    specials = np.array([0.0, -0.0, 1.0, 2.0, 4.0, -1.0, np.inf, -np.inf, np.nan, info.tiny, info.smallest_subnormal,
                         info.smallest_subnormal * 3, info.max, -info.tiny, 0.25, 1e-30, 3.0, 10.0], np_dtype)
    rng = np.random.default_rng(7)
    extra = np.abs(rng.standard_normal(max(size - len(specials), 0)) * 1e3).astype(np_dtype)
    return np.concatenate([specials, extra])[:size]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite].view(np.uint8), want[finite].view(np.uint8))


@pytest.mark.skipif(cpu.vector_bytes() == 0, reason="this host has no SIMD registers")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [1, 7, 18, 67, 4099])
def test_vector_square_roots_are_numpys_bits(device, np_dtype, size):
    values = _values(np_dtype, size)
    x = fast.from_numpy(values, device)
    results = []
    for threads in (1, 2):
        with config.override(threads=threads, parallel_min_work=0):
            results.append(fast.to_numpy(x.e(UnaryOps.SQRT)))
            flipped = fast.to_numpy(x.stride((-1,)).e(UnaryOps.SQRT))
    assert results[0].tobytes() == results[1].tobytes()
    with np.errstate(invalid="ignore"):
        _same(results[0], np.sqrt(values))
        _same(flipped, np.sqrt(values[::-1]))


@pytest.mark.parametrize("device", DEVICES)
def test_square_roots_of_strided_and_padded_views(device):
    raw = _values(np.float32, 40 * 33).reshape(40, 33)
    x = fast.from_numpy(raw, device)
    got = fast.to_numpy(x.stride((2, -1)).pad(((1, 2), (16, 0))).e(UnaryOps.SQRT))
    with np.errstate(invalid="ignore"):
        _same(got, np.sqrt(np.pad(raw[::2, ::-1], ((1, 2), (16, 0)))))


def test_both_renderers_keep_sqrt_on_vectors():
    x = fast.from_numpy(np.ones(256, np.float32), "CLANG")
    options = cpu_options(64, threads=False)
    (program,) = lowered_kernels(x.e(UnaryOps.SQRT), options)
    assert any(i.op is IROps.ALU and i.arg is UnaryOps.SQRT and i.dtype.count == 16 for i in program.instrs)
    c_source = CRenderer(options).render(program)
    assert "_mm512_sqrt_ps" in c_source and "__AVX512F__" in c_source and "sqrtf(a[15])" in c_source
    assert "@llvm.sqrt.v16f32" in LLVMIRRenderer(options).render(program)


def test_vectors_no_register_holds_take_libm_lane_by_lane():
    helpers: dict[str, str] = {}

    def need(name: str, source: str) -> str:
        helpers[name] = source
        return name
    assert VectorC(need).sqrt(dtypes.float64.vec(16), ["v"]) == "vsqrt_vfloat64x16(v)"
    helper = helpers["vsqrt vfloat64x16"]
    assert "_mm" not in helper and "#if" not in helper and "sqrt(a[15])" in helper
