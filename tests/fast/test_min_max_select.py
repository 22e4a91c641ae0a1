"""The C renderer's min/max selects (RendererOptions.min_max): a float vector `WHERE(a < b, a, b)` is
x86 `min(a, b)` and `WHERE(a < b, b, a)` is `max(b, a)`, with the same bits in every lane (NaN
payloads, signed zeros, infinities, subnormals), against numpy's `where` on the same comparison."""
from __future__ import annotations

import platform

import numpy as np
import pytest

import fast
from fast import BinaryOps, TernaryOps, dtypes
from fast.codegen.ir import IROps
from fast.renderer.base import cpu_options
from fast.renderer.c import CRenderer
from fast.runtime import cpu
from tests.fast.kernel_values import lowered_kernels

X86 = platform.machine().lower() in ("x86_64", "amd64")


def _specials(np_dtype: type) -> np.ndarray:
    info = np.finfo(np_dtype)
    quiet = np.array([np.nan], np_dtype)
    payload = quiet.view(np.uint32 if np_dtype is np.float32 else np.uint64) | 1  # a NaN with another payload
    values = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, info.tiny, -info.tiny, info.smallest_subnormal,
              -info.smallest_subnormal, info.max, -info.max, 130.0, 131.0, -160.0, -161.0, 2.5, -2.5]
    return np.concatenate([np.array(values, np_dtype), quiet, payload.view(np_dtype)])


def _pairs(np_dtype: type, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (special, special) pair, then random values, `length` of each."""
    specials = _specials(np_dtype)
    left, right = (grid.ravel() for grid in np.meshgrid(specials, specials))
    rng = np.random.default_rng(3)
    extra = length - len(left)
    left = np.concatenate([left, rng.normal(size=extra).astype(np_dtype)])
    right = np.concatenate([right, rng.normal(size=extra).astype(np_dtype)])
    return left, right


def _select(x: fast.LazyBuffer, y: fast.LazyBuffer, which: str) -> fast.LazyBuffer:
    less = x.e(BinaryOps.CMPLT, y)
    return less.e(TernaryOps.WHERE, x, y) if which == "min" else less.e(TernaryOps.WHERE, y, x)


def test_render_uses_the_intrinsics_only_with_the_option():
    x = fast.from_numpy(np.zeros(256, np.float32), "CLANG")
    y = fast.from_numpy(np.ones(256, np.float32), "CLANG")
    for which, intrinsic in (("min", "_mm256_min_ps"), ("max", "_mm256_max_ps")):
        out = _select(x, y, which)
        with_option = cpu_options(32, threads=False, min_max=True)
        program = lowered_kernels(out, with_option)[0]
        assert any(i.op is IROps.ALU and i.arg is TernaryOps.WHERE and i.dtype.count == 8 for i in program.instrs)
        assert intrinsic in CRenderer(with_option).render(program)
        plain = cpu_options(32, threads=False)
        assert "_mm256_m" not in CRenderer(plain).render(lowered_kernels(out, plain)[0])
    other = x.e(BinaryOps.CMPLT, y).e(TernaryOps.WHERE, x, x.e(BinaryOps.ADD, y))  # not a clamp: a plain select
    options = cpu_options(32, threads=False, min_max=True)
    assert "_mm256_m" not in CRenderer(options).render(lowered_kernels(other, options)[0])


@pytest.mark.skipif(not X86 or not cpu.renderer_options().min_max,
                    reason="min/max selects are rendered only on x86 hosts with vector registers")
@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", ["min", "max"])
@pytest.mark.parametrize("constant", [False, True])
def test_min_max_selects_keep_every_bit(np_dtype, which, constant):
    left, right = _pairs(np_dtype, 4096 + 7)  # vector lanes, then the scalar tail
    dtype = dtypes.float32 if np_dtype is np.float32 else dtypes.float64
    x = fast.from_numpy(left, "CLANG")
    if constant:
        bound = -160.0 if which == "max" else 130.0
        y, right = x.const(bound), np.full_like(left, bound)
    else:
        y = fast.from_numpy(right, "CLANG")
    out = _select(x, y, which)
    source = CRenderer(cpu.renderer_options()).render(lowered_kernels(out, cpu.renderer_options())[0])
    assert f"v{which}_select_" in source
    got = fast.to_numpy(out)
    with np.errstate(invalid="ignore"):
        want = np.where(left < right, left, right) if which == "min" else np.where(left < right, right, left)
    bits = np.uint32 if dtype == dtypes.float32 else np.uint64
    np.testing.assert_array_equal(got.view(bits), want.view(bits))
