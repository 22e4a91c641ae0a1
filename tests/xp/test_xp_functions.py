"""Non-element-wise functions of the Array API front end against numpy (>= 2): dtype functions and the
promotion table, creation, indexing, manipulation, statistics, searching, sorting, sets and linear
algebra, over fast (CLANG, LLVM) and reference."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.xp.conftest import to_np

RNG = np.random.default_rng(7)
STANDARD = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32", "float64"]


def same(got, expected, rtol: float = 0.0) -> None:
    host = to_np(got)
    assert host.shape == np.shape(expected), (host.shape, np.shape(expected))
    if rtol:
        np.testing.assert_allclose(host, expected, rtol=rtol, atol=1e-6)
    else:
        np.testing.assert_array_equal(host, expected)


# ------------------------------------------------------------ dtypes

def test_promotion_table_matches_numpy_where_the_standard_defines_it(ns):
    xp = ns.xp
    for a, b in itertools.product(STANDARD, repeat=2):
        kinds = {np.dtype(a).kind, np.dtype(b).kind}
        mixed = len(kinds - {"i", "u"}) and len(kinds) > 1 or {a, b} & {"uint64"} and "i" in kinds
        if mixed:
            with pytest.raises(TypeError, match="no promotion"):
                xp.result_type(getattr(xp, a), getattr(xp, b))
            assert not xp.can_cast(getattr(xp, a), getattr(xp, b))
            continue
        expected = np.result_type(a, b).name
        assert xp.result_type(getattr(xp, a), getattr(xp, b)).name == expected, (a, b)
        assert xp.can_cast(getattr(xp, a), getattr(xp, b)) == (expected == b), (a, b)
    assert xp.result_type(xp.float16, xp.bfloat16) == xp.float32
    x = ns.asarray(np.array([1], np.int8))
    assert (x + ns.asarray(np.array([1], np.uint8))).dtype == xp.int16


def test_dtype_functions(ns):
    xp = ns.xp
    for name in ("float16", "float32", "float64"):
        info, ref = xp.finfo(getattr(xp, name)), np.finfo(name)
        assert (info.bits, info.eps, info.max, info.min, info.smallest_normal) == \
            (ref.bits, float(ref.eps), float(ref.max), float(ref.min), float(ref.smallest_normal))
    assert xp.finfo(xp.bfloat16).eps == 2.0 ** -7
    for name in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"):
        info, ref = xp.iinfo(getattr(xp, name)), np.iinfo(name)
        assert (info.bits, info.min, info.max) == (ref.bits, ref.min, ref.max)
    assert xp.isdtype(xp.int8, "signed integer") and xp.isdtype(xp.uint8, ("integral", "bool"))
    assert not xp.isdtype(xp.float32, "integral") and xp.isdtype(xp.float32, xp.float32)
    with pytest.raises(ValueError, match="isdtype"):
        xp.isdtype(xp.float32, "blob")
    with pytest.raises(TypeError, match="finfo"):
        xp.finfo(xp.int32)
    x = ns.asarray(np.array([1.7, -2.7, 300.5], np.float32))
    same(xp.astype(x, xp.int32), np.array([1, -2, 300], np.int32))
    same(xp.astype(x, xp.bool), np.array([True, True, True]))
    info = xp.__array_namespace_info__()
    assert info.default_dtypes()["real floating"] == xp.float32 and "CLANG" in info.devices()
    assert set(info.dtypes(kind="signed integer")) == {"int8", "int16", "int32", "int64"}


# ------------------------------------------------------------ creation

def test_creation(ns):
    xp = ns.xp
    assert ns.asarray([1, 2]).dtype == xp.int32 and ns.asarray([1.5]).dtype == xp.float32
    assert ns.asarray([True]).dtype == xp.bool and ns.asarray([2**40]).dtype == xp.int64
    assert ns.asarray(np.array([1.5])).dtype == xp.float64
    same(ns.asarray([[1, 2], [3, 4]], dtype=xp.float64), np.array([[1.0, 2], [3, 4]]))
    same(xp.zeros((2, 3), device=ns.device), np.zeros((2, 3), np.float32))
    same(xp.ones(4, dtype=xp.int8, device=ns.device), np.ones(4, np.int8))
    same(xp.full((2,), 7, device=ns.device), np.full((2,), 7, np.int32))
    same(xp.empty((0, 3), device=ns.device), np.empty((0, 3), np.float32))
    same(xp.arange(2, 11, 3, device=ns.device), np.arange(2, 11, 3))
    same(xp.arange(5.0, 0.0, -1.5, device=ns.device), np.arange(5.0, 0.0, -1.5, dtype=np.float32))
    same(xp.linspace(0, 1, 5, device=ns.device), np.linspace(0, 1, 5, dtype=np.float32))
    same(xp.eye(3, 4, k=1, device=ns.device), np.eye(3, 4, 1, dtype=np.float32))
    base = ns.asarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    same(xp.zeros_like(base), np.zeros((3, 4), np.int16))
    same(xp.ones_like(base, dtype=xp.float32), np.ones((3, 4), np.float32))
    same(xp.full_like(base, 3), np.full((3, 4), 3, np.int16))
    same(xp.empty_like(base), np.zeros((3, 4), np.int16))
    same(xp.tril(base, k=1), np.tril(np.arange(12).reshape(3, 4), 1))
    same(xp.triu(base), np.triu(np.arange(12).reshape(3, 4)))
    same(xp.from_dlpack(np.arange(3.0)), np.arange(3.0))
    with pytest.raises(ValueError, match="copy=False"):
        ns.asarray(np.arange(3), copy=False)
    with pytest.raises(TypeError, match="unsupported"):
        ns.asarray(np.array(["a"]))


def test_array_object(ns):
    xp = ns.xp
    x = ns.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert x.__array_namespace__() is xp and x.shape == (2, 3) and x.ndim == 2 and x.size == 6
    assert x.device == ns.device and x.dtype == xp.float32 and len(x) == 2
    same(x.T, np.arange(6).reshape(2, 3).T)
    same(ns.asarray(np.zeros((2, 3, 4))).mT, np.zeros((2, 4, 3)))
    assert float(xp.sum(x)) == 15.0 and int(x[1, 2]) == 5 and bool(x[0, 1]) and not bool(x[0, 0])
    assert [int(v) for v in ns.asarray([3, 4])] == [3, 4] and "Array(" in repr(x)
    assert list(range(10))[ns.asarray(np.int64(4))] == 4
    with pytest.raises(TypeError, match="0-d"):
        float(x)
    with pytest.raises(TypeError, match="__index__"):
        list(range(3))[ns.asarray(1.0)]
    with pytest.raises(TypeError):
        hash(x)
    np.testing.assert_array_equal(np.from_dlpack(x), np.arange(6).reshape(2, 3))
    assert x.to_device(ns.device).device == ns.device


# ------------------------------------------------------------ indexing

@settings(max_examples=12, deadline=None, derandomize=True)
@given(index=hnp.basic_indices((4, 5, 6), allow_newaxis=True, allow_ellipsis=True))
def test_getitem_basic_indices(ns, index):
    data = np.arange(120, dtype=np.int32).reshape(4, 5, 6)
    same(ns.asarray(data)[index], data[index])


@settings(max_examples=12, deadline=None, derandomize=True)
@given(index=hnp.basic_indices((4, 6), allow_newaxis=False, allow_ellipsis=True), value=st.integers(-99, 99))
def test_setitem_basic_indices(ns, index, value):
    data = np.arange(24, dtype=np.int32).reshape(4, 6)
    x = ns.asarray(data)
    region = data[index]
    fill = np.arange(region.size, dtype=np.int32).reshape(region.shape) * value
    x[index] = ns.asarray(fill)
    data[index] = fill
    same(x, data)


def test_index_arrays_take_and_errors(ns):
    xp = ns.xp
    data = RNG.standard_normal((5, 3)).astype(np.float32)
    x = ns.asarray(data)
    mask = data[:, 0] > 0
    same(x[ns.asarray(mask)], data[mask])
    same(x[ns.asarray(np.array([4, 0, -1], np.int32))], data[[4, 0, -1]])
    same(xp.take(x, ns.asarray(np.array([[2, 1]], np.int64)), axis=1), np.take(data, [[2, 1]], axis=1))
    y = ns.asarray(data)
    y[ns.asarray(data > 0)] = 0.0
    same(y, np.where(data > 0, 0, data))
    with pytest.raises(IndexError, match="out of bounds"):
        x[5]
    with pytest.raises(IndexError, match="too many"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="ellipsis"):
        x[..., ...]


# ------------------------------------------------------------ manipulation

def test_manipulation(ns):
    xp = ns.xp
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = ns.asarray(data)
    same(xp.reshape(x, (4, -1)), data.reshape(4, -1))
    same(xp.permute_dims(x, (2, 0, 1)), data.transpose(2, 0, 1))
    same(xp.expand_dims(x, axis=-1), data[..., None])
    same(xp.squeeze(xp.expand_dims(x, axis=1), axis=1), data)
    same(xp.broadcast_to(ns.asarray(data[0, :, :1]), (2, 3, 4)), np.broadcast_to(data[0, :, :1], (2, 3, 4)))
    a, b = xp.broadcast_arrays(ns.asarray(data[:, :1]), ns.asarray(data[0]))
    same(a, np.broadcast_to(data[:, :1], (2, 3, 4)))
    same(b, np.broadcast_to(data[0], (2, 3, 4)))
    neg_zero = ns.asarray(np.array([[-0.0, np.nan]], np.float32))
    joined = to_np(xp.concat([x[0], neg_zero[:, :1] * ns.asarray(np.ones((1, 4), np.float32))], axis=0))
    assert np.signbit(joined[-1, 0]) and joined.shape == (4, 4)
    same(xp.concat([x, x[:, :1]], axis=1), np.concatenate([data, data[:, :1]], axis=1))
    same(xp.concat([x, ns.asarray(np.ones((2, 3, 4), np.float64))], axis=None),
         np.concatenate([data, np.ones((2, 3, 4))], axis=None))
    same(xp.stack([x[0], x[1]], axis=1), np.stack([data[0], data[1]], axis=1))
    assert all(np.array_equal(to_np(p), q) for p, q in zip(xp.unstack(x, axis=2), np.moveaxis(data, 2, 0), strict=True))
    same(xp.flip(x, axis=(0, 2)), np.flip(data, axis=(0, 2)))
    same(xp.roll(x, 2, axis=2), np.roll(data, 2, axis=2))
    same(xp.roll(x, -3), np.roll(data, -3))
    same(xp.roll(x, (1, -1), axis=(0, 1)), np.roll(data, (1, -1), axis=(0, 1)))
    same(xp.tile(x[0], (2, 1, 2)), np.tile(data[0], (2, 1, 2)))
    same(xp.repeat(x, 2, axis=1), np.repeat(data, 2, axis=1))
    same(xp.repeat(x[0, 0], ns.asarray(np.array([1, 0, 2, 1]))), np.repeat(data[0, 0], [1, 0, 2, 1]))
    same(xp.moveaxis(x, 0, -1), np.moveaxis(data, 0, -1))
    for indexing in ("xy", "ij"):
        for got, expected in zip(xp.meshgrid(x[0, 0], x[0, :, 0], indexing=indexing),
                                 np.meshgrid(data[0, 0], data[0, :, 0], indexing=indexing), strict=True):
            same(got, expected)
    with pytest.raises(ValueError, match="reshape"):
        xp.reshape(x, (5, 5))
    with pytest.raises(ValueError, match="squeeze"):
        xp.squeeze(x, axis=0)


# ------------------------------------------------------------ statistics and searching

AXES = [None, 0, 1, -1, (0, 2)]


@pytest.mark.parametrize("axis", AXES)
@settings(max_examples=3, deadline=None, derandomize=True)
@given(data=hnp.arrays(np.float32, (3, 4, 5), elements=st.floats(-4, 4, width=32)), keepdims=st.booleans())
def test_statistics(ns, axis, data, keepdims):
    xp, x = ns.xp, ns.asarray(data)
    for name, rtol in (("sum", 1e-5), ("prod", 1e-5), ("max", 0), ("min", 0), ("mean", 1e-5), ("var", 1e-4),
                       ("std", 1e-4)):
        got = getattr(xp, name)(x, axis=axis, keepdims=keepdims)
        same(got, getattr(np, name)(data.astype(np.float64), axis=axis, keepdims=keepdims), rtol or 0)
    same(xp.var(x, axis=axis, correction=1), np.var(data.astype(np.float64), axis=axis, ddof=1), 1e-4)
    flags = data > 0
    for name in ("all", "any"):
        same(getattr(xp, name)(ns.asarray(flags), axis=axis, keepdims=keepdims),
             getattr(np, name)(flags, axis=axis, keepdims=keepdims))
    same(xp.count_nonzero(ns.asarray(flags), axis=axis, keepdims=keepdims),
         np.count_nonzero(flags, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_integer_reductions(ns, dtype):
    data = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (4, 7), endpoint=True).astype(dtype)
    data[0, 0], data[1, 1] = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = ns.asarray(data)
    same(ns.xp.max(x, axis=1), data.max(axis=1))
    same(ns.xp.min(x, axis=0), data.min(axis=0))
    same(ns.xp.argmax(x, axis=1), data.argmax(axis=1))
    same(ns.xp.argmin(x), data.argmin())
    small = (data % 5).astype(dtype)
    same(ns.xp.prod(ns.asarray(small), axis=1, dtype=ns.xp.int64), np.prod(small, axis=1, dtype=np.int64))
    assert ns.xp.sum(x).dtype.name == ("uint32" if dtype == np.uint8 else "int64" if dtype == np.int64 else "int32")


@settings(max_examples=6, deadline=None, derandomize=True)
@given(data=hnp.arrays(np.float32, (4, 6), elements=st.sampled_from([-1.0, 0.0, 2.0, 2.0, np.nan, -np.inf])))
def test_argmax_argmin_first_occurrence_and_nan(ns, data):
    x = ns.asarray(data)
    for axis, keepdims in ((None, False), (0, False), (1, True), (-1, False)):
        same(ns.xp.argmax(x, axis=axis, keepdims=keepdims), np.argmax(data, axis=axis, keepdims=keepdims))
        same(ns.xp.argmin(x, axis=axis, keepdims=keepdims), np.argmin(data, axis=axis, keepdims=keepdims))


def test_where_cumulative_sum_searchsorted(ns):
    xp = ns.xp
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    same(xp.where(ns.asarray(a > 0), ns.asarray(a), 0.0), np.where(a > 0, a, 0))
    zeros = np.zeros(4, np.int32)
    same(xp.where(ns.asarray(a[:, :1] > 0), 1, ns.asarray(zeros)), np.where(a[:, :1] > 0, 1, zeros))
    same(xp.cumulative_sum(ns.asarray(a), axis=1), np.cumsum(a, axis=1), 1e-5)
    same(xp.cumulative_sum(ns.asarray(a[0]), include_initial=True), np.concatenate([[0], np.cumsum(a[0])]), 1e-5)
    same(xp.cumulative_sum(ns.asarray(np.arange(5, dtype=np.int8)), axis=0), np.cumsum(np.arange(5)))
    base = np.array([1.0, 2.0, 2.0, 5.0], np.float32)
    values = np.array([[0.0, 2.0], [3.0, 9.0]], np.float32)
    for side in ("left", "right"):
        same(xp.searchsorted(ns.asarray(base), ns.asarray(values), side=side), np.searchsorted(base, values, side))
    with pytest.raises(ValueError, match="zero-size"):
        xp.max(ns.asarray(np.zeros((0, 2), np.float32)), axis=0)


# ------------------------------------------------------------ sorting and sets

@settings(max_examples=5, deadline=None, derandomize=True)
@given(data=hnp.arrays(np.int16, (3, 8), elements=st.integers(-3, 3)), descending=st.booleans())
def test_sort_argsort_stable(ns, data, descending):
    x = ns.asarray(data)
    expected = np.flip(np.sort(data, axis=1), axis=1) if descending else np.sort(data, axis=1)
    same(ns.xp.sort(x, axis=1, descending=descending), expected)
    order = to_np(ns.xp.argsort(x, axis=0, descending=descending))
    key = -data.astype(np.int64) if descending else data
    np.testing.assert_array_equal(order, np.argsort(key, axis=0, kind="stable"))


def test_sets_and_nonzero(ns):
    xp = ns.xp
    data = np.array([[3, 1, 3], [2, 1, 0]], np.int32)
    x = ns.asarray(data)
    values, index, inverse, counts = np.unique(data, return_index=True, return_inverse=True, return_counts=True)
    same(xp.unique_values(x), values)
    got = xp.unique_all(x)
    for g, e in zip(got, (values, index, inverse.reshape(data.shape), counts), strict=True):
        same(g, e)
    same(xp.unique_counts(x).counts, counts)
    same(xp.unique_inverse(x).inverse_indices, inverse.reshape(data.shape))
    for g, e in zip(xp.nonzero(x), np.nonzero(data), strict=True):
        same(g, e)


# ------------------------------------------------------------ linear algebra

@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((4,), (4, 2)), ((2, 3), (3,)), ((4,), (4,)),
                                    ((2, 1, 3, 4), (5, 4, 2)), ((3, 0), (0, 2))])
def test_matmul_shapes(ns, shapes):
    a = RNG.standard_normal(shapes[0]).astype(np.float32)
    b = RNG.standard_normal(shapes[1]).astype(np.float32)
    same(ns.asarray(a) @ ns.asarray(b), a.astype(np.float64) @ b, 1e-5)


def test_linear_algebra(ns):
    xp = ns.xp
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    same(xp.tensordot(ns.asarray(a), ns.asarray(b), axes=([1, 2], [1, 0])), np.tensordot(a, b, ([1, 2], [1, 0])), 1e-5)
    same(xp.tensordot(ns.asarray(a), ns.asarray(a), axes=0), np.tensordot(a, a, 0), 1e-5)
    same(xp.vecdot(ns.asarray(a), ns.asarray(a[:1]), axis=1), np.sum(a * a[:1], axis=1), 1e-5)
    same(xp.matrix_transpose(ns.asarray(a)), np.swapaxes(a, -1, -2))
    same(xp.linalg.vector_norm(ns.asarray(a), axis=-1), np.linalg.norm(a, axis=-1), 1e-5)
    same(xp.linalg.vector_norm(ns.asarray(a), ord=float("inf")), np.max(np.abs(a)), 1e-6)
    same(xp.linalg.outer(ns.asarray(a[0, 0]), ns.asarray(a[1, 1])), np.outer(a[0, 0], a[1, 1]), 1e-6)
    ints = np.arange(6, dtype=np.int8).reshape(2, 3)
    same(ns.asarray(ints) @ ns.asarray(ints.T), ints @ ints.T)
    with pytest.raises(ValueError, match="matmul"):
        ns.asarray(a) @ ns.asarray(a)
