"""SIMD lowering and threaded kernels stay correct on awkward sizes and views, and are deterministic.

Every case runs on CLANG and LLVM with optimizations on (vectors, register tiles, split accumulators,
thread shares), against numpy: integer results exactly, float sums within the reduction tolerance.
`parallel_min_work=0` threads even tiny kernels, so thread shares of awkward lengths are exercised.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from kernel_values import lowered_kernels

import fast
from fast import BinaryOps, LazyBuffer, ReduceOps, TernaryOps, UnaryOps, config
from fast.codegen.ir import IROps
from fast.runtime import cpu

DEVICES = ["CLANG", "LLVM"]
SIZES = [1, 2, 7, 16, 17, 31, 64, 97, 256, 1000]
RNG = np.random.default_rng(11)

Movement = Callable[[LazyBuffer], LazyBuffer]
VIEWS: dict[str, tuple[Movement, Callable[[np.ndarray], np.ndarray]]] = {
    "plain": (lambda x: x, lambda x: x),
    "flip": (lambda x: x.stride((-1, 1)), lambda x: x[::-1, :]),
    "flip_cols": (lambda x: x.stride((1, -1)), lambda x: x[:, ::-1]),
    "every_second": (lambda x: x.stride((1, 2)), lambda x: x[:, ::2]),
    "transpose": (lambda x: x.permute((1, 0)), lambda x: x.T),
    "shrink": (lambda x: x.shrink(((1, x.shape[0]), (0, x.shape[1]))), lambda x: x[1:]),
    "pad": (lambda x: x.pad(((1, 2), (3, 0))), lambda x: np.pad(x, ((1, 2), (3, 0)))),
}


def _inputs(rows: int, cols: int, dtype: np.dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-1000, 1000, (rows, cols)).astype(dtype)
    return RNG.uniform(-2, 2, (rows, cols)).astype(dtype)


def _check(got: np.ndarray, want: np.ndarray, reduced: int = 1) -> None:
    if np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.finfo(got.dtype).eps * (reduced + 2) * scale)


@pytest.fixture(autouse=True)
def _thread_everything():
    with config.override(parallel_min_work=0):
        yield


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_elementwise_and_row_reduce_awkward_sizes(device, size, dtype):
    a, b = _inputs(3, size, dtype), _inputs(3, size, dtype)
    x, y = fast.from_numpy(a, device), fast.from_numpy(b, device)
    both = x.e(BinaryOps.MUL, y).e(BinaryOps.ADD, x).e(BinaryOps.MAX, y)
    _check(fast.to_numpy(both), np.maximum(a * b + a, b))
    _check(fast.to_numpy(both.r(ReduceOps.SUM, (1,))), np.maximum(a * b + a, b).sum(1, keepdims=True), size)
    _check(fast.to_numpy(x.r(ReduceOps.MAX, (1,))), a.max(1, keepdims=True))
    _check(fast.to_numpy(x.r(ReduceOps.SUM, (0,))), a.sum(0, keepdims=True), 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("shape", [(5, 64), (33, 48), (64, 17)])
def test_views_through_vector_kernels(device, view, shape):
    move, np_move = VIEWS[view]
    a = _inputs(*shape, np.float32)
    x = move(fast.from_numpy(a, device))
    want = np_move(a)
    _check(fast.to_numpy(x.e(BinaryOps.MUL, x.const(3.0))), want * np.float32(3))
    _check(fast.to_numpy(x.r(ReduceOps.SUM, (1,))), want.sum(1, keepdims=True), want.shape[1])
    _check(fast.to_numpy(x.r(ReduceOps.SUM, (0,))), want.sum(0, keepdims=True), want.shape[0])
    _check(fast.to_numpy(x.r(ReduceOps.MAX, (0, 1))), want.max(keepdims=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,k,m", [(1, 1, 1), (3, 5, 7), (16, 16, 16), (17, 33, 48), (64, 31, 64), (8, 128, 96)])
def test_matmul_register_tiles(device, n, k, m):
    a, b = _inputs(n, k, np.float32), _inputs(k, m, np.float32)
    x, y = fast.from_numpy(a, device), fast.from_numpy(b, device)
    product = x.reshape((n, 1, k)).expand((n, m, k)).e(
        BinaryOps.MUL, y.permute((1, 0)).reshape((1, m, k)).expand((n, m, k))).r(ReduceOps.SUM, (2,))
    _check(fast.to_numpy(product).reshape(n, m), a @ b, k)


@pytest.mark.parametrize("device", DEVICES)
def test_special_values_in_vector_lanes(device):
    values = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 1.5, -3.0, 3.4e38, -3.4e38, 1e-45, 2.0, np.nan,
                       7.0, -7.0, 0.5, 100.0] * 4, np.float32)
    other = np.roll(values, 5)
    x, y = fast.from_numpy(values, device), fast.from_numpy(other, device)
    with np.errstate(all="ignore"):
        got_max = fast.to_numpy(x.e(BinaryOps.MAX, y))
        want_max = np.where(np.isnan(values) | np.isnan(other), np.nan, np.maximum(values, other))
        np.testing.assert_array_equal(got_max, want_max)
        np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.CMPLT, y)), values < other)
        np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.CMPLT, y).e(TernaryOps.WHERE, x, y)),
                                      np.where(values < other, values, other))
        np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.DIV, y)), values / other)
        got_cast = fast.to_numpy(x.cast(fast.dtypes.int32))
        fits = np.isfinite(values) & (np.abs(values) < 2**31)
        np.testing.assert_array_equal(got_cast[fits], np.trunc(values[fits]).astype(np.int32))
    assert fast.to_numpy(x.r(ReduceOps.MAX, (0,)))[0] != fast.to_numpy(x.r(ReduceOps.MAX, (0,)))[0]  # NaN


@pytest.mark.parametrize("device", DEVICES)
def test_integer_wrap_and_division_on_vectors(device):
    a = np.array([2**31 - 1, -2**31, 7, -7, 0, 1, -1, 123456789] * 8, np.int32)
    x = fast.from_numpy(a, device)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.ADD, x)), a + a)
        np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.MUL, x.const(3))), a * np.int32(3))
        np.testing.assert_array_equal(fast.to_numpy(x.e(UnaryOps.NEG)), -a)
    quotient = fast.to_numpy(x.e(BinaryOps.DIV, x.const(4)))
    np.testing.assert_array_equal(quotient, np.trunc(a / 4).astype(np.int32))
    np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.MOD, x.const(5))), np.fmod(a, 5))
    np.testing.assert_array_equal(fast.to_numpy(x.r(ReduceOps.SUM, (0,))), [a.sum(dtype=np.int32)])


def _kernel_programs(out: LazyBuffer, device: str):
    return lowered_kernels(out, fast.Device[device].renderer.options)


@pytest.mark.skipif(cpu.vector_bytes() == 0, reason="this host has no SIMD registers")
@pytest.mark.parametrize("device", DEVICES)
def test_contiguous_kernels_use_vector_loads(device):
    x = fast.from_numpy(_inputs(64, 256, np.float32), device)
    for out in (x.e(BinaryOps.MUL, x), x.r(ReduceOps.SUM, (1,)), x.r(ReduceOps.SUM, (0,))):
        (program,) = _kernel_programs(out, device)
        assert any(i.op is IROps.LOAD and i.dtype.count > 1 for i in program.instrs), program.name
    with config.override(noopt=True):
        (program,) = _kernel_programs(x.e(BinaryOps.MUL, x.const(2.0)), device)
        assert all(i.dtype is None or i.dtype.count == 1 for i in program.instrs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 4099), (13, 4096), (257, 3), (4096, 1)])
def test_bit_identical_whatever_the_thread_count(device, shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    results = []
    for threads in (1, 2, 3, 7):
        with config.override(threads=threads):
            x = fast.from_numpy(a, device)
            row = x.e(BinaryOps.MUL, x).r(ReduceOps.SUM, (1,))
            col = x.e(UnaryOps.EXP2).r(ReduceOps.SUM, (0,))
            total = x.r(ReduceOps.SUM, (0, 1))
            results.append([fast.to_numpy(out).tobytes() for out in (row, col, total)])
    assert all(result == results[0] for result in results[1:])


@pytest.mark.parametrize("device", DEVICES)
def test_large_threaded_kernel_matches_single_thread(device):
    a = RNG.standard_normal((512, 1024)).astype(np.float32)
    outputs = []
    for threads in (1, 2):
        with config.override(threads=threads, parallel_min_work=1 << 18):
            x = fast.from_numpy(a, device)
            (program,) = _kernel_programs(x.r(ReduceOps.SUM, (1,)), device)
            assert program.threaded
            outputs.append(fast.to_numpy(x.r(ReduceOps.SUM, (1,))))
    np.testing.assert_array_equal(outputs[0], outputs[1])
    _check(outputs[0], a.sum(1, keepdims=True), 1024)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,cols", [(128, 16), (160, 48), (1024, 64), (96, 32), (4096, 32)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_chunked_column_reductions(device, rows, cols, dtype):
    """Column sums and maxes walk the rows in chunks, accumulating in the output between chunks."""
    a = _inputs(rows, cols, dtype)
    if dtype == np.float32:
        a[rows // 2, 3] = np.nan
    x = fast.from_numpy(a, device)
    got_max = fast.to_numpy(x.r(ReduceOps.MAX, (0,)))
    want_max = a.max(0, keepdims=True)
    np.testing.assert_array_equal(got_max, want_max)
    sums = fast.to_numpy(x.r(ReduceOps.SUM, (0,)))
    scaled = fast.to_numpy(x.r(ReduceOps.SUM, (0,)).e(BinaryOps.MUL, x.const(2).r(ReduceOps.MAX, (0,))))
    finite = ~np.isnan(sums)
    _check(scaled[finite], (sums * dtype(2))[finite], rows)  # post-reduce work: no accumulation in the output
    want = a.sum(0, keepdims=True, dtype=dtype)
    if dtype == np.float32:
        assert np.isnan(sums[0, 3])
        sums[0, 3] = want[0, 3] = 0.0
    _check(sums, want, rows)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [fast.dtypes.float64, fast.dtypes.int64, fast.dtypes.float32, fast.dtypes.int32])
@pytest.mark.parametrize("value", [float("nan"), 2.0, float("inf")])
def test_padded_constants_keep_their_zero_lane(device, dtype, value):
    """Conformance regressions: a NaN (or 2.0) constant padded by one became x everywhere on CLANG,
    because GCC 12 with AVX-512 stores a memcpy'd constant {x, x, x, 0.0} of 64-bit lanes as x in
    every lane (runtime/clang.py; the C renderer stores vectors through may_alias pointers)."""
    if fast.dtypes.is_int(dtype) and value != 2.0:
        return
    base = fast.LazyBuffer.loadop(fast.LoadOps.CONST, (3,), dtype, device, arg=value)
    padded = base.pad(((0, 1),))
    want = np.array([value, value, value, 0], dtype=dtype.np)
    np.testing.assert_array_equal(fast.to_numpy(padded.e(BinaryOps.MAX, padded)), want)
    if not fast.dtypes.is_int(dtype):
        np.testing.assert_array_equal(fast.to_numpy(padded.e(UnaryOps.SQRT)), np.sqrt(want))
    rows = fast.LazyBuffer.loadop(fast.LoadOps.CONST, (1, 3), dtype, device, arg=value).pad(((0, 1), (0, 1)))
    want_rows = np.array([[value] * 3 + [0], [0] * 4], dtype=dtype.np).reshape(2, 4, 1)
    np.testing.assert_array_equal(fast.to_numpy(rows.reshape((2, 4, 1))), want_rows)  # GCC folded {x, x, x, 0}
    wide = fast.LazyBuffer.loadop(fast.LoadOps.CONST, (7,), dtype, device, arg=value).pad(((0, 1),))
    np.testing.assert_array_equal(fast.to_numpy(wide.e(BinaryOps.ADD, wide)), np.array([value] * 7 + [0], dtype.np) * 2)


@pytest.mark.skipif(cpu.vector_bytes() == 0, reason="this host has no SIMD registers")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [9, 17, 97, 4099])
def test_sizes_the_lanes_do_not_divide_get_vectors_and_a_scalar_tail(device, size):
    """A prime-length output axis is vectorized over its largest multiple of the vector step; a
    second loop nest does the rest lane by lane (opt.py `KernelPlan.tail`), threaded or not, with the
    same bits whatever the thread count."""
    a = RNG.standard_normal(size).astype(np.float32)
    x = fast.from_numpy(a, device)
    out = x.e(BinaryOps.MUL, x).e(BinaryOps.ADD, x.stride((-1,)))
    (program,) = _kernel_programs(out, device)
    stores = [program.instrs[i.srcs[1]].dtype.count for i in program.instrs if i.op is IROps.STORE]
    assert any(i.op is IROps.LOAD and i.dtype.count > 1 for i in program.instrs)
    assert max(stores) > 1 and min(stores) == 1  # vector stores, then the tail's scalar ones
    results = []
    for threads in (1, 2, 3):
        with config.override(threads=threads):
            results.append(fast.to_numpy(x.e(BinaryOps.MUL, x).e(BinaryOps.ADD, x.stride((-1,)))).tobytes())
    assert results[0] == results[1] == results[2]
    np.testing.assert_array_equal(np.frombuffer(results[0], np.float32), a * a + a[::-1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,cols", [(130, 257), (64, 100), (5, 37), (3, 9)])
def test_tails_in_reductions_and_views(device, rows, cols):
    """Column sums and maxes (chunked, vectorized along the columns) and flipped, padded views over a
    column count the lanes do not divide."""
    a = _inputs(rows, cols, np.float32)
    x = fast.from_numpy(a, device)
    _check(fast.to_numpy(x.r(ReduceOps.SUM, (0,))), a.sum(0, keepdims=True), rows)
    np.testing.assert_array_equal(fast.to_numpy(x.r(ReduceOps.MAX, (0,))), a.max(0, keepdims=True))
    np.testing.assert_array_equal(fast.to_numpy(x.stride((-1, 1)).e(BinaryOps.SUB, x)), a[::-1] - a)
    padded = x.pad(((0, 1), (2, 1))).e(BinaryOps.MUL, x.const(3.0).pad(((0, 1), (2, 1))))
    np.testing.assert_array_equal(fast.to_numpy(padded), np.pad(a, ((0, 1), (2, 1))) * np.float32(3.0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k,n", [(100, 64, 100), (33, 130, 70), (4, 3, 19)])
def test_matmul_with_output_columns_the_lanes_do_not_divide(device, m, k, n):
    a, b = _inputs(m, k, np.float32), _inputs(k, n, np.float32)
    x, y = fast.from_numpy(a, device), fast.from_numpy(b, device)
    rows = x.reshape((m, 1, k)).expand((m, n, k))
    out = rows.e(BinaryOps.MUL, y.permute((1, 0)).reshape((1, n, k)).expand((m, n, k)))
    _check(fast.to_numpy(out.r(ReduceOps.SUM, (2,))).reshape(m, n), a @ b, k)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k,n", [(24, 37, 96), (12, 5, 128), (8, 1, 67), (6, 33, 64), (1, 64, 64), (16, 7, 99)])
@pytest.mark.parametrize("view", ["plain", "flip", "pad"])
def test_matmul_register_tiles_on_awkward_shapes(device, m, k, n, view):
    """Register tiles of up to 16 accumulators (4 x 4 or 8 x 2 vectors with AVX-512; opt.py) over
    column counts with and without a tail, a K of 1 or a prime, and A flipped or padded (masked
    loads): the same bits for 1, 2 and 3 threads, and numpy's product within the sum tolerance."""
    move, want_move = VIEWS[view]
    a, b = _inputs(m, k, np.float32), _inputs(k, n, np.float32)
    x, y = move(fast.from_numpy(a, device)), fast.from_numpy(b, device)
    rows, depth = x.shape
    want = want_move(a) @ b if depth == k else None
    if want is None:  # the padded view widens K: pad B's rows the same way (zeros)
        y = y.pad(((3, 0), (0, 0)))
        want = want_move(a) @ np.pad(b, ((3, 0), (0, 0)))

    def product() -> bytes:
        left = x.reshape((rows, 1, depth)).expand((rows, n, depth))
        right = y.permute((1, 0)).reshape((1, n, depth)).expand((rows, n, depth))
        return fast.to_numpy(left.e(BinaryOps.MUL, right).r(ReduceOps.SUM, (2,))).tobytes()

    results = []
    for threads in (1, 2, 3):
        with config.override(threads=threads, alloc_poison=True):
            results.append(product())
    assert results[0] == results[1] == results[2]
    _check(np.frombuffer(results[0], np.float32).reshape(want.shape), want, depth)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(6, 40), (7, 33), (13, 5), (17, 3)])
def test_several_reduces_with_an_output_tail_write_every_output(device, shape):
    """Row sum + row max of one input share a kernel whose vectorized output axis may leave a tail;
    with ALLOC_POISON an output position the tail missed would read back as NaN."""
    a = _inputs(*shape, np.float32)
    with config.override(alloc_poison=True):
        x = fast.from_numpy(a, device)
        both = x.r(ReduceOps.SUM, (1,)).e(BinaryOps.ADD, x.r(ReduceOps.MAX, (1,)))
        _check(fast.to_numpy(both), a.sum(1, keepdims=True) + a.max(1, keepdims=True), shape[1])
