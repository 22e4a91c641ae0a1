"""Tests for fast.shape.view: canonical form, movement ops against numpy, reshape merging, composition,
inversion and argument validation."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fast.shape.sizes import strides_for_shape
from fast.shape.symbolic import Variable, sint
from fast.shape.view import View

SENTINEL = -1


def _int(value: sint) -> int:
    assert isinstance(value, int), f"expected a concrete int, got {value!r}"
    return value


def _table(view: View) -> np.ndarray:
    """Brute-force read of a concrete view: the buffer index at every valid position, SENTINEL elsewhere."""
    result = np.full(tuple(_int(s) for s in view.shape), SENTINEL, dtype=np.int64)
    for position in itertools.product(*(range(_int(s)) for s in view.shape)):
        if all(_int(start) <= p < _int(end) for p, (start, end) in zip(position, view.ranges(), strict=True)):
            result[position] = _int(view.offset) + sum(p * _int(s) for p, s in zip(position, view.strides, strict=True))
    return result


def _apply(view: View, array: np.ndarray, kind: str, arg: tuple) -> tuple[View, np.ndarray]:  # type: ignore[type-arg]
    if kind == "pad":
        return view.pad(arg), np.pad(array, arg, constant_values=SENTINEL) if array.ndim else array
    if kind == "shrink":
        return view.shrink(arg), array[tuple(slice(b, e) for b, e in arg)]
    if kind == "expand":
        return view.expand(arg), np.broadcast_to(array, arg)
    if kind == "permute":
        return view.permute(arg), np.transpose(array, arg)
    return view.stride(arg), array[tuple(slice(None, None, k) for k in arg)]


def _random_arg(rng: random.Random, kind: str, shape: tuple[int, ...]) -> tuple:  # type: ignore[type-arg]
    if kind == "pad":
        return tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in shape)
    if kind == "shrink":
        starts = [rng.randint(0, s) for s in shape]
        return tuple((b, rng.randint(b, s)) for b, s in zip(starts, shape, strict=True))
    if kind == "expand":
        return tuple(rng.randint(0, 3) if s == 1 else s for s in shape)
    if kind == "permute":
        return tuple(rng.sample(range(len(shape)), len(shape)))
    return tuple(rng.choice((-3, -2, -1, 1, 2, 3)) for _ in shape)


def _random_view(seed: int, shape: tuple[int, ...], length: int) -> tuple[View, np.ndarray]:
    rng = random.Random(seed)
    view, array = View.create(shape), np.arange(math.prod(shape)).reshape(shape)
    for _ in range(length):
        kind = rng.choice(("pad", "shrink", "expand", "permute", "stride"))
        if kind in ("pad", "expand") and array.size > 200:
            continue
        view, array = _apply(view, array, kind, _random_arg(rng, kind, array.shape))
        assert view.shape == array.shape
    return view, array


def _factor_shape(rng: random.Random, size: int) -> tuple[int, ...]:
    if size == 0:
        return (0, rng.randint(0, 3)) if rng.random() < 0.5 else (rng.randint(1, 3), 0)
    dims = [d for d in range(2, size + 1) if size % d == 0]
    shape: list[int] = []
    while size > 1:
        d = rng.choice([d for d in dims if size % d == 0])
        shape.append(d)
        size //= d
    for _ in range(rng.randint(0, 2)):
        shape.insert(rng.randint(0, len(shape)), 1)
    return tuple(shape)


SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)


@settings(max_examples=300, deadline=None)
@given(SHAPES, st.integers(0, 2**32), st.integers(1, 5))
def test_single_view_ops_match_numpy(shape: tuple[int, ...], seed: int, length: int) -> None:
    view, array = _random_view(seed, shape, length)
    np.testing.assert_array_equal(_table(view), array)
    assert view == View.create(view.shape, view.strides, view.offset, view.mask)  # canonical form is stable


@settings(max_examples=300, deadline=None)
@given(SHAPES, st.integers(0, 2**32), st.integers(0, 4))
def test_reshape_is_exact_when_it_succeeds(shape: tuple[int, ...], seed: int, length: int) -> None:
    view, array = _random_view(seed, shape, length)
    new_shape = _factor_shape(random.Random(seed), array.size)
    reshaped = view.reshape(new_shape)
    if reshaped is not None:
        np.testing.assert_array_equal(_table(reshaped), np.ascontiguousarray(array).reshape(new_shape))
    minified = view.minify()
    np.testing.assert_array_equal(_table(minified).reshape(-1), np.ascontiguousarray(array).reshape(-1))


@settings(max_examples=200, deadline=None)
@given(SHAPES, st.integers(0, 2**32), st.integers(0, 4), st.integers(1, 4))
def test_composition_is_exact_when_it_succeeds(shape: tuple[int, ...], seed: int, first: int, second: int) -> None:
    base, array = _random_view(seed, shape, first)
    top, positions = _random_view(seed + 1, array.shape, second)
    composed = base + top
    if composed is None:
        return
    flat = np.ascontiguousarray(array).reshape(-1)
    expected = np.where(positions == SENTINEL, SENTINEL, flat[np.clip(positions, 0, max(flat.size - 1, 0))]
                        if flat.size else SENTINEL)
    np.testing.assert_array_equal(_table(composed), expected)


def test_create_canonicalises() -> None:
    assert strides_for_shape((2, 3, 4)) == (12, 4, 1)
    assert strides_for_shape((2, 1, 4)) == (4, 0, 1)
    assert View.create((2, 3, 4)).contiguous
    assert View.create((1, 3), (7, 1)).strides == (0, 1)
    assert View.create((2, 3), mask=((0, 2), (0, 3))).mask is None
    empty = View.create((2, 3), (3, 1), 5, ((1, 1), (0, 3)))
    assert empty.all_invalid and empty.strides == (0, 0) and empty.offset == 0 and empty.mask == ((0, 0), (0, 0))
    single = View.create((4, 3), (3, 1), 0, ((2, 3), (0, 3)))
    assert single.strides == (0, 1) and single.offset == 6
    assert not View.create((2, 3), (3, 1), 1).contiguous


def test_stride_flips_and_steps() -> None:
    view = View.create((5,))
    assert view.stride((-1,)) == View.create((5,), (-1,), 4)
    assert view.stride((2,)).shape == (3,) and view.stride((-2,)).offset == 4
    masked = View.create((5,)).pad(((1, 0),)).shrink(((0, 5),))
    np.testing.assert_array_equal(_table(masked.stride((-2,))), np.array([3, 1, -1]))


def test_reshape_cases() -> None:
    permuted = View.create((2, 3)).permute((1, 0))
    assert permuted.reshape((6,)) is None
    assert permuted.reshape((3, 2, 1)) == View.create((3, 2, 1), (1, 3, 0))
    assert permuted.reshape((3, 1, 2)) is not None
    padded = View.create((4, 6)).pad(((1, 1), (0, 0)))
    merged = padded.reshape((36,))
    assert merged == View.create((36,), (1,), -6, ((6, 30),))
    split = padded.reshape((6, 3, 2))
    assert split is not None and split.mask == ((1, 5), (0, 3), (0, 2))
    assert View.create((4, 6)).pad(((0, 0), (1, 1))).reshape((32,)) is None
    assert View.create((0, 3)).reshape((3, 0, 2)) == View.create((3, 0, 2))
    expanded = View.create((1, 3)).expand((4, 3)).reshape((2, 2, 3))
    assert expanded is not None and expanded.strides == (0, 0, 1)
    assert View.create((1,)).pad(((0, 1),)).shrink(((1, 2),)).reshape(()) is None


def test_minify_merges_axes() -> None:
    view = View.create((2, 3, 4)).permute((2, 0, 1))
    assert view.minify() == View.create((4, 6), (1, 4))
    assert View.create((2, 1, 3)).minify() == View.create((6,))


def test_composition_cases() -> None:
    permuted = View.create((2, 3)).permute((1, 0))
    assert permuted + View.create((6,)) is None
    assert View.create((6,)) + permuted == permuted
    assert permuted + View.create((3, 2)) == permuted
    padded = View.create((3,)).pad(((1, 1),))
    assert padded + View.create((5,)).shrink(((1, 4),)) == View.create((3,))


def test_invert() -> None:
    view = View.create((2, 3)).permute((1, 0))
    inverse = view.invert((2, 3))
    assert inverse == View.create((2, 3), (1, 2))
    assert View.create((4,)).pad(((1, 2),)).invert((4,)) == View.create((4,), (1,), 1)
    assert View.create((4,)).shrink(((1, 3),)).invert((4,)) is None
    assert View.create((4,)).stride((-1,)).invert((4,)) == View.create((4,), (-1,), 3)


def test_vars_and_unbind() -> None:
    n = Variable("n", 1, 10)
    view = View.create((n.bind(5), 3))
    assert view.vars() == {n}
    unbound, values = view.unbind()
    assert values == {n: 5} and all(v._val is None for v in unbound.vars())
    assert view.strides == (3, 1) and View.create((3, n)).strides == (n, 1)


@pytest.mark.parametrize("call, error", [
    (lambda v: v.reshape((7,)), ValueError),
    (lambda v: v.reshape((-1, 6)), ValueError),
    (lambda v: v.reshape((2.0, 3)), TypeError),
    (lambda v: v.pad(((0, 0), (-1, 0))), ValueError),
    (lambda v: v.pad(((0, 0),)), ValueError),
    (lambda v: v.pad(((0, 0), (1,))), TypeError),
    (lambda v: v.shrink(((0, 2), (2, 4))), ValueError),
    (lambda v: v.shrink(((1, 0), (0, 3))), ValueError),
    (lambda v: v.shrink(((-1, 1), (0, 3))), ValueError),
    (lambda v: v.shrink(((0, 2),)), ValueError),
    (lambda v: v.expand((4, 3)), ValueError),
    (lambda v: v.expand((2, 3, 1)), ValueError),
    (lambda v: v.permute((0, 0)), ValueError),
    (lambda v: v.permute((0,)), ValueError),
    (lambda v: v.stride((1, 0)), ValueError),
    (lambda v: v.stride((1,)), ValueError),
    (lambda v: v.stride((1, 1.5)), TypeError),
    (lambda v: v.permute((0, "1")), TypeError),
    (lambda v: v.expand((2, "3")), TypeError),
    (lambda v: View.create((2, "3")), TypeError),  # type: ignore[arg-type]
    (lambda v: View.create((2, -3)), ValueError),
    (lambda v: View.create((2, 3), (1,)), ValueError),
])
def test_validation_errors(call, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as info:
        call(View.create((2, 3)))
    assert str(info.value)
