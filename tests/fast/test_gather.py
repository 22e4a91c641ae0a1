"""LazyBuffer.gather in `fast`: values against numpy for edge indices, dtypes and views on CLANG and LLVM;
one kernel (a gathered LOAD) fused with what reads it; out-of-range indices an IndexError raised at
realize (scheduled and replayed), while the kernel itself clamps (never reads out of bounds)."""
from __future__ import annotations

import numpy as np
import pytest

import fast
from fast import BinaryOps, ReduceOps, dtypes
from fast.engine import gathers
from fast.ops import BufferOps, KernelOps, LoadOps

DEVICES = ("CLANG", "LLVM")


def expected(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    wide = idx.astype(np.int64) if idx.dtype.kind == "i" else idx.astype(np.uint64).astype(np.int64)
    return np.take(x, np.where(wide < 0, wide + x.shape[axis], wide), axis=axis)


def gathered_loads(items: list) -> int:
    return sum(node.op is BufferOps.LOAD and bool(node.src) for item in items for node in item.ast.walk())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint32, np.uint64])
def test_edge_indices_on_every_axis(device, index_dtype):
    x = np.arange(5 * 6 * 7, dtype=np.float32).reshape(5, 6, 7)
    lb = fast.from_numpy(x, device)
    for axis, n in enumerate(x.shape):
        edges = [0, n - 1, -1, -n, 1, n // 2] if np.dtype(index_dtype).kind == "i" else [0, n - 1, 1, n // 2]
        idx = np.array(edges, dtype=index_dtype).reshape(2, -1)
        got = fast.to_numpy(lb.gather(fast.from_numpy(idx, device), axis))
        np.testing.assert_array_equal(got, expected(x, idx, axis))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint16, np.int64, np.float64, np.bool_])
def test_rows_of_every_kind_of_dtype(device, dtype):
    x = (np.random.default_rng(1).random((9, 33)) * 50).astype(dtype)
    idx = np.array([8, 0, -9, 3, 3, -1], dtype=np.int32)
    got = fast.to_numpy(fast.from_numpy(x, device).gather(fast.from_numpy(idx, device), 0))
    np.testing.assert_array_equal(got, expected(x, idx, 0))


def test_bfloat16_rows_keep_their_bits():
    x = fast.from_numpy(np.linspace(-3, 3, 40, dtype=np.float32).reshape(10, 4), "CLANG").cast(dtypes.bfloat16)
    want = fast.to_numpy(x)[[9, 0, 4]]
    got = fast.to_numpy(x.gather(fast.from_numpy(np.array([-1, 0, 4], np.int64), "CLANG"), 0))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_gathered_views_strided_flipped_padded(device):
    x = np.arange(8 * 10, dtype=np.int32).reshape(8, 10)
    lb = fast.from_numpy(x, device)
    view = lb.stride((-1, 2)).pad(((2, 1), (0, 3)))  # 11 x 8: flipped rows, every other column, zero borders
    numpy_view = np.pad(x[::-1, ::2], ((2, 1), (0, 3)))
    for axis, n in enumerate(numpy_view.shape):  # 0, 1, 2 (in the border), n - 1, -1, -n, the middle
        idx = np.array([0, 1, 2, n - 1, -1, -n, n // 2], dtype=np.int32)
        got = fast.to_numpy(view.gather(fast.from_numpy(idx, device), axis))
        np.testing.assert_array_equal(got, expected(numpy_view, idx, axis))


@pytest.mark.parametrize("device", DEVICES)
def test_index_arrays_that_are_views(device):
    x = np.arange(35, dtype=np.float32).reshape(7, 5)
    base = np.array([[5, -6, 2], [0, 1, -1]], dtype=np.int64)
    idx = fast.from_numpy(base, device)
    cases = {
        "transposed": (idx.permute((1, 0)), base.T),
        "flipped": (idx.stride((1, -1)), base[:, ::-1]),
        "shrunk": (idx.shrink(((1, 2), (0, 3))), base[1:2]),
        "padded": (idx.pad(((0, 1), (1, 0))), np.pad(base, ((0, 1), (1, 0)))),
        "expanded": (idx.reshape((1, 2, 3)).expand((2, 2, 3)), np.broadcast_to(base, (2, 2, 3))),
        "constant": (idx.const(-2, (4,)), np.full(4, -2)),
        "computed": (idx.e(BinaryOps.ADD, idx.const(1)), base + 1),
    }
    for name, (lazy, numpy_idx) in cases.items():
        got = fast.to_numpy(fast.from_numpy(x, device).gather(lazy, 0))
        np.testing.assert_array_equal(got, expected(x, numpy_idx, 0), err_msg=name)


def test_empty_index_arrays_and_empty_axes():
    x = fast.from_numpy(np.ones((4, 3), np.float32), "CLANG")
    empty = fast.from_numpy(np.zeros((0,), np.int32), "CLANG")
    assert fast.to_numpy(x.gather(empty, 0)).shape == (0, 3)
    assert fast.to_numpy(x.gather(empty.reshape((0, 1)), 1)).shape == (4, 0, 1)
    no_rows = fast.from_numpy(np.ones((0, 3), np.float32), "CLANG")
    assert fast.to_numpy(no_rows.gather(empty, 0)).shape == (0, 3)
    with pytest.raises(IndexError, match="gather: cannot take indices of shape"):
        no_rows.gather(fast.from_numpy(np.zeros(2, np.int32), "CLANG"), 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [4, -5, 2**31 - 1, -(2**31)])
def test_out_of_range_is_an_index_error_at_realize(device, bad):
    x = fast.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3), device)
    out = x.gather(fast.from_numpy(np.array([0, bad, 1], np.int32), device), 0)  # building raises nothing
    with pytest.raises(IndexError, match=rf"take \(gather\): index {bad} is out of bounds for axis 0 with size 4"):
        fast.realize(out)
    assert not out.is_realized()


def test_unsigned_out_of_range_and_replayed_checks():
    x = fast.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3), "CLANG")
    with pytest.raises(IndexError, match=str(2**64 - 1)):
        fast.realize(x.gather(fast.from_numpy(np.array([2**64 - 1], np.uint64), "CLANG"), 0))
    for _ in range(3):  # the same structure again: replayed, its leaf indices checked every time
        good = x.gather(fast.from_numpy(np.array([3, -4], np.int32), "CLANG"), 0)
        np.testing.assert_array_equal(fast.to_numpy(good), np.arange(12).reshape(4, 3)[[3, 0]])
        bad = x.gather(fast.from_numpy(np.array([3, 4], np.int32), "CLANG"), 0)
        with pytest.raises(IndexError, match="index 4 is out of bounds"):
            fast.realize(bad)


@pytest.mark.parametrize("device", DEVICES)
def test_the_kernel_clamps_what_the_check_would_refuse(device, monkeypatch):
    """Memory safety does not rest on the check: with it switched off, any index reads inside x (an
    index below -n reads row 0, one at or past n reads row n - 1)."""
    monkeypatch.setattr(gathers, "check_indices", lambda checks: None)
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    idx = np.array([-(2**62), -11, -10, -1, 9, 10, 2**62], dtype=np.int64)
    got = fast.to_numpy(fast.from_numpy(table, device).gather(fast.from_numpy(idx, device), 0))
    np.testing.assert_array_equal(got, table[[0, 0, 0, 9, 9, 9, 9]])
    huge = np.array([2**64 - 1, 2**63, 3], dtype=np.uint64)
    got = fast.to_numpy(fast.from_numpy(table, device).gather(fast.from_numpy(huge, device), 0))
    np.testing.assert_array_equal(got, table[[9, 9, 3]])


def test_one_kernel_fused_with_adds_and_a_layernorm():
    """The embedding pattern: gather rows, add broadcast position rows, normalize each row: one kernel."""
    rng = np.random.default_rng(2)
    table, pos = rng.standard_normal((50, 16), dtype=np.float32), rng.standard_normal((6, 16), dtype=np.float32)
    ids = rng.integers(-50, 50, (3, 6)).astype(np.int32)
    words = fast.from_numpy(table, "CLANG").gather(fast.from_numpy(ids, "CLANG"), 0)
    h = words.e(BinaryOps.ADD, fast.from_numpy(pos, "CLANG").reshape((1, 6, 16)).expand((3, 6, 16)))
    mean = h.r(ReduceOps.SUM, (2,)).e(BinaryOps.MUL, h.const(1 / 16, (3, 6, 1))).expand((3, 6, 16))
    out = h.e(BinaryOps.SUB, mean)
    items = fast.schedule(out)
    assert [item.ast.op for item in items] == [KernelOps.SINK] and gathered_loads(items) == 1
    want = expected(table, ids, 0) + pos
    np.testing.assert_allclose(fast.to_numpy(out), want - want.mean(axis=2, keepdims=True), rtol=1e-5, atol=1e-6)


def test_no_custom_item_and_sources_realized_first():
    x = fast.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3), "CLANG")
    idx = fast.from_numpy(np.array([1, 2], np.int32), "CLANG")
    scaled = x.e(BinaryOps.MUL, x.const(2.0))  # an unrealized source: realized by its own kernel
    items = fast.schedule(scaled.gather(idx.e(BinaryOps.ADD, idx.const(1)), 0))
    assert all(item.ast.op is KernelOps.SINK for item in items) and LoadOps.CUSTOM not in {i.ast.op for i in items}
    assert len(items) == 3 and gathered_loads(items) == 1
    np.testing.assert_array_equal(fast.to_numpy(scaled.gather(idx.e(BinaryOps.ADD, idx.const(1)), 0)),
                                  2 * np.arange(12).reshape(4, 3)[[2, 3]])


def test_argument_errors():
    x = fast.from_numpy(np.zeros((4, 3), np.float32), "CLANG")
    idx = fast.from_numpy(np.zeros(2, np.int32), "CLANG")
    with pytest.raises(TypeError, match="gather: indices must have an integer dtype, got float32"):
        x.gather(x, 0)
    with pytest.raises(TypeError, match="gather: expected a LazyBuffer"):
        x.gather(np.zeros(2, np.int32), 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gather: axis 2 is out of range for shape"):
        x.gather(idx, 2)
    with pytest.raises(ValueError, match="gather: axis -1"):
        x.gather(idx, -1)
    with pytest.raises(ValueError, match="gather: x is on CLANG and indices on LLVM"):
        x.gather(fast.from_numpy(np.zeros(2, np.int32), "LLVM"), 0)
