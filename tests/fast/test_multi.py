"""MultiLazyBuffer (fast/graph/multi.py) against SPEC §5: layout after every method, errors, all-reduce."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fast
from fast import config
from fast.dtype import dtypes
from fast.graph import allreduce as allreduce_module
from fast.graph.multi import MultiLazyBuffer, all_reduce, ring_chunks, use_ring
from fast.graph.node import LazyBuffer
from fast.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps

DEVICES = ("CLANG", "CLANG:1", "CLANG:2", "CLANG:3")


def empty(shape, dtype=dtypes.float32, device="CLANG"):
    return LazyBuffer.loadop(LoadOps.EMPTY, shape, dtype, device)


def sharded(shape, ndev, axis, dtype=dtypes.float32):
    return MultiLazyBuffer.from_sharded(empty(shape, dtype), DEVICES[:ndev], axis)


def layout(mlb):
    """(shape, axis, real, bounds or None, shard shapes) for compact assertions."""
    return mlb.shape, mlb.axis, mlb.real, mlb.bounds, [lb.shape for lb in mlb.lbs]


# ---------------------------------------------------------------- use_ring / ring_chunks

@pytest.mark.parametrize("ndev, numel, ring, expected", [
    (3, 256_001, 1, True), (3, 256_000, 1, False), (2, 10**7, 1, False), (4, 10**6, 1, True),
    (3, 10**6, 0, False), (4, 10**7, 0, False), (2, 1, 2, True), (3, 10, 2, True), (2, 10, 5, True),
    (8, 10, 1, False), (3, 10**6, -1, False),
])
def test_use_ring_follows_the_spec_table(ndev, numel, ring, expected):
    assert use_ring(ndev, numel, ring) is expected


@pytest.mark.parametrize("numel, ndev, expected", [
    (10, 3, [(0, 4), (4, 8), (8, 10)]),          # factor 2, 5 units -> 2, 2, 1
    (96, 4, [(0, 32), (32, 64), (64, 96)]),      # factor 32, 3 units -> 1, 1, 1, (0 dropped)
    (7, 3, [(0, 3), (3, 5), (5, 7)]),            # factor 1
    (64, 2, [(0, 32), (32, 64)]),
    (2, 3, [(0, 2)]),
    (0, 3, []),
    (5, 1, [(0, 5)]),
])
def test_ring_chunks_examples(numel, ndev, expected):
    assert ring_chunks(numel, ndev) == expected


@given(st.integers(0, 2_000_000), st.integers(1, 16))
@settings(max_examples=300, deadline=None)
def test_ring_chunks_cover_every_element_once_in_order(numel, ndev):
    chunks = ring_chunks(numel, ndev)
    factor = next(f for f in (32, 16, 8, 4, 2, 1) if numel % f == 0)
    assert len(chunks) <= ndev
    starts, ends = [start for start, _ in chunks], [end for _, end in chunks]
    assert starts[:1] == ([0] if numel else []) and starts[1:] == ends[:-1] and ends[-1:] == ([numel] if numel else [])
    lengths = [end - start for start, end in chunks]
    assert all(length > 0 and length % factor == 0 for length in lengths)
    assert lengths == sorted(lengths, reverse=True) and (not lengths or lengths[0] - lengths[-1] <= factor)


def test_ring_chunks_rejects_bad_arguments():
    with pytest.raises(ValueError, match="ring_chunks"):
        ring_chunks(5, 0)
    with pytest.raises(ValueError, match="ring_chunks"):
        ring_chunks(-1, 2)


# ---------------------------------------------------------------- layout: from_sharded and the constructor

@pytest.mark.parametrize("shape, ndev, axis, sizes", [
    ((6, 4), 2, 0, [3, 3]), ((10, 2), 4, 0, [3, 3, 3, 1]), ((2, 5), 3, 1, [2, 2, 1]),
    ((3, 7), 4, 1, [2, 2, 2, 1]), ((4, 9), 3, 1, [3, 3, 3]), ((5,), 1, 0, [5]),
])
def test_from_sharded_layout(shape, ndev, axis, sizes):
    mlb = sharded(shape, ndev, axis)
    assert mlb.shape == shape and mlb.axis == axis and mlb.real == [True] * ndev
    starts = np.cumsum([0] + sizes)
    assert mlb.bounds == [(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    assert [lb.shape[axis] for lb in mlb.lbs] == sizes
    assert mlb.device == DEVICES[:ndev] and [lb.device for lb in mlb.lbs] == list(DEVICES[:ndev])
    assert mlb.dtype == dtypes.float32 and mlb.size == int(np.prod(shape)) and len(mlb.real_lbs) == ndev


@pytest.mark.parametrize("size, ndev", [(6, 4), (5, 4), (2, 3), (0, 2), (9, 4)])
def test_from_sharded_rejects_an_empty_shard(size, ndev):
    with pytest.raises(ValueError, match="from_sharded.*empty"):
        sharded((size, 2), ndev, 0)


def test_from_sharded_unsharded_and_bad_arguments():
    mlb = sharded((3, 2), 3, None)
    assert layout(mlb) == ((3, 2), None, [True] * 3, None, [(3, 2)] * 3)
    assert mlb.bounds is None
    with pytest.raises(ValueError, match="from_sharded"):
        sharded((3, 2), 2, 2)
    with pytest.raises(ValueError, match="from_sharded"):
        MultiLazyBuffer.from_sharded(empty((3, 2)), (), 0)
    assert MultiLazyBuffer.from_sharded(empty((4,)), ("CLANG:0", "CLANG:1"), 0).device == ("CLANG", "CLANG:1")


def test_constructor_checks_the_layout():
    a, b = empty((2, 3)), empty((2, 3), device="CLANG:1")
    assert layout(MultiLazyBuffer([a, empty((1, 3), device="CLANG:1")], 0, [False, True])) == \
        ((1, 3), 0, [False, True], [(0, 2), (2, 3)], [(2, 3), (1, 3)])
    for lbs, axis, real in [([], None, None), ([a, b], 0, [True]), ([a, b], 0, [False, False]), ([a, b], 2, None),
                            ([a, empty((2, 4), device="CLANG:1")], 0, None), ([a, empty((2, 3, 1))], None, None),
                            ([a, empty((2, 3), dtypes.int32, "CLANG:1")], 0, None), ([a, np.zeros((2, 3))], 0, None)]:
        with pytest.raises(ValueError, match="MultiLazyBuffer"):
            MultiLazyBuffer(lbs, axis, real)


# ---------------------------------------------------------------- layout: e, r, per-shard ops

def test_e_layout_and_axis_choice():
    rows, cols, whole = sharded((4, 6), 2, 0), sharded((4, 6), 2, 1), sharded((4, 6), 2, None)
    assert layout(rows.e(BinaryOps.ADD, whole))[:4] == ((4, 6), 0, [True, True], [(0, 2), (2, 4)])
    assert layout(whole.e(BinaryOps.ADD, rows))[1] == 0
    assert layout(rows.e(BinaryOps.ADD, cols))[1:4] == (1, [True, True], [(0, 3), (3, 6)])
    assert layout(cols.e(BinaryOps.ADD, rows))[1] == 0
    assert layout(whole.e(UnaryOps.NEG))[:2] == ((4, 6), None)
    compare = rows.e(BinaryOps.CMPLT, whole)
    assert compare.dtype == dtypes.bool and all(lb.dtype == dtypes.bool for lb in compare.lbs)


def test_e_between_partly_real_shards_keeps_result_dtype():
    part = sharded((5, 2), 3, 0).shrink(((2, 4), (0, 2)))
    assert layout(part) == ((2, 2), 0, [False, True, False], [(0, 2), (2, 4), (4, 5)], [(2, 2), (2, 2), (1, 2)])
    for out in (part.e(BinaryOps.CMPLT, part), part.e(BinaryOps.CMPEQ, sharded((2, 2), 3, None))):
        assert out.real == [False, True, False] and out.shape == (2, 2)
        assert [lb.dtype for lb in out.lbs] == [dtypes.bool] * 3 and [lb.shape for lb in out.lbs] == part_shapes(part)
    cond = part.e(BinaryOps.CMPLT, part)
    chosen = cond.e(TernaryOps.WHERE, part, part.const(1.0))
    assert chosen.real == [False, True, False] and [lb.dtype for lb in chosen.lbs] == [dtypes.float32] * 3


def part_shapes(mlb):
    return [lb.shape for lb in mlb.lbs]


def test_e_errors():
    rows = sharded((4, 6), 2, 0)
    with pytest.raises(ValueError, match="e: .*devices"):
        rows.e(BinaryOps.ADD, MultiLazyBuffer.from_sharded(empty((4, 6)), ("CLANG:2", "CLANG:3"), 0))
    with pytest.raises(ValueError, match="e: .*shapes"):
        rows.e(BinaryOps.ADD, sharded((4, 5), 2, 0))
    with pytest.raises(ValueError, match="MultiLazyBuffer"):
        rows.e(BinaryOps.ADD, empty((4, 6)))
    uneven = MultiLazyBuffer([empty((1, 6)), empty((3, 6), device="CLANG:1")], 0)
    with pytest.raises(ValueError, match="different bounds"):
        rows.e(BinaryOps.ADD, uneven)
    first, second = rows.shrink(((0, 2), (0, 6))), rows.shrink(((2, 4), (0, 6)))
    with pytest.raises(ValueError, match="no shard is real"):
        first.e(BinaryOps.ADD, second)
    with pytest.raises(ValueError, match="shapes"):
        first.e(BinaryOps.ADD, rows)


def test_r_layout():
    mlb = sharded((10, 3), 4, 0)
    assert layout(mlb.r(ReduceOps.SUM, (1,)))[:4] == ((10, 1), 0, [True] * 4, [(0, 3), (3, 6), (6, 9), (9, 10)])
    assert layout(mlb.r(ReduceOps.SUM, (0,))) == ((1, 3), None, [True] * 4, None, [(1, 3)] * 4)
    assert layout(mlb.r(ReduceOps.MAX, (0, 1)))[:2] == ((1, 1), None)
    part = mlb.shrink(((3, 6), (0, 3))).r(ReduceOps.MAX, (0,))
    assert layout(part) == ((1, 3), None, [False, True, False, False], None, [(1, 3)] * 4)
    assert layout(sharded((4, 3), 2, None).r(ReduceOps.SUM, (0,)))[:2] == ((1, 3), None)
    for bad in [(2,), (0, 0), (-1,), ("x",), 0]:
        with pytest.raises(ValueError, match="r: "):
            mlb.r(ReduceOps.SUM, bad)
    with pytest.raises(TypeError, match="r: "):
        mlb.r(BinaryOps.ADD, (0,))
    assert mlb.r(ReduceOps.SUM, (np.int64(1),)).shape == (10, 1)


def test_per_shard_ops_keep_axis_and_real():
    part = sharded((5, 2), 3, 0).shrink(((2, 4), (0, 2)))
    for out in (part.const(3.0), part.cast(dtypes.int32), part.cast(dtypes.int32, bitcast=True), part.contiguous()):
        assert layout(out)[:4] == layout(part)[:4]
    assert part.cast(dtypes.float16).dtype == dtypes.float16
    assert isinstance(part.copy_to_device("CLANG:3"), LazyBuffer) and part.copy_to_device("CLANG:3").shape == (2, 2)
    assert sharded((5, 2), 3, 0).copy_to_device("CLANG").shape == (5, 2)


# ---------------------------------------------------------------- layout: movement ops

@pytest.mark.parametrize("shape, ndev, axis, new_shape, new_axis, sizes", [
    ((4, 6), 2, 1, (4, 2, 3), 1, [1, 1]),
    ((4, 6), 2, 0, (2, 2, 6), 0, [1, 1]),
    ((4, 6), 2, 0, (24,), 0, [12, 12]),
    ((10, 2), 4, 0, (10, 2, 1), 0, [3, 3, 3, 1]),
    ((10, 2), 4, 0, (1, 10, 2), 1, [3, 3, 3, 1]),
    ((6, 2), 2, 0, (4, 3), 0, [2, 2]),
    ((2, 6), 3, 1, (2, 6, 1, 1), 1, [2, 2, 2]),
    ((4, 3), 2, 0, (12,), 0, [6, 6]),
])
def test_reshape_new_axis_rule(shape, ndev, axis, new_shape, new_axis, sizes):
    out = sharded(shape, ndev, axis).reshape(new_shape)
    assert out.shape == new_shape and out.axis == new_axis and [lb.shape[new_axis] for lb in out.lbs] == sizes


def test_reshape_errors_and_partly_real():
    with pytest.raises(ValueError, match="reshape.*divide"):
        sharded((6, 2), 3, 0).reshape((4, 3))
    with pytest.raises(ValueError, match="reshape.*divide"):
        sharded((10, 2), 4, 0).reshape((20,))
    with pytest.raises(ValueError, match="reshape.*sharded axis"):
        sharded((2, 6), 2, 1).reshape((3, 4))
    with pytest.raises(ValueError, match="reshape.*sharded axis"):
        sharded((3, 4, 1), 2, 1).reshape((12,))
    with pytest.raises(ValueError, match="reshape"):
        sharded((2, 6), 2, 1).reshape((5, 2))
    part = sharded((5, 4), 3, 0).shrink(((4, 5), (0, 4)))
    out = part.reshape((2, 2))
    assert layout(out) == ((2, 2), 0, [False, False, True], [(0, 4), (4, 8), (8, 10)], [(4, 2), (4, 2), (2, 2)])
    with pytest.raises(ValueError, match="move elements"):
        sharded((5, 3), 3, 0).shrink(((0, 2), (0, 3))).reshape((3, 2))


def test_permute_expand_stride():
    mlb = sharded((4, 1, 6), 2, 2)
    one_row = sharded((10, 4), 4, 0).shrink(((9, 10), (0, 4)))
    assert layout(one_row.expand((1, 4)))[:3] == ((1, 4), 0, [False, False, False, True])
    assert layout(mlb.permute((2, 0, 1)))[:4] == ((6, 4, 1), 0, [True, True], [(0, 3), (3, 6)])
    assert layout(mlb.expand((4, 5, 6)))[:2] == ((4, 5, 6), 2) and mlb.expand((4, 5, 6)).lbs[0].shape == (4, 5, 3)
    assert layout(mlb.stride((-1, 1, 1)))[:2] == ((4, 1, 6), 2)
    assert layout(sharded((4, 1), 2, None).expand((4, 3)))[:2] == ((4, 3), None)
    for call, match in [(lambda: mlb.permute((0, 0, 1)), "permute"), (lambda: mlb.permute((0, 1)), "permute"),
                        (lambda: one_row.expand((3, 4)), "expand.*sharded"), (lambda: mlb.expand((4, 5)), "expand"),
                        (lambda: mlb.expand((3, 1, 6)), "expand"), (lambda: mlb.stride((1, 1, -1)), "stride.*sharded"),
                        (lambda: mlb.stride((0, 1, 1)), "stride"), (lambda: one_row.stride((2, 1)), "stride.*sharded")]:
        with pytest.raises(ValueError, match=match):
            call()


def test_shrink_rules():
    mlb = sharded((10, 4), 4, 0)
    whole = mlb.shrink(((0, 10), (1, 3)))
    assert layout(whole)[:4] == ((10, 2), 0, [True] * 4, mlb.bounds)
    last = mlb.shrink(((9, 10), (0, 4)))
    assert layout(last) == ((1, 4), 0, [False, False, False, True], mlb.bounds, [(3, 4)] * 3 + [(1, 4)])
    second = mlb.shrink(((3, 6), (0, 4)))
    assert second.real == [False, True, False, False] and second.lbs[1] is mlb.lbs[1]
    assert layout(second.shrink(((0, 3), (0, 2))))[:3] == ((3, 2), 0, [False, True, False, False])
    assert layout(sharded((3, 4), 3, None).shrink(((1, 2), (0, 4))))[:2] == ((1, 4), None)
    for arg, match in [(((0, 5), (0, 4)), "neither"), (((3, 7), (0, 4)), "neither"), (((3, 6), (0, 2)), "at once"),
                       (((0, 11), (0, 4)), "out of range"), (((2, 1), (0, 4)), "out of range"), (((0, 10),), "pairs")]:
        with pytest.raises(ValueError, match=f"shrink.*{match}"):
            mlb.shrink(arg)


def test_pad_rules():
    mlb = sharded((5, 2), 3, 0)
    part = mlb.shrink(((2, 4), (0, 2)))
    restored = part.pad(((2, 1), (0, 0)))
    assert layout(restored) == layout(mlb)
    assert layout(mlb.pad(((0, 0), (1, 2))))[:4] == ((5, 5), 0, [True] * 3, mlb.bounds)
    assert layout(part.pad(((0, 0), (1, 0))))[:3] == ((2, 3), 0, [False, True, False])
    assert layout(sharded((2, 2), 2, None).pad(((1, 1), (0, 0))))[:2] == ((4, 2), None)
    for target, arg, match in [(mlb, ((1, 0), (0, 0)), "real"), (part, ((2, 0), (0, 0)), "restore"),
                               (part, ((1, 1), (0, 0)), "restore"), (part, ((2, 1), (0, 1)), "at once"),
                               (part, ((0, -1), (0, 0)), "negative")]:
        with pytest.raises(ValueError, match=f"pad.*{match}"):
            target.pad(arg)


def test_assign_errors_are_raised_before_anything_is_built():
    target = sharded((4, 6), 2, 0)
    part = target.shrink(((2, 4), (0, 6)))
    for value in (sharded((4, 5), 2, 0), sharded((4, 6), 2, 1), sharded((4, 6), 2, None), sharded((4, 6), 3, 1),
                  MultiLazyBuffer([empty((1, 6)), empty((3, 6), device="CLANG:1")], 0)):
        with pytest.raises(ValueError, match="assign"):
            target.assign(value)
    with pytest.raises(ValueError, match="assign.*real"):  # same layout, but shard 1 of the value is not real
        part.assign(target.shrink(((0, 2), (0, 6))))
    with pytest.raises(RuntimeError, match="realized"):  # the lazy layer's rule, per shard
        target.assign(sharded((4, 6), 2, 0))


# ---------------------------------------------------------------- all-reduce dispatch

@pytest.mark.parametrize("ring, ndev, numel, expected", [(0, 3, 300_000, "naive"), (1, 3, 300_000, "ring"),
                                                         (1, 2, 300_000, "naive"), (1, 3, 1000, "naive"),
                                                         (2, 2, 4, "ring")])
def test_all_reduce_dispatch(monkeypatch, ring, ndev, numel, expected):
    called = []

    def spy(name):
        def record(op, parts):
            called.append(name)
            return list(parts)
        return record

    monkeypatch.setattr(allreduce_module, "_ring_all_reduce", spy("ring"))
    monkeypatch.setattr(allreduce_module, "_naive_all_reduce", spy("naive"))
    with config.override(ring=ring):
        all_reduce(ReduceOps.SUM, [empty((numel,), device=d) for d in DEVICES[:ndev]])
    assert called == [expected]


# ---------------------------------------------------------------- values (numpy is the ground truth)

def shard_values(array, ndev, axis):
    return MultiLazyBuffer.from_sharded(fast.from_numpy(array, "CLANG"), DEVICES[:ndev], axis)


def values(mlb):
    return fast.to_numpy(mlb)


def ints(*shape, low=-50, high=50, seed=0):
    return np.random.default_rng(seed).integers(low, high, size=shape).astype(np.int32)


@pytest.mark.parametrize("shape, ndev, axis", [((10, 3), 4, 0), ((2, 5), 3, 1), ((4, 4), 2, None)])
def test_from_sharded_and_copy_values(shape, ndev, axis):
    array = ints(*shape)
    mlb = shard_values(array, ndev, axis)
    np.testing.assert_array_equal(values(mlb), array)
    np.testing.assert_array_equal(fast.to_numpy(mlb.copy_to_device("CLANG:1")), array)
    if axis is not None:
        for lb, (start, end) in zip(mlb.lbs, mlb.bounds, strict=True):
            np.testing.assert_array_equal(fast.to_numpy(lb), np.take(array, range(start, end), axis=axis))


def test_e_values_across_layouts():
    a, b = ints(6, 5, seed=1), ints(6, 5, seed=2)
    for axis_a, axis_b in [(0, 0), (0, None), (None, 1), (0, 1), (1, 0)]:
        out = shard_values(a, 3, axis_a).e(BinaryOps.ADD, shard_values(b, 3, axis_b))
        np.testing.assert_array_equal(values(out), a + b)
    cond = shard_values(a, 2, 0).e(BinaryOps.CMPLT, shard_values(b, 2, None))
    chosen = cond.e(TernaryOps.WHERE, shard_values(a, 2, 1), shard_values(b, 2, 0))
    np.testing.assert_array_equal(values(chosen), np.where(a < b, a, b))


@pytest.mark.parametrize("ring", [0, 1, 2])
@pytest.mark.parametrize("ndev, shape, axis", [(2, (4, 3), 0), (3, (7, 5), 0), (4, (3, 10), 1), (3, (6, 1), 0)])
def test_reduce_over_sharded_axis_values(ring, ndev, shape, axis):
    array = ints(*shape, seed=ndev)
    with config.override(ring=ring):
        total = shard_values(array, ndev, axis).r(ReduceOps.SUM, (axis,))
        largest = shard_values(array, ndev, axis).r(ReduceOps.MAX, (0, 1))
    assert total.axis is None and total.real == [True] * ndev
    for lb in total.lbs:  # every device holds the all-reduced result
        np.testing.assert_array_equal(fast.to_numpy(lb), array.sum(axis=axis, keepdims=True))
    np.testing.assert_array_equal(values(largest), array.max(keepdims=True))


def test_reduce_dtypes_wrap_and_half():
    big = np.full((4, 3), 2**30, dtype=np.int32)
    with config.override(ring=2):
        wrapped = values(shard_values(big, 4, 0).r(ReduceOps.SUM, (0,)))
    np.testing.assert_array_equal(wrapped, big.sum(axis=0, keepdims=True, dtype=np.int32))
    half = (np.arange(24, dtype=np.float16) / 8).reshape(6, 4)
    out = values(shard_values(half, 3, 0).r(ReduceOps.SUM, (0,)))
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, half.astype(np.float32).sum(axis=0, keepdims=True), rtol=1e-2)
    flags = np.array([[False, True], [False, False], [False, False]])
    np.testing.assert_array_equal(values(shard_values(flags, 3, 0).r(ReduceOps.SUM, (0,))), [[False, True]])


def test_default_ring_threshold_values():
    array = np.tile(np.arange(3, dtype=np.int32)[:, None], (1, 256_032))
    out = shard_values(array, 3, 0).r(ReduceOps.SUM, (0,))
    np.testing.assert_array_equal(values(out), array.sum(axis=0, keepdims=True))


def test_partly_real_values():
    array = ints(5, 6, seed=3) - 100  # all negative: a zero from a non-real shard would win a MAX
    mlb = shard_values(array, 3, 0)
    part = mlb.shrink(((2, 4), (0, 6)))
    np.testing.assert_array_equal(values(part), array[2:4])
    np.testing.assert_array_equal(values(part.r(ReduceOps.MAX, (0,))), array[2:4].max(axis=0, keepdims=True))
    np.testing.assert_array_equal(fast.to_numpy(part.r(ReduceOps.SUM, (0,)).lbs[0]), np.zeros((1, 6), np.int32))
    less = part.e(BinaryOps.CMPLT, shard_values(array[2:4] + 1, 3, None))
    np.testing.assert_array_equal(values(less), np.ones((2, 6), bool))
    restored = part.e(BinaryOps.MUL, part).pad(((2, 1), (0, 0)))
    expected = np.zeros_like(array)
    expected[2:4] = array[2:4] ** 2
    np.testing.assert_array_equal(values(restored), expected)
    np.testing.assert_array_equal(fast.to_numpy(part.copy_to_device("CLANG:3")), array[2:4])
    last = mlb.shrink(((4, 5), (0, 6)))  # the short last shard of an uneven split (2, 2, 1)
    np.testing.assert_array_equal(fast.to_numpy(last.copy_to_device("CLANG")), array[4:])
    plus = last.e(BinaryOps.ADD, shard_values(array[4:], 3, None)).e(BinaryOps.ADD, shard_values(array[4:], 3, 1))
    np.testing.assert_array_equal(values(plus), 3 * array[4:])


def test_movement_values():
    array = ints(4, 6, seed=4)
    mlb = shard_values(array, 2, 1)
    np.testing.assert_array_equal(values(mlb.reshape((4, 2, 3))), array.reshape(4, 2, 3))
    np.testing.assert_array_equal(values(mlb.permute((1, 0))), array.T)
    np.testing.assert_array_equal(values(mlb.stride((-1, 1))), array[::-1])
    np.testing.assert_array_equal(values(mlb.pad(((1, 0), (0, 0)))), np.pad(array, ((1, 0), (0, 0))))
    np.testing.assert_array_equal(values(mlb.shrink(((1, 3), (0, 6)))), array[1:3])
    rows = shard_values(array, 2, 0).reshape((24,))
    np.testing.assert_array_equal(values(rows), array.reshape(-1))
    np.testing.assert_array_equal(values(rows.cast(dtypes.float16)), array.reshape(-1).astype(np.float16))


def copied(array, axis):
    """Sharded onto CLANG:1 and CLANG:2 (so every shard is a copy: a whole buffer) and realized."""
    mlb = MultiLazyBuffer.from_sharded(fast.from_numpy(array, "CLANG"), DEVICES[1:3], axis)
    fast.realize(*mlb.lbs)
    return mlb


def test_assign_values():
    update = np.arange(24, dtype=np.float32).reshape(4, 6)
    for axis in (0, 1, None):
        target = copied(np.zeros((4, 6), np.float32), axis)
        assigned = target.assign(MultiLazyBuffer.from_sharded(fast.from_numpy(update, "CLANG"), DEVICES[1:3], axis))
        assert layout(assigned) == layout(target)
        np.testing.assert_array_equal(values(assigned), update)
    part = copied(np.zeros((4, 6), np.float32), 0).shrink(((2, 4), (0, 6)))
    value = MultiLazyBuffer.from_sharded(fast.from_numpy(update, "CLANG"), DEVICES[1:3], 0).shrink(((2, 4), (0, 6)))
    assigned = part.assign(value)
    assert assigned.real == [False, True] and assigned.lbs[0] is part.lbs[0]
    np.testing.assert_array_equal(values(assigned), update[2:])


@st.composite
def sharded_cases(draw):
    """A small int32 array, a device count, a sharded axis with no empty shard, and an axis for a 2nd operand."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    axis = draw(st.integers(0, ndim - 1))
    ndev = draw(st.integers(1, min(4, shape[axis])))
    step = -(-shape[axis] // ndev)
    ndev = -(-shape[axis] // step)  # the largest count with this shard size: never an empty shard
    other = draw(st.sampled_from([None, *[a for a in range(ndim) if -(-shape[a] // ndev) * (ndev - 1) < shape[a]]]))
    array = np.random.default_rng(draw(st.integers(0, 2**16))).integers(-9, 9, size=shape).astype(np.int32)
    axes = tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1))))
    return array, ndev, axis, other, axes, draw(st.sampled_from([0, 1, 2]))


@given(sharded_cases())
@settings(max_examples=15, deadline=None)
def test_sharded_graphs_match_numpy(case):
    array, ndev, axis, other, axes, ring = case
    with config.override(ring=ring):
        mlb = shard_values(array, ndev, axis).e(BinaryOps.MUL, shard_values(array + 1, ndev, other))
        expected = array * (array + 1)
        np.testing.assert_array_equal(values(mlb), expected)
        np.testing.assert_array_equal(values(mlb.r(ReduceOps.SUM, axes)), expected.sum(axis=axes, keepdims=True))
        np.testing.assert_array_equal(values(mlb.r(ReduceOps.MAX, axes)), expected.max(axis=axes, keepdims=True))
        np.testing.assert_array_equal(fast.to_numpy(mlb.copy_to_device("CLANG:3")), expected)
