"""Hypothesis strategies for scalars, shapes and leaf data of every dtype, edges included.

Floats include NaN, +-inf, -0.0, the largest finite value, the smallest normal and subnormal;
integers their MIN/MAX, 0 (a divisor), -1 and MIN+1. Values are always representable in the leaf
dtype (bfloat16 leaves are built from float32 data and converted in the graph).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from hypothesis import strategies as st

from conformance.program import ArrayData, Scalar, Shape
from conformance.vocab import DENORM_MIN, FLOATS, MAX_FINITE, TINY, int_range

FLOAT_WIDTH = {"float16": 16, "float32": 32, "float64": 64, "bfloat16": 32}


def float_edges(dtype: str) -> tuple[float, ...]:
    big = MAX_FINITE["float32" if dtype == "bfloat16" else dtype]
    small = "float32" if dtype == "bfloat16" else dtype
    return (0.0, -0.0, math.nan, math.inf, -math.inf, 1.0, -1.0, big, -big, TINY[small], DENORM_MIN[small],
            -DENORM_MIN[small], 0.5, 3.0)


def int_edges(dtype: str) -> tuple[int, ...]:
    low, high = int_range(dtype)
    return tuple(sorted({0, 1, low, high, low + 1, high - 1, max(low, -1), 2, high // 2}))


def scalars(dtype: str) -> st.SearchStrategy[Scalar]:
    """A value representable in `dtype` (bfloat16: any float32), edges about a third of the time."""
    if dtype == "bool":
        return st.booleans()
    if dtype in FLOATS:
        width = FLOAT_WIDTH[dtype]
        return st.one_of(st.sampled_from(float_edges(dtype)),
                         st.integers(-8, 8).map(float),
                         st.integers(-16, 16).map(lambda i: i / 4),
                         st.floats(width=width, allow_nan=False, allow_infinity=False))  # type: ignore[arg-type]
    low, high = int_range(dtype)
    return st.one_of(st.sampled_from(int_edges(dtype)), st.integers(max(low, -8), min(high, 8)),
                     st.integers(low, high))


def const_values(dtype: str) -> st.SearchStrategy[Scalar]:
    """Arguments for CONST: the dtype's values, plus ints that wrap and values of another kind."""
    if dtype == "bool":
        return st.one_of(st.booleans(), st.sampled_from((0, 1, 2, 0.0, 2.5)))
    if dtype in FLOATS:
        return st.one_of(scalars(dtype), st.sampled_from((2, -3, 2 ** 24 + 1, 2 ** 53 + 1, 0.1)))
    low, high = int_range(dtype)
    wrapping = st.sampled_from((-1, high + 1, low - 1, 2 ** 70 + 5, -(2 ** 65)))
    in_range_float = st.sampled_from((2.75, -2.75, 0.0, -0.5)).filter(lambda f: low <= math.trunc(f) <= high)
    return st.one_of(scalars(dtype), wrapping, in_range_float)


@st.composite
def shapes(draw: st.DrawFn, max_elements: int = 256, min_rank: int = 0, max_rank: int = 4,
           allow_zero: bool = True) -> Shape:
    """Small shapes, rank 1-2 mostly; dims 1-5, sometimes 8 or 16, rarely 0."""
    ranks = (1, 2, 2, 3, 1, 2, 3, 4, 1, 2, 0)
    rank = draw(st.sampled_from(tuple(r for r in ranks if min_rank <= r <= max_rank)))
    dims: list[int] = []
    for _ in range(rank):
        dim = draw(st.sampled_from((2, 3, 1, 4, 5, 2, 3, 8, 4, 16, 0)[: 11 if allow_zero else 10]))
        if math.prod(dims) * max(dim, 1) > max_elements:
            dim = 1
        dims.append(dim)
    return tuple(dims)


@functools.cache
def value_pool(dtype: str) -> tuple[Scalar, ...]:
    """A fixed palette per dtype: the edges, small values and spread-out random values."""
    if dtype == "bool":
        return (False, True)
    rng = np.random.default_rng(sum(map(ord, dtype)))
    if dtype in FLOATS:
        np_type = np.float32 if dtype == "bfloat16" else np.dtype(dtype).type
        spread = rng.standard_normal(24) * 2.0 ** rng.integers(-30, 30, 24)
        with np.errstate(all="ignore"):
            randoms = tuple(float(np_type(v)) for v in spread if np.isfinite(np_type(v)))
        return (0.0, *float_edges(dtype)[1:], *(float(i) for i in range(-8, 9)), *(i / 4 for i in range(-9, 9, 2)),
                *randoms)
    low, high = int_range(dtype)
    randoms = tuple(int(v) for v in rng.integers(low, high, 24, dtype=np.int64 if high < 2 ** 63 else np.uint64,
                                                 endpoint=True))
    return (0, *int_edges(dtype), *range(max(low, -8), min(high, 8) + 1), *randoms)


@st.composite
def array_data(draw: st.DrawFn, dtype: str, shape: Shape) -> ArrayData:
    """Explicit values for a leaf of numpy dtype `dtype` (bfloat16 -> float32 values).

    Mostly indices into `value_pool` (cheap to draw and shrink); a quarter of the arrays draw each
    element from the full `scalars` strategy instead.
    """
    leaf_dtype = "float32" if dtype == "bfloat16" else dtype
    size = math.prod(shape)
    if draw(st.integers(0, 3)) < 3:
        pool = value_pool(dtype)
        picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=size, max_size=size))
        return ArrayData(leaf_dtype, shape, tuple(pool[i] for i in picks))
    values = draw(st.lists(scalars(dtype), min_size=size, max_size=size))
    return ArrayData(leaf_dtype, shape, tuple(values))


@st.composite
def random_data(draw: st.DrawFn, dtype: str, shape: Shape) -> ArrayData:
    """Seeded numpy random data for large leaves (bfloat16 -> float32)."""
    seed = draw(st.integers(0, 2 ** 16))
    return ArrayData("float32" if dtype == "bfloat16" else dtype, shape, seed=seed)
