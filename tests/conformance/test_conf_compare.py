"""The comparison rules of docs/semantics.md "What conformance compares", one case each."""
from __future__ import annotations

import math

import numpy as np

from conformance.compare import bad_elements, compare
from conformance.driver import Fetched, Outcome, Raised
from conformance.program import ArrayData, Fetch, Leaf, Program

NAN, INF = math.nan, math.inf


def test_floats_equal_bit_for_bit_except_nan_and_signed_zero() -> None:
    expected = np.array([1.0, NAN, -0.0, INF, 2.0], np.float32)
    actual = np.array([1.0, NAN, 0.0, INF, np.nextafter(np.float32(2.0), np.float32(3.0))], np.float32)
    assert bad_elements(expected, actual, None, "float32").tolist() == [False, False, False, False, True]


def test_nan_against_a_number_differs_even_with_a_tolerance() -> None:
    bad = bad_elements(np.array([NAN, 1.0]), np.array([1.0, NAN]), np.array([0.5, 0.5]), "float64")
    assert bad.tolist() == [True, True]


def test_tolerance_bounds_the_absolute_difference() -> None:
    bad = bad_elements(np.array([1.0, 1.0]), np.array([1.25, 1.5]), np.array([0.25, 0.25]), "float64")
    assert bad.tolist() == [False, True]


def test_nan_or_infinite_tolerance_skips_the_element() -> None:
    bad = bad_elements(np.array([1.0, 1.0]), np.array([NAN, 7.0]), np.array([NAN, INF]), "float64")
    assert bad.tolist() == [False, False]


def test_overflow_to_inf_near_the_largest_value_is_accepted_only_with_a_tolerance() -> None:
    big = np.float32(3.4e38)
    expected, actual = np.array([big, big], np.float32), np.array([INF, INF], np.float32)
    assert bad_elements(expected, actual, np.array([1e37, 0.0]), "float32").tolist() == [False, True]


def test_integers_exact_and_unspecified_elements_skipped() -> None:
    expected, actual = np.array([1, 2, 3], np.int8), np.array([1, 5, 6], np.int8)
    assert bad_elements(expected, actual, None, "int8").tolist() == [False, True, True]
    assert bad_elements(expected, actual, np.array([0.0, NAN, 0.0]), "int8").tolist() == [False, False, True]


def _outcome(array: np.ndarray, error: Raised | None = None, dtype: str = "float32") -> Outcome:
    out = Outcome(shapes={0: (array.shape, dtype, "CLANG")})
    out.fetched.append(Fetched(1, 0, dtype, array.shape, array))
    out.error = error
    return out


PROGRAM = Program((Leaf(ArrayData("float32", (2,), (1.0, 2.0)), "CLANG"), Fetch(0)))


def test_compare_reports_values_shapes_and_errors() -> None:
    same = _outcome(np.array([1.0, 2.0], np.float32))
    assert compare(PROGRAM, same, same) == []
    other = _outcome(np.array([1.0, 3.0], np.float32))
    [value] = compare(PROGRAM, same, other)
    assert value.signature == "value:Leaf:float32" and "expected 2.0, got 3.0" in value.detail
    wrong_shape = _outcome(np.array([1.0], np.float32))
    assert {m.signature.split(":")[0] for m in compare(PROGRAM, same, wrong_shape)} == {"meta"}
    raised = _outcome(np.array([1.0, 2.0], np.float32), Raised(1, "RuntimeError", "boom"))
    assert [m.signature for m in compare(PROGRAM, same, raised)] == ["error:ok->RuntimeError:Fetch"]


def test_compare_checks_the_expected_side_against_the_program() -> None:
    invalid = Program(PROGRAM.steps, expect="ValueError")
    ok = _outcome(np.array([1.0, 2.0], np.float32))
    assert [m.signature for m in compare(invalid, ok, ok)] == ["expect:ValueError:Fetch"]
    raised = _outcome(np.array([1.0, 2.0], np.float32), Raised(1, "ValueError", "bad"))
    assert compare(invalid, raised, raised) == []
