"""The lanes of a vectorized reduce folded by vector ops (lower.py `_combine_lanes`): the same pairs
in the same order as folding them one by one, so the same bits, for SUM (order-sensitive) and MAX
(signed zeros and NaN), float32, float64, float16 (accumulated in float32) and int32, on CLANG and
LLVM. Each case runs twice, with the vector fold and with the scalar fold (`_combine` on every
lane), each in a kernel cache of its own, and the bits must agree."""
from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import fast
from fast import config
from fast.engine.compile import render_kernel
from fast.engine.schedule import schedule
from fast.ops import ReduceOps

lower_module = importlib.import_module("fast.codegen.lower")
DEVICES = ["CLANG", "LLVM"] if importlib.util.find_spec("llvmlite") else ["CLANG"]


@pytest.fixture
def own_caches(tmp_path: Path) -> Iterator[Path]:
    """Empty in-process kernel caches and a kernel folder of its own (restored afterwards)."""
    realize = importlib.import_module("fast.engine.realize")
    caches = [realize.PROGRAMS, realize.AST_KERNELS, importlib.import_module("fast.engine.replay").TEMPLATES]
    saved = [dict(cache) for cache in caches]
    try:
        yield tmp_path
    finally:
        for cache, before in zip(caches, saved, strict=True):
            cache.clear()
            cache.update(before)


def awkward(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Values whose sum depends on the order (large and small, cancelling), ties of +0.0 and -0.0, and
    for floats a NaN and infinities in some rows."""
    rng = np.random.default_rng(seed)
    if dtype == "int32":
        return rng.integers(-2**31, 2**31 - 1, shape, dtype=np.int64).astype(np.int32)
    scale = 1e2 if dtype == "float16" else 1e8  # float16 sums stay below its largest value
    values = rng.standard_normal(shape) * rng.choice([1.0, scale, 1e-3], shape)
    values[..., ::7] = rng.choice([0.0, -0.0], values[..., ::7].shape)
    flat = values.reshape(-1, shape[-1])
    flat[1, 3], flat[2, 5], flat[3, 0] = np.nan, np.inf, -np.inf
    flat[4, :] = -0.0
    flat[5, :] = rng.choice([0.0, -0.0], shape[-1])
    return values.astype(dtype)


def reduced(data: np.ndarray, op: ReduceOps, device: str, cache: Path) -> tuple[np.ndarray, str]:
    with config.override(cache_dir=str(cache)):
        x = fast.from_numpy(data, device)
        out = x.r(op, (data.ndim - 1,))
        item = [entry for entry in schedule(out) if getattr(entry, "ast", None) is not None][-1]
        _, source = render_kernel(item.ast, device)
        fast.realize(out)
        return fast.to_numpy(out), source


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, length", [("float32", 128), ("float32", 384), ("float32", 48), ("float64", 128),
                                           ("float16", 256), ("int32", 128), ("float32", 37)])
@pytest.mark.parametrize("op", [ReduceOps.SUM, ReduceOps.MAX])
def test_vector_fold_gives_the_scalar_folds_bits(device: str, dtype: str, length: int, op: ReduceOps,
                                                  own_caches: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = awkward(dtype, (6, 5, length), seed=length)
    vector, source = reduced(data, op, device, own_caches / "vector")
    realize = importlib.import_module("fast.engine.realize")
    for cache in (realize.PROGRAMS, realize.AST_KERNELS, importlib.import_module("fast.engine.replay").TEMPLATES):
        cache.clear()  # nothing of the first run is reused: the scalar fold is lowered and compiled anew

    def one_by_one(self: object, op: object, value: int, lanes: int) -> int:
        return self._combine(op, [self.builder.gep(value, k) for k in range(lanes)])  # type: ignore[attr-defined]

    monkeypatch.setattr(lower_module._Lowering, "_combine_lanes", one_by_one)
    scalar, scalar_source = reduced(data, op, device, own_caches / "scalar")
    assert vector.tobytes() == scalar.tobytes()
    if length % 16 == 0 and dtype != "float16":  # a vectorized reduce: the fold is vector code there
        assert source != scalar_source
    # and the value itself is right: a float SUM within rounding of float64's, MAX exactly (NaN rows NaN)
    wide = data.astype(np.float64)
    if op is ReduceOps.MAX:
        np.testing.assert_array_equal(vector, data.max(-1, keepdims=True))
    elif dtype == "int32":
        np.testing.assert_array_equal(vector, data.sum(-1, keepdims=True, dtype=np.int32))
    else:
        scale = np.abs(wide[np.isfinite(wide)]).max() * length
        np.testing.assert_allclose(vector.astype(np.float64), wide.sum(-1, keepdims=True), rtol=0,
                                   atol=scale * float(np.finfo(dtype).eps) * 4)
