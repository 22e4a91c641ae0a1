"""Elementwise ops for every dtype class, edges included, against Python/numpy oracles (docs/semantics.md)."""
from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ref_util import DEV, FLOATS, INTS, bits, buf, dt, edges, op, run, same_float, to_bits, wrap


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _trunc_mod(a: int, b: int) -> int:
    return a if b == 0 else a - _trunc_div(a, b) * b


INT_ORACLE: dict[str, Any] = {
    "ADD": lambda a, b: a + b, "SUB": lambda a, b: a - b, "MUL": lambda a, b: a * b,
    "DIV": _trunc_div, "MOD": _trunc_mod, "MAX": max, "XOR": lambda a, b: a ^ b,
}


@pytest.mark.parametrize("name", INTS)
@pytest.mark.parametrize("opname", list(INT_ORACLE))
def test_int_binary_edges(impl, name, opname):
    pairs = list(itertools.product(edges(name), repeat=2))
    a, b = (buf(impl, [p[i] for p in pairs], name) for i in (0, 1))
    got = run(impl, opname, a, b)
    want = [wrap(INT_ORACLE[opname](x, y), name) for x, y in pairs]
    assert got.dtype == np.dtype(name) and got.tolist() == want


@pytest.mark.parametrize("name", INTS)
def test_int_compares_and_unary(impl, name):
    pairs = list(itertools.product(edges(name), repeat=2))
    a, b = (buf(impl, [p[i] for p in pairs], name) for i in (0, 1))
    assert run(impl, "CMPLT", a, b).tolist() == [x < y for x, y in pairs]
    assert run(impl, "CMPEQ", a, b).tolist() == [x == y for x, y in pairs]
    assert run(impl, "CMPLT", a, b).dtype == np.bool_
    assert run(impl, "NEG", a).tolist() == [wrap(-x, name) for x, _ in pairs]
    c = buf(impl, [p[1] for p in reversed(pairs)], name)
    assert run(impl, "MULACC", a, b, c).tolist() == [wrap(x * y + z, name) for (x, y), (_, z) in
                                                      zip(pairs, reversed(pairs), strict=True)]


@pytest.mark.parametrize("name", ["int8", "int16", "int32", "int64"])
def test_int_div_mod_documented_edges(impl, name):
    lo, hi = int(np.iinfo(name).min), int(np.iinfo(name).max)
    a = buf(impl, [7, -7, 7, -7, lo, lo, 5, lo, hi], name)
    b = buf(impl, [2, 2, -2, -2, -1, 0, 0, 1, -1], name)
    assert run(impl, "DIV", a, b).tolist() == [3, -3, -3, 3, lo, 0, 0, lo, -hi]
    assert run(impl, "MOD", a, b).tolist() == [1, -1, 1, -1, 0, lo, 5, 0, 0]


@pytest.mark.parametrize("name", INTS)
def test_int_div_mod_identity(impl, name):
    pairs = list(itertools.product(edges(name), repeat=2))
    a, b = (buf(impl, [p[i] for p in pairs], name) for i in (0, 1))
    q = a.e(op(impl, "DIV"), b)
    back = q.e(op(impl, "MUL"), b).e(op(impl, "ADD"), a.e(op(impl, "MOD"), b))
    assert impl.to_numpy(back).tolist() == [x for x, _ in pairs]


def test_uint_neg_and_wrap(impl):
    a = buf(impl, [0, 1, 200], "uint8")
    assert run(impl, "NEG", a).tolist() == [0, 255, 56]
    assert run(impl, "ADD", a, a).tolist() == [0, 2, 144]
    assert run(impl, "SUB", buf(impl, [0], "uint64"), buf(impl, [1], "uint64")).tolist() == [2**64 - 1]


def test_int64_mul_and_div_above_2_53(impl):
    a = buf(impl, [2**62 + 3, 2**53 + 1, -(2**63)], "int64")
    b = buf(impl, [3, 1, 3], "int64")
    assert run(impl, "DIV", a, b).tolist() == [(2**62 + 3) // 3, 2**53 + 1, -((2**63) // 3)]
    assert run(impl, "MUL", a, a).tolist() == [wrap(x * x, "int64") for x in [2**62 + 3, 2**53 + 1, -(2**63)]]


BOOL_PAIRS = list(itertools.product([False, True], repeat=2))
BOOL_ORACLE = {
    "ADD": lambda a, b: a or b, "MUL": lambda a, b: a and b, "MAX": lambda a, b: a or b,
    "MOD": lambda a, b: a and not b, "XOR": lambda a, b: a != b, "CMPLT": lambda a, b: (not a) and b,
    "CMPEQ": lambda a, b: a == b,
}


@pytest.mark.parametrize("opname", list(BOOL_ORACLE))
def test_bool_binary(impl, opname):
    a, b = (buf(impl, [p[i] for p in BOOL_PAIRS], "bool") for i in (0, 1))
    got = run(impl, opname, a, b)
    assert got.dtype == np.bool_ and got.tolist() == [BOOL_ORACLE[opname](x, y) for x, y in BOOL_PAIRS]


def test_bool_mulacc_and_where(impl):
    trip = list(itertools.product([False, True], repeat=3))
    a, b, c = (buf(impl, [t[i] for t in trip], "bool") for i in range(3))
    assert run(impl, "MULACC", a, b, c).tolist() == [(x and y) or z for x, y, z in trip]
    assert run(impl, "WHERE", a, b, c).tolist() == [y if x else z for x, y, z in trip]


SPECIALS = [0.0, -0.0, 1.0, -1.5, 3.25, math.inf, -math.inf, math.nan, 1e-3, 65504.0]


@pytest.mark.parametrize("name", ["float32", "float64"])
@pytest.mark.parametrize("opname", ["ADD", "SUB", "MUL", "DIV"])
def test_float_ieee(impl, name, opname):
    pairs = list(itertools.product(SPECIALS, repeat=2))
    xa, xb = (np.array([p[i] for p in pairs], dtype=name) for i in (0, 1))
    want = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide}[opname]
    with np.errstate(all="ignore"):
        expected = want(xa, xb)
    got = run(impl, opname, buf(impl, xa, name), buf(impl, xb, name))
    assert got.dtype == np.dtype(name) and same_float(got, expected)
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(expected[~np.isnan(expected)]))


@pytest.mark.parametrize("name", FLOATS)
def test_float_max_and_compares_with_nan(impl, name):
    pairs = list(itertools.product([0.0, 1.0, -2.0, math.inf, -math.inf, math.nan], repeat=2))
    a, b = (buf(impl, [p[i] for p in pairs], name) for i in (0, 1))
    mx = run(impl, "MAX", a, b)
    assert same_float(mx, [math.nan if math.isnan(x) or math.isnan(y) else max(x, y) for x, y in pairs])
    assert run(impl, "CMPLT", a, b).tolist() == [x < y for x, y in pairs]  # NaN compares are False
    assert run(impl, "CMPEQ", a, b).tolist() == [x == y for x, y in pairs]


@pytest.mark.parametrize("name", FLOATS)
def test_float_neg_and_zero_division(impl, name):
    a = buf(impl, [0.0, -0.0, 1.0, math.inf, math.nan], name)
    neg = run(impl, "NEG", a)
    assert same_float(neg, [-0.0, 0.0, -1.0, -math.inf, math.nan]) and np.signbit(neg[:2]).tolist() == [True, False]
    z = buf(impl, [0.0] * 5, name)
    assert same_float(run(impl, "DIV", a, z), [math.nan, math.nan, math.inf, math.inf, math.nan])


@pytest.mark.parametrize("name", FLOATS)
def test_transcendental_edges(impl, name):
    a = buf(impl, [0.0, -1.0, math.inf, -math.inf, 1.0, 4.0], name)
    assert same_float(run(impl, "LOG2", a), [-math.inf, math.nan, math.inf, math.nan, 0.0, 2.0])
    assert same_float(run(impl, "SQRT", a), [0.0, math.nan, math.inf, math.nan, 1.0, 2.0])
    assert same_float(run(impl, "SIN", a)[[2, 3]], [math.nan, math.nan])
    big = 2000.0 if name == "float64" else 200.0
    assert same_float(run(impl, "EXP2", buf(impl, [big, -math.inf, 0.0, 3.0], name)), [math.inf, 0.0, 1.0, 8.0])


@pytest.mark.parametrize("name", FLOATS)
def test_transcendentals_within_tolerance(impl, name):
    x = np.linspace(0.05, 7.5, 97)
    xin = impl.to_numpy(buf(impl, x, name)).astype(np.float64)  # the dtype's values
    eps = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}[name]
    for opname, fn in [("EXP2", np.exp2), ("LOG2", np.log2), ("SIN", np.sin), ("SQRT", np.sqrt)]:
        got = run(impl, opname, buf(impl, x, name)).astype(np.float64)
        np.testing.assert_allclose(got, fn(xin), rtol=4 * eps, atol=eps, err_msg=opname)


@pytest.mark.parametrize("name,tiny", [("float16", 2.0**-11), ("bfloat16", 2.0**-8)])
def test_half_rounds_every_op(impl, name, tiny):
    one, t = buf(impl, [1.0], name), buf(impl, [tiny], name)
    s = one.e(op(impl, "ADD"), t)  # 1 + half an ulp: a tie, rounds to even (1.0)
    assert impl.to_numpy(s).tolist() == [1.0]
    assert impl.to_numpy(s.e(op(impl, "SUB"), one)).tolist() == [0.0]  # not kept in float32 between ops
    three = buf(impl, [1.0 + 3 * tiny], name)  # 1 + 3 * (ulp / 2): a tie between odd and even -> up
    assert impl.to_numpy(buf(impl, [1.0 + 2 * tiny], name)).tolist() == [1.0 + 2 * tiny]
    assert impl.to_numpy(three).tolist() == [1.0 + 4 * tiny]


@pytest.mark.parametrize("name,a,c", [
    ("float32", 1 + 2.0**-12, -(1 + 2.0**-11)), ("float64", 1 + 2.0**-27, -(1 + 2.0**-26)),
    ("float16", 1 + 2.0**-6, -(1 + 2.0**-5)), ("bfloat16", 1 + 2.0**-4, -(1 + 2.0**-3)),
])
def test_mulacc_two_roundings(impl, name, a, c):
    x, z = buf(impl, [a], name), buf(impl, [c], name)
    assert impl.to_numpy(x.e(op(impl, "MULACC"), x, z)).tolist() == [0.0]  # fused would give a tiny non-zero


@pytest.mark.parametrize("name", ["bool", *INTS, *FLOATS])
def test_where_selects_exactly(impl, name):
    vals = [1, 0, 1, 1] if name == "bool" else [1, 2, 3, 100]
    cond = buf(impl, [True, False, False, True], "bool")
    a, b = buf(impl, vals, name), buf(impl, vals[::-1], name)
    assert run(impl, "WHERE", cond, a, b).tolist() == impl.to_numpy(buf(impl, [vals[0], vals[2], vals[1], vals[3]],
                                                                           name)).tolist()


def test_where_keeps_nan_payload_bits(impl):
    cond = buf(impl, [True, False], "bool")
    a, b = bits(impl, [0x7FC1, 0x3F80]), bits(impl, [0x0000, 0xFF81])
    assert to_bits(impl, cond.e(op(impl, "WHERE"), a, b)).tolist() == [0x7FC1, 0xFF81]


def test_dtype_of_results(impl):
    a = buf(impl, [1.5], "float16")
    assert a.e(op(impl, "ADD"), a).dtype == dt(impl, "float16")
    assert a.e(op(impl, "CMPLT"), a).dtype == dt(impl, "bool")
    assert impl.to_numpy(a.e(op(impl, "CMPLT"), a)).dtype == np.bool_
    assert impl.from_numpy(np.zeros(3, np.int8), DEV).e(op(impl, "NEG")).dtype == dt(impl, "int8")


def _defined(opname: str, name: str) -> bool:
    if name == "bool":
        return opname not in ("NEG", "SUB", "DIV", "EXP2", "LOG2", "SIN", "SQRT")
    if name in FLOATS:
        return opname not in ("MOD", "XOR")
    return opname not in ("EXP2", "LOG2", "SIN", "SQRT")


@pytest.mark.parametrize("shape", [(), (0, 3)])
@pytest.mark.parametrize("name", ["bool", *INTS, *FLOATS])
def test_scalar_and_empty_shapes_through_every_op(impl, shape, name):
    x = buf(impl, np.ones(shape), name)
    cond = buf(impl, np.ones(shape, bool), "bool")
    results = [x.cast(d) for d in impl.dtypes.all] + [x.r(impl.ReduceOps.SUM, ()), x.r(impl.ReduceOps.MAX, ())]
    for enum in (impl.UnaryOps, impl.BinaryOps, impl.TernaryOps):
        for o in enum:
            if o.name in ("CAST", "BITCAST") or not _defined(o.name, name):
                continue
            arity = {"UnaryOps": 1, "BinaryOps": 2, "TernaryOps": 3}[enum.__name__]
            srcs = (cond, x, x) if o.name == "WHERE" else (x,) * arity
            results.append(srcs[0].e(o, *srcs[1:]))
    impl.realize(*results)
    for r in results:
        got = impl.to_numpy(r)
        assert got.shape == shape and got.dtype == r.dtype.np


@settings(max_examples=40, deadline=None)
@given(data=st.data(), name=st.sampled_from(INTS), opname=st.sampled_from(sorted(INT_ORACLE)))
def test_int_ops_random(impl, data, name, opname):
    lo, hi = np.iinfo(name).min, np.iinfo(name).max
    xs = data.draw(st.lists(st.tuples(st.integers(int(lo), int(hi)), st.integers(int(lo), int(hi))), min_size=1,
                            max_size=20))
    a, b = (buf(impl, [p[i] for p in xs], name) for i in (0, 1))
    assert run(impl, opname, a, b).tolist() == [wrap(INT_ORACLE[opname](x, y), name) for x, y in xs]
