"""A GEMM with a long K runs in chunks of KC steps (fast/codegen/gemm.py `chunk_steps`): B and A are
packed chunk by chunk, and each tile's sums wait in the output between chunks. Each output still
adds its K products in index order into one float32 accumulator, so with every input within the FMA
bound the bits are those of the same product run with K whole (its output cast to float64, which
the sums cannot wait in), in every
layout, on 1, 2 and 3 threads, on poisoned memory, with epilogues; beyond the bound the FMA choice
is per tile and chunk, and the values stay within tolerance of float64 with the infinities where a
product overflows. Kernels whose output cannot hold the sums keep K whole."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

import fast
from fast import config, xp
from fast.codegen import gemm
from fast.codegen.analyze import analyze
from fast.runtime import cpu

DEVICES = ["CLANG", "LLVM"]
OPTIONS = dataclasses.replace(cpu.renderer_options(), matrix_tiles=False)  # the FMA micro-kernel's lowering
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


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_in_place_accumulate(device: str) -> None:
    """`c = c + a @ b` assigned into c: the product is a kernel of its own, writing a buffer nobody
    else reads meanwhile, in chunks (a kernel reading its own output would keep K whole:
    `gemm.holds_partial_sums`); c gets old c plus the product."""
    from fast.ops import BinaryOps
    rng = np.random.default_rng(12)
    shapes = ((40, 1024), (1024, 8 * LANES), (40, 8 * LANES))
    a, b, c = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    with config.override(alloc_poison=True):
        target = xp.asarray(c, device=device).lazy
        product = xp.asarray(a, device=device) @ xp.asarray(b, device=device)
        out = target.assign(product.lazy.e(BinaryOps.ADD, target))
        gemms = [shape for item in fast.schedule(out) if item.ast.op.name == "SINK"
                 if (shape := gemm.match(analyze(item.ast), OPTIONS)) is not None]
        assert len(gemms) == 1 and gemms[0].in_output
        got = fast.to_numpy(out)
    exact = a.astype(np.float64) @ b.astype(np.float64) + c
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + np.abs(c)
    np.testing.assert_array_less(np.abs(got - exact), bound * (a.shape[1] + 3) * float(np.finfo(np.float32).eps) + 1e-6)


@needs_tiles
def test_a_kernel_reading_its_output_keeps_k_whole() -> None:
    """The product's kernel rewritten to add its output buffer's old values in the epilogue (what an
    in-place accumulate fused into one kernel would read): its output cannot hold the sums."""
    from fast.ops import BinaryOps, BufferOps, LazyOp
    out = xp.asarray(np.ones((40, 1024), np.float32)) @ xp.asarray(np.ones((1024, 8 * LANES), np.float32))
    ast = [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast
    store = ast.src[0]
    old = LazyOp(BufferOps.LOAD, (), store.arg)
    rewritten = LazyOp(ast.op, (LazyOp(store.op, (LazyOp(BinaryOps.ADD, (store.src[0], old)),), store.arg),), ast.arg)
    before, after = gemm.match(analyze(ast), OPTIONS), gemm.match(analyze(rewritten), OPTIONS)
    assert before is not None and before.in_output
    assert after is not None and not after.in_output and gemm.choose_tiles(after, OPTIONS).chunk == 0  # type: ignore[union-attr]
