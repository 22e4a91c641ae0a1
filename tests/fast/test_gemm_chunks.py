"""A GEMM with a long K runs in chunks of KC steps (fast/codegen/gemm.py `chunk_steps`): B and A are
packed chunk by chunk, and each tile's sums wait in the output between chunks. Each output still
adds its K products in index order into one float32 accumulator, so with every input within the FMA
bound the bits are those of the same product run with K whole (its output cast to float64, which
the sums cannot wait in), in every
layout, on 1, 2 and 3 threads, on poisoned memory, with epilogues; beyond the bound the FMA choice
is per tile and chunk, and the values stay within tolerance of float64 with the infinities where a
product overflows. Kernels whose output cannot hold the sums keep K whole."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import fast
from fast import config, xp
from fast.codegen import gemm
from fast.codegen.analyze import analyze
from fast.runtime import cpu

DEVICES = ["CLANG", "LLVM"]
OPTIONS = cpu.renderer_options()
LANES = OPTIONS.lanes(fast.dtypes.float32)
needs_tiles = pytest.mark.skipif(not (OPTIONS.gemm and LANES >= 4),
                                 reason="this host's renderer has no vectors for GEMM tiles")


def _tiles(out: xp.Array) -> gemm.GemmTiles | None:
    ast = [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast
    shape = gemm.match(analyze(ast), OPTIONS)
    return gemm.choose_tiles(shape, OPTIONS) if shape is not None else None


def _product(layout: str, a: np.ndarray, b: np.ndarray, device: str) -> xp.Array:
    """a @ b with a given (M, K) and b (K, N), stored as `layout` says: "ab", "abt" (b stored (N,
    K)), "atb" (a stored (K, M))."""
    left = xp.asarray(np.ascontiguousarray(a.T), device=device) if layout == "atb" else xp.asarray(a, device=device)
    right = xp.asarray(np.ascontiguousarray(b.T), device=device) if layout == "abt" else xp.asarray(b, device=device)
    left = xp.matrix_transpose(left) if layout == "atb" else left
    return left @ (xp.matrix_transpose(right) if layout == "abt" else right)


def _chunked_and_whole(build: Callable[[], xp.Array], threads: int) -> tuple[np.ndarray, np.ndarray]:
    """`build()` run in chunks of K, and the same product cast to float64 after the last step of its
    kernel (an output the sums cannot wait in: K whole; the cast of a float32 is exact), as float32."""
    with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
        out = build()
        whole = xp.astype(build(), xp.float64)
        assert _tiles(out).chunk > 0 and _tiles(whole).chunk == 0  # type: ignore[union-attr]
        return np.asarray(out), np.asarray(whole).astype(np.float32)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["ab", "abt", "atb"])
@pytest.mark.parametrize("m,k,n", [(37, 1024, 4 * 4 * LANES), (97, 1536, 10 * LANES), (70, 1280, 9 * LANES)])
def test_chunks_give_the_bits_of_k_whole(device: str, layout: str, m: int, k: int, n: int) -> None:
    """Two, three and five chunks (KC 512, 512, 256), an edge block of rows, wide and narrow B."""
    rng = np.random.default_rng(m + k + n)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    for threads in (1, 2, 3):
        chunked, whole = _chunked_and_whole(lambda: _product(layout, a, b, device), threads)
        np.testing.assert_array_equal(chunked, whole)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    np.testing.assert_array_less(np.abs(whole - exact), bound * (k + 2) * float(np.finfo(np.float32).eps) + 1e-6)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_chunks_with_epilogues(device: str) -> None:
    """A bias, a tanh and a scale after the product (unrolled and looped epilogues) run once, after
    the last chunk: the bits of K whole."""
    rng = np.random.default_rng(4)
    m, k, n = 45, 1024, 8 * LANES
    a, b, bias = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (k, n), (n,)))

    def plain() -> xp.Array:
        return _product("ab", a, b, device) + xp.asarray(bias, device=device)

    def activated() -> xp.Array:
        return xp.tanh(_product("abt", a, b, device) * 0.05 + xp.asarray(bias, device=device)) * 0.5

    for build in (plain, activated):
        for threads in (1, 2):
            chunked, whole = _chunked_and_whole(build, threads)
            np.testing.assert_array_equal(chunked, whole)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_chunks_beyond_the_fma_bound(device: str) -> None:
    """Huge values in one chunk of some rows: those tiles round each product in that chunk only;
    within tolerance of float64, and an overflowing product's row is infinite as specified."""
    rng = np.random.default_rng(9)
    m, k, n = 40, 1024, 4 * 4 * LANES
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    a[3, 700] = 3e37  # within float32 as a product with |b| < 11: finite, beyond the bound
    a[20, 10] = 1e38
    b[10, :] = 1e10  # a[20, 10] * b[10, j] overflows: row 20 is +inf or -inf wherever it does
    with config.override(threads=2, parallel_min_work=1, alloc_poison=True):
        out = _product("ab", a, b, device)
        assert _tiles(out).chunk > 0  # type: ignore[union-attr]
        got = np.asarray(out)
    with np.errstate(over="ignore"):
        overflow = np.isinf(np.float32(a[20, 10]) * b[10])
    assert np.isinf(got[20][overflow]).all()
    rows = [r for r in range(m) if r != 20]
    exact = a[rows].astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a[rows]).astype(np.float64) @ np.abs(b).astype(np.float64)
    np.testing.assert_array_less(np.abs(got[rows] - exact), bound * (k + 2) * float(np.finfo(np.float32).eps) + 1e-6)


@needs_tiles
def test_kernels_whose_output_cannot_hold_the_sums_keep_k_whole() -> None:
    """A cast of the product to float16 (the sums would not survive the output's dtype) and a batch
    keep K whole; short K, a B of a few micro-panels and N off whole vectors too."""
    a, b = xp.asarray(np.ones((40, 1024), np.float32)), xp.asarray(np.ones((1024, 8 * LANES), np.float32))
    assert _tiles(a @ b).chunk > 0  # type: ignore[union-attr]
    assert _tiles(xp.astype(a @ b, xp.float16)).chunk == 0  # type: ignore[union-attr]
    batched = xp.asarray(np.ones((2, 40, 1024), np.float32)) @ xp.asarray(np.ones((2, 1024, 8 * LANES), np.float32))
    assert _tiles(batched).chunk == 0  # type: ignore[union-attr]
    assert _tiles(xp.asarray(np.ones((40, 512), np.float32)) @ xp.asarray(np.ones((512, 8 * LANES), np.float32))
                  ).chunk == 0  # type: ignore[union-attr]
    assert _tiles(a @ xp.asarray(np.ones((1024, LANES), np.float32))).chunk == 0  # type: ignore[union-attr]
    assert _tiles(a @ xp.asarray(np.ones((1024, 8 * LANES + 1), np.float32))).chunk == 0  # type: ignore[union-attr]
