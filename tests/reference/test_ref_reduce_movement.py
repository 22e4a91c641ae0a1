"""Reductions per dtype class (empty axes included) and the six movement ops against numpy indexing."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ref_util import DEV, FLOATS, INTS, buf, int_range, op, same_float, wrap

RNG = np.random.default_rng(0)


def _red(impl, b, name, axes):
    return impl.to_numpy(b.r(getattr(impl.ReduceOps, name), axes))


@pytest.mark.parametrize("name", INTS)
def test_int_sum_wraps_and_max(impl, name):
    lo, hi = int_range(name)
    x = RNG.integers(lo, hi, size=(3, 5), dtype=np.dtype(name), endpoint=True)
    b = buf(impl, x, name)
    got = _red(impl, b, "SUM", (1,))
    assert got.shape == (3, 1) and got.dtype == np.dtype(name)
    assert got[:, 0].tolist() == [wrap(sum(int(v) for v in row), name) for row in x]
    assert _red(impl, b, "MAX", (0, 1)).tolist() == [[int(x.max())]]
    assert _red(impl, buf(impl, [hi, hi], name), "SUM", (0,)).tolist() == [wrap(2 * hi, name)]


@pytest.mark.parametrize("name", ["bool", *INTS, *FLOATS])
def test_empty_axis(impl, name):
    e = impl.from_numpy(np.zeros((0, 3), dtype=np.float32), DEV).cast(getattr(impl.dtypes, name))
    s, m = _red(impl, e, "SUM", (0,)), _red(impl, e, "MAX", (0,))
    assert s.shape == (1, 3) and m.shape == (1, 3)
    lowest = {"bool": False, **{n: int_range(n)[0] for n in INTS}, **{n: -math.inf for n in FLOATS}}[name]
    assert s.tolist() == [[0, 0, 0]] and m.tolist() == [[lowest] * 3]


def test_bool_reductions_are_any(impl):
    b = buf(impl, [[False, True], [False, False]], "bool")
    assert _red(impl, b, "SUM", (1,)).tolist() == [[True], [False]]
    assert _red(impl, b, "MAX", (0,)).tolist() == [[False, True]]
    assert _red(impl, b, "SUM", (0,)).dtype == np.bool_


@pytest.mark.parametrize("name", FLOATS)
def test_float_reductions(impl, name):
    x = RNG.standard_normal((4, 6, 5))
    b = buf(impl, x, name)
    xv = impl.to_numpy(b).astype(np.float64)
    for axes in [(0,), (1, 2), (0, 1, 2), ()]:
        got = _red(impl, b, "SUM", axes).astype(np.float64)
        want = xv.sum(axis=axes, keepdims=True)
        n = max(1, math.prod(x.shape[a] for a in axes))
        eps = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}[name]
        assert np.all(np.abs(got - want) <= eps * (n + 2) * np.maximum(1, np.abs(xv).sum(axis=axes, keepdims=True)))
        assert same_float(_red(impl, b, "MAX", axes), xv.max(axis=axes, keepdims=True))
    nan = buf(impl, [[1.0, math.nan], [2.0, -math.inf]], name)
    assert same_float(_red(impl, nan, "MAX", (1,)), [[math.nan], [2.0]])
    assert same_float(_red(impl, nan, "SUM", (1,)), [[math.nan], [-math.inf]])


def test_half_sum_accumulates_wide(impl):
    b = buf(impl, [2048.0] + [1.0] * 16, "float16")  # adding 1.0 to 2048 one at a time in float16 is lost
    assert _red(impl, b, "SUM", (0,)).tolist() == [2064.0]


NUMPY_EQUIV = {
    "reshape": lambda a, arg: a.reshape(arg), "permute": lambda a, arg: a.transpose(arg),
    "expand": lambda a, arg: np.broadcast_to(a, arg), "pad": lambda a, arg: np.pad(a, arg),
    "shrink": lambda a, arg: a[tuple(slice(s, e) for s, e in arg)],
    "stride": lambda a, arg: a[tuple(slice(None, None, k) for k in arg)],
}


@pytest.mark.parametrize("name,arg", [
    ("reshape", (3, 2, 2)), ("reshape", (12,)), ("permute", (1, 0, 2)), ("expand", (3, 2, 3, 2)),
    ("pad", ((1, 0), (0, 2), (3, 3))), ("shrink", ((0, 1), (1, 3), (0, 2))), ("stride", (-1, 2, -2)),
    ("stride", (1, -3, 1)), ("shrink", ((1, 1), (0, 3), (0, 2))),
])
def test_movement_matches_numpy(impl, name, arg):
    x: np.ndarray = np.arange(12, dtype=np.int32).reshape((2, 3, 2))
    b = buf(impl, x, "int32")
    if name == "expand":
        x, b = x.reshape(1, 2, 3, 2), b.reshape((1, 2, 3, 2))
    got = impl.to_numpy(getattr(b, name)(arg))
    assert got.shape == NUMPY_EQUIV[name](x, arg).shape and np.array_equal(got, NUMPY_EQUIV[name](x, arg))


@st.composite
def movement_chain(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    ops, cur = [], shape
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(sorted(NUMPY_EQUIV)))
        if kind == "reshape":
            arg = draw(st.permutations(cur)) if len(cur) > 1 else (1, *cur)
        elif kind == "permute":
            arg = tuple(draw(st.permutations(range(len(cur)))))
        elif kind == "expand":
            arg = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in cur)
        elif kind == "pad":
            arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur)
        elif kind == "shrink":
            arg = tuple(tuple(sorted((draw(st.integers(0, s)), draw(st.integers(0, s))))) for s in cur)
        else:
            arg = tuple(draw(st.sampled_from([-3, -2, -1, 1, 2])) for _ in cur)
        arg = tuple(arg)
        ops.append((kind, arg))
        cur = NUMPY_EQUIV[kind](np.empty(cur), arg).shape
    return shape, ops


@settings(max_examples=60, deadline=None)
@given(chain=movement_chain(), name=st.sampled_from(["int16", "float32", "bfloat16", "bool"]))
def test_random_movement_chains(impl, chain, name):
    shape, ops = chain
    x = np.arange(1, math.prod(shape) + 1).reshape(shape) % 7
    b = buf(impl, x, name)
    x = impl.to_numpy(b)
    for kind, arg in ops:
        b, x = getattr(b, kind)(arg), NUMPY_EQUIV[kind](x, arg)
        assert b.shape == x.shape
    b = b.e(op(impl, "MAX"), b)  # compute after the views
    got = impl.to_numpy(b)
    assert got.shape == x.shape and np.array_equal(got, x)
