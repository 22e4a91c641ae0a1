"""A GEMM whose B already lies as packed B would hold it (fast/codegen/gemm_pack.py `reads_b_in_place`:
N = NR, contiguous columns, steps NR apart, K whole) reads B where it is; the pass over B only ANDs
its bound flag. Checked: which layouts qualify (and that views, edges, transposes and masks do not),
that such a kernel has no packed-B scratch, and that it gives the bits of the same product through
packed B on awkward sizes, with values past the FMA bound, NaN and infinities in B, on 1-3 threads."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fast
from fast import config, xp
from fast.codegen import gemm
from fast.codegen.analyze import analyze
from fast.codegen.gemm_pack import reads_b_in_place
from fast.codegen.lower import lower
from fast.runtime import cpu
from tests.fast.test_gemm import _check

DEVICES = ["CLANG", "LLVM"]
OPTIONS = dataclasses.replace(cpu.renderer_options(), matrix_tiles=False)  # the FMA micro-kernel's lowering
TILES_KNOWN = OPTIONS.gemm and OPTIONS.lanes(fast.dtypes.float32) >= 4
needs_tiles = pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")


def _kernel_ast(out: xp.Array) -> object:
    return [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast


def _in_place(out: xp.Array) -> bool:
    """Whether the GEMM realizing `out` reads its B in place (None-safe: False when no GEMM)."""
    shape = gemm.match(analyze(_kernel_ast(out)), OPTIONS)  # type: ignore[arg-type]
    tiles = gemm.choose_tiles(shape, OPTIONS) if shape is not None else None
    return shape is not None and tiles is not None and reads_b_in_place(shape, tiles)


def _columns() -> int:
    """NR: the columns of this host's register tile for float32 (from a product that has one panel)."""
    x, y = xp.asarray(np.ones((3, 37, 20), np.float32)), xp.asarray(np.ones((3, 20, 24), np.float32))
    shape = gemm.match(analyze(_kernel_ast(x @ y)), OPTIONS)  # type: ignore[arg-type]
    assert shape is not None
    tiles = gemm.choose_tiles(shape, OPTIONS)
    assert tiles is not None
    return tiles.columns


@needs_tiles
def test_which_layouts_are_read_in_place() -> None:
    """Contiguous (batch, K, NR) and (K, NR) B: in place. N one more or one less than NR, B a
    transposed view, B the first NR columns of a wider array (steps wider than NR), B a padded view,
    or a head split (steps of heads x NR): packed."""
    nr = _columns()
    a = xp.asarray(np.ones((4, 37, 40), np.float32))
    assert _in_place(a @ xp.asarray(np.ones((4, 40, nr), np.float32)))
    assert _in_place(xp.asarray(np.ones((61, 40), np.float32)) @ xp.asarray(np.ones((40, nr), np.float32)))
    assert not _in_place(a @ xp.asarray(np.ones((4, 40, nr + 1), np.float32)))
    assert not _in_place(a @ xp.asarray(np.ones((4, 40, nr - 1), np.float32)))
    assert not _in_place(a @ xp.asarray(np.ones((4, nr, 40), np.float32)).mT)
    assert not _in_place(a @ xp.asarray(np.ones((4, 40, 2 * nr), np.float32))[..., :nr])
    padded = fast.LazyBuffer.pad(xp.asarray(np.ones((4, 39, nr), np.float32)).lazy, ((0, 0), (0, 1), (0, 0)))
    assert not _in_place(a @ xp.asarray(padded))
    heads = xp.permute_dims(xp.reshape(xp.asarray(np.ones((4, 40, 3 * nr), np.float32)), (4, 40, 3, nr)), (0, 2, 1, 3))
    assert not _in_place(xp.asarray(np.ones((4, 3, 37, 40), np.float32)) @ heads)


@needs_tiles
def test_a_kernel_reading_b_in_place_has_no_packed_b() -> None:
    """The same product with B contiguous and with B a view of a wider array: the first kernel has one
    float scratch fewer (packed B, K x NR values) and the same flags, and its paths record
    `gemm-b-in-place` (fast/codegen/paths.py, read by conformance's coverage)."""
    nr = _columns()
    a = xp.asarray(np.ones((2, 37, 45), np.float32))
    contiguous = lower(_kernel_ast(a @ xp.asarray(np.ones((2, 45, nr), np.float32))), OPTIONS)  # type: ignore[arg-type]
    view = lower(_kernel_ast(a @ xp.asarray(np.ones((2, 45, 2 * nr), np.float32))[..., :nr]), OPTIONS)  # type: ignore[arg-type]

    def floats(program: object) -> list[int]:
        return sorted(array.size for array in program.scratch if array.dtype == fast.dtypes.float32)  # type: ignore[attr-defined]

    def flags(program: object) -> list[int]:
        return sorted(array.size for array in program.scratch if array.dtype == fast.dtypes.bool)  # type: ignore[attr-defined]

    assert 45 * nr in floats(view) and 45 * nr not in floats(contiguous)
    assert len(floats(view)) == len(floats(contiguous)) + 1 and flags(view) == flags(contiguous)
    assert "gemm-b-in-place" in contiguous.paths and "gemm-b-in-place" not in view.paths  # type: ignore[attr-defined]


def _both(device: str, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a @ b with B contiguous (read in place) and with B the first columns of a wider array
    (packed): the same products in the same order."""
    wide = np.concatenate([b, np.ones_like(b)], axis=-1)
    x = xp.asarray(a, device=device)
    in_place, packed = x @ xp.asarray(b, device=device), x @ xp.asarray(wide, device=device)[..., :b.shape[-1]]
    assert _in_place(in_place) and not _in_place(packed)
    return np.asarray(in_place), np.asarray(packed)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,m,k", [(2, 37, 5), (3, 40, 16), (1, 41, 17), (2, 64, 31), (2, 37, 129), (1, 131, 64)])
def test_the_bits_of_the_packed_product(device: str, batch: int, m: int, k: int) -> None:
    """Awkward sizes (M prime or one past a tile's rows, K prime, one past a line of A's row, one
    short of two): the same bits as packed B, and within the float sum tolerance of a float64
    reference. (With fewer rows than B's columns the matcher swaps the operands: B is then the
    rows' operand and nothing is read in place.)"""
    nr = _columns()
    rng = np.random.default_rng(batch * 10_000 + m * 100 + k)
    a, b = rng.standard_normal((batch, m, k)).astype(np.float32), rng.standard_normal((batch, k, nr)).astype(np.float32)
    got, packed = _both(device, a, b)
    np.testing.assert_array_equal(got, packed)
    _check(got, a, b)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_b_past_the_bound_nan_and_infinity(device: str) -> None:
    """B's flag still comes from the pass: a value past the FMA bound in batch 0 (its tiles run
    unfused: the bits of the specified sum, one rounding per product and per addition), a NaN in
    batch 1 (NaN down its column), an infinity in batch 2; the same bits on 1, 2 and 3 threads."""
    nr = _columns()
    rng = np.random.default_rng(22)
    a, b = rng.standard_normal((3, 41, 129)).astype(np.float32), rng.standard_normal((3, 129, nr)).astype(np.float32)
    b[0, 7, 3], b[1, 100, 5], b[2, 128, 0] = 1e30, np.nan, np.inf
    results = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
            results.append(_both(device, a, b))
    for got, packed in results:
        np.testing.assert_array_equal(got, results[0][0])
        np.testing.assert_array_equal(packed, results[0][0])
    got = results[0][0]
    assert np.isnan(got[1, :, 5]).all() and np.isinf(got[2, :, 0]).all()
    unfused = np.zeros((41, nr), np.float32)  # the specified sum, in K's order: acc + round(a * b)
    for step in range(129):
        unfused = unfused + a[0, :, step:step + 1] * b[0, step]
    np.testing.assert_array_equal(got[0], unfused)


@needs_tiles
def test_without_fma_nothing_passes_over_b() -> None:
    """Where products are not fused (no FMA on the host) there is no flag to compute: a B read in
    place then has no pass (the two loops of the packed path's copy are gone, not left empty) and
    the kernel no scratch at all, where the packed path keeps its copy."""
    nr = _columns()
    unfused = dataclasses.replace(OPTIONS, fused_multiply_add=False)
    a = xp.asarray(np.ones((2, 37, 45), np.float32))
    contiguous = lower(_kernel_ast(a @ xp.asarray(np.ones((2, 45, nr), np.float32))), unfused)  # type: ignore[arg-type]
    view = lower(_kernel_ast(a @ xp.asarray(np.ones((2, 45, 2 * nr), np.float32))[..., :nr]), unfused)  # type: ignore[arg-type]
    assert "gemm-b-in-place" in contiguous.paths and not contiguous.scratch  # type: ignore[attr-defined]
    assert [array.size for array in view.scratch] == [45 * nr]  # type: ignore[attr-defined]

    def loops(program: object) -> int:
        return sum(instr.op.name == "LOOP" for instr in program.instrs)  # type: ignore[attr-defined]

    assert loops(contiguous) == loops(view) - 2
