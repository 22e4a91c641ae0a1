"""Shared memory: assign chaining, identical graphs built once, same-dtype casts, zero-copy views."""
from __future__ import annotations

import numpy as np
import pytest
from ref_util import DEV, buf, disk, dt, op


def test_assign_chaining_shares_the_targets_storage(impl):
    t = buf(impl, [1, 2, 3], "int32")
    t2 = t.assign(t.e(op(impl, "ADD"), t.const(1)))
    impl.realize(t2)
    impl.realize(t2.assign(t2.const(7)))  # an assign into t2 writes t
    assert impl.to_numpy(t).tolist() == [7, 7, 7] and impl.to_numpy(t2).tolist() == [7, 7, 7]
    pending = t.assign(t.const(5))
    with pytest.raises(RuntimeError, match="ASSIGN"):  # one pending assign per storage, whichever node
        t2.assign(t2.const(9))
    impl.realize(pending)  # a later assign into t shows in t2
    assert impl.to_numpy(t2).tolist() == [5, 5, 5]


def test_identical_graphs_are_built_once(impl):
    t = buf(impl, [1.0, -2.0], "float32")
    add, neg = op(impl, "ADD"), op(impl, "NEG")
    assert t.e(add, t) is t.e(add, t) and t.reshape((2, 1)).permute((1, 0)) is t.reshape((2, 1)).permute((1, 0))
    assert t.r(impl.ReduceOps.SUM, (0,)) is t.r(impl.ReduceOps.SUM, (0,))
    assert t.cast(dt(impl, "int32")) is t.cast(dt(impl, "int32")) and t.const(1.5) is t.const(1.5)
    assert t.const(0.0) is not t.const(-0.0)  # float args keyed by bits
    empty = [impl.LazyBuffer.loadop(impl.LoadOps.EMPTY, (2,), dt(impl, "int8"), DEV) for _ in range(2)]
    assert empty[0] is not empty[1]
    old = t.e(neg)
    impl.realize(old)
    impl.realize(t.assign(t.const(4.0)))
    new = t.e(neg)  # the memory it reads was assigned since `old` was built: a new node
    assert new is not old and impl.to_numpy(old).tolist() == [-1.0, 2.0] and impl.to_numpy(new).tolist() == [-4, -4]


def test_zero_constants_of_both_signs_stay_apart_when_realized(impl):
    t = buf(impl, [1.0, -2.0], "float32")
    zeros = t.const(0.0), t.const(-0.0)
    assert [np.signbit(impl.to_numpy(z)).all() for z in zeros] == [False, True]


def test_realizing_one_copy_of_a_graph_saves_the_other_from_a_stale_read(impl):
    t = buf(impl, [1, 2, 3], "int32")
    first, second = (t.e(op(impl, "MUL"), t).reshape((3, 1)) for _ in range(2))
    impl.realize(first)
    impl.realize(t.assign(t.const(7)))
    assert impl.to_numpy(second).tolist() == [[1], [4], [9]]  # one object with `first`, realized before
    assert impl.to_numpy(t.e(op(impl, "MUL"), t)).tolist() == [49, 49, 49]  # built after: a new node


def test_same_dtype_cast_is_itself_after_validation(impl, tmp_path):
    for name in ("bool", "int8", "bfloat16", "float64"):
        x = buf(impl, [1, 0], name)
        assert x.cast(x.dtype) is x
    b = buf(impl, [True, False], "bool")
    with pytest.raises(TypeError, match="BITCAST"):
        b.cast(b.dtype, bitcast=True)
    d = impl.from_numpy(np.arange(4, dtype=np.int32), disk(tmp_path))
    with pytest.raises(RuntimeError, match="CAST"):
        d.cast(d.dtype)
    assert np.array_equal(impl.to_numpy(d.cast(d.dtype, bitcast=True)), np.arange(4))


def test_assign_into_a_zero_copy_view_writes_the_parent(impl):
    t = impl.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4), DEV)
    reader = t.e(op(impl, "ADD"), t)  # built before the write below
    rows = t.shrink(((1, 3), (0, 4))).contiguous()  # consecutive: a zero-copy view
    cols = t.shrink(((0, 3), (1, 2))).contiguous()  # strided: a copy
    impl.realize(rows, cols)
    impl.realize(rows.assign(rows.const(-1)), cols.assign(cols.const(-2)))
    want = np.arange(12).reshape(3, 4)
    want[1:] = -1
    assert np.array_equal(impl.to_numpy(t), want) and impl.to_numpy(cols).ravel().tolist() == [-2, -2, -2]
    with pytest.raises(RuntimeError, match="assign"):
        impl.realize(reader)
    bits = t.cast(dt(impl, "uint32"), bitcast=True)  # a whole realized buffer bitcast: a zero-copy view
    impl.realize(bits)
    impl.realize(bits.assign(bits.const(2**32 - 3)))
    assert (impl.to_numpy(t) == -3).all()
    impl.realize(t.assign(t.const(0)))
    for alias in (rows, bits):  # a view of memory assigned since: its value no longer exists
        with pytest.raises(RuntimeError, match="assign"):
            impl.to_numpy(alias)


def test_views_read_after_an_assign_into_their_memory_raise(impl):
    t = buf(impl, [1, 2, 3, 4], "int16")
    view = t.reshape((2, 2))
    impl.realize(view)
    whole = t.reshape((4, 1)).contiguous()  # reads all of t in order: itself, a view
    impl.realize(whole)
    with pytest.raises(RuntimeError, match="ASSIGN"):
        whole.assign(whole.const(0))
    impl.realize(t.assign(t.const(9)))
    for stale in (view, whole, view.e(op(impl, "MAX"), view)):  # asking for one, or building on one
        with pytest.raises(RuntimeError, match="assign"):
            impl.to_numpy(stale)
    assert impl.to_numpy(t.reshape((2, 2))).tolist() == [[9, 9], [9, 9]]  # built after: fine


def test_disk_zero_copy_bitcast_writes_the_file_buffer(impl, tmp_path):
    d = impl.from_numpy(np.arange(8, dtype=np.uint8), disk(tmp_path))
    wide = d.shrink(((2, 6),)).cast(dt(impl, "uint16"), bitcast=True)
    impl.realize(wide)
    value = impl.from_numpy(np.array([0x0B0A, 0x0D0C], np.uint16), DEV).copy_to_device(disk(tmp_path))
    impl.realize(wide.assign(value))
    assert impl.to_numpy(d).tolist() == [0, 1, 10, 11, 12, 13, 6, 7]
