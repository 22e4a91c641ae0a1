"""Tests for fast.shape.shapetracker: a numpy lockstep twin over random movement chains, view merging,
composition, inversion and index generation."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import NumNode, Variable, as_node
from fast.shape.view import View

SENTINEL = -1
Op = tuple[str, Any]


def _random_reshape(rng: random.Random, size: int) -> tuple[int, ...]:
    """A random shape with ``size`` elements, including size-1 axes (and zero-size axes when size is 0)."""
    if size == 0:
        zero_dims = [rng.randint(0, 4) for _ in range(rng.randint(1, 3))]
        zero_dims[rng.randrange(len(zero_dims))] = 0
        return tuple(zero_dims)
    factors, rest = [], size
    for prime in (2, 3, 5, 7):
        while rest % prime == 0:
            factors.append(prime)
            rest //= prime
    if rest > 1:
        factors.append(rest)
    rng.shuffle(factors)
    dims: list[int] = []
    for factor in factors:
        if dims and rng.random() < 0.4:
            dims[-1] *= factor
        else:
            dims.append(factor)
    for _ in range(rng.randint(0, 2)):
        dims.insert(rng.randint(0, len(dims)), 1)
    return tuple(dims)


def _random_op(rng: random.Random, shape: tuple[int, ...], kinds: tuple[str, ...]) -> Op:
    kind = rng.choice(kinds)
    big = math.prod(shape) > 300
    if kind == "reshape":
        return kind, _random_reshape(rng, math.prod(shape))
    if kind == "pad":
        return kind, tuple((0, 0) if big else (rng.randint(0, 2), rng.randint(0, 2)) for _ in shape)
    if kind == "shrink":
        ranges = []
        for size in shape:
            start = rng.randint(0, size)
            ranges.append((start, rng.randint(start, size)))
        return kind, tuple(ranges)
    if kind == "expand":
        return kind, tuple(rng.randint(0, 4) if size == 1 and not big else size for size in shape)
    if kind == "permute":
        order = list(range(len(shape)))
        rng.shuffle(order)
        return kind, tuple(order)
    if kind == "flip":
        return "stride", tuple(rng.choice((-1, 1)) for _ in shape)
    return kind, tuple(rng.choice((-3, -2, -1, 1, 2, 3)) for _ in shape)


def _apply_numpy(array: np.ndarray, op: Op) -> np.ndarray:
    kind, arg = op
    if kind == "reshape":
        return np.ascontiguousarray(array).reshape(arg)
    if kind == "pad":
        return np.pad(array, arg, constant_values=SENTINEL) if array.ndim else array
    if kind == "shrink":
        return array[tuple(slice(start, end) for start, end in arg)]
    if kind == "expand":
        return np.broadcast_to(array, arg)
    if kind == "permute":
        return np.transpose(array, arg)
    return array[tuple(slice(None, None, step) for step in arg)]


def _apply_tracker(tracker: ShapeTracker, op: Op) -> ShapeTracker:
    kind, arg = op
    result: ShapeTracker = getattr(tracker, kind)(arg)
    return result


def _chain(seed: int, shape: tuple[int, ...], length: int,
           kinds: tuple[str, ...] = ("reshape", "pad", "shrink", "expand", "permute", "stride")) -> list[Op]:
    rng = random.Random(seed)
    ops, array = [], np.zeros(shape)
    for _ in range(length):
        op = _random_op(rng, array.shape, kinds)
        ops.append(op)
        array = _apply_numpy(array, op)
    return ops


def _run(shape: tuple[int, ...], ops: list[Op]) -> tuple[ShapeTracker, np.ndarray]:
    tracker, array = ShapeTracker.from_shape(shape), np.arange(math.prod(shape)).reshape(shape)
    for op in ops:
        tracker, array = _apply_tracker(tracker, op), _apply_numpy(array, op)
        assert tracker.shape == array.shape
    return tracker, array


def _check_against(tracker: ShapeTracker, array: np.ndarray) -> None:
    """Every position: concrete and symbolic expr_idxs agree with the numpy twin; derived facts hold."""
    symbolic_index, symbolic_valid = tracker.expr_idxs()
    flat_index, flat_valid = tracker.expr_node()
    for flat, position in enumerate(itertools.product(*(range(size) for size in array.shape))):
        index, valid = tracker.expr_idxs([NumNode(p) for p in position])
        assert isinstance(index, NumNode) and isinstance(valid, NumNode)
        expected = int(array[position])
        assert (valid.b != 0) == (expected != SENTINEL), (tracker, position)
        env = {f"idx{axis}": p for axis, p in enumerate(position)}
        assert symbolic_valid.min <= symbolic_valid.evaluate(env) <= symbolic_valid.max
        assert symbolic_index.min <= symbolic_index.evaluate(env) <= symbolic_index.max
        assert (symbolic_valid.evaluate(env) != 0) == (expected != SENTINEL)
        assert (flat_valid.evaluate({"idx": flat}) != 0) == (expected != SENTINEL)
        if expected != SENTINEL:
            assert index.b == expected, (tracker, position)
            assert symbolic_index.evaluate(env) == expected
            assert flat_index.evaluate({"idx": flat}) == expected
    _check_real_strides_and_size(tracker, array)


def _check_real_strides_and_size(tracker: ShapeTracker, array: np.ndarray) -> None:
    valid_values = array[array != SENTINEL]
    real_size = tracker.real_size()
    if valid_values.size == 0:
        assert real_size == 0 or array.size > 0
    else:
        assert int(valid_values.max()) < real_size
        if len(tracker.views) == 1:
            assert real_size == int(valid_values.max()) + 1
    for axis, stride in enumerate(tracker.real_strides()):
        if stride is None or array.shape[axis] < 2:
            continue
        assert not tracker.axis_is_masked(axis)
        first = np.take(array, range(0, array.shape[axis] - 1), axis)
        second = np.take(array, range(1, array.shape[axis]), axis)
        both = (first != SENTINEL) & (second != SENTINEL)
        assert np.all((second - first)[both] == stride), (tracker, axis, stride)


SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)


@settings(max_examples=250, deadline=None)
@given(SHAPES, st.integers(0, 2**32), st.integers(1, 6))
def test_lockstep_twin(shape: tuple[int, ...], seed: int, length: int) -> None:
    tracker, array = _run(shape, _chain(seed, shape, length))
    _check_against(tracker, array)


@settings(max_examples=120, deadline=None)
@given(SHAPES, st.integers(0, 2**32), st.integers(1, 4), st.integers(1, 4))
def test_composition_matches_sequential_application(shape: tuple[int, ...], seed: int, first: int, second: int) -> None:
    first_ops = _chain(seed, shape, first)
    bottom, array = _run(shape, first_ops)
    second_ops = _chain(seed + 1, array.shape, second)
    top = ShapeTracker.from_shape(array.shape)
    for op in second_ops:
        top, array = _apply_tracker(top, op), _apply_numpy(array, op)
    _check_against(bottom + top, array)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple), st.integers(0, 2**32), st.integers(1, 5))
def test_invert_undoes_permute_flip_pad(shape: tuple[int, ...], seed: int, length: int) -> None:
    tracker, array = _run(shape, _chain(seed, shape, length, ("permute", "flip", "pad", "reshape")))
    inverse = tracker.invert(shape)
    if len(tracker.views) > 1 and inverse is None:
        return
    assert inverse is not None and inverse.shape == shape
    flat_result = np.ascontiguousarray(array).reshape(-1)
    for flat, position in enumerate(itertools.product(*(range(size) for size in shape))):
        index, valid = inverse.expr_idxs([NumNode(p) for p in position])
        assert valid == 1 and flat_result[index.evaluate({})] == flat


def test_invert_refuses_lossy_views() -> None:
    assert ShapeTracker.from_shape((4, 5)).shrink(((1, 3), (0, 5))).invert((4, 5)) is None
    assert ShapeTracker.from_shape((1, 5)).expand((3, 5)).invert((1, 5)) is None
    assert ShapeTracker.from_shape((6,)).stride((2,)).invert((6,)) is None


def test_reshape_after_permute_merges() -> None:
    tracker = ShapeTracker.from_shape((2, 3, 4)).permute((1, 0, 2)).reshape((3, 2, 2, 2))
    assert len(tracker.views) == 1
    assert ShapeTracker.from_shape((2, 3, 4)).permute((2, 0, 1)).reshape((4, 6)).views[0].strides == (1, 4)
    assert len(ShapeTracker.from_shape((2, 3, 4)).permute((1, 0, 2)).reshape((6, 4)).views) == 2


def test_reshape_after_pad_merges_when_possible() -> None:
    padded = ShapeTracker.from_shape((4, 6)).pad(((1, 1), (0, 0)))
    assert len(padded.reshape((6, 2, 3)).views) == 1
    assert len(padded.reshape((36,)).views) == 1
    assert len(padded.reshape((3, 12)).views) == 2  # rows 1..4 of 6 do not form a box in (3, 12)
    assert len(ShapeTracker.from_shape((2, 6)).pad(((2, 2), (0, 0))).reshape((3, 12)).views) == 1
    assert len(ShapeTracker.from_shape((4, 6)).pad(((0, 0), (1, 1))).reshape((32,)).views) == 2
    assert len(ShapeTracker.from_shape((4, 6)).pad(((0, 0), (1, 1))).reshape((4, 2, 4)).views) == 2
    assert len(ShapeTracker.from_shape((4, 6)).pad(((0, 0), (2, 2))).reshape((4, 2, 5)).views) == 2


def test_views_merge_back_into_one() -> None:
    tracker = ShapeTracker.from_shape((2, 3)).permute((1, 0)).reshape((6,))
    assert len(tracker.views) == 2
    assert len(tracker.reshape((3, 2)).views) == 1
    assert len(tracker.reshape((3, 2)).permute((1, 0)).reshape((6,)).views) == 1
    assert tracker.reshape((3, 2)).permute((1, 0)).reshape((6,)).contiguous


def test_contiguous_and_consecutive() -> None:
    base = ShapeTracker.from_shape((4, 5))
    assert base.contiguous and base.consecutive and base.size == 20
    shrunk = base.shrink(((1, 3), (0, 5)))
    assert not shrunk.contiguous and shrunk.consecutive and shrunk.real_size() == 15
    assert not base.permute((1, 0)).consecutive
    assert not base.pad(((1, 0), (0, 0))).consecutive
    assert ShapeTracker.from_shape((2, 0)).real_size() == 0
    assert base.pad(((0, 0), (0, 3))).shrink(((0, 4), (5, 8))).real_size() == 0


def test_real_strides_and_masks() -> None:
    base = ShapeTracker.from_shape((3, 4))
    assert base.real_strides() == (4, 1)
    padded = base.pad(((1, 0), (0, 0)))
    assert padded.real_strides() == (None, 1) and padded.real_strides(ignore_valid=True) == (4, 1)
    assert padded.axis_is_masked(0) and not padded.axis_is_masked(1)
    assert padded.unit_stride_axes() == [1]
    two_views = base.permute((1, 0)).reshape((12,))
    assert two_views.real_strides() == (None,)
    assert base.expand((3, 4)).permute((1, 0)).real_strides() == (1, 4)


def test_large_indices_are_python_ints() -> None:
    tracker = ShapeTracker.from_shape((2**20, 2**20, 4)).permute((2, 0, 1))
    index, _ = tracker.expr_idxs([NumNode(3), NumNode(2**20 - 1), NumNode(2**20 - 1)])
    assert index == 3 + (2**20 - 1) * 4 * 2**20 + (2**20 - 1) * 4
    assert tracker.real_size() == 2**42


def test_symbolic_shapes_unbind_and_indexing() -> None:
    n = Variable("n", 1, 8)
    tracker = ShapeTracker.from_shape((n.bind(3), 4))
    assert tracker.var_vals == {n: 3} and tracker.vars() == {n}
    unbound, values = tracker.unbind()
    assert values == {n: 3} and all(v._val is None for v in unbound.vars())
    assert tracker.reshape((n * 4,)).views[0].strides == (1,)
    assert len(tracker.permute((1, 0)).reshape((4, n)).views) == 1
    index, valid = tracker.permute((1, 0)).expr_idxs()
    assert index.evaluate({"idx0": 2, "idx1": 1, "n": 3}) == 6 and valid == 1
    shrunk = tracker.shrink(((0, n), (1, 3)))
    assert shrunk.shape == (n, 2)


def test_expr_idxs_argument_errors() -> None:
    with pytest.raises(ValueError):
        ShapeTracker.from_shape((2, 3)).expr_idxs([NumNode(0)])
    with pytest.raises(TypeError):
        ShapeTracker(())
    with pytest.raises(ValueError):
        ShapeTracker.from_shape((2, 3)).reshape((7,))


def test_trackers_are_hashable_values() -> None:
    first = ShapeTracker.from_shape((2, 3)).permute((1, 0))
    second = ShapeTracker.from_shape((2, 3)).permute((1, 0))
    assert first == second and hash(first) == hash(second)
    assert View.create((3, 2), (1, 3)) == first.views[0]


class _Twin:
    """numpy stand-in with the tracker's movement-op names, for symbolic scenarios."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __getattr__(self, kind: str) -> Any:
        return lambda arg: _Twin(_apply_numpy(self.array, (kind, arg)))


SYMBOLIC_SCENARIOS = [
    lambda x, n: x.reshape((n, 6)).permute((1, 0)),
    lambda x, n: x.reshape((n, 6)).permute((1, 0)).reshape((2, 3, n)),
    lambda x, n: x.reshape((n, 6)).pad(((1, 1), (0, 2))).reshape((n + 2, 2, 4)),
    lambda x, n: x.reshape((n, 6)).pad(((1, 2), (0, 0))).reshape(((n + 3) * 6,)),
    lambda x, n: x.reshape((n, 6)).permute((1, 0)).reshape((6 * n,)),
    lambda x, n: x.reshape((n, 6)).permute((1, 0)).reshape((6 * n,)).reshape((6, n)).permute((1, 0)),
    lambda x, n: x.reshape((n, 2, 3)).shrink(((0, n), (1, 2), (0, 3))).stride((1, 1, -1)),
    lambda x, n: x.reshape((n, 1, 6)).expand((n, 4, 6)).permute((2, 1, 0)),
    lambda x, n: x.reshape((n, 6)).stride((-1, 2)),
    lambda x, n: x.reshape((n, 3, 2)).permute((2, 0, 1)).reshape((2, n * 3)).shrink(((1, 2), (0, n * 3))),
]


@pytest.mark.parametrize("scenario", SYMBOLIC_SCENARIOS)
def test_symbolic_scenarios_match_numpy_for_every_binding(scenario: Any) -> None:
    n = Variable("n", 1, 5)
    tracker: ShapeTracker = scenario(ShapeTracker.from_shape((n * 6,)), n)
    index, valid = tracker.expr_idxs()
    for value in range(1, 6):
        array = scenario(_Twin(np.arange(value * 6)), value).array
        assert tuple(as_node(s).substitute({n: NumNode(value)}) for s in tracker.shape) == array.shape
        for position in itertools.product(*(range(size) for size in array.shape)):
            env = {"n": value, **{f"idx{axis}": p for axis, p in enumerate(position)}}
            expected = int(array[position])
            assert (valid.evaluate(env) != 0) == (expected != SENTINEL), (tracker, position, value)
            if expected != SENTINEL:
                assert index.evaluate(env) == expected, (tracker, position, value)
