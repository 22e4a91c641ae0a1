"""MultiLazyBuffers with shards that are not real (docs/api.md "Partly real buffers").

The logical value is the real shards joined along the axis; positions along the axis count real
shards only, so every rule below follows from "the result's logical value is the op applied to the
operands' logical values".
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ref_util import buf, op

D2 = ("CLANG:0", "CLANG:1")
D3 = ("CLANG:0", "CLANG:1", "CLANG:2")
X = np.arange(80, dtype=np.int32).reshape(10, 8)
KEPT = np.concatenate([X[0:4], X[8:10]])  # shards [4, 4, 2] of X with the middle one not real


def shard(impl, x, devices, axis, name="int32"):
    return impl.MultiLazyBuffer.from_sharded(buf(impl, x, name), devices, axis)


def holes(impl):
    """X sharded over three devices (rows 4, 4, 2), the middle shard not real: logical value KEPT."""
    return impl.MultiLazyBuffer(shard(impl, X, D3, 0).lbs, 0, [True, False, True])


def test_logical_value_counts_real_shards_only(impl):
    m = holes(impl)
    assert m.shape == (6, 8) and m.bounds == [(0, 4), (4, 8), (8, 10)] and np.array_equal(impl.to_numpy(m), KEPT)
    copied = m.copy_to_device("CLANG:5")  # each real shard placed at its position among the real shards
    assert copied.shape == (6, 8) and np.array_equal(impl.to_numpy(copied), KEPT)


def test_reduce_over_the_axis_combines_the_real_shards(impl):
    m = holes(impl)
    reducers: list[tuple[str, Any]] = [("SUM", np.sum), ("MAX", np.max)]
    for name, fn in reducers:
        r = m.r(getattr(impl.ReduceOps, name), (0,))
        assert r.axis is None and r.real == [True, False, True] and r.shape == (1, 8)
        want = fn(KEPT, axis=0, keepdims=True)
        for i in (0, 2):  # every real device holds the combination of all real shards
            assert np.array_equal(impl.to_numpy(r.lbs[i]), want)
        assert np.array_equal(impl.to_numpy(r.lbs[1]), np.zeros((1, 8)))  # not real: zeros
    assert np.array_equal(impl.to_numpy(m.r(impl.ReduceOps.SUM, (1,))), KEPT.sum(1, keepdims=True))


def test_shrink_and_elementwise_use_real_positions(impl):
    m = holes(impl)
    last = m.shrink(((4, 6), (0, 8)))  # the last real shard's range in the logical tensor
    assert last.real == [False, False, True] and np.array_equal(impl.to_numpy(last), X[8:10])
    with pytest.raises(ValueError, match="shrink"):
        m.shrink(((4, 8), (0, 8)))  # the absolute bound of a shard that is not real
    y = (KEPT * 3 - 1).astype(np.int32)
    w = m.e(op(impl, "ADD"), shard(impl, y, D3, None))  # the unsharded operand is sliced at real positions
    assert w.axis == 0 and w.real == [True, False, True] and np.array_equal(impl.to_numpy(w), KEPT + y)
    assert np.array_equal(impl.to_numpy(w.lbs[1]), np.zeros((4, 8)))
    c = m.const(7)
    assert np.array_equal(impl.to_numpy(c), np.full((6, 8), 7)) and not impl.to_numpy(c.lbs[1]).any()


def test_operand_sharded_on_another_axis_counts_as_real(impl):
    add = op(impl, "ADD")
    one = shard(impl, X, D2, 0).shrink(((5, 10), (0, 8)))  # real [False, True], shape (5, 8)
    cols = shard(impl, X[5:] * 2, D2, 1)
    r = one.e(add, cols)  # axis 1: `one` is gathered, so every result shard is real
    assert r.axis == 1 and all(r.real) and np.array_equal(impl.to_numpy(r), X[5:] * 3)
    r = cols.e(add, one)  # axis 0: `cols` is gathered and resliced at the real positions of `one`
    assert r.axis == 0 and r.real == [False, True] and np.array_equal(impl.to_numpy(r), X[5:] * 3)
    right = shard(impl, X, D2, 1).shrink(((0, 10), (4, 8)))  # real [False, True] on axis 1, shape (10, 4)
    r = right.e(add, shard(impl, X[:, 4:], D2, 0))
    assert r.axis == 0 and all(r.real) and np.array_equal(impl.to_numpy(r), 2 * X[:, 4:])


def test_partly_real_layout_violations(impl):
    red = shard(impl, X, D2, 0).shrink(((5, 10), (0, 8))).r(impl.ReduceOps.SUM, (0,))  # axis None, real [F, T]
    assert impl.to_numpy(red).tolist() == [X[5:].sum(0).tolist()]
    with pytest.raises(ValueError):  # the real result shards would not cover axis 1
        red.e(op(impl, "ADD"), shard(impl, X[:1], D2, 1))
    lbs = [buf(impl, X[:4], "int32"), buf(impl, X[4:], "int32").copy_to_device("CLANG:1")]
    with pytest.raises(ValueError):  # sharded on the same axis with different bounds
        impl.MultiLazyBuffer(lbs, 0).e(op(impl, "ADD"), shard(impl, X, D2, 0))
    m = shard(impl, X, D2, 0).contiguous()
    impl.realize(m)
    with pytest.raises(ValueError):
        m.assign(shard(impl, X, D2, 1))
    target = impl.MultiLazyBuffer(m.lbs, 0, [False, True])
    value = shard(impl, -X, D2, 0)
    with pytest.raises(ValueError):  # the value is not real where the target is
        target.assign(impl.MultiLazyBuffer(value.lbs, 0, [True, False]))
    impl.realize(target.assign(impl.MultiLazyBuffer(value.lbs, 0, [False, True])))
    assert np.array_equal(impl.to_numpy(target), -X[5:])  # only the real shard is written
    assert np.array_equal(impl.to_numpy(m), np.concatenate([X[:5], -X[5:]]))
