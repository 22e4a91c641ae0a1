"""Element-wise functions of the Array API front end against numpy (>= 2) on the same inputs, over fast
(CLANG, LLVM) and reference. Shapes are fixed per test (a new shape would compile a new kernel) and
hypothesis draws the values; tolerances follow docs/api.md's accuracy notes (fast/xp/_math.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.xp.conftest import to_np

SETTINGS = settings(max_examples=6, deadline=None, derandomize=True)
SHAPE = (3, 4)

# name -> (low, high, rtol) on float32; rtol 0 means bit-exact (NaN equal to NaN)
UNARY_FLOAT = {
    "abs": (-50, 50, 0), "negative": (-50, 50, 0), "positive": (-50, 50, 0), "square": (-50, 50, 0),
    "floor": (-50, 50, 0), "ceil": (-50, 50, 0), "trunc": (-50, 50, 0), "round": (-50, 50, 0),
    "sign": (-5, 5, 0), "sqrt": (0, 100, 0), "isnan": (-5, 5, 0), "isinf": (-5, 5, 0), "isfinite": (-5, 5, 0),
    "signbit": (-5, 5, 0), "exp": (-10, 10, 2e-6), "expm1": (-5, 5, 2e-6), "log": (1e-3, 1e3, 2e-6),
    "log1p": (-0.9, 100, 2e-6), "log2": (1e-3, 1e3, 2e-6), "log10": (1e-3, 1e3, 2e-6),
    "sin": (-10, 10, 2e-6), "cos": (-10, 10, 2e-6), "tan": (-1.4, 1.4, 4e-6), "asin": (-0.99, 0.99, 2e-6),
    "acos": (-0.99, 0.99, 2e-6), "atan": (-50, 50, 2e-6), "sinh": (-8, 8, 2e-6), "cosh": (-8, 8, 2e-6),
    "tanh": (-8, 8, 2e-6), "asinh": (-1e4, 1e4, 2e-6), "acosh": (1, 1e4, 2e-6), "atanh": (-0.99, 0.99, 2e-6),
}
NP_NAMES = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh", "acosh": "arccosh",
            "atanh": "arctanh", "atan2": "arctan2", "pow": "power", "bitwise_invert": "invert",
            "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift"}


def np_fn(name: str):
    return getattr(np, NP_NAMES.get(name, name))


def check(out, expected, rtol: float, atol: float | None = None) -> None:
    got = to_np(out)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    if rtol == 0:
        np.testing.assert_array_equal(got, expected)
    else:
        finfo = np.finfo(expected.dtype) if expected.dtype.kind == "f" else None
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol if atol is not None else
                                   (float(finfo.eps) * 8 if finfo is not None else 0))


def floats(low: float, high: float, dtype=np.float32, shape=SHAPE):
    width = 8 * np.dtype(dtype).itemsize
    kind = np.dtype(dtype).type
    return hnp.arrays(dtype, shape, elements=st.floats(float(kind(low)), float(kind(high)), width=width))


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
@SETTINGS
@given(data=st.data())
def test_unary_float32(ns, name, data):
    low, high, rtol = UNARY_FLOAT[name]
    x = data.draw(floats(low, high))
    with np.errstate(all="ignore"):
        expected = np_fn(name)(x)
    check(getattr(ns.xp, name)(ns.asarray(x)), expected, rtol)


@pytest.mark.parametrize("name", ["exp", "log", "sin", "tanh", "atan", "floor", "round", "sqrt", "expm1", "log1p"])
@SETTINGS
@given(data=st.data())
def test_unary_float64(ns, name, data):
    low, high, rtol = UNARY_FLOAT[name]
    x = data.draw(floats(low, high, np.float64))
    check(getattr(ns.xp, name)(ns.asarray(x)), np_fn(name)(x), rtol * 1e-8 if rtol else 0, atol=1e-14)


@pytest.mark.parametrize("name", ["expm1", "log1p", "sinh", "tanh", "asinh", "atanh", "sin", "atan", "asin"])
def test_relative_accuracy_near_zero(ns, name):
    x = np.array([1e-30, -1e-20, 3e-12, -2e-8, 1e-5, -4e-4], np.float32)
    check(getattr(ns.xp, name)(ns.asarray(x)), np_fn(name)(x), 4e-6, atol=0)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.5, -2.5, 0.5, -0.5, 1e30], np.float32)


@pytest.mark.parametrize("name", ["abs", "floor", "ceil", "trunc", "round", "sign", "isnan", "isinf", "isfinite",
                                  "exp", "expm1", "log", "log1p", "sqrt", "tanh", "atan", "sinh", "cosh", "asinh"])
def test_special_values(ns, name):
    with np.errstate(all="ignore"):
        expected = np_fn(name)(SPECIALS)
    rtol = UNARY_FLOAT[name][2]
    check(getattr(ns.xp, name)(ns.asarray(SPECIALS)), expected, rtol)


BINARY_FLOAT = {
    "add": (-50, 50, 0), "subtract": (-50, 50, 0), "multiply": (-50, 50, 0), "divide": (-50, 50, 0),
    "maximum": (-50, 50, 0), "minimum": (-50, 50, 0), "equal": (-3, 3, 0), "not_equal": (-3, 3, 0),
    "less": (-3, 3, 0), "less_equal": (-3, 3, 0), "greater": (-3, 3, 0), "greater_equal": (-3, 3, 0),
    "atan2": (-50, 50, 4e-6), "hypot": (-50, 50, 2e-6), "logaddexp": (-20, 20, 2e-6), "copysign": (-5, 5, 0),
    "pow": (0.1, 4, 4e-6), "floor_divide": (-50, 50, 0), "remainder": (-50, 50, 4e-6),
}


@pytest.mark.parametrize("name", sorted(BINARY_FLOAT))
@SETTINGS
@given(data=st.data())
def test_binary_float32_broadcasting(ns, name, data):
    low, high, rtol = BINARY_FLOAT[name]
    a, b = data.draw(floats(low, high, shape=(3, 1, 4))), data.draw(floats(low, high, shape=(2, 1)))
    if name in ("floor_divide", "remainder"):
        a, b = np.round(a), np.where(np.round(b) == 0, 3.0, np.round(b)).astype(np.float32)
    with np.errstate(all="ignore"):
        expected = np_fn(name)(a, b)
    check(getattr(ns.xp, name)(ns.asarray(a), ns.asarray(b)), expected, rtol, atol=1e-5 if rtol else None)


def test_float_edges(ns):
    a = ns.asarray(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], np.float32))
    b = ns.asarray(np.array([-0.0, 0.0, np.inf, np.inf, 1.0, np.nan, -np.inf], np.float32))
    host_a, host_b = to_np(a), to_np(b)
    for name in ("atan2", "maximum", "minimum", "hypot", "logaddexp", "copysign", "divide", "equal", "less"):
        with np.errstate(all="ignore"):
            expected = np_fn(name)(host_a, host_b)
        got = to_np(getattr(ns.xp, name)(a, b))
        np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=name)
    for base, exponent in ((-2.0, 3.0), (-2.0, 2.0), (-2.0, 0.5), (0.0, -1.0), (5.0, 0.0), (1.0, np.nan)):
        got = float(ns.xp.pow(ns.asarray(np.float32(base)), ns.asarray(np.float32(exponent))))
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(got, np.power(np.float32(base), np.float32(exponent)), rtol=1e-6)


INT_BINARY = ["add", "subtract", "multiply", "floor_divide", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor",
              "maximum", "minimum", "equal", "less", "greater_equal", "bitwise_left_shift", "bitwise_right_shift",
              "pow"]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint32])
@pytest.mark.parametrize("name", INT_BINARY)
@settings(max_examples=4, deadline=None, derandomize=True)
@given(data=st.data())
def test_integer_binary(ns, name, dtype, data):
    a = data.draw(hnp.arrays(dtype, (2, 5)))
    if name in ("bitwise_left_shift", "bitwise_right_shift"):
        b = data.draw(hnp.arrays(dtype, (5,), elements=st.integers(0, 8 * np.dtype(dtype).itemsize - 1)))
    elif name == "pow":
        b = data.draw(hnp.arrays(dtype, (5,), elements=st.integers(0, 9)))
    else:
        b = data.draw(hnp.arrays(dtype, (5,)))
    with np.errstate(all="ignore"):
        expected = np_fn(name)(a, b)
    check(getattr(ns.xp, name)(ns.asarray(a), ns.asarray(b)), expected, 0)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64])
def test_integer_unary_and_edges(ns, dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -1 if info.min else 0, 0, 1, 7, info.max], dtype)
    for name in ("abs", "negative", "sign", "bitwise_invert", "square", "floor", "round", "positive"):
        with np.errstate(all="ignore"):
            check(getattr(ns.xp, name)(ns.asarray(x)), np_fn(name)(x), 0)
    divisor = np.array([-1 if info.min else 1, 0, 3, -2 if info.min else 2, 0, 1, 5], dtype)
    for name in ("floor_divide", "remainder"):
        with np.errstate(all="ignore"):
            check(getattr(ns.xp, name)(ns.asarray(x), ns.asarray(divisor)), np_fn(name)(x, divisor), 0)
    shifts = np.array([0, 1, 3, 7, 2, 5, 6], dtype)
    for name in ("bitwise_left_shift", "bitwise_right_shift"):
        check(getattr(ns.xp, name)(ns.asarray(x), ns.asarray(shifts)), np_fn(name)(x, shifts), 0)


def test_bool_logic(ns):
    a = np.array([[True, False, True, False]])
    b = np.array([[True], [False]])
    for name in ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "equal",
                 "not_equal"):
        check(getattr(ns.xp, name)(ns.asarray(a), ns.asarray(b)), np_fn(name)(a, b), 0)
    check(ns.xp.logical_not(ns.asarray(a)), np.logical_not(a), 0)
    check(ns.xp.bitwise_invert(ns.asarray(a)), ~a, 0)


def test_clip(ns):
    x = np.array([-3.0, -1.0, 0.5, 2.0, np.nan], np.float32)
    check(ns.xp.clip(ns.asarray(x), min=-1.5, max=1.0), np.clip(x, -1.5, 1.0), 0)
    check(ns.xp.clip(ns.asarray(x), max=0.0), np.clip(x, None, 0.0), 0)
    i = np.arange(-5, 5, dtype=np.int16)
    check(ns.xp.clip(ns.asarray(i), min=ns.asarray(np.int16(-2)), max=3), np.clip(i, -2, 3), 0)


def test_operators_reflected_and_inplace(ns):
    a, b = np.arange(1, 7, dtype=np.float32).reshape(2, 3), np.array([2.0, -1.0, 0.5], np.float32)
    x, y = ns.asarray(a), ns.asarray(b)
    pairs = [(x + y, a + b), (2 - x, 2 - a), (x * 3, a * 3), (1 / x, 1 / a), (x / y, a / b), (x // 2, a // 2),
             (7.0 % x, 7.0 % a), (x ** 2, a ** 2), (2 ** y, 2 ** b), (-x, -a), (+x, +a), (abs(-x), a),
             (x @ ns.asarray(a.T), a @ a.T), (x < y, a < b), (x >= 3, a >= 3), (x == y, a == b), (x != 2, a != 2)]
    for got, expected in pairs:
        np.testing.assert_allclose(to_np(got), expected, rtol=4e-6)
    i = ns.asarray(np.array([5, 6, 12], np.int32))
    for got, expected in ((i & 6, [4, 6, 4]), (3 | i, [7, 7, 15]), (i ^ 1, [4, 7, 13]), (~i, [-6, -7, -13]),
                          (i << 2, [20, 24, 48]), (i >> 1, [2, 3, 6]), (1 << i, [32, 64, 4096])):
        np.testing.assert_array_equal(to_np(got), expected)
    z = ns.asarray(a)
    alias = z
    z += 1
    z *= y
    z -= 0.5
    z /= 2
    assert z is alias
    np.testing.assert_allclose(to_np(z), ((a + 1) * b - 0.5) / 2, rtol=1e-6)
    with pytest.raises(TypeError, match="in-place"):
        ints = ns.asarray(np.array([1, 2], np.int32))
        ints /= 2
    with pytest.raises(TypeError, match="in-place"):
        small = ns.asarray(np.array([1.0], np.float32))
        small += ns.asarray(np.ones((2, 1), np.float32))


def test_type_errors_name_the_function(ns):
    x = ns.asarray(np.array([1, 2], np.int32))
    with pytest.raises(TypeError, match="exp"):
        ns.xp.exp(x)
    with pytest.raises(TypeError, match="subtract"):
        ns.asarray([True]) - ns.asarray([False])
    with pytest.raises(TypeError, match="float cannot join"):
        x + 1.5
    with pytest.raises(TypeError, match="no promotion"):
        x + ns.asarray(np.array([1.0], np.float32))
    with pytest.raises(OverflowError, match="out of range"):
        ns.asarray(np.array([1], np.int8)) + 300
    with pytest.raises(ValueError, match="broadcast"):
        x + ns.asarray(np.ones(3, np.int32))


def test_half_precision_rounds_each_op(ns):
    x = np.array([1.0, 2.5, -3.25, 1000.0], np.float16)
    with np.errstate(over="ignore"):  # 1000**2 overflows float16 to inf, in both
        expected = x * x
    check(ns.xp.multiply(ns.asarray(x), ns.asarray(x)), expected, 0)
    check(ns.xp.exp(ns.asarray(np.array([0.5, 1.0], np.float16))), np.exp(np.array([0.5, 1.0], np.float16)), 1e-3)
    bf = ns.xp.astype(ns.asarray(np.array([1.0, 3.0], np.float32)), ns.xp.bfloat16)
    assert bf.dtype == ns.xp.bfloat16 and math.isclose(float(ns.xp.sum(bf / 3)), 4 / 3, rel_tol=1e-2)
