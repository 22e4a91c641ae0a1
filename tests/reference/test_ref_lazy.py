"""Lazy-layer behaviour: laziness, assign ordering, CUSTOM, copies, devices, DISK rules, Variables."""
from __future__ import annotations

import numpy as np
import pytest
from ref_util import DEV, buf, disk, op


def test_building_is_lazy_and_realizing_memoises(impl):
    a = buf(impl, [1.0, 2.0], "float32")
    b = a.e(op(impl, "ADD"), a).e(op(impl, "SQRT"))
    assert a.is_realized() and not b.is_realized() and b.shape == (2,) and b.size == 2
    impl.realize(b)
    assert b.is_realized() and b.realized is not None
    assert impl.to_numpy(b).tolist() == impl.to_numpy(b).tolist() == [np.sqrt(np.float32(2)), 2.0]
    impl.realize()  # nothing to do
    impl.realize(a, b)


def test_loadops(impl):
    f32 = impl.dtypes.float32
    c = impl.LazyBuffer.loadop(impl.LoadOps.CONST, (2, 2), f32, DEV, 1.5)
    assert c.dtype == f32 and c.device == DEV and impl.to_numpy(c).tolist() == [[1.5, 1.5], [1.5, 1.5]]
    e = impl.LazyBuffer.loadop(impl.LoadOps.EMPTY, (3,), impl.dtypes.int8, DEV)
    got = impl.to_numpy(e)
    assert got.shape == (3,) and got.dtype == np.int8  # contents unspecified


def test_custom(impl):
    a, b = buf(impl, [1.0, 2.0], "float32"), buf(impl, [3, 4], "int32")
    calls = []

    def fn(out, x, y):
        calls.append((x.dtype, y.dtype, out.dtype))
        out[:] = x * y + 0.5
    c = impl.LazyBuffer.loadop(impl.LoadOps.CUSTOM, (2,), impl.dtypes.float64, DEV, arg=fn, src=(a, b))
    assert impl.to_numpy(c).tolist() == [3.5, 8.5] and calls == [(np.float32, np.int32, np.float64)]
    h = impl.LazyBuffer.loadop(impl.LoadOps.CUSTOM, (1,), impl.dtypes.bfloat16, DEV,
                               arg=lambda out: out.fill(1 + 2.0**-8 + 2.0**-20))  # rounded into bfloat16
    assert impl.to_numpy(h).tolist() == [1 + 2.0**-7]


def test_copy_to_device(impl):
    a = buf(impl, [[1, 2], [3, 4]], "int16")
    for d, canon in [("CLANG:1", "CLANG:1"), ("LLVM", "LLVM"), ("CUDA:2", "CUDA:2"), ("LLVM:0", "LLVM")]:
        c = a.copy_to_device(d)
        assert c.device == canon and c.dtype == a.dtype and c.shape == (2, 2)
        if not d.startswith("CUDA"):  # building is lazy: realizing on CUDA needs a GPU (tests/fast covers it)
            assert impl.to_numpy(c).tolist() == [[1, 2], [3, 4]]
    assert impl.from_numpy(np.ones(1), "CLANG:0").device == "CLANG"
    assert impl.to_numpy(a.copy_to_device("CLANG:0")).tolist() == [[1, 2], [3, 4]]
    assert impl.to_numpy(a.copy_to_device(DEV, force=True)).tolist() == [[1, 2], [3, 4]]
    t = a.permute((1, 0)).shrink(((0, 2), (1, 2))).copy_to_device("CLANG:3")
    assert impl.to_numpy(t).tolist() == [[3], [4]]


def test_assign_same_realize_sees_old_value(impl):
    t = buf(impl, [1, 2, 3], "int32")
    before = t.e(op(impl, "ADD"), t.const(10))
    a = t.assign(t.e(op(impl, "MUL"), t.const(2)))
    impl.realize(before, a)
    assert impl.to_numpy(before).tolist() == [11, 12, 13]
    assert impl.to_numpy(t).tolist() == [2, 4, 6] and impl.to_numpy(a).tolist() == [2, 4, 6]
    after = t.e(op(impl, "ADD"), t.const(10))  # built after the assign: sees the new value
    assert impl.to_numpy(after).tolist() == [12, 14, 16]


def test_reading_a_buffer_built_before_a_realized_assign_raises(impl):
    t = buf(impl, [1, 2, 3], "int32")
    stale = t.e(op(impl, "MUL"), t).reshape((3, 1))  # not the graph of `done` (fast builds identical graphs once)
    done = t.e(op(impl, "NEG"))
    impl.realize(done)
    impl.realize(t.assign(t.const(7)))
    with pytest.raises(RuntimeError, match="assign"):
        impl.realize(stale)
    assert impl.to_numpy(done).tolist() == [-1, -2, -3]  # realized before: keeps its value
    assert impl.to_numpy(t).tolist() == [7, 7, 7]


def test_assign_chain(impl):
    t = buf(impl, [1.0], "float32")
    for _ in range(3):
        impl.realize(t.assign(t.e(op(impl, "ADD"), t)))
    assert impl.to_numpy(t).tolist() == [8.0]


def test_disk_allows_data_ops(impl, tmp_path):
    x = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
    d = impl.from_numpy(x, disk(tmp_path))
    assert d.device == disk(tmp_path)
    v = d.permute((2, 1, 0)).shrink(((1, 3), (0, 3), (0, 2))).stride((-1, 2, 1)).pad(((0, 1), (0, 0), (0, 0)))
    want = np.pad(x.transpose(2, 1, 0)[1:3][::-1, ::2], ((0, 1), (0, 0), (0, 0)))
    assert np.array_equal(impl.to_numpy(v.copy_to_device(DEV)), want)
    assert np.array_equal(impl.to_numpy(v), want)
    wide = d.cast(impl.dtypes.int32, bitcast=True)
    assert wide.shape == (2, 3, 1) and np.array_equal(impl.to_numpy(wide), x.view(np.int32))
    narrow = d.shrink(((1, 2), (1, 3), (0, 4))).cast(impl.dtypes.int16, bitcast=True)  # a DISK slice
    assert narrow.shape == (1, 2, 2) and np.array_equal(impl.to_numpy(narrow), x[1:2, 1:3].copy().view(np.int16))
    e = impl.LazyBuffer.loadop(impl.LoadOps.EMPTY, (2,), impl.dtypes.float32, disk(tmp_path))
    assert impl.to_numpy(e).shape == (2,)
    s = d.cast(impl.dtypes.uint8, bitcast=True).expand((2, 3, 4)).reshape((24,))
    assert impl.to_numpy(s).tolist() == list(range(24))


def test_disk_assign_writes(impl, tmp_path):
    d = impl.from_numpy(np.zeros(4, np.float32), disk(tmp_path))
    impl.realize(d.assign(buf(impl, [1.0, 2.0, 3.0, 4.0], "float32").copy_to_device(disk(tmp_path))))
    assert impl.to_numpy(d).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_variables_in_shapes(impl):
    n = impl.Variable("n", 1, 10)
    bound = n.bind(3)
    assert bound.val == 3 and bound.unbind()[1] == 3
    c = impl.LazyBuffer.loadop(impl.LoadOps.CONST, (bound, 2), impl.dtypes.int32, DEV, 4)
    assert tuple(int(getattr(s, "val", s)) for s in c.shape) == (3, 2)  # fast keeps the bound Variable
    assert impl.to_numpy(c).shape == (3, 2) and impl.to_numpy(c).sum() == 24
    assert impl.to_numpy(c.reshape((2, bound))).shape == (2, 3)
    e = c.reshape((2, 1, bound)).expand((2, n.bind(3), bound)).shrink(((0, 2), (1, bound), (0, 2)))
    assert impl.to_numpy(e).shape == (2, 2, 2) and impl.to_numpy(e).sum() == 32


def test_properties(impl):
    a = buf(impl, np.zeros((2, 3)), "float16")
    assert a.st.shape == (2, 3) and a.base.shape == (2, 3) and a.dtype == impl.dtypes.float16
    s = a.e(op(impl, "ADD"), a)
    assert s.base.op == op(impl, "ADD") and len(s.base.srcs) == 2


def test_one_pending_assign_per_target(impl):
    t = buf(impl, [1, 2, 3], "int32")
    first = t.assign(t.e(op(impl, "ADD"), t.const(1)))
    with pytest.raises(RuntimeError, match="ASSIGN"):
        t.assign(t.const(9))  # the first assign has not been realized yet
    impl.realize(first)
    impl.realize(t.assign(t.e(op(impl, "MUL"), t.const(3))))
    assert impl.to_numpy(t).tolist() == [6, 9, 12]


def test_assign_into_a_view_is_runtime_error(impl):
    t = buf(impl, [[1, 2], [3, 4]], "int32")
    for view in (t.reshape((4,)), t.permute((1, 0)), t.shrink(((0, 1), (0, 2))).pad(((0, 1), (0, 0)))):
        impl.realize(view)  # even once its values are computed
        with pytest.raises(RuntimeError, match="ASSIGN"):
            view.assign(view.const(0))
    assert impl.to_numpy(t).tolist() == [[1, 2], [3, 4]]


def test_contiguous_of_a_realized_buffer_is_itself(impl, tmp_path):
    t = buf(impl, [1.0, 2.0], "float32")
    assert t.contiguous() is t
    d = impl.from_numpy(np.arange(4, dtype=np.int16), disk(tmp_path))
    assert d.contiguous() is d
    flipped = t.stride((-1,)).contiguous()
    assert flipped is not t and impl.to_numpy(flipped).tolist() == [2.0, 1.0]


def test_assign_into_a_zero_size_target_checks_only_shape_dtype_device(impl):
    """Conformance found: a zero-size cast result realized, then assigned into (fast folds it to a CONST)."""
    empty = impl.from_numpy(np.zeros((0,), np.float32), DEV).cast(impl.dtypes.bfloat16)
    target = impl.from_numpy(np.zeros((0,), np.float32), DEV).cast(impl.dtypes.bfloat16)
    impl.realize(target)
    assert target.assign(empty) is target
    assert impl.to_numpy(target.assign(empty)).shape == (0,)
    with pytest.raises(TypeError, match="ASSIGN"):
        target.assign(impl.from_numpy(np.zeros((0,), np.float32), DEV))
    with pytest.raises(ValueError, match="ASSIGN"):
        target.assign(impl.from_numpy(np.zeros((1,), np.float32), DEV).cast(impl.dtypes.bfloat16))


def test_rebuilding_an_op_after_its_node_was_assigned_computes_the_op(impl):
    """Conformance found: after assigning into from_sharded's shards, from_sharded of the same source
    gave the assigned zeros in reference (cache hit) and the source's values in fast (rebuilt)."""
    source = buf(impl, [1, 2, 3, 4], "int16")
    copy = source.e(op(impl, "ADD"), source.const(0, (4,)).e(op(impl, "XOR"), source))
    impl.realize(copy)
    impl.realize(copy.assign(buf(impl, [0, 0, 0, 0], "int16")))
    again = source.e(op(impl, "ADD"), source.const(0, (4,)).e(op(impl, "XOR"), source))
    assert again is not copy
    assert impl.to_numpy(again).tolist() == [2, 4, 6, 8]
    assert impl.to_numpy(copy).tolist() == [0, 0, 0, 0]


def test_an_expanded_constant_copied_to_disk_is_a_plain_file(impl, tmp_path):
    """Conformance found: fast re-applied the expand on DISK, so bitcast/contiguous there raised."""
    target = disk(tmp_path)
    on_disk = buf(impl, np.zeros((3, 5)), "int64").const(-(2**63)).copy_to_device(target)
    assert impl.to_numpy(on_disk.cast(impl.dtypes.int8, bitcast=True).copy_to_device(DEV)).shape == (3, 40)
    assert impl.to_numpy(on_disk.contiguous().copy_to_device(DEV)).tolist() == [[-(2**63)] * 5] * 3
