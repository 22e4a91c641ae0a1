"""Tolerance graphs built on the expected side: exact where the docs say exact, bounded elsewhere."""
from __future__ import annotations

import math

import numpy as np

import reference
from conformance.driver import replay
from conformance.program import ArrayData, Cast, Elementwise, Fetch, Leaf, Program, Reduce, Shard


def _tolerances(*steps: object) -> list[np.ndarray | None]:
    outcome = replay(reference, Program(tuple(steps)), tolerances=True)  # type: ignore[arg-type]
    assert outcome.error is None and outcome.tolerance_failures == 0
    return [f.tolerance for f in outcome.fetched]


def test_elementwise_floats_without_transcendentals_are_exact() -> None:
    leaf = Leaf(ArrayData("float16", (3,), (1.0, math.nan, -2.0)), "CLANG")
    assert _tolerances(leaf, Elementwise("MUL", (0, 0)), Elementwise("SQRT", (1,)), Fetch(2)) == [None]


def test_transcendental_tolerance_is_relative_plus_absolute_eps() -> None:
    leaf = Leaf(ArrayData("float32", (3,), (0.0, 10.0, math.nan)), "CLANG")
    [tol] = _tolerances(leaf, Elementwise("EXP2", (0,)), Fetch(1))
    eps = 2.0 ** -23
    assert tol is not None and np.allclose(tol, [5 * eps, 4 * eps * 1024 + eps, eps])


def test_float_sum_tolerance_follows_the_reduction_size() -> None:
    leaf = Leaf(ArrayData("float32", (2, 3), (1.0, -2.0, 3.0, math.inf, 1.0, 1.0)), "CLANG")
    [tol] = _tolerances(leaf, Reduce(0, "SUM", (1,)), Fetch(1))
    eps = 2.0 ** -23
    assert tol is not None and np.allclose(tol.ravel(), [eps * 5 * 6, eps * 5 * 2])


def test_sharded_sum_tolerance_uses_the_whole_axis() -> None:
    leaf = Leaf(ArrayData("float64", (5, 1), (1.0, 2.0, 3.0, 4.0, -5.0)), "CLANG")
    [tol] = _tolerances(leaf, Shard(0, ("CLANG", "CLANG:1", "CLANG:2"), 0), Reduce(1, "SUM", (0,)), Fetch(2))
    assert tol is not None and np.allclose(tol, 2.0 ** -52 * 7 * 15)


def test_float_to_int_cast_marks_unspecified_elements() -> None:
    values = (1.5, -1.0, 255.9, 256.0, math.nan, -math.inf, -0.9)
    [tol] = _tolerances(Leaf(ArrayData("float32", (7,), values), "CLANG"), Cast(0, "uint8"), Fetch(1))
    assert tol is not None and np.isnan(tol).tolist() == [False, True, False, True, True, True, False]
    [tol] = _tolerances(Leaf(ArrayData("float64", (3,), (-2.0 ** 63, 2.0 ** 63, -1e300)), "CLANG"),
                        Cast(0, "int64"), Fetch(1))
    assert tol is not None and np.isnan(tol).tolist() == [False, True, True]


def test_bitcast_of_a_computed_nan_is_unspecified_but_of_data_exact() -> None:
    leaf = Leaf(ArrayData("float32", (2,), (math.nan, 1.0)), "CLANG")
    assert _tolerances(leaf, Cast(0, "int32", bitcast=True), Fetch(1)) == [None]
    [tol] = _tolerances(leaf, Elementwise("ADD", (0, 0)), Cast(1, "int32", bitcast=True), Fetch(2))
    assert tol is not None and np.isnan(tol).tolist() == [True, False]
