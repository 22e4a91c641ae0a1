"""The all-int fast paths and memos of movement ops agree with the general (symbolic-capable) paths.

`_memo_move` answers non-symbolic trackers with plain-int arguments; the general path is reached by
the private `_<op>` methods. Awkward cases: size-1 and zero-size axes, masks from pad, flips, stacked
views, bound Variables (never memoised by value), bools and lists (not memo keys), errors (not cached).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fast.dtype import dtypes
from fast.graph import from_numpy
from fast.graph.checks import check_expand, check_permute, check_reshape, check_shape
from fast.graph.multi import MultiLazyBuffer
from fast.graph.multi_checks import check_ints
from fast.shape import shapetracker as stmod
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import NumNode, Variable, all_int, is_sint, sint_prod

CASES: list[tuple[tuple[int, ...], list[tuple[str, Any]]]] = [
    ((4, 1, 3), [("expand", (4, 5, 3)), ("permute", (2, 0, 1)), ("reshape", (3, 20))]),
    ((4, 3), [("pad", ((1, 2), (0, 1))), ("reshape", (7, 4)), ("shrink", ((1, 6), (0, 4)))]),
    ((6, 4), [("stride", (-1, 2)), ("reshape", (12,)), ("pad", ((3, 0),)), ("reshape", (3, 5))]),
    ((0, 3), [("reshape", (3, 0)), ("expand", (3, 0)), ("permute", (1, 0))]),
    ((1, 1), [("reshape", (1,)), ("pad", ((0, 0),)), ("reshape", (1, 1, 1))]),
    ((2, 3, 4), [("permute", (2, 1, 0)), ("reshape", (24,)), ("shrink", ((5, 17),)), ("reshape", (3, 4))]),
    ((3, 4), [("shrink", ((1, 1), (0, 4))), ("reshape", (0, 2, 2))]),
]


@pytest.mark.parametrize(("shape", "ops"), CASES)
def test_memoised_moves_equal_general_path(shape: tuple[int, ...], ops: list[tuple[str, Any]]) -> None:
    memo, general = ShapeTracker.from_shape(shape), ShapeTracker.from_shape(shape)
    for name, arg in ops:
        before, memo = memo, getattr(memo, name)(arg)
        general = getattr(general, "_" + name)(arg)
        assert memo == general and memo.views == general.views
        assert getattr(before, name)(arg) is memo  # answered from the memo


def test_non_tuple_and_bool_arguments_skip_the_memo() -> None:
    tracker = ShapeTracker.from_shape((2, 3))
    assert not stmod._concrete([3, 2]) and not stmod._concrete((True, 2)) and not stmod._concrete(((0, 1), [0, 1]))
    assert stmod._concrete(()) and stmod._concrete((3, 2)) and stmod._concrete(((0, 1), (1, 2)))
    assert tracker.reshape([3, 2]) == tracker.reshape((3, 2))


def test_errors_are_raised_every_time() -> None:
    tracker = ShapeTracker.from_shape((2, 3))
    for _ in range(2):
        with pytest.raises(ValueError):
            tracker.reshape((4, 2))
        with pytest.raises(ValueError):
            tracker.expand((4, 3))


def test_bound_variables_are_not_memoised_by_value() -> None:
    """Two bindings of one Variable compare equal; each tracker must keep its own binding."""
    n = Variable("n", 1, 10)
    first, second = ShapeTracker.from_shape((n.bind(3), 4)), ShapeTracker.from_shape((n.bind(5), 4))
    moved_first, moved_second = first.permute((1, 0)), second.permute((1, 0))
    assert moved_first.var_vals == {n: 3} and moved_second.var_vals == {n: 5}
    assert first.pad(((0, 0), (1, 1))).var_vals == {n: 3} and second.pad(((0, 0), (1, 1))).var_vals == {n: 5}
    assert check_reshape((n.bind(3), 4), (4, n.bind(3)))[1].val == 3  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        check_reshape((n.bind(3), 4), (4, 5))


def test_symbolic_helpers_fast_paths() -> None:
    n = Variable("n", 1, 10)
    assert all_int((1, 2, 0)) and all_int(()) and not all_int((1, True)) and not all_int((1, NumNode(2)))
    assert is_sint(3) and is_sint(n) and not is_sint(True) and not is_sint(2.0)
    assert sint_prod((2, 3)) == 6 and type(sint_prod((2, 3))) is int and sint_prod(()) == 1
    assert sint_prod((n, 2)) == n * 2 and sint_prod((NumNode(2), 3)) == 6


def test_lazy_checks_fast_paths_keep_errors() -> None:
    assert check_shape("x", (2, 0, 1)) == (2, 0, 1) and check_shape("x", [2, 1]) == (2, 1)
    with pytest.raises(ValueError):
        check_shape("x", (2, -1))
    with pytest.raises(TypeError):
        check_shape("x", (2, True))
    with pytest.raises(ValueError):
        check_reshape((2, 3), (5,))
    with pytest.raises(ValueError):
        check_expand((2, 3), (2, 4))
    assert check_expand((2, 1), (2, 4)) == (2, 4) and check_permute((2, 3), (1, 0)) == (1, 0)
    with pytest.raises(ValueError):
        check_permute((2, 3), (1, 1))
    with pytest.raises(ValueError):
        check_permute((2, 3), (True, 0))


def test_lazy_moves_match_numpy_with_masks_and_flips() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    lb = from_numpy(data, "CLANG")
    moved = lb.pad(((1, 0), (0, 2))).stride((-1, 1)).reshape((4, 2, 3)).permute((2, 0, 1))
    expected = np.pad(data, ((1, 0), (0, 2)))[::-1].reshape(4, 2, 3).transpose(2, 0, 1)
    assert moved.shape == expected.shape
    assert lb.pad(((0, 0), (0, 0))) is lb and lb.stride((1, 1)) is lb and lb.permute((0, 1)) is lb


def test_multi_layout_and_ints() -> None:
    lb = from_numpy(np.arange(24, dtype=np.float32).reshape(6, 4), "CLANG")
    multi = MultiLazyBuffer.from_sharded(lb, ("CLANG", "CLANG:1"), 0)
    assert multi.shape == (6, 4) and multi.device == ("CLANG", "CLANG:1") and multi._sizes() == [3, 3]
    shrunk = multi.shrink(((3, 6), (0, 4)))
    assert shrunk.shape == (3, 4) and shrunk.real == [False, True] and shrunk.real_lbs == [multi.lbs[1]]
    assert check_ints("r", "axes", [np.int64(1), 0]) == (1, 0)
    with pytest.raises(ValueError):
        check_ints("r", "axes", (True,))
    assert MultiLazyBuffer([multi.lbs[0], lb], 0, [True, False]).shape == (3, 4)  # shards differ on axis 0 only
    other = from_numpy(np.zeros((3, 5), dtype=np.float32), "CLANG")
    with pytest.raises(ValueError, match="differ"):
        MultiLazyBuffer([multi.lbs[0], other], 0)
    with pytest.raises(ValueError, match="differ"):
        MultiLazyBuffer([multi.lbs[0], lb], None)
    with pytest.raises(ValueError, match="dtypes"):
        MultiLazyBuffer([multi.lbs[0], other.cast(dtypes.int32)], 0)
