"""Assign ordering (SPEC §4) on CLANG: a view or zero-copy VIEW built before a realized assign into the
memory it aliases raises RuntimeError when read afterwards, instead of reading the new value; the
assign target must be the realized buffer itself; zero-size graphs and symbolic shapes read back."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fast import (
    BinaryOps,
    LazyBuffer,
    LoadOps,
    MultiLazyBuffer,
    ReduceOps,
    UnaryOps,
    Variable,
    dtypes,
    from_numpy,
    realize,
    schedule,
    to_numpy,
)

STALE = "assign has since overwritten"
VIEWS: dict[str, Callable[[LazyBuffer], LazyBuffer]] = {
    "reshape": lambda t: t.reshape((3, 1)),
    "shrink": lambda t: t.shrink(((0, 2),)),
    "flip": lambda t: t.stride((-1,)),
    "permute": lambda t: t.reshape((1, 3)).permute((1, 0)),
    "expand": lambda t: t.reshape((3, 1)).expand((3, 2)),
    "pad": lambda t: t.pad(((1, 0),)),
    "zero-copy contiguous": lambda t: t.shrink(((1, 3),)).contiguous(),
    "zero-copy bitcast": lambda t: t.cast(dtypes.uint32, bitcast=True),
}


def target() -> LazyBuffer:
    return from_numpy(np.array([1, 2, 3], np.int32), "CLANG")


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_a_view_built_before_a_realized_assign_raises_when_read(name: str) -> None:
    t = target()
    view = VIEWS[name](t)
    realize(t.assign(t.const(7)))
    for read in (lambda: to_numpy(view), lambda: realize(view), lambda: to_numpy(view.reshape(view.shape))):
        with pytest.raises(RuntimeError, match=STALE):
            read()
    with pytest.raises(RuntimeError, match=STALE):  # a kernel built after the assign, from the old view
        to_numpy(view.e(BinaryOps.MUL, view))
    with pytest.raises(RuntimeError, match=STALE):
        to_numpy(view.copy_to_device("CLANG:1"))
    assert to_numpy(t).tolist() == [7, 7, 7]
    assert to_numpy(VIEWS[name](t)).reshape(-1).tolist()[-1] == 7  # the same view built now reads the new value


def test_a_view_read_in_the_realize_of_the_assign_sees_the_old_value() -> None:
    t = target()
    negated = t.reshape((3, 1)).e(UnaryOps.NEG)
    realize(negated, t.assign(t.const(7)))
    assert to_numpy(negated).reshape(-1).tolist() == [-1, -2, -3]
    assert to_numpy(t).tolist() == [7, 7, 7]


def test_the_target_itself_and_views_of_the_assign_read_the_new_value() -> None:
    t = target()
    assert t.contiguous() is t  # contiguous() of a realized contiguous buffer is the buffer: it IS the target
    done = t.assign(t.const(9))
    of_assign = done.reshape((3, 1))  # built before the assign ran, but from the assign: its new value
    realize(done)
    assert to_numpy(of_assign).reshape(-1).tolist() == [9, 9, 9] and to_numpy(t.contiguous()).tolist() == [9, 9, 9]
    realize(t.assign(t.const(4)))
    with pytest.raises(RuntimeError, match=STALE):  # the memory moved on past the assign it was built from
        to_numpy(of_assign)
    assert to_numpy(done).tolist() == [4, 4, 4]


def test_assigning_into_a_zero_copy_view_keeps_it_readable_but_not_views_of_it() -> None:
    t = target()
    window = t.shrink(((1, 3),)).contiguous()
    realize(window)
    assert window.base.op is LoadOps.VIEW
    before = window.reshape((2, 1))
    realize(window.assign(window.const(5)))
    assert to_numpy(window).tolist() == [5, 5] and to_numpy(t).tolist() == [1, 5, 5]
    with pytest.raises(RuntimeError, match=STALE):
        to_numpy(before)


def test_the_assign_target_must_be_the_realized_buffer_itself() -> None:
    t = target()
    assert t.reshape((1, 3)).reshape((3,)) is t  # a view reading the whole base in order is the base
    for bad in (t.reshape((3, 1)), t.shrink(((0, 2),)), t.stride((-1,)), t.e(UnaryOps.NEG)):
        with pytest.raises(RuntimeError, match="ASSIGN: the target must be a realized buffer"):
            bad.assign(bad.const(1))
    pending = t.assign(t.const(1))
    with pytest.raises(RuntimeError, match="pending"):
        t.assign(t.const(2))
    realize(pending)
    realize(t.assign(t.const(2)))
    assert to_numpy(t).tolist() == [2, 2, 2]


def test_sharded_buffers_own_their_shards() -> None:
    source = from_numpy(np.arange(12, dtype=np.int32).reshape(4, 3), "CLANG")
    for axis in (0, 1, None):
        sharded = MultiLazyBuffer.from_sharded(source, ("CLANG", "CLANG:1"), axis)
        realize(sharded)
        assert all(lb.base is lb for lb in sharded.lbs)
        realize(sharded.assign(sharded.const(5)))
        assert to_numpy(sharded).tolist() == [[5] * 3] * 4
        assert to_numpy(source).tolist() == np.arange(12).reshape(4, 3).tolist()  # the source is untouched


# ---------------------------------------------------------------- zero-size graphs and symbolic shapes

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.bfloat16, dtypes.bool, dtypes.uint64])
def test_zero_size_graphs_read_back_as_empty_arrays(dtype: dtypes) -> None:
    empty = LazyBuffer.loadop(LoadOps.CONST, (0, 3), dtype, "CLANG", 1)
    full = LazyBuffer.loadop(LoadOps.CONST, (2, 3), dtype, "CLANG", 1)
    graphs = [empty, full.shrink(((1, 1), (0, 3))), full.shrink(((0, 2), (2, 2))).e(BinaryOps.MAX, full.shrink(
        ((0, 2), (0, 0)))), empty.r(ReduceOps.MAX, (1,)), empty.permute((1, 0)).pad(((0, 0), (0, 0))),
        from_numpy(np.zeros((0, 3), dtype.np), "CLANG").cast(dtypes.int8), empty.copy_to_device("CLANG:1")]
    for graph in graphs:
        got = to_numpy(graph)
        assert got.dtype == graph.dtype.np and got.shape == graph.shape and got.size == 0
    assert schedule(*graphs) == []


def test_scalar_shapes_read_back() -> None:
    scalar = from_numpy(np.array(3.5, np.float32), "CLANG")
    got = to_numpy(scalar.e(BinaryOps.MUL, scalar.const(2.0)))
    assert got.shape == () and got.item() == 7.0
    assert to_numpy(LazyBuffer.loadop(LoadOps.CONST, (), dtypes.int16, "CLANG", -1)).tolist() == -1


def test_shapes_keep_bound_variables_and_read_back_at_their_values() -> None:
    n = Variable("n", 1, 10)
    bound = n.bind(3)
    c = LazyBuffer.loadop(LoadOps.CONST, (bound, 2), dtypes.int32, "CLANG", 4)
    assert c.shape == (bound, 2) and isinstance(c.shape[0], Variable)
    assert to_numpy(c).tolist() == [[4, 4]] * 3
    wide = c.reshape((2, bound)).expand((2, 3))
    assert wide.shape == (2, bound)  # expanding to the bound value keeps the symbolic size
    assert to_numpy(wide).tolist() == [[4, 4, 4]] * 2
    with pytest.raises(ValueError, match="expand"):
        c.reshape((2, bound)).expand((2, 4))
    counted = LazyBuffer.loadop(LoadOps.CUSTOM, (bound, 2), dtypes.int32, "CLANG",
                                lambda out: out.__setitem__(slice(None), np.arange(out.size).reshape(out.shape)))
    total = counted.e(BinaryOps.ADD, c).r(ReduceOps.SUM, (0,))
    assert to_numpy(total).tolist() == [[0 + 2 + 4 + 12, 1 + 3 + 5 + 12]]


def test_disk_views_built_before_a_realized_assign_raise(tmp_path) -> None:
    disk = f"DISK:{tmp_path / 'data.bin'}"
    d = from_numpy(np.arange(8, dtype=np.uint8), disk)
    window, strided = d.shrink(((2, 6),)), d.stride((2,))
    wide = d.cast(dtypes.uint16, bitcast=True)  # a zero-copy VIEW of the file
    realize(d.assign(from_numpy(np.full(8, 9, np.uint8), "CLANG").copy_to_device(disk)))
    for stale in (window, strided, wide):
        with pytest.raises(RuntimeError, match=STALE):
            to_numpy(stale)
    with pytest.raises(RuntimeError, match=STALE):
        strided.cast(dtypes.int8, bitcast=True)
    with pytest.raises(RuntimeError, match=STALE):
        window.copy_to_device("CLANG")
    assert to_numpy(d.shrink(((2, 6),))).tolist() == [9] * 4
