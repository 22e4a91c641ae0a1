"""Packed A of a GEMM whose A is stored along M (`a.T @ b`): the full blocks are copied in squares of
lanes x lanes through a register transpose, the rows left over one by one, and the blocks' FMA bound
flags read back from the packed copy (fast/codegen/gemm_pack_a.py). The same values land in the same
places as the row-by-row pass of a contiguous A, so `a.T @ b` must give the bits of `a_copy @ b` (A
made contiguous first), on every thread count, with values beyond the FMA bound in some blocks, on
poisoned memory, with K tails, edge blocks, rows left over past the last square, several groups,
padded views, a batch and float64."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import fast
from fast import config, xp
from fast.codegen import gemm
from fast.codegen.analyze import analyze
from fast.codegen.lower import lower
from fast.runtime import cpu

DEVICES = ["CLANG", "LLVM"]
OPTIONS = dataclasses.replace(cpu.renderer_options(), matrix_tiles=False)  # the FMA micro-kernel's lowering
LANES = OPTIONS.lanes(fast.dtypes.float32)
needs_tiles = pytest.mark.skipif(not (OPTIONS.gemm and LANES >= 4 and LANES & (LANES - 1) == 0),
                                 reason="this host's renderer has no power-of-two vectors for GEMM tiles")


def _kernel(out: xp.Array) -> object:
    return [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast


def _shape_and_tiles(out: xp.Array) -> tuple[gemm.GemmShape, gemm.GemmTiles]:
    shape = gemm.match(analyze(_kernel(out)), OPTIONS)
    assert shape is not None
    tiles = gemm.choose_tiles(shape, OPTIONS)
    assert tiles is not None
    return shape, tiles


def _shuffles(out: xp.Array) -> int:
    """SHUFFLEs of numbers (the bool ones fold the bound flags' lanes: GemmEmitter.all_lanes)."""
    return sum(instr.op.name == "SHUFFLE" and instr.dtype.scalar() != fast.dtypes.bool  # type: ignore[attr-defined]
               for instr in lower(_kernel(out), OPTIONS).instrs)  # type: ignore[attr-defined]


def _wide() -> int:
    """N wide enough for A to be packed (at least `PACK_A_MIN_PANELS` micro-panels of the widest
    tile), plus an edge of 3 columns."""
    widest = gemm.WIDE_VECTORS if OPTIONS.vector_registers >= 32 else 2
    return gemm.PACK_A_MIN_PANELS * widest * LANES + 3


@needs_tiles
def test_a_stored_along_m_is_packed_in_squares() -> None:
    """a.T @ b takes the squares (its program shuffles; a @ b with the same B does not), its group
    of rows is whole squares, and a @ b's A is not taken for one."""
    m, k, n = 200, 96, _wide()
    a, b = xp.asarray(np.ones((k, m), np.float32)), xp.asarray(np.ones((k, n), np.float32))
    transposed = xp.matrix_transpose(a) @ b
    shape, tiles = _shape_and_tiles(transposed)
    assert gemm.transposes_a(shape, tiles.lanes) and gemm.packs_a(shape, tiles)
    assert tiles.group_rows % tiles.lanes == 0
    least = tiles.rows * tiles.lanes // math.gcd(tiles.rows, tiles.lanes)
    by_cache = (OPTIONS.cache_bytes // 2) // (k * 4 * tiles.rows) * tiles.rows
    assert tiles.group_rows == max(least, by_cache // least * least)  # rounded down, never past the cache's
    plain = xp.asarray(np.ones((m, k), np.float32)) @ b
    assert not gemm.transposes_a(_shape_and_tiles(plain)[0], tiles.lanes)
    assert _shuffles(transposed) >= LANES and _shuffles(plain) == 0


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1 * LANES, 2 * LANES + 3, 3 * LANES, 5 * LANES - 1])
def test_narrow_b_packs_a_stored_along_m(device: str, n: int) -> None:
    """An A stored along M is packed (in squares) whatever B's width: one or two micro-panels, which
    would read A in place and check it in the tiles (gemm_checked.py) for a contiguous A, and a
    few more (`x.T @ dy` on few output features); the same bits as a contiguous A."""
    rng = np.random.default_rng(n)
    m, k = 70, 130
    a_stored, b = rng.standard_normal((k, m)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    shape, tiles = _shape_and_tiles(xp.matrix_transpose(xp.asarray(a_stored)) @ xp.asarray(b))
    assert gemm.packs_a(shape, tiles) and tiles.group_rows % tiles.lanes == 0
    contiguous, _ = _shape_and_tiles(xp.asarray(np.ascontiguousarray(a_stored.T)) @ xp.asarray(b))
    assert not gemm.packs_a(contiguous, gemm.choose_tiles(contiguous, OPTIONS))  # type: ignore[arg-type]
    _same_as_contiguous(device, a_stored, b)


def _same_as_contiguous(device: str, a_stored: np.ndarray, b: np.ndarray, dtype: type = np.float32) -> None:
    """a_stored.T @ b on 1, 2 and 3 threads (poisoned memory) has the bits of the same product with
    A made contiguous first, and is within tolerance of float64."""
    a = np.ascontiguousarray(a_stored.T)
    results = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
            left = xp.matrix_transpose(xp.asarray(a_stored, device=device))
            results.append(np.asarray(left @ xp.asarray(b, device=device)))
    with config.override(alloc_poison=True):
        contiguous = np.asarray(xp.asarray(a, device=device) @ xp.asarray(b, device=device))
    for other in results:
        np.testing.assert_array_equal(other, contiguous)
    ordinary = (np.abs(a) < 1e30).all(axis=-1)  # rows without the test's huge values, infinities, NaNs
    exact = a[ordinary].astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a[ordinary]).astype(np.float64) @ np.abs(b).astype(np.float64)
    tolerance = bound * (a.shape[-1] + 2) * float(np.finfo(dtype).eps) + 1e-6
    np.testing.assert_array_less(np.abs(contiguous[ordinary] - exact), tolerance)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k", [(32, 64), (97, 67), (LANES * 8 + 1, 80), (LANES * 8 - 1, 129), (131, LANES)])
def test_squares_with_tails_and_edges(device: str, m: int, k: int) -> None:
    """Primes, one more and one less than whole squares, K with and without a tail, K of one square."""
    rng = np.random.default_rng(m * k)
    n = _wide()
    _same_as_contiguous(device, rng.standard_normal((k, m)).astype(np.float32),
                        rng.standard_normal((k, n)).astype(np.float32))


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_several_groups_and_shares(device: str) -> None:
    """Enough rows for several groups of rows per thread share, so shares start and end inside
    squares and leave rows over."""
    rng = np.random.default_rng(7)
    k = 300
    _, tiles = _shape_and_tiles(xp.matrix_transpose(xp.asarray(np.ones((k, 400), np.float32)))
                                @ xp.asarray(np.ones((k, _wide()), np.float32)))
    m = 2 * tiles.group_rows + 37
    _same_as_contiguous(device, rng.standard_normal((k, m)).astype(np.float32),
                        rng.standard_normal((k, _wide())).astype(np.float32))


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_blocks_beyond_the_fma_bound(device: str) -> None:
    """Huge values, an infinity and a NaN in some rows of A: their blocks run unfused, the others
    fused, exactly as with a contiguous A (the flags come from the packed copy)."""
    rng = np.random.default_rng(11)
    m, k = 150, 70
    a_stored = rng.standard_normal((k, m)).astype(np.float32)
    a_stored[3, 10] = 3e38
    a_stored[5, 77] = np.inf
    a_stored[k - 1, 140] = np.nan
    a_stored[k - 2, 149] = -2e38
    _same_as_contiguous(device, a_stored, rng.standard_normal((k, _wide())).astype(np.float32))


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_padded_view_batch_and_float64(device: str) -> None:
    """A padded along M and K before the transpose (validity masks in the squares' loads), a batch of
    two, and float64 (its own lanes)."""
    rng = np.random.default_rng(5)
    k, m = 77, 90
    a_small = rng.standard_normal((k - 2, m - 5)).astype(np.float32)
    b = rng.standard_normal((k, _wide())).astype(np.float32)
    with config.override(alloc_poison=True):
        padded = xp.asarray(np.pad(a_small, ((1, 1), (2, 3))), device=device)
        view = xp.asarray(xp.asarray(a_small, device=device).lazy.pad(((1, 1), (2, 3))))
        got = np.asarray(xp.matrix_transpose(view) @ xp.asarray(b, device=device))
        want = np.asarray(xp.matrix_transpose(padded) @ xp.asarray(b, device=device))
    np.testing.assert_array_equal(got, want)
    batch = rng.standard_normal((2, k, m)).astype(np.float32)
    b2 = rng.standard_normal((2, k, _wide())).astype(np.float32)
    with config.override(alloc_poison=True):
        got = np.asarray(xp.matrix_transpose(xp.asarray(batch, device=device)) @ xp.asarray(b2, device=device))
        want = np.asarray(xp.asarray(np.ascontiguousarray(np.swapaxes(batch, 1, 2)), device=device)
                          @ xp.asarray(b2, device=device))
    np.testing.assert_array_equal(got, want)
    _same_as_contiguous(device, rng.standard_normal((k, m)), rng.standard_normal((k, _wide())), np.float64)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_long_k_keeps_packed_a_within_the_scratch(device: str) -> None:
    """A K so long that the fewest whole squares of rows would pass `SCRATCH_BYTES` of packed A (a
    stack array): the general rule decides (here: A read in place, narrow B), and the values hold."""
    rng = np.random.default_rng(2)
    m, n = 50, 20
    _, tiles = _shape_and_tiles(xp.matrix_transpose(xp.asarray(np.ones((64, m), np.float32)))
                                @ xp.asarray(np.ones((64, n), np.float32)))  # the rows do not depend on K
    least = tiles.rows * tiles.lanes // math.gcd(tiles.rows, tiles.lanes)
    k = gemm.SCRATCH_BYTES // (4 * least) + 7  # under the reduce split's 32,768
    a_stored, b = rng.standard_normal((k, m)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    shape, tiles = _shape_and_tiles(xp.matrix_transpose(xp.asarray(a_stored)) @ xp.asarray(b))
    assert gemm.transposes_a(shape, tiles.lanes)
    assert not gemm.squares_a(shape, tiles.rows, tiles.lanes, shape.sizes[shape.reduce])
    assert not gemm.packs_a(shape, tiles)
    _same_as_contiguous(device, a_stored, b)
