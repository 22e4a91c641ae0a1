"""GEMMs of one or two micro-panels with A read in place (fast/codegen/gemm_checked.py): a linear layer on a
few tokens, `x @ W.T + bias`, whose rows are W's. The tiles run fused at once and check W's rows as
they go; a tile with a value beyond the bound (or NaN, or infinite) runs again unfused from zero.
Checked: which kernels take this path, values on awkward sizes (K below, at and past a chunk, K tails,
an edge block of rows), products that overflow (+inf and -inf in one output give NaN, as in the
specified sum), NaN and infinite weights, the exact edge of the bound, float64, and bits that do not
depend on the thread count."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fast
from fast import config, xp
from fast.codegen import gemm_checked
from fast.codegen.fma import FMA_BOUNDS
from fast.codegen.lower import lower
from fast.runtime import cpu

DEVICES = ["CLANG", "LLVM"]
OPTIONS = dataclasses.replace(cpu.renderer_options(), matrix_tiles=False)  # the FMA micro-kernel's lowering
TILES_KNOWN = OPTIONS.gemm and OPTIONS.lanes(fast.dtypes.float32) >= 4 and OPTIONS.fused_multiply_add
needs_tiles = pytest.mark.skipif(not TILES_KNOWN, reason="this host's renderer has no fused GEMM tiles")


def _program(out: xp.Array) -> object:
    items = [item for item in fast.schedule(out.lazy) if item.ast.op.name == "SINK"]
    return lower(items[-1].ast, OPTIONS)


def _checks_in_tiles(program: object) -> bool:
    """A GEMM whose only bool scratch is B's panel flag: the rows' flags come from the tiles."""
    flags = [array for array in program.scratch if array.dtype == fast.dtypes.bool]  # type: ignore[attr-defined]
    return bool(program.scratch) and len(flags) == 1  # type: ignore[attr-defined]


def _linear(device: str, x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> tuple[bool, np.ndarray]:
    """(whether the kernel checks W's rows in its tiles, the values of `x @ W.T + bias`)."""
    out = xp.asarray(x, device=device) @ xp.matrix_transpose(xp.asarray(w, device=device)) \
        + xp.asarray(bias, device=device)
    return _checks_in_tiles(_program(out)), np.asarray(out)


def _within_tolerance(got: np.ndarray, x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> None:
    """float64 reference with the float sum tolerance of docs/semantics.md (K + 2 roundings)."""
    exact = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    bound = np.abs(x).astype(np.float64) @ np.abs(w).T.astype(np.float64) + np.abs(bias)
    tolerance = bound * (x.shape[-1] + 2) * float(np.finfo(x.dtype).eps) + 1e-30
    np.testing.assert_array_less(np.abs(got - exact), tolerance + 1e-6)


def _random(seed: int, tokens: int, k: int, n: int, dtype: type = np.float32) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for shape in ((tokens, k), (n, k), (n,)))


def test_the_square_check_accepts_exactly_the_values_below_the_bound() -> None:
    """`and_square_bounded` keeps a value when its square is below the largest finite value: that
    is every value below FMA_BOUNDS and none at or above it (the largest value below the bound
    squares to a finite number, the bound itself to infinity), nor NaN or infinities."""
    for dtype, np_type in ((fast.dtypes.float32, np.float32), (fast.dtypes.float64, np.float64)):
        bound = np_type(FMA_BOUNDS[dtype])
        below = np.nextafter(bound, np_type(0))
        largest = np_type(gemm_checked.LARGEST[dtype])
        assert largest == np.finfo(np_type).max
        with np.errstate(over="ignore", invalid="ignore"):
            assert below * below < largest and -below * -below < largest
            assert not bound * bound < largest and not -bound * -bound < largest
            for special in (np.inf, -np.inf, np.nan):
                value = np_type(special)
                assert not value * value < largest


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tokens,k,n", [(16, 384, 48), (9, 7, 33), (8, 16, 37), (4, 17, 32), (5, 31, 41),
                                        (13, 33, 64), (16, 129, 35), (4, 100, 97), (17, 96, 40), (24, 50, 37),
                                        (31, 33, 45)])
def test_few_tokens_on_awkward_sizes(device: str, tokens: int, k: int, n: int) -> None:
    """K with no whole chunk (7), exactly one (16), one and a tail (17, 31, 33), many and a tail
    (129); W's rows an edge block past the register tile (33, 37, 41, 35, 97)."""
    x, w, bias = _random(tokens * 1000 + k + n, tokens, k, n)
    checks, got = _linear(device, x, w, bias)
    assert checks
    _within_tolerance(got, x, w, bias)


def test_wider_products_keep_the_rows_pass() -> None:
    """More than two micro-panels (x's 48 rows, three micro-panels of 2 vectors: 48 columns with
    AVX2's 8 lanes, 96 with AVX-512's 16), or A packed (four panels, K = 96): the rows' flags come
    from the pass over each block (gemm_loops.py), not from the tiles."""
    if not TILES_KNOWN:
        pytest.skip("this host's renderer has no fused GEMM tiles")
    lanes = OPTIONS.lanes(fast.dtypes.float32)
    for tokens, n in ((48, 6 * lanes), (64, 8 * lanes)):
        x, w, bias = _random(tokens, tokens, 96, n)
        program = _program(xp.asarray(x) @ xp.matrix_transpose(xp.asarray(w)) + xp.asarray(bias))
        assert program.scratch and not _checks_in_tiles(program)  # type: ignore[attr-defined]


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_overflowing_products_give_the_specified_infinities(device: str) -> None:
    """Row 3 of W holds +3e38 and -3e38 (row 20 too, in K's tail): with the tokens' 4.0 both products
    overflow, so the specified sum (each product rounded) is inf + -inf = NaN; fused, +inf. Row 40
    (the edge block) holds one overflowing product: +inf. The tiles without such values agree with
    the reference within tolerance."""
    x, w, bias = _random(3, 6, 40, 41)
    x[:, 0] = x[:, 1] = x[:, 38] = x[:, 39] = 4.0
    w[3, 0], w[3, 1] = 3e38, -3e38
    w[20, 38], w[20, 39] = 3e38, -3e38  # in K's tail (40 = 2 chunks of 16 + 8), another block than row 3's
    w[40, 1] = 3e38
    checks, got = _linear(device, x, w, bias)
    assert checks and np.isnan(got[:, 3]).all() and np.isnan(got[:, 20]).all()
    assert np.isposinf(got[:, 40]).all()
    keep = [row for row in range(41) if row not in (3, 20, 40)]
    _within_tolerance(got[:, keep], x, w[keep], bias[keep])


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_nan_infinite_and_edge_weights(device: str) -> None:
    """A NaN weight makes its row NaN; an infinite one makes it infinite (or NaN beside a zero
    token); weights just below the bound and at it give finite products within tolerance."""
    x, w, bias = _random(4, 7, 50, 44)
    x[:, 5] = np.abs(x[:, 5]) + 0.5
    w[0, 9] = np.nan
    w[1, 5] = np.inf
    below = np.nextafter(np.float32(FMA_BOUNDS[fast.dtypes.float32]), np.float32(0))
    w[20, 2], w[21, 2] = below, np.float32(FMA_BOUNDS[fast.dtypes.float32])
    x[:, 2] = 1e-20
    checks, got = _linear(device, x, w, bias)
    assert checks and np.isnan(got[:, 0]).all()
    assert np.isposinf(got[:, 1]).all()
    keep = list(range(2, 44))
    _within_tolerance(got[:, keep], x, w[keep], bias[keep])


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_float64(device: str) -> None:
    x, w, bias = _random(64, 7, 45, 39, np.float64)  # 7 tokens: one micro-panel of float64 vectors
    w[38, 44] = 1e300  # beyond float64's bound (2**512): that tile runs unfused
    checks, got = _linear(device, x, w, bias)
    assert checks
    _within_tolerance(got, x, w, bias)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_bits_do_not_depend_on_threads(device: str) -> None:
    """Tiles are blocks of W's rows, whatever share a thread gets: fused and rerun tiles alike give
    the same bits on 1, 2 and 3 threads."""
    x, w, bias = _random(9, 12, 200, 131)
    w[70, 3] = 1e25  # beyond the bound: that block reruns unfused
    results = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
            results.append(_linear(device, x, w, bias)[1])
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
    _within_tolerance(results[0], x, w, bias)


def _context(device: str, p: np.ndarray, v: np.ndarray) -> tuple[bool, np.ndarray]:
    """(whether the kernel checks p's rows in its tiles, the values of attention's `p @ v`)."""
    out = xp.asarray(p, device=device) @ xp.asarray(v, device=device)
    return _checks_in_tiles(_program(out)), np.asarray(out)


def _within_product_tolerance(got: np.ndarray, a: np.ndarray, b: np.ndarray, rows: np.ndarray) -> None:
    """The output rows `rows` (a bool mask of batch x row) of a batched a @ b against a float64
    reference, with the float sum tolerance of docs/semantics.md."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    tolerance = bound * (a.shape[-1] + 2) * float(np.finfo(a.dtype).eps) + 1e-30
    np.testing.assert_array_less(np.abs(got - exact)[rows], tolerance[rows] + 1e-6)


@needs_tiles
@pytest.mark.parametrize("device", DEVICES)
def test_attention_context_checks_its_tiles_with_sums_of_squares(device: str) -> None:
    """`p @ v` (d = 32, batched; with AVX-512 one micro-panel checked in its tiles, the squares of p
    added among the steps: gemm_checked `lead_check`). A NaN in p makes its row NaN, an infinity its
    row infinite; two products past the largest float32 in one row give NaN (inf + -inf, the
    specified sum), where fused products would cancel. A tile whose values are all below the bound
    but whose squares add past the largest float32 (2^62 at one K position of every row: 64 squares
    of 2^124 in one lane) runs unfused: its values still agree within tolerance. The bits do not
    depend on the thread count."""
    rng = np.random.default_rng(26)
    p = rng.random((3, 128, 128), dtype=np.float32)
    v = rng.standard_normal((3, 128, 32)).astype(np.float32)
    p[0, 5, 7] = np.nan
    p[1, 9, 100], v[1, 100, :] = np.inf, 1.0
    p[2, 20, 3], p[2, 20, 4], v[2, 3, :], v[2, 4, :] = 3e38, -3e38, 4.0, 4.0
    p[2, 64:72, 0::16] = np.float32(2.0**62)  # rows 64-71: one tile of 8 rows (or within one of 12)
    results = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, parallel_min_work=1, alloc_poison=True):
            checks, got = _context(device, p, v)
            results.append(got)
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
    got = results[0]
    if OPTIONS.lanes(fast.dtypes.float32) == 16:
        assert checks
    assert np.isnan(got[0, 5]).all() and np.isposinf(got[1, 9]).all() and np.isnan(got[2, 20]).all()
    finite = np.ones(got.shape[:2], bool)
    finite[0, 5] = finite[1, 9] = finite[2, 20] = False
    _within_product_tolerance(got, np.where(np.isfinite(p), p, 0.0).astype(np.float32), v, finite)


@needs_tiles
def test_bool_lanes_fold_as_the_renderer_asks() -> None:
    """`RendererOptions.lanes_by_halves`: a tile's bound flag ANDs its lanes by shuffled halves where
    the renderer asks (CLANG: what GCC compiles best), lane by lane elsewhere (LLVM, which makes one
    mask test of it); CLANG and LLVM give the same bits."""
    from fast.runtime import clang, llvm

    assert clang.renderer_options().lanes_by_halves and not llvm._RENDERER.options.lanes_by_halves
    rng = np.random.default_rng(22)
    p, v = rng.random((2, 128, 128), dtype=np.float32), rng.standard_normal((2, 128, 32)).astype(np.float32)
    ast = [item for item in fast.schedule((xp.asarray(p) @ xp.asarray(v)).lazy) if item.ast.op.name == "SINK"][-1].ast

    def bool_shuffles(halves: bool) -> int:
        program = lower(ast, dataclasses.replace(OPTIONS, lanes_by_halves=halves))
        return sum(instr.op.name == "SHUFFLE" and instr.dtype.scalar() == fast.dtypes.bool
                   for instr in program.instrs)  # type: ignore[attr-defined]

    assert bool_shuffles(True) > 0 and bool_shuffles(False) == 0
    results = [np.asarray(xp.asarray(p, device=device) @ xp.asarray(v, device=device)) for device in DEVICES]
    np.testing.assert_array_equal(results[0], results[1])
