"""The edge micro-panel of a GEMM (N % NR columns) is computed in whole vectors of `lanes` over
packed B's zeros past N, and only the columns that exist are stored (fast/codegen/gemm.py
`padded_vectors`). Checked on every width of the edge, in both orientations (x's rows, and W's rows
for a linear on a few tokens), with epilogues, against float64 products; the micro-kernels keep no
accumulator narrower than a vector; nothing past N is written (poisoned outputs around a view)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fast
from fast import config, xp
from fast.codegen.lower import lower
from fast.runtime import cpu

DEVICES = ["CLANG", "LLVM"]
OPTIONS = dataclasses.replace(cpu.renderer_options(), matrix_tiles=False)  # the FMA micro-kernel's lowering
LANES = OPTIONS.lanes(fast.dtypes.float32)
TILES_KNOWN = OPTIONS.gemm and LANES >= 4
needs_tiles = pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")


def _program(out: xp.Array) -> object:
    items = [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"]
    return lower(items[-1].ast, OPTIONS)


def _float_accumulators(program: object) -> list[int]:
    """The lane count of every float accumulator the program defines."""
    return [instr.dtype.count for instr in program.instrs  # type: ignore[attr-defined]
            if instr.op.name == "DEFINE_ACC" and instr.dtype.scalar() == fast.dtypes.float32]


def _within_tolerance(got: np.ndarray, a: np.ndarray, b: np.ndarray, extra: np.ndarray | float = 0.0) -> None:
    exact = a.astype(np.float64) @ b.astype(np.float64) + extra
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + np.abs(extra)
    tolerance = bound * (a.shape[-1] + 2) * float(np.finfo(np.float32).eps) + 1e-6
    np.testing.assert_array_less(np.abs(got - exact), tolerance)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("width", list(range(1, 2 * LANES)) if TILES_KNOWN else [1])
def test_every_edge_width_on_x_rows(device: str, width: int) -> None:
    """`a @ b` with N = 2 NR + width (AVX2: 32 + 1..15): full panels, then an edge of `width`."""
    rng = np.random.default_rng(width)
    n = 4 * LANES + width
    a, b = rng.standard_normal((45, 37)).astype(np.float32), rng.standard_normal((37, n)).astype(np.float32)
    out = xp.asarray(a, device=device) @ xp.asarray(b, device=device)
    program = _program(out)
    assert program.scratch and set(_float_accumulators(program)) == {LANES}  # type: ignore[attr-defined]
    _within_tolerance(np.asarray(out), a, b)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tokens", [4, 5, 6, 7, 9, 13, 15, 17, 23, 31])
def test_linears_on_few_tokens(device: str, tokens: int) -> None:
    """`x @ W.T + bias` (W the rows' operand, the tokens B's columns), with GELU-like tanh epilogue
    too: every token count's edge (one micro-panel or a full one and an edge)."""
    rng = np.random.default_rng(tokens)
    x, w, bias = (rng.standard_normal(shape).astype(np.float32) for shape in ((tokens, 96), (70, 96), (70,)))
    xx, wx, bx = (xp.asarray(value, device=device) for value in (x, w, bias))
    plain = xx @ xp.matrix_transpose(wx) + bx
    program = _program(plain)
    assert program.scratch and set(_float_accumulators(program)) == {LANES}  # type: ignore[attr-defined]
    _within_tolerance(np.asarray(plain), x, np.ascontiguousarray(w.T), bias)
    activated = np.asarray(xp.tanh(xx @ xp.matrix_transpose(wx) + bx) * 0.5)
    exact = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    np.testing.assert_allclose(activated, np.tanh(exact) * 0.5, rtol=1e-5, atol=1e-5)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_nothing_is_written_past_the_columns(device: str) -> None:
    """The product's columns are a window of a wider buffer (a pad then a shrink): the lanes the
    edge computes past N are never stored, so the output's other columns hold what they should."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((40, 21)).astype(np.float32), rng.standard_normal((21, 19)).astype(np.float32)
    with config.override(alloc_poison=True):
        product = xp.asarray(a, device=device) @ xp.asarray(b, device=device)
        wide = xp.concat([product, xp.ones((40, 5), device=device)], axis=1)
        got = np.asarray(wide)
    _within_tolerance(got[:, :19], a, b)
    np.testing.assert_array_equal(got[:, 19:], np.ones((40, 5), np.float32))


def _same_bits_on_1_2_3_threads(device: str, seed: int, rows: int, k: int, n: int) -> None:
    """`x @ W.T` gives the same bits on 1, 2 and 3 threads, within tolerance of float64."""
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    results = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
            results.append(np.asarray(xp.asarray(x, device=device) @ xp.matrix_transpose(xp.asarray(w, device=device))))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
    _within_tolerance(results[0], x, np.ascontiguousarray(w.T))


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_bits_do_not_depend_on_threads(device: str) -> None:
    _same_bits_on_1_2_3_threads(device, 11, 13, 200, 150)


def test_few_rows_split_b_into_blocks_that_threads_share() -> None:
    """Rows that fit in one group (not batched) and N > M: at least `SHARED_BLOCKS` column blocks of
    B, so each thread packs only its own; many rows, or a batch: blocks only as the scratch requires."""
    if not TILES_KNOWN:
        pytest.skip("this host's renderer has no vectors for GEMM tiles")
    from fast.codegen import gemm
    from fast.codegen.analyze import analyze

    def tiles(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, int]:
        out = xp.asarray(np.ones(a_shape, np.float32)) @ xp.asarray(np.ones(b_shape, np.float32))
        info = analyze([item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast)
        shape = gemm.match(info, OPTIONS)
        assert shape is not None
        chosen = gemm.choose_tiles(shape, OPTIONS)
        assert chosen is not None
        return -(-shape.sizes[shape.column] // chosen.columns), chosen.panels  # (all panels, per block)

    total, per_block = tiles((40, 384), (384, 384))
    assert -(-total // per_block) >= gemm.SHARED_BLOCKS
    total, per_block = tiles((200, 96), (96, 128))
    assert per_block == total  # N <= M: A is the larger operand, the threads split its rows instead
    total, per_block = tiles((4096, 384), (384, 384))
    assert per_block == total  # one block fits the scratch
    total, per_block = tiles((6, 40, 384), (6, 384, 384))
    assert per_block == total  # batched: threads share the batches


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,n", [(32, 384), (33, 70), (100, 129), (45, 65)])
def test_few_rows_in_shared_blocks_agree(device: str, rows: int, n: int) -> None:
    _same_bits_on_1_2_3_threads(device, rows + n, rows, 96, n)


WIDE_TILES = TILES_KNOWN and OPTIONS.vector_registers >= 32


def _wide_tiles(a_shape: tuple[int, ...], b_shape: tuple[int, ...], transpose_b: bool) -> tuple[int, int]:
    """(rows, vectors) of the register tile this host's GEMM takes for a @ b (b given (N, K) when
    `transpose_b`)."""
    from fast.codegen import gemm
    from fast.codegen.analyze import analyze

    b = xp.asarray(np.ones(b_shape, np.float32))
    out = xp.asarray(np.ones(a_shape, np.float32)) @ (xp.matrix_transpose(b) if transpose_b else b)
    info = analyze([item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast)
    shape = gemm.match(info, OPTIONS)
    assert shape is not None
    chosen = gemm.choose_tiles(shape, OPTIONS)
    assert chosen is not None
    return chosen.rows, chosen.vectors


@pytest.mark.skipif(not WIDE_TILES, reason="the wide register tile needs 32 vector registers (AVX-512)")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k,n,transpose_b", [(192, 64, 64, False), (197, 31, 70, True), (203, 65, 129, False),
                                               (389, 17, 63, True), (193, 129, 191, False)])
def test_wide_tiles_with_edges(device: str, m: int, k: int, n: int, transpose_b: bool) -> None:
    """A long M with 32 vector registers: 6 rows x up to 4 vectors (`gemm.WIDE_VECTORS`), with edge
    rows (M % 6) and edge columns (N % 64, or N narrower than the tile), both layouts, a bias, on
    poisoned memory: the same bits on 1, 2 and 3 threads, within tolerance of float64."""
    rows, vectors = _wide_tiles((m, k), (n, k) if transpose_b else (k, n), transpose_b)
    assert (rows, vectors) == (6, min(4, -(-n // LANES)))
    rng = np.random.default_rng(m * n + k)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    stored = np.ascontiguousarray(b.T) if transpose_b else b
    results = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
            right = xp.asarray(stored, device=device)
            out = xp.asarray(a, device=device) @ (xp.matrix_transpose(right) if transpose_b else right)
            results.append(np.asarray(out + xp.asarray(bias, device=device)))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
    _within_tolerance(results[0], a, b, bias)
