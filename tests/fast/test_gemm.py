"""Matmul-shaped kernels lowered as GEMMs (fast/codegen/gemm.py): packed panels, register tiles and
edge code on awkward sizes (1, primes, one more and one less than the tiles), every layout
(`a @ b`, `a @ b.T`, `a.T @ b`, batched attention, head-split views), views that are flipped, padded,
strided or shrunk, epilogues (bias, activation, residual, scale, a cast), the FMA guard, and bits that
never depend on the thread count. Values are checked against float64 products with the float sum
tolerance of docs/semantics.md (K products, each within one rounding)."""
from __future__ import annotations

import dataclasses

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
TILES_KNOWN = OPTIONS.gemm and OPTIONS.lanes(fast.dtypes.float32) >= 4


def _expected(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a @ b in float64, the tolerance: K roundings of each product's magnitude)."""
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    k = a.shape[-1]
    bound = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    return exact, bound * (k + 2) * float(np.finfo(a.dtype).eps) + 1e-30


def _check(got: np.ndarray, a: np.ndarray, b: np.ndarray, extra: np.ndarray | float = 0.0) -> None:
    exact, tolerance = _expected(a, b)
    np.testing.assert_array_less(np.abs(got.astype(np.float64) - (exact + extra)), tolerance + 1e-6)


def _gemm_program(out: xp.Array) -> object:
    """The lowered program of the last kernel realizing `out` (for checking that GEMM lowered it)."""
    items = [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"]
    return lower(items[-1].ast, OPTIONS)


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k,n", [(32, 4, 4), (33, 7, 5), (47, 31, 17), (97, 129, 31), (101, 64, 47), (37, 19, 53)])
def test_layouts_on_awkward_sizes(device: str, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = _random(rng, (m, k)), _random(rng, (k, n))
    bt = np.ascontiguousarray(b.T)
    at = np.ascontiguousarray(a.T)
    x, y, yt, xt = (xp.asarray(v, device=device) for v in (a, b, bt, at))
    for out in (x @ y, x @ yt.mT, xt.mT @ y, xt.mT @ yt.mT):
        assert _gemm_program(out).scratch, "expected the GEMM lowering"  # type: ignore[attr-defined]
        _check(np.asarray(out), a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_batched_attention_and_head_split(device: str) -> None:
    rng = np.random.default_rng(3)
    batch, tokens, heads, size = 2, 37, 3, 8
    h = _random(rng, (batch, tokens, heads * size))
    q = xp.permute_dims(xp.reshape(xp.asarray(h, device=device), (batch, tokens, heads, size)), (0, 2, 1, 3))
    qn = h.reshape(batch, tokens, heads, size).transpose(0, 2, 1, 3)
    scores = q @ q.mT
    _check(np.asarray(scores), qn, qn.transpose(0, 1, 3, 2))
    p = _random(rng, (batch, heads, tokens, tokens))
    context = xp.asarray(p, device=device) @ q
    _check(np.asarray(context), p, qn)


@pytest.mark.parametrize("device", DEVICES)
def test_flipped_strided_padded_and_shrunk_views(device: str) -> None:
    rng = np.random.default_rng(4)
    a, b = _random(rng, (70, 40)), _random(rng, (41, 36))
    x, y = xp.asarray(a, device=device), xp.asarray(b, device=device)
    _check(np.asarray(x[::-1, :] @ y[1:, ::-1]), a[::-1, :], b[1:, ::-1])
    _check(np.asarray(x[::2, 1:] @ y[2:, :]), a[::2, 1:], b[2:, :])
    padded = np.pad(a, ((0, 0), (0, 1)))
    lazy_padded = xp.asarray(fast.LazyBuffer.pad(x.lazy, ((0, 0), (0, 1))), device=device)
    _check(np.asarray(lazy_padded @ y), padded, b)
    _check(np.asarray(x[3:60, 5:36] @ y[4:35, 7:30]), a[3:60, 5:36], b[4:35, 7:30])


@pytest.mark.parametrize("device", DEVICES)
def test_epilogues_bias_activation_residual_scale_cast(device: str) -> None:
    rng = np.random.default_rng(5)
    a, w, bias, residual = _random(rng, (65, 48)), _random(rng, (39, 48)), _random(rng, (39,)), _random(rng, (65, 39))
    x, wx, bx, rx = (xp.asarray(v, device=device) for v in (a, w, bias, residual))
    out = xp.maximum((x @ wx.mT + bx) * 0.5 + rx, 0.0)
    exact, tolerance = _expected(a, w.T)
    want = np.maximum((exact + bias) * 0.5 + residual, 0.0)
    np.testing.assert_array_less(np.abs(np.asarray(out) - want), tolerance + 1e-5)
    half = xp.astype(x @ wx.mT + bx, xp.float16)
    np.testing.assert_allclose(np.asarray(half).astype(np.float64), exact + bias, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_float64(device: str) -> None:
    rng = np.random.default_rng(6)
    a, b = _random(rng, (45, 33), np.float64), _random(rng, (33, 29), np.float64)
    got = np.asarray(xp.asarray(a, device=device) @ xp.asarray(b, device=device))
    _check(got, a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_bits_do_not_depend_on_threads(device: str) -> None:
    rng = np.random.default_rng(7)
    a, b, bias = _random(rng, (263, 130)), _random(rng, (130, 97)), _random(rng, (97,))
    results = []
    for threads in (1, 2, 3, 8):
        with config.override(threads=threads, parallel_min_work=1):
            x, y, c = (xp.asarray(v, device=device) for v in (a, b, bias))
            results.append(np.asarray(x @ y + c))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
    _check(results[0], a, b, bias)


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,m,k,n", [(1, 37, 300, 1800), (2, 13, 257, 2100), (1, 6, 520, 1030)])
def test_column_blocks_split_between_threads(device: str, batch: int, m: int, k: int, n: int) -> None:
    """B packs into more than one column block (`SCRATCH_BYTES`): a share's units run in the order
    (batch, column block, rows), so shares may split the column blocks. With any thread count, on
    poisoned memory (an output no share writes reads NaN), every output is written, bit for bit
    the same, and agrees with the specified sum."""
    rng = np.random.default_rng(m + k + n)
    a, b = _random(rng, (batch, m, k)), _random(rng, (batch, k, n))
    x, y = xp.asarray(a, device=device), xp.asarray(b, device=device)
    info = analyze([item for item in fast.schedule((x @ y).lazy) if item.ast.op.name == "SINK"][-1].ast)
    shape = gemm.match(info, OPTIONS)
    tiles = gemm.choose_tiles(shape, OPTIONS) if shape is not None else None
    assert tiles is not None and tiles.panels * tiles.columns < n  # two column blocks or more
    results = []
    for threads in (1, 2, 3, 5, 8):
        with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
            results.append(np.asarray(xp.asarray(a, device=device) @ xp.asarray(b, device=device)))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
    _check(results[0], a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_overflowing_products_run_unfused(device: str) -> None:
    """Products that overflow must be infinities in the sum (codegen/fma.py): the tiles holding
    elements beyond the bound run unfused (codegen/gemm_loops.py), so +inf and -inf products in one
    output give NaN, like numpy; the other tiles agree with the specified sum within tolerance."""
    a = np.ones((300, 260), np.float32)
    b = np.ones((260, 256), np.float32)
    a[0, 0], a[0, 1], b[0, 0], b[1, 0] = 3e38, -3e38, 4.0, 4.0
    x, y = xp.asarray(a, device=device), xp.asarray(b, device=device)
    program = _gemm_program(x @ y)
    assert program.scratch and not program.bounded_inputs  # type: ignore[attr-defined]  # decided per tile
    got = np.asarray(x @ y)
    with np.errstate(over="ignore", invalid="ignore"):
        want = (a[:, :, None] * b[None, :, :]).sum(axis=1, dtype=np.float32)
    assert np.isnan(got[0, 0]) and np.isnan(want[0, 0])
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-6)


def test_matches_layouts_and_rejects_what_is_not_a_matmul() -> None:
    x, y = xp.asarray(np.ones((64, 32), np.float32)), xp.asarray(np.ones((32, 48), np.float32))
    info = analyze(next(i for i in fast.schedule((x @ y).lazy) if i.ast.op.name == "SINK").ast)
    shape = gemm.match(info, OPTIONS)
    if not OPTIONS.gemm:
        assert shape is None
        return
    assert shape is not None and shape.sizes[shape.column] == 48 and shape.size(shape.rows) == 64
    small = analyze(next(i for i in fast.schedule((x[:8] @ y[:, :16]).lazy) if i.ast.op.name == "SINK").ast)
    assert gemm.match(small, OPTIONS) is None  # too few rows for packing to pay
    summed = analyze(next(i for i in fast.schedule(xp.sum(x * x, axis=1).lazy) if i.ast.op.name == "SINK").ast)
    assert gemm.match(summed, OPTIONS) is None  # no axis that only one operand moves along
    with config.override(noopt=True):
        assert gemm.match(info, OPTIONS) is None


def test_tiles_follow_the_registers_and_fit_the_scratch() -> None:
    x, y = xp.asarray(np.ones((4096, 384), np.float32)), xp.asarray(np.ones((384, 1536), np.float32))
    info = analyze(next(i for i in fast.schedule((x @ y).lazy) if i.ast.op.name == "SINK").ast)
    for registers, lanes_bytes in ((32, 64), (16, 32)):
        options = fast.renderer.base.cpu_options(lanes_bytes)
        shape = gemm.match(info, options)
        assert shape is not None
        tiles = gemm.choose_tiles(shape, options)
        assert tiles is not None
        assert tiles.rows * tiles.vectors <= (24 if registers == 32 else 12)
        assert tiles.lanes * 4 == lanes_bytes and tiles.group_rows % tiles.rows == 0
        assert tiles.panels * tiles.columns * 384 * 4 <= gemm.SCRATCH_BYTES


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tokens,k,n", [(4, 257, 33), (5, 300, 37), (16, 384, 48), (17, 515, 45), (7, 1031, 97),
                                        (1, 300, 40)])
def test_linear_on_few_tokens_prefetches_the_next_rows(device: str, tokens: int, k: int, n: int) -> None:
    """`x @ W.T + bias` on a few tokens (B narrow: few panels, each block of W's rows its own group):
    with A unpacked each step of the micro-kernel hints one line of the next block's rows
    (guarded: the last block and, for K not a multiple of the line, the last column); the values
    on the edges (N % MR rows, the tail of K) agree, and an overflowing block runs unfused."""
    rng = np.random.default_rng(tokens * 7 + k + n)
    a, w, bias = _random(rng, (tokens, k)), _random(rng, (n, k)), _random(rng, (n,))
    w[n - 1, k - 1] = 1e30  # beyond FMA_BOUNDS: the last block's bound flag fails: its products run unfused
    x, wx, bx = (xp.asarray(v, device=device) for v in (a, w, bias))
    out = x @ wx.mT + bx
    program = _gemm_program(out)
    assert bool(program.scratch) == (tokens >= 4)  # type: ignore[attr-defined]  (one token: a matvec, opt.py)
    if OPTIONS.prefetch and tokens >= 4:
        assert any(instr.op.name == "PREFETCH" for instr in program.instrs)  # type: ignore[attr-defined]
    _check(np.asarray(out), a, np.ascontiguousarray(w.T), bias)


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,k,n", [(5, 300, 37), (16, 384, 48), (65, 48, 39), (97, 33, 17), (1, 40, 40)])
def test_large_epilogues_run_as_a_loop_over_the_tile_rows(device: str, rows: int, k: int, n: int) -> None:
    """An epilogue of more than `UNROLLED_EPILOGUE_MAX` nodes (here tanh, a residual, a scale), or one
    whose vectors of columns are stored as scalars (W the rows' operand: few tokens), runs from the
    tile's scratch in a loop over its rows (`looped_epilogue`); a bias-only one on x's rows is
    unrolled. Both agree on edge rows and columns."""
    rng = np.random.default_rng(rows * 31 + k + n)
    a, w, bias, residual = _random(rng, (rows, k)), _random(rng, (n, k)), _random(rng, (n,)), _random(rng, (rows, n))
    x, wx, bx, rx = (xp.asarray(v, device=device) for v in (a, w, bias, residual))
    exact, tolerance = _expected(a, w.T)
    plain = x @ wx.mT + bx
    large = xp.tanh(x @ wx.mT + bx) * 0.5 + rx
    if rows >= 4:  # one row: a matvec (opt.py), no GEMM
        counts, loops, padded = [], [], []
        for out in (plain, large):
            info = analyze([item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast)
            shape = gemm.match(info, OPTIONS)
            tiles = gemm.choose_tiles(shape, OPTIONS) if shape is not None else None
            assert shape is not None and tiles is not None
            loops.append(gemm.epilogue_size(info) > gemm.UNROLLED_EPILOGUE_MAX
                         or not gemm.stores_columns_contiguously(info, shape))
            # an edge panel of N % NR columns, not whole vectors, is computed in whole vectors: via the tile
            padded.append(shape.sizes[shape.column] % tiles.columns % tiles.lanes != 0)
            scratch = _gemm_program(out).scratch  # type: ignore[attr-defined]
            counts.append(sum(array.dtype == fast.dtypes.float32 for array in scratch))
        assert loops[1], "tanh, a residual and a scale: a looped epilogue"
        assert loops[0] == (rows < 32), "bias only: unrolled, unless W is the rows' operand (few tokens)"
        assert counts[1] == counts[0] + (not loops[0] and not padded[0]), "the tile is a scratch array"
    np.testing.assert_array_less(np.abs(np.asarray(plain) - (exact + bias)), tolerance + 1e-6)
    want = np.tanh(exact + bias) * 0.5 + residual
    np.testing.assert_allclose(np.asarray(large), want, rtol=1e-5, atol=1e-5 + float(tolerance.max()))


def _packs_a(out: xp.Array) -> bool:
    """Whether the GEMM of `out` packs A: a float scratch array of `a_stride` x MC elements besides
    packed B (and the tile), found from the shape's tiles."""
    info = analyze([item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast)
    shape = gemm.match(info, OPTIONS)
    assert shape is not None
    tiles = gemm.choose_tiles(shape, OPTIONS)
    assert tiles is not None
    itemsize = out.dtype.itemsize
    stride = gemm.packed_row_stride(shape.sizes[shape.reduce], itemsize, tiles.lanes)
    scratch = _gemm_program(out).scratch  # type: ignore[attr-defined]
    return any(array.size == stride * tiles.group_rows for array in scratch)


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k", [(37, 64), (41, 65), (53, 127), (67, 256), (33, 255), (45, 1024)])
def test_packed_a_on_awkward_sizes(device: str, m: int, k: int) -> None:
    """A packed by the rows pass (`prepare_rows`): K one more and one less than the lanes and the
    lines, K whose lines are even (the stride gets a line of padding: 256 and 1024 float32), M with
    an edge block of rows, N with an edge micro-panel; A as rows, transposed (K strided), flipped and
    shrunk; float64 too; and an element past the bound in the last block of rows, whose outputs
    must be the sum of rounded products (infinities where a product overflows)."""
    nr = OPTIONS.lanes(fast.dtypes.float32) * 2
    n = gemm.PACK_A_MIN_PANELS * nr + 5
    rng = np.random.default_rng(m * 7 + k)
    a, b = _random(rng, (m, k)), _random(rng, (k, n))
    at = np.ascontiguousarray(a.T)
    x, y, xt = (xp.asarray(v, device=device) for v in (a, b, at))
    assert _packs_a(x @ y) and _packs_a(xt.mT @ y)
    for out in (x @ y, xt.mT @ y):
        _check(np.asarray(out), a, b)
    _check(np.asarray(xp.flip(x, axis=0) @ y), a[::-1], b)
    wide = xp.asarray(np.pad(a, ((0, 0), (2, 3))), device=device)[:, 2:2 + k]
    _check(np.asarray(wide @ y), a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    _check(np.asarray(xp.asarray(a64, device=device) @ xp.asarray(b64, device=device)), a64, b64)
    big = a.copy()
    big[m - 1, k - 1] = 3e38  # the last block of rows: beyond the bound, that block runs unfused
    got = np.asarray(xp.asarray(big, device=device) @ y)
    _check(got[:m - 1], a[:m - 1], b)
    with np.errstate(over="ignore", invalid="ignore"):
        want = (big[m - 1, :, None] * b).sum(axis=0, dtype=np.float32)
    np.testing.assert_allclose(got[m - 1], want, rtol=1e-6)


def test_packed_rows_are_an_odd_count_of_lines_apart() -> None:
    """`packed_row_stride`: at least K, whole vectors and whole lines, and an odd count of lines, so
    the MR rows of a block fall in different cache sets."""
    for itemsize, lanes in ((4, 16), (4, 8), (8, 8), (8, 4)):
        per_line = 64 // itemsize
        for k in (1, 4, 15, 16, 17, 64, 65, 256, 384, 1023, 1024, 1536):
            stride = gemm.packed_row_stride(k, itemsize, lanes)
            assert k <= stride < k + 3 * per_line
            assert stride % lanes == 0 and stride % per_line == 0 and (stride // per_line) % 2 == 1


def test_hint_spacing() -> None:
    from fast.codegen.gemm_prefetch import hint_spacing
    assert [hint_spacing(steps, lines) for steps, lines in ((2048, 256), (2048, 1024), (2048, 1280), (100, 300),
                                                            (64, 1), (0, 5))] == [8, 2, 1, 1, 64, 1]


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,m,k,n,transpose", [(3, 33, 7, 5, True), (2, 47, 31, 17, False), (5, 37, 19, 53, True),
                                                   (1, 40, 32, 40, True), (7, 41, 129, 33, False)])
def test_batched_products_hint_the_next_batch(device: str, batch: int, m: int, k: int, n: int,
                                              transpose: bool) -> None:
    """Batched products (codegen/gemm_prefetch.py): each micro-kernel step may hint a line of the next
    batch's A and B, along K where K is contiguous (`q @ k.T`: both) or along the other axis (`p @ v`:
    B's columns); the guards keep the last batch, rows past M and columns past N unhinted. Also with
    A's batches flipped and A a shrunk view of a wider array; the values agree on every edge."""
    rng = np.random.default_rng(batch * 100 + m + k + n)
    a = _random(rng, (batch, m, k))
    b = _random(rng, (batch, n, k) if transpose else (batch, k, n))
    x, y = xp.asarray(a, device=device), xp.asarray(b, device=device)
    rhs = xp.matrix_transpose(y) if transpose else y
    out = x @ rhs
    program = _gemm_program(out)
    hints = [instr for instr in program.instrs if instr.op.name == "PREFETCH"]  # type: ignore[attr-defined]
    if OPTIONS.prefetch:
        # the next block's rows (spread over the first steps only where B has few micro-panels:
        # gemm_prefetch.spread_steps; N = 40 is two panels of AVX-512's 32 columns, three of AVX2's
        # 16), the next batch's A and B
        tiles = _tiles((batch, m, k), (batch, k, n), OPTIONS)
        spread = -(-n // tiles.columns) <= gemm.FEW_PANELS
        assert len(hints) >= (3 if batch > 1 else 1 if spread else 0)
    expected_b = np.swapaxes(b, -1, -2) if transpose else b
    _check(np.asarray(out), a, expected_b)
    flipped = xp.flip(x, axis=0) @ rhs  # the batches of A in reverse: the next batch is an earlier one in memory
    _check(np.asarray(flipped), a[::-1], expected_b)
    shrunk = xp.asarray(np.pad(a, ((0, 0), (0, 0), (0, 3))), device=device)[..., :k] @ rhs
    _check(np.asarray(shrunk), a, expected_b)


def _transposes_b(out: xp.Array) -> bool:
    """Whether the GEMM of `out` packs B through the transposing squares (SHUFFLE instructions of
    values: the bool ones fold the bound flags' lanes, GemmEmitter.all_lanes)."""
    return any(_value_shuffle(instr) for instr in _gemm_program(out).instrs)  # type: ignore[attr-defined]


def _value_shuffle(instr: object) -> bool:
    """A SHUFFLE of numbers, not of a bool vector (GemmEmitter.all_lanes)."""
    return instr.op.name == "SHUFFLE" and instr.dtype.scalar() != fast.dtypes.bool  # type: ignore[attr-defined]


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k_offset,extra_columns", [(-1, 5), (0, 0), (1, 5), (3, 0), (0, 7)])
@pytest.mark.parametrize("squares", [1, 3])
def test_b_stored_along_k_is_packed_in_squares(device: str, k_offset: int, extra_columns: int, squares: int) -> None:
    """`a @ b.T` with b stored (N, K) (`pack_transposed`): K one less, equal, one and three more than
    a whole number of lanes x lanes squares (the rest packed step by step), N with and without an edge
    micro-panel (packed step by step), b flipped along N and shrunk from a wider array, float64 (its
    own lane count); each bit for bit what the same values give stored (K, N), whose packing is a
    plain copy: the same products, in the same order, fused in the same tiles. An element past the
    FMA bound in a square leaves its panel unfused."""
    lanes = OPTIONS.lanes(fast.dtypes.float32)
    k, n = max(1, squares * lanes + k_offset), 3 * 2 * lanes + extra_columns
    rng = np.random.default_rng(k * 31 + n)
    a, b = _random(rng, (37, k)), _random(rng, (k, n))
    x, y = xp.asarray(a, device=device), xp.asarray(b, device=device)
    stored_nk = xp.asarray(np.ascontiguousarray(b.T), device=device)
    assert _transposes_b(x @ stored_nk.mT) == (k >= lanes)
    np.testing.assert_array_equal(np.asarray(x @ stored_nk.mT), np.asarray(x @ y))
    _check(np.asarray(x @ stored_nk.mT), a, b)
    flipped = xp.asarray(np.ascontiguousarray(b[:, ::-1].T), device=device)
    np.testing.assert_array_equal(np.asarray(x @ xp.flip(flipped, axis=0).mT), np.asarray(x @ y))
    wide = xp.asarray(np.pad(np.ascontiguousarray(b.T), ((0, 0), (2, 3))), device=device)[:, 2:2 + k]
    np.testing.assert_array_equal(np.asarray(x @ wide.mT), np.asarray(x @ y))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    x64, y64 = xp.asarray(a64, device=device), xp.asarray(b64, device=device)
    got64 = np.asarray(x64 @ xp.asarray(np.ascontiguousarray(b64.T), device=device).mT)
    np.testing.assert_array_equal(got64, np.asarray(x64 @ y64))
    big = b.copy()
    big[k - 1, 1] = 3e38  # in the first panel's last square (or step)
    got = np.asarray(x @ xp.asarray(np.ascontiguousarray(big.T), device=device).mT)
    np.testing.assert_array_equal(got, np.asarray(x @ xp.asarray(big, device=device)))
    with np.errstate(over="ignore", invalid="ignore"):
        want = (a[:, :, None] * big[None, :, 1:2]).sum(axis=1, dtype=np.float32)[:, 0]
    np.testing.assert_allclose(got[:, 1], want, rtol=1e-5)


def _micro_kernel_loops(program: object) -> list[list[int]]:
    """Per loop whose own body (nested loops aside) multiplies and adds float32 (a micro-kernel's K
    loop, fused or not): the buffer of each PREFETCH in its own body."""
    open_loops: list[tuple[bool, list[int]]] = []
    found: list[list[int]] = []
    for instr in program.instrs:  # type: ignore[attr-defined]
        name = instr.op.name
        if name == "LOOP":
            open_loops.append((False, []))
        elif name == "ENDLOOP":
            multiplies, hints = open_loops.pop()
            if multiplies:
                found.append(hints)
        elif open_loops and name == "PREFETCH":
            open_loops[-1][1].append(instr.arg)
        elif open_loops and name == "ALU" and getattr(instr.arg, "name", "") in ("FMA", "MUL") \
                and instr.dtype.scalar() == fast.dtypes.float32:  # not the bound flags' bool products
            open_loops[-1] = (True, open_loops[-1][1])
    return found


@pytest.mark.skipif(not TILES_KNOWN or not OPTIONS.prefetch, reason="this host's renderer has no GEMM tiles or hints")
@pytest.mark.parametrize("device", DEVICES)
def test_hints_sit_where_they_are_due(device: str) -> None:
    """gemm_loops `products` on attention's two products (6 heads of 128 tokens, d = 32):
    - `q @ k.T` (K = 32): the next batch's hints are due at a tile's first step only, so they come
      before the K loop, and with eight micro-panels of B its rows of A get no spread hints
      (`spread_steps`: they are cached after the first panel): no K loop hints anything;
    - `p @ v` (K = 128): the next batch's hints stay in the K loop (one every few steps), and the
      K loop is cut where the spread hints end: its second part hints one line fewer of A per step.
    Where the hints fall depends on the tiles, so the programs inspected are lowered for AVX2's
    (16 registers of 8 lanes: 4 x 2 vectors here) whatever the host; the values agree on the host.
    """
    rng = np.random.default_rng(5)
    q, k, v = (_random(rng, (6, 128, 32)) for _ in range(3))
    p = _random(rng, (6, 128, 128))
    qx, kx, vx, px = (xp.asarray(value, device=device) for value in (q, k, v, p))
    scores, context = qx @ xp.matrix_transpose(kx), px @ vx
    a_buffer, b_buffer = 1, 2  # the kernel's buffers: the output, then A, then B
    avx2 = dataclasses.replace(OPTIONS, vector_bytes=32, vector_registers=16)
    for out in (scores, context):
        items = [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"]
        loops = _micro_kernel_loops(lower(items[-1].ast, avx2))
        assert loops and len(loops) % 2 == 0  # fused and unfused tiles (`p @ v`: each K loop in two parts)
        if out is scores:
            assert all(not hints for hints in loops)
        else:
            assert all(b_buffer in hints for hints in loops)
            counts = [hints.count(a_buffer) for hints in loops]
            assert counts[0::2] == [count + 1 for count in counts[1::2]]
    _check(np.asarray(scores), q, np.swapaxes(k, -1, -2))
    _check(np.asarray(context), p, v)


@pytest.mark.skipif(not TILES_KNOWN or not OPTIONS.prefetch, reason="this host's renderer has no GEMM tiles or hints")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,m,d", [(6, 128, 32), (3, 37, 32), (2, 128, 31)])
def test_few_next_batch_hints_go_before_each_tile(device: str, batch: int, m: int, d: int) -> None:
    """gemm_prefetch `tile_start_hints`, on AVX-512's tiles (32 registers of 16 lanes) whatever the
    host: `q @ k.T` with K = d = 32 hints the next batch every 8 steps, 4 lines of each operand a tile,
    so they go before the tile's steps, written out one by one (no loop of hints alone: GCC keeps such
    a loop rolled), and no K loop hints B; `p @ v` (K = 128, 64 a tile)
    keeps them among the steps; K = 31 (the spacing does not divide K) keeps them among the steps.
    The values agree on the host (M = 37: an edge block of rows)."""
    rng = np.random.default_rng(batch + m + d)
    q, k = _random(rng, (batch, m, d)), _random(rng, (batch, m, d))
    p, v = _random(rng, (batch, m, m)), _random(rng, (batch, m, d))
    qx, kx, px, vx = (xp.asarray(value, device=device) for value in (q, k, p, v))
    scores, context = qx @ xp.matrix_transpose(kx), px @ vx
    b_buffer = 2
    avx512 = dataclasses.replace(OPTIONS, vector_bytes=64, vector_registers=32)
    for out, before_tiles in ((scores, d % 8 == 0 and m == 128), (context, False)):
        items = [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"]
        program = lower(items[-1].ast, avx512)
        loops = _micro_kernel_loops(program)
        in_steps = any(b_buffer in hints for hints in loops)
        hinted = any(instr.op.name == "PREFETCH" and instr.arg == b_buffer for instr in program.instrs)
        assert hinted and in_steps == (not before_tiles), (out is scores, batch, m, d)
        assert _hint_only_loops(program) == 0, (out is scores, batch, m, d)
        if before_tiles:
            b_hints = sum(instr.op.name == "PREFETCH" and instr.arg == b_buffer for instr in program.instrs)
            assert b_hints >= 4 and b_hints % 4 == 0, b_hints  # 4 a tile, for each copy of the tile
    _check(np.asarray(scores), q, np.swapaxes(k, -1, -2))
    _check(np.asarray(context), p, v)


@pytest.mark.skipif(not TILES_KNOWN or not OPTIONS.prefetch, reason="this host's renderer has no GEMM tiles or hints")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,m,k,group", [(6, 128, 128, 2), (2, 128, 160, 2), (3, 64, 96, 2), (3, 127, 128, 1)])
def test_next_batch_hints_lead_groups_of_steps(device: str, batch: int, m: int, k: int, group: int) -> None:
    """gemm_prefetch `hinted_steps`, on AVX-512's tiles whatever the host: `p @ v` (d = 32) with M =
    128 or 64 hints the next batch every 2 steps, so its fused K loops run over pairs of steps written
    out (the FMAs of two steps, 2 x MR rows x 2 vectors), each pair after one hint of B; M = 127 (12-row
    tiles and an edge block of 7) hints every step, one step a trip. Values agree on the host."""
    rng = np.random.default_rng(batch + m + k)
    p, v = _random(rng, (batch, m, k)), _random(rng, (batch, k, 32))
    context = xp.asarray(p, device=device) @ xp.asarray(v, device=device)
    avx512 = dataclasses.replace(OPTIONS, vector_bytes=64, vector_registers=32)
    ast = [item for item in fast.schedule(context.lazy) if item.ast.op.name == "SINK"][-1].ast
    rows = gemm.choose_tiles(gemm.match(analyze(ast), avx512), avx512).rows  # type: ignore[arg-type]
    bodies = _fused_loop_bodies(lower(ast, avx512))
    edge = m % rows
    assert bodies and all(body[:2] in ((group * rows * 2, 1), (group * edge * 2, 1)) for body in bodies), (bodies, rows)
    # gemm_checked `lead_check`: where a chunk's 16 steps run in as many trips as its tile has rows
    # (8 rows, pairs of steps), each trip adds one vector of A's squares; else (12 rows, one step a
    # trip) the chunk adds them all before its step loop
    spread = [body[2] for body in bodies if body[0] == group * rows * 2]
    assert all(squares == (1 if 16 // group == rows else 0) for squares in spread), (bodies, rows)
    _check(np.asarray(context), p, v)


def _fused_loop_bodies(program: object, b_buffer: int = 2) -> list[tuple[int, int, int]]:
    """Per loop whose own body holds fused multiply-adds of the product: how many, how many hints of
    B, and how many FMAs of a value by itself (gemm_checked's sums of squares)."""
    open_loops: list[list[int]] = []
    found: list[tuple[int, int, int]] = []
    for instr in program.instrs:  # type: ignore[attr-defined]
        name = instr.op.name
        if name == "LOOP":
            open_loops.append([0, 0, 0])
        elif name == "ENDLOOP":
            fmas, hints, squares = open_loops.pop()
            if fmas:
                found.append((fmas, hints, squares))
        elif open_loops and name == "ALU" and getattr(instr.arg, "name", "") == "FMA":
            open_loops[-1][2 if instr.srcs[0] == instr.srcs[1] else 0] += 1
        elif open_loops and name == "PREFETCH" and instr.arg == b_buffer:
            open_loops[-1][1] += 1
    return found


def _hint_only_loops(program: object) -> int:
    """How many loops hold, in their own body, PREFETCHes and no LOAD, STORE or nested loop (a loop
    that only issues hints)."""
    open_loops: list[set[str]] = []
    count = 0
    for instr in program.instrs:  # type: ignore[attr-defined]
        name = instr.op.name
        if name == "LOOP":
            if open_loops:
                open_loops[-1].add("LOOP")
            open_loops.append(set())
        elif name == "ENDLOOP":
            seen = open_loops.pop()
            count += "PREFETCH" in seen and not seen & {"LOAD", "STORE", "LOOP"}
        elif open_loops:
            open_loops[-1].add(name)
    return count


def _tiles(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
           options: fast.renderer.base.RendererOptions) -> gemm.GemmTiles:
    x, y = xp.asarray(np.ones(a_shape, np.float32)), xp.asarray(np.ones(b_shape, np.float32))
    info = analyze([item for item in fast.schedule((x @ y).lazy) if item.ast.op.name == "SINK"][-1].ast)
    shape = gemm.match(info, options)
    assert shape is not None
    tiles = gemm.choose_tiles(shape, options)
    assert tiles is not None
    return tiles


def _rows_and_vectors(tiles: gemm.GemmTiles) -> tuple[int, int]:
    return tiles.rows, tiles.vectors


def test_a_long_m_keeps_enough_accumulators_a_short_one_a_divisor() -> None:
    """16 registers (AVX2): a long M keeps the 6-row tile (12 accumulators) and an edge block rather
    than 4 rows that divide it (8); attention's short M per batch (128) takes the divisor. 32
    registers (AVX-512): a long M gets the wide tile of 6 rows x 4 vectors (24 accumulators, an
    edge block of 4096 % 6 rows) rather than 4 x 4 that divide it, 3 vectors when N holds only 3,
    the 2-vector tile when N holds 2 (12 rows: 5 in 6 of the budget, no divisor of 4096 that
    keeps them), and a short M keeps 2 vectors with 8 rows that divide 128."""
    avx2, avx512 = fast.renderer.base.cpu_options(32), fast.renderer.base.cpu_options(64)
    assert _rows_and_vectors(_tiles((4096, 384), (384, 1536), avx2)) == (6, 2)
    assert _rows_and_vectors(_tiles((512, 512), (512, 512), avx2)) == (6, 2)
    assert _tiles((640, 64), (64, 64), avx2).rows == 5  # 5 x 2 = 10 accumulators divide it
    assert _tiles((8, 128, 32), (8, 32, 128), avx2).rows == 4
    assert _rows_and_vectors(_tiles((4096, 384), (384, 1536), avx512)) == (6, 4)
    assert _rows_and_vectors(_tiles((512, 512), (512, 512), avx512)) == (6, 4)
    assert _rows_and_vectors(_tiles((4096, 1536), (1536, 48), avx512)) == (8, 3)
    assert _rows_and_vectors(_tiles((4096, 384), (384, 32), avx512)) == (12, 2)
    assert _rows_and_vectors(_tiles((8, 128, 32), (8, 32, 128), avx512)) == (8, 2)
    assert _rows_and_vectors(_tiles((191, 64), (64, 64), avx512)) == (12, 2)  # one row short of long for 6 x 4


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m", [196, 515, 1001])
def test_long_m_with_an_edge_block(device: str, m: int) -> None:
    """M at least `LONG_M_BLOCKS` tiles and not a multiple of the rows: the edge block of M % MR
    rows, with one thread and with several, on poisoned memory, agrees with the specified sum, and
    `a @ b.T` (a linear layer) too."""
    rng = np.random.default_rng(m)
    k, n = 67, 45
    a, b = _random(rng, (m, k)), _random(rng, (k, n))
    results = []
    for threads in (1, 3):
        with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
            results.append(np.asarray(xp.asarray(a, device=device) @ xp.asarray(b, device=device)))
            bt = np.ascontiguousarray(b.T)
            linear = np.asarray(xp.asarray(a, device=device) @ xp.asarray(bt, device=device).T)
            _check(linear, a, b)
    np.testing.assert_array_equal(results[1], results[0])
    _check(results[0], a, b)


def _shuffles_per_loop(program: object) -> list[int]:
    """Per loop whose own body (nested loops aside) shuffles vectors: how many SHUFFLEs it holds."""
    open_loops: list[int] = []
    found: list[int] = []
    for instr in program.instrs:  # type: ignore[attr-defined]
        if instr.op.name == "LOOP":
            open_loops.append(0)
        elif instr.op.name == "ENDLOOP":
            count = open_loops.pop()
            if count:
                found.append(count)
        elif open_loops and _value_shuffle(instr):
            open_loops[-1] += 1
    return found


@pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no vectors for GEMM tiles")
def test_a_transposed_pack_walks_one_vector_of_columns_at_a_time() -> None:
    """`a @ b.T` packs B in squares of lanes x lanes (gemm_pack.py `pack_transposed`), one loop over
    K's squares per vector of the tile's columns: each loop reads `lanes` rows of B, not all NR of
    them (with 4 vectors, 64 rows at once were more streams than the prefetchers follow: the
    512 x 512 product after a collection 1.02-1.04 -> 0.87-0.88 ms in its launch)."""
    x, w = xp.asarray(np.ones((512, 512), np.float32)), xp.asarray(np.ones((512, 512), np.float32))
    out = x @ xp.matrix_transpose(w)
    info = analyze([item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"][-1].ast)
    shape = gemm.match(info, OPTIONS)
    assert shape is not None
    tiles = gemm.choose_tiles(shape, OPTIONS)
    assert tiles is not None and tiles.vectors >= 2
    square = tiles.lanes * (tiles.lanes.bit_length() - 1)  # n x log2(n) shuffles
    assert _shuffles_per_loop(_gemm_program(out)) == [square] * tiles.vectors
