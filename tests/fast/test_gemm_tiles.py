"""float32 GEMMs on AMX tiles (codegen/gemm_tiles.py): values against float64 within the bound of
docs/semantics.md ("matmul on AMX tiles"), the same bits on CLANG and LLVM and for every thread
count, IEEE results where an input is infinite, NaN or huge (those tiles fall back to the unfused
loop), flushing of subnormal values, fused epilogues, layouts and views. Run where the host has
the tiles; the lowering and rendering checks run everywhere (the IR is made whenever the renderer
options say tiles, whatever the host)."""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from kernel_values import empty_kernel_caches

import fast
from fast import BinaryOps, ReduceOps, config
from fast.codegen.ir import IROps, TileOps
from fast.codegen.ir_verify import verify
from fast.codegen.lower import lower
from fast.engine.schedule import schedule
from fast.ops import KernelOps
from fast.renderer.c import C_DIALECT, render_c
from fast.renderer.llvmir import LLVMIRRenderer
from fast.runtime import cpu

DEVICES = ["CLANG", "LLVM"] if importlib.util.find_spec("llvmlite") else ["CLANG"]


def has_tiles(device: str) -> bool:
    """Whether `device`'s renderer makes tiles here (CLANG also needs a compiler that builds them)."""
    from fast.runtime import clang, llvm
    return bool((clang if device == "CLANG" else llvm).create(device).renderer.options.matrix_tiles)


def require_tiles(device: str) -> None:
    if not has_tiles(device):
        pytest.skip(f"{device} makes no tile kernels here (no AMX, or its C compiler cannot build them)")
NEEDS_TILES = pytest.mark.skipif(not cpu.matrix_tiles(),
                                 reason="no AMX tiles with bfloat16 on this host (or MATRIX_TILES=0)")
#: float32's unit roundoff: the tiles' error stays within a few of these times sum |a*b| (module docstring of
#: gemm_tiles.py: 9.5e-8 measured, float32's own serial sum 1.2e-7).
U = 2.0**-24


@pytest.fixture
def own_caches(tmp_path: Path) -> Iterator[Path]:
    """Empty in-process kernel caches and a kernel folder of its own (restored afterwards)."""
    with empty_kernel_caches(), config.override(cache_dir=str(tmp_path)):
        yield tmp_path


def product(a: fast.LazyBuffer, b: fast.LazyBuffer) -> fast.LazyBuffer:
    """a (M, K) @ b (K, N) as the LazyBuffer API writes it."""
    (m, k), n = a.shape, b.shape[1]
    left = a.reshape((m, 1, k)).expand((m, n, k))
    right = b.permute((1, 0)).reshape((1, n, k)).expand((m, n, k))
    return left.e(BinaryOps.MUL, right).r(ReduceOps.SUM, (2,)).reshape((m, n))


Built = Callable[[np.ndarray, np.ndarray, str], tuple[fast.LazyBuffer, np.ndarray]]
LAYOUTS: dict[str, Built] = {}


def layout(name: str) -> Callable[[Built], Built]:
    """Register a way to feed (a, b) to a product: returns (the lazy product, float64 a @ b)."""
    def register(fn: Built) -> Built:
        LAYOUTS[name] = fn
        return fn
    return register


@layout("a@b")
def _ab(a: np.ndarray, b: np.ndarray, device: str) -> tuple[fast.LazyBuffer, np.ndarray]:
    return product(fast.from_numpy(a, device), fast.from_numpy(b, device)), a.astype(np.float64) @ b.astype(np.float64)


@layout("a@b.T")
def _abt(a: np.ndarray, b: np.ndarray, device: str) -> tuple[fast.LazyBuffer, np.ndarray]:
    stored = np.ascontiguousarray(b.T)  # (N, K), as a linear layer's weight
    return product(fast.from_numpy(a, device), fast.from_numpy(stored, device).permute((1, 0))), \
        a.astype(np.float64) @ b.astype(np.float64)


@layout("a.T@b")
def _atb(a: np.ndarray, b: np.ndarray, device: str) -> tuple[fast.LazyBuffer, np.ndarray]:
    stored = np.ascontiguousarray(a.T)  # (K, M)
    return product(fast.from_numpy(stored, device).permute((1, 0)), fast.from_numpy(b, device)), \
        a.astype(np.float64) @ b.astype(np.float64)


@layout("rows of a 3-d a, b flipped")
def _views(a: np.ndarray, b: np.ndarray, device: str) -> tuple[fast.LazyBuffer, np.ndarray]:
    m, k = a.shape
    stacked = fast.from_numpy(a.reshape(2, m // 2, k), device).reshape((m, k))
    flipped = np.ascontiguousarray(b[::-1])
    right = fast.from_numpy(flipped, device).stride((-1, 1))
    return product(stacked, right), a.astype(np.float64) @ b.astype(np.float64)


@layout("b padded with zero columns")
def _padded(a: np.ndarray, b: np.ndarray, device: str) -> tuple[fast.LazyBuffer, np.ndarray]:
    kept = np.ascontiguousarray(b[:, :-16])
    right = fast.from_numpy(kept, device).pad(((0, 0), (0, 16)))
    full = np.concatenate([kept, np.zeros((b.shape[0], 16), np.float32)], axis=1)
    return product(fast.from_numpy(a, device), right), a.astype(np.float64) @ full.astype(np.float64)


def realized(out: fast.LazyBuffer) -> tuple[np.ndarray, frozenset[str]]:
    """The result and the paths of the kernel that computed it."""
    realize = importlib.import_module("fast.engine.realize")
    items = [item for item in schedule(out) if item.ast.op is KernelOps.SINK]
    paths = frozenset().union(*(realize.get_kernel(item.bufs[0].device, item.ast)[0].program.paths for item in items))
    fast.realize(out)
    return fast.to_numpy(out), paths


def inputs(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)


def within_bound(got: np.ndarray, a: np.ndarray, b: np.ndarray, want: np.ndarray, units: float = 8.0) -> None:
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    worst = float(np.max(np.abs(got - want) / np.maximum(scale, 1e-30)))
    assert worst <= units * U, f"error {worst:.3g} of sum |a*b| (bound {units} u = {units * U:.3g})"


@NEEDS_TILES
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("m,k,n", [(32, 32, 32), (48, 64, 96), (128, 384, 64), (64, 1536, 32), (32, 1024, 64)])
def test_values_within_the_bound(own_caches: Path, device: str, name: str, m: int, k: int, n: int) -> None:
    require_tiles(device)
    a, b = inputs(m, k, n, m + k + n)
    out, want = LAYOUTS[name](a, b, device)
    got, paths = realized(out)
    assert "gemm-tiles" in paths
    within_bound(got.reshape(m, n), a, b, want)


@NEEDS_TILES
def test_same_bits_on_both_renderers_and_every_thread_count(tmp_path: Path) -> None:
    a, b = inputs(256, 256, 256, 3)
    results = []
    for device in [device for device in DEVICES if has_tiles(device)]:
        for threads in (1, 2):
            folder = str(tmp_path / f"{device}{threads}")
            with empty_kernel_caches(), config.override(cache_dir=folder, threads=threads):
                got, paths = realized(LAYOUTS["a@b.T"](a, b, device)[0])
            assert "gemm-tiles" in paths
            results.append(got.view(np.uint32))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


@NEEDS_TILES
@pytest.mark.parametrize("device", DEVICES)
def test_infinities_nan_and_huge_values_give_the_unfused_results(own_caches: Path, device: str) -> None:
    """The tiles that hold such a value sum `acc + round(a*b)` in increasing k (IEEE: inf, -inf, NaN
    where float32 gives them); the others stay within the bound."""
    require_tiles(device)
    m, k, n = 64, 64, 64
    a, b = inputs(m, k, n, 5)
    a[3, 7], a[40, 0], b[9, 50], b[20, 33] = np.inf, 3e30, np.nan, -np.inf
    got, paths = realized(LAYOUTS["a@b"](a, b, device)[0])
    assert "gemm-tiles" in paths
    unfused = np.zeros((m, n), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for step in range(k):
            unfused = (unfused + (a[:, step:step + 1] * b[step:step + 1, :]).astype(np.float32)).astype(np.float32)
    fallback = np.zeros((m, n), bool)
    for row, column in ((3, None), (40, None), (None, 50), (None, 33)):
        rows = slice(row // 16 * 16, row // 16 * 16 + 16) if row is not None else slice(None)
        columns = slice(column // 32 * 32, column // 32 * 32 + 32) if column is not None else slice(None)
        fallback[rows, columns] = True
    np.testing.assert_array_equal(got[fallback].view(np.uint32), unfused[fallback].view(np.uint32))
    clean = ~fallback
    assert clean.any()
    finite_a, finite_b = np.where(np.isfinite(a) & (np.abs(a) < 1e20), a, 0), np.nan_to_num(b, posinf=0, neginf=0)
    want = finite_a.astype(np.float64) @ finite_b.astype(np.float64)  # the bad values reach no clean output
    scale = np.abs(finite_a.astype(np.float64)) @ np.abs(finite_b.astype(np.float64))
    assert np.max(np.abs(got - want)[clean] / scale[clean]) <= 8 * U


@NEEDS_TILES
@pytest.mark.parametrize("device", DEVICES)
def test_chunks_of_k_keep_the_unchunked_bits(tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """K of 1024 runs in two chunks of 512 (gemm_tiles.py `chunk_steps`), the sums waiting in the
    output between them: the same bits as K whole (chunks turned off, in kernel caches of their own)."""
    require_tiles(device)
    from fast.codegen import gemm_tiles

    m, k, n = 64, 1024, 64
    a, b = inputs(m, k, n, 13)
    results = []
    for least in (gemm_tiles.CHUNK_MIN_K, 1 << 30):
        monkeypatch.setattr(gemm_tiles, "CHUNK_MIN_K", least)
        with empty_kernel_caches(), config.override(cache_dir=str(tmp_path / str(least))):
            got, paths = realized(LAYOUTS["a@b.T"](a, b, device)[0])
        assert "gemm-tiles" in paths
        results.append(got.view(np.uint32))
    np.testing.assert_array_equal(results[0], results[1])
    within_bound(results[0].view(np.float32), a, b, a.astype(np.float64) @ b.astype(np.float64))


@NEEDS_TILES
@pytest.mark.parametrize("device", DEVICES)
def test_chunks_with_an_infinity_in_one(own_caches: Path, device: str) -> None:
    """An infinity in the second chunk of K: that chunk of its tiles runs unfused, the first on the
    tiles; infinities and NaN where float32 gives them, the rest within the bound."""
    require_tiles(device)
    m, k, n = 32, 1024, 64
    a, b = inputs(m, k, n, 17)
    a[5, 700], b[600, 40] = np.inf, -np.inf
    got, paths = realized(LAYOUTS["a@b"](a, b, device)[0])
    assert "gemm-tiles" in paths
    with np.errstate(invalid="ignore", over="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    finite_a, finite_b = np.nan_to_num(a.astype(np.float64), posinf=0), np.nan_to_num(b.astype(np.float64), neginf=0)
    scale = np.abs(finite_a) @ np.abs(finite_b)
    assert np.max(np.abs(got[finite] - want[finite]) / scale[finite]) <= 8 * U


@NEEDS_TILES
@pytest.mark.parametrize("device", DEVICES)
def test_subnormal_values_flush_to_zero(own_caches: Path, device: str) -> None:
    """A subnormal input reads as zero and products below float32's smallest normal are dropped: the
    error is at most 2^-126 per partial product and sum (semantics: seven a step of K)."""
    require_tiles(device)
    m, k, n = 32, 64, 32
    a, b = inputs(m, k, n, 7)
    a[0, :] = np.float32(1e-39)  # subnormal
    a[1, :] = np.float32(1e-30)  # normal, its products with b below 2^-126 in part
    got, _ = realized(LAYOUTS["a@b"](a, b, device)[0])
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.all(np.abs(got[:2] - want[:2]) <= 7 * k * 2.0**-126)
    within_bound(got[2:], a[2:], b, want[2:])


@NEEDS_TILES
@pytest.mark.parametrize("device", DEVICES)
def test_a_fused_epilogue(own_caches: Path, device: str) -> None:
    """x @ W.T + bias, then max(., 0) and a residual: the epilogue runs on the tile's sums."""
    require_tiles(device)
    from fast import xp

    rng = np.random.default_rng(11)
    x, w = rng.uniform(-1, 1, (64, 96)).astype(np.float32), rng.uniform(-1, 1, (128, 96)).astype(np.float32)
    bias, residual = rng.uniform(-1, 1, 128).astype(np.float32), rng.uniform(-1, 1, (64, 128)).astype(np.float32)
    y = xp.maximum(xp.matmul(xp.asarray(x, device=device), xp.matrix_transpose(xp.asarray(w, device=device)))
                   + xp.asarray(bias, device=device), 0.0) + xp.asarray(residual, device=device)
    got = np.asarray(y)
    want = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + bias, 0.0) + residual
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def tile_ast(m: int, k: int, n: int) -> fast.LazyOp:
    a, b = inputs(m, k, n, 1)
    out = product(fast.from_numpy(a, "CLANG"), fast.from_numpy(b, "CLANG"))
    return [item for item in schedule(out) if item.ast.op is KernelOps.SINK][-1].ast


@pytest.mark.parametrize("m,k,n,tiles", [(64, 64, 64, True), (64, 48, 64, False), (40, 64, 64, False),
                                          (64, 64, 48, False)])
def test_lowering_with_tiles_verifies_and_renders(m: int, k: int, n: int, tiles: bool) -> None:
    """Wherever the options say tiles (any host): K % 32, M % 16 and N % 32 decide; the program
    verifies and both renderers write it (configured first, released last)."""
    options = dataclasses.replace(cpu_options_with_vectors(), matrix_tiles=True)
    program = lower(tile_ast(m, k, n), options)
    verify(program)
    forms = [instr.arg[0] for instr in program.instrs if instr.op is IROps.TILE]
    assert ("gemm-tiles" in program.paths) is tiles
    assert bool(forms) is tiles
    if tiles:
        assert forms[0] is TileOps.CONFIG and forms[-1] is TileOps.RELEASE
        assert "_tile_dpbf16ps" in render_c(program, C_DIALECT)
        assert "@llvm.x86.tdpbf16ps" in LLVMIRRenderer(options).render(program)


def test_no_tiles_without_the_option() -> None:
    program = lower(tile_ast(64, 64, 64), dataclasses.replace(cpu_options_with_vectors(), matrix_tiles=False))
    assert "gemm-tiles" not in program.paths
    assert not any(instr.op is IROps.TILE for instr in program.instrs)


def cpu_options_with_vectors():  # type: ignore[no-untyped-def]
    """AVX-512's options (64-byte vectors, the tiles' lanes), whatever this host has."""
    from fast.renderer.base import cpu_options

    return cpu_options(64, fused_multiply_add=True, matrix_tiles=True)
