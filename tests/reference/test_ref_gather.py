"""LazyBuffer.gather on both implementations (docs/semantics.md, "Gather"): values for edge indices of
every integer dtype, rows of every dtype, gathered views and index views; the errors and when they
are raised (out-of-range indices at realize, the rest when the node is built)."""
from __future__ import annotations

import numpy as np
import pytest
from ref_util import ALL, DEV, INTS, buf, disk, dt


def numpy_take(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    wide = [int(v) for v in idx.reshape(-1)]
    n = x.shape[axis]
    return np.take(x, np.array([v + n if v < 0 else v for v in wide], np.int64).reshape(idx.shape), axis=axis)


@pytest.mark.parametrize("index", INTS)
def test_edge_indices(impl, index):
    x = np.arange(4 * 5, dtype=np.float32).reshape(4, 5)
    for axis, n in enumerate(x.shape):
        edges = [0, n - 1, 1] + ([-1, -n] if not index.startswith("u") else [n - 2])
        idx = np.array(edges, dtype=index)
        got = impl.to_numpy(buf(impl, x, "float32").gather(buf(impl, idx, index), axis))
        assert got.shape == (*x.shape[:axis], len(edges), *x.shape[axis + 1:])
        np.testing.assert_array_equal(got, numpy_take(x, idx, axis))


@pytest.mark.parametrize("name", ALL)
def test_rows_of_every_dtype(impl, name):
    values = np.arange(-6, 6).reshape(4, 3) * (0.5 if name in ("float16", "bfloat16", "float32", "float64") else 1)
    x = buf(impl, values % 2 if name == "bool" else values, name)
    idx = buf(impl, [[3, -4], [0, 2]], "int32")
    got = impl.to_numpy(x.gather(idx, 0))
    np.testing.assert_array_equal(got, numpy_take(impl.to_numpy(x), np.array([[3, -4], [0, 2]]), 0))
    assert got.dtype == impl.to_numpy(x).dtype and x.gather(idx, 0).dtype == dt(impl, name)


def test_gathered_views_and_index_views(impl):
    data = np.arange(6 * 4, dtype=np.int16).reshape(6, 4)
    x = buf(impl, data, "int16").stride((-1, 1)).pad(((1, 2), (0, 1))).shrink(((0, 8), (1, 5)))
    view = np.pad(data[::-1], ((1, 2), (0, 1)))[0:8, 1:5]
    base = np.array([[7, -8, 0], [3, -1, 5]], dtype=np.int64)
    idx = buf(impl, base, "int64")
    for lazy, numpy_idx in [(idx.permute((1, 0)), base.T), (idx.stride((-1, 1)), base[::-1]),
                            (idx.pad(((0, 0), (1, 0))), np.pad(base, ((0, 0), (1, 0)))),
                            (idx.shrink(((1, 2), (0, 2))), base[1:2, :2])]:
        np.testing.assert_array_equal(impl.to_numpy(x.gather(lazy, 0)), numpy_take(view, numpy_idx, 0))
    small = buf(impl, [[1, -2], [3, 0]], "int8")
    computed = small.e(impl.BinaryOps.ADD, small.const(-1)).pad(((0, 1), (0, 0)))  # [[0, -3], [2, -1], [0, 0]]
    np.testing.assert_array_equal(impl.to_numpy(x.gather(computed, 1)),
                                  numpy_take(view, np.array([[0, -3], [2, -1], [0, 0]]), 1))


def test_empty_indices_and_empty_axes(impl):
    x = buf(impl, np.ones((3, 2)), "float32")
    empty = buf(impl, np.zeros(0), "int32")
    assert impl.to_numpy(x.gather(empty, 0)).shape == (0, 2)
    assert impl.to_numpy(x.gather(empty.reshape((0, 4)), 1)).shape == (3, 0, 4)
    rows = buf(impl, np.ones((0, 2)), "float32")
    assert impl.to_numpy(rows.gather(empty, 0)).shape == (0, 2)
    with pytest.raises(IndexError, match="gather: cannot take indices of shape"):
        rows.gather(buf(impl, [0], "int32"), 0)
    nothing = buf(impl, np.ones((4, 0)), "float32")  # an empty result reads no index: none is checked
    assert impl.to_numpy(nothing.gather(buf(impl, [9], "int32"), 0)).shape == (1, 0)


@pytest.mark.parametrize("bad,name", [(3, "int8"), (-4, "int8"), (200, "uint8"), (2**63, "uint64"),
                                      (-(2**63), "int64")])
def test_out_of_range_raises_index_error_at_realize(impl, bad, name):
    x = buf(impl, np.arange(6).reshape(3, 2), "int32")
    out = x.gather(buf(impl, [0, bad, 2], name), 0)  # built without error
    with pytest.raises(IndexError, match=rf"take \(gather\): index {bad} is out of bounds for axis 0 with size 3"):
        impl.realize(out)
    with pytest.raises(IndexError):
        impl.to_numpy(out.e(impl.BinaryOps.ADD, out))


def test_argument_errors(impl, tmp_path):
    x, idx = buf(impl, np.zeros((2, 3)), "float32"), buf(impl, [0], "int32")
    with pytest.raises(TypeError, match="gather: indices must have an integer dtype, got bool"):
        x.gather(buf(impl, [True], "bool"), 0)
    with pytest.raises(TypeError, match="gather: indices must have an integer dtype, got float32"):
        x.gather(x, 1)
    with pytest.raises(TypeError, match="gather"):
        x.gather([0], 0)
    for axis in (2, -1, 0.0, None):
        with pytest.raises(ValueError, match="gather: axis"):
            x.gather(idx, axis)
    with pytest.raises(ValueError, match="gather: x is on"):
        x.gather(buf(impl, [0], "int32", "CLANG:1"), 0)
    on_disk = buf(impl, np.zeros((2, 3)), "float32", disk(tmp_path))
    with pytest.raises(RuntimeError, match="gather"):
        on_disk.gather(on_disk.cast(dt(impl, "int32"), bitcast=True).reshape((6,)), 0)
    assert x.device == DEV
