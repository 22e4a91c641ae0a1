"""MultiLazyBuffer per SPEC §5: sharding, elementwise across layouts, reductions, movement, copies."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ref_util import buf, op

D2 = ("CLANG:0", "CLANG:1")
D3 = ("CLANG:0", "CLANG:1", "CLANG:2")
D4 = ("CLANG:0", "CLANG:1", "CLANG:2", "CLANG:3")
X = np.arange(80, dtype=np.int32).reshape(10, 8)


def shard(impl, x, devices, axis, name="int32"):
    return impl.MultiLazyBuffer.from_sharded(buf(impl, x, name), devices, axis)


@pytest.mark.parametrize("devices,axis,sizes", [
    (D2, 0, [5, 5]), (D3, 0, [4, 4, 2]), (D4, 0, [3, 3, 3, 1]), (D4, 1, [2, 2, 2, 2]), (D3, 1, [3, 3, 2]),
    (D3, None, None),
])
def test_from_sharded_layout(impl, devices, axis, sizes):
    m = shard(impl, X, devices, axis)
    assert m.shape == (10, 8) and m.size == 80 and m.axis == axis and m.dtype == impl.dtypes.int32
    assert m.device == ("CLANG", *devices[1:]) and list(m.real) == [True] * len(devices)
    if axis is not None:
        assert [lb.shape[axis] for lb in m.lbs] == sizes
        ends = np.cumsum([0, *sizes]).tolist()
        assert [tuple(b) for b in m.bounds] == list(zip(ends, ends[1:], strict=False))
        for lb, (s, e) in zip(m.lbs, m.bounds, strict=True):
            assert np.array_equal(impl.to_numpy(lb), np.take(X, range(s, e), axis=axis))
    assert np.array_equal(impl.to_numpy(m), X)


def test_uneven_sharding_where_ceil_overshoots(impl):
    m = shard(impl, np.arange(10, dtype=np.int32), D4, 0)  # ceil(10/4)*3 = 9 < 10: shards 3,3,3,1
    assert [lb.shape for lb in m.lbs] == [(3,), (3,), (3,), (1,)]
    m = shard(impl, np.arange(7, dtype=np.int32), D3, 0)  # 3,3,1
    assert [lb.shape for lb in m.lbs] == [(3,), (3,), (1,)]
    assert impl.to_numpy(m.e(op(impl, "ADD"), m)).tolist() == [2 * i for i in range(7)]


@pytest.mark.parametrize("devices", [D2, D3, D4])
def test_elementwise_across_layouts(impl, devices):
    y = (X * 3 - 7).astype(np.int32)
    a0, a1, an = shard(impl, X, devices, 0), shard(impl, y, devices, 1), shard(impl, y, devices, None)
    add = op(impl, "ADD")
    for a, b, axis in [(a0, an, 0), (an, a0, 0), (a0, a1, 1), (a1, a0, 0), (an, an, None), (a0, a0, 0)]:
        r = a.e(add, b)
        assert r.axis == axis and r.shape == (10, 8)
        want = impl.to_numpy(a) + impl.to_numpy(b)
        assert np.array_equal(impl.to_numpy(r), want)
    cond = shard(impl, X % 3 == 0, devices, 1, "bool")
    w = cond.e(op(impl, "WHERE"), a0, an)
    assert w.axis == 0 and np.array_equal(impl.to_numpy(w), np.where(X % 3 == 0, X, y))


@pytest.mark.parametrize("devices", [D2, D3, D4])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_reductions(impl, devices, axis):
    m = shard(impl, X, devices, axis)
    reducers: list[tuple[str, Any]] = [("SUM", np.sum), ("MAX", np.max)]
    for red, fn in reducers:
        rop = getattr(impl.ReduceOps, red)
        full = m.r(rop, (0, 1))
        assert full.axis is None and full.shape == (1, 1) and all(full.real)
        assert impl.to_numpy(full).tolist() == [[int(fn(X))]]
        for lb in full.lbs:  # the all-reduce leaves the value on every device
            assert impl.to_numpy(lb).tolist() == [[int(fn(X))]]
        part = m.r(rop, (1,))
        assert part.shape == (10, 1) and part.axis == (axis if axis != 1 else None)
        assert np.array_equal(impl.to_numpy(part), fn(X, axis=1, keepdims=True))


def test_float_allreduce(impl):
    x = np.linspace(-3, 5, 40).reshape(8, 5)
    m = shard(impl, x, D4, 0, "float32")
    got = impl.to_numpy(m.r(impl.ReduceOps.SUM, (0,)))
    np.testing.assert_allclose(got, x.astype(np.float32).sum(0, keepdims=True), rtol=1e-5)


def test_shrink_to_shard_and_pad_back(impl):
    m = shard(impl, X, D4, 0)
    for i, (s, e) in enumerate(m.bounds):
        one = m.shrink(((s, e), (0, 8)))
        assert one.real == [j == i for j in range(4)] and one.shape == (e - s, 8) and one.axis == 0
        assert np.array_equal(impl.to_numpy(one), X[s:e])
        assert impl.to_numpy(one.r(impl.ReduceOps.SUM, (0,))).tolist() == [X[s:e].sum(0).tolist()]
        back = one.pad(((s, 10 - e), (0, 0)))
        assert all(back.real) and back.shape == (10, 8)
        want = np.zeros_like(X)
        want[s:e] = X[s:e]
        assert np.array_equal(impl.to_numpy(back), want)
        doubled = one.e(op(impl, "ADD"), one)  # partly real operands keep the real mask
        assert doubled.real == one.real and np.array_equal(impl.to_numpy(doubled), 2 * X[s:e])
        copied = one.copy_to_device("CLANG:5")  # positions count over the real shards only
        assert copied.shape == one.shape and np.array_equal(impl.to_numpy(copied), X[s:e])


def test_per_shard_movement(impl):
    m = shard(impl, X, D3, 1)  # column shards 3,3,2
    assert m.shrink(((2, 7), (0, 8))).shape == (5, 8)
    assert np.array_equal(impl.to_numpy(m.shrink(((2, 7), (0, 8)))), X[2:7])
    assert np.array_equal(impl.to_numpy(m.pad(((1, 2), (0, 0)))), np.pad(X, ((1, 2), (0, 0))))
    p = m.permute((1, 0))
    assert p.axis == 0 and np.array_equal(impl.to_numpy(p), X.T)
    s = m.stride((-1, 1))
    assert np.array_equal(impl.to_numpy(s), X[::-1])
    e = m.reshape((10, 1, 8)).expand((10, 4, 8))
    assert e.axis == 2 and np.array_equal(impl.to_numpy(e), np.broadcast_to(X.reshape(10, 1, 8), (10, 4, 8)))


@pytest.mark.parametrize("axis,new,new_axis", [
    (0, (5, 2, 8), None), (0, (10, 4, 2), 0), (1, (10, 2, 4), 1), (1, (10, 4, 2), 1), (1, (10, 8, 1), 1),
    (1, (80,), None), (0, (1, 10, 8), 1), (0, (20, 4), 0), (0, (2, 40), 0), (1, (10, 1, 8), 2),
])
def test_reshape_axis_rule(impl, axis, new, new_axis):
    m = shard(impl, X, D2, axis)
    if new_axis is None:
        with pytest.raises(ValueError, match="reshape"):
            m.reshape(new)
        return
    r = m.reshape(new)
    assert r.axis == new_axis and r.shape == new and np.array_equal(impl.to_numpy(r), X.reshape(new))


def test_const_cast_contiguous_assign_copy(impl):
    src = buf(impl, X, "int32")
    m = impl.MultiLazyBuffer.from_sharded(src, D3, 0)
    c = m.const(2)
    assert c.axis == 0 and np.array_equal(impl.to_numpy(c), np.full((10, 8), 2))
    f = m.cast(impl.dtypes.float32)
    assert f.dtype == impl.dtypes.float32 and np.array_equal(impl.to_numpy(f), X.astype(np.float32))
    assert np.array_equal(impl.to_numpy(m.contiguous()), X)
    impl.realize(m)
    a = m.assign(m.e(op(impl, "MUL"), m.const(3)))
    impl.realize(a)
    assert np.array_equal(impl.to_numpy(m), X * 3)
    assert np.array_equal(impl.to_numpy(src), X)  # every shard is a buffer of its own, even on src's device
    single = m.copy_to_device("CLANG:7")
    assert single.device == "CLANG:7" and np.array_equal(impl.to_numpy(single), X * 3)
    rep = shard(impl, X, D2, None)
    assert np.array_equal(impl.to_numpy(rep.copy_to_device("LLVM")), X)


@pytest.mark.parametrize("bad", [
    lambda impl, m: m.expand((10, 8, 2)), lambda impl, m: m.stride((-1, 1)), lambda impl, m: m.shrink(((1, 5), (0, 8))),
    lambda impl, m: m.shrink(((0, 3), (0, 2))), lambda impl, m: m.pad(((1, 0), (0, 0))),
    lambda impl, m: m.reshape((4, 20)), lambda impl, m: m.e(op(impl, "ADD"), shard(impl, X, D3, 0)),
    lambda impl, m: m.shrink(((0, 3), (0, 8))).e(op(impl, "ADD"), m.shrink(((3, 6), (0, 8)))),
    lambda impl, m: impl.MultiLazyBuffer.from_sharded(buf(impl, X, "int32"), D4 + ("CLANG:4",) * 8, 0),
    lambda impl, m: impl.MultiLazyBuffer.from_sharded(buf(impl, X, "int32"), D2, 2),
    lambda impl, m: impl.MultiLazyBuffer(m.lbs, 0, [False] * 4), lambda impl, m: impl.MultiLazyBuffer([], None),
    lambda impl, m: m.r(impl.ReduceOps.SUM, (2,)), lambda impl, m: m.permute((0, 0)),
])
def test_rule_violations_are_value_errors(impl, bad):
    m = shard(impl, X, D4, 0)
    with pytest.raises(ValueError):
        bad(impl, m)


def test_expand_on_sharded_size_one_axis(impl):
    m = shard(impl, X.reshape(10, 1, 8), D2, 0)
    assert np.array_equal(impl.to_numpy(m.expand((10, 3, 8))), np.broadcast_to(X.reshape(10, 1, 8), (10, 3, 8)))
    with pytest.raises(ValueError, match="expand"):
        m.expand((20, 1, 8))


def test_reshape_uneven_and_partly_real(impl):
    m = shard(impl, X, D4, 0)  # 3,3,3,1
    r = m.reshape((10, 2, 4))
    assert r.axis == 0 and [lb.shape for lb in r.lbs] == [(3, 2, 4)] * 3 + [(1, 2, 4)]
    assert np.array_equal(impl.to_numpy(r), X.reshape(10, 2, 4))
    with pytest.raises(ValueError, match="reshape"):
        m.reshape((5, 16))  # the axis size changes and 10 does not divide by 4 real shards
    one = m.shrink(((3, 6), (0, 8)))
    flat = one.reshape((1, 24))
    assert flat.axis == 1 and flat.real == one.real and np.array_equal(impl.to_numpy(flat), X[3:6].reshape(1, 24))
