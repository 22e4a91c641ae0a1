"""Dtypes, CAST, BITCAST, bfloat16 emulation and constant normalisation (docs/semantics.md)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from ref_util import ALL, DEV, FLOATS, INTS, bits, buf, dt, int_range, same_float, to_bits, wrap


def test_dtypes_table(impl):
    d = impl.dtypes
    assert [x.name for x in d.all] == ALL
    assert d.default_float == d.float32 and d.default_int == d.int32
    assert [x.itemsize for x in d.all] == [1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8]
    assert all(d.is_float(dt(impl, n)) for n in FLOATS) and not d.is_float(d.int8)
    assert all(d.is_int(dt(impl, n)) for n in INTS) and not d.is_int(d.bool) and not d.is_int(d.float16)
    assert d.is_unsigned(d.uint32) and not d.is_unsigned(d.int32) and not d.is_unsigned(d.bool)
    assert d.bfloat16.np == np.float32 and d.float16.np == np.float16 and d.bool.np == np.bool_
    for n in INTS:
        assert (d.min(dt(impl, n)), d.max(dt(impl, n))) == int_range(n)
    assert d.min(d.float32) == -math.inf and d.max(d.float64) == math.inf
    assert d.min(d.bool) is False and d.max(d.bool) is True


def test_dtypes_from_numpy(impl):
    for n in ALL:
        if n != "bfloat16":
            assert impl.dtypes.from_numpy(np.dtype(n)) == dt(impl, n)
    for bad in (np.complex64, np.object_, np.dtype("U3")):
        with pytest.raises(TypeError):
            impl.dtypes.from_numpy(bad)


@pytest.mark.parametrize("src", INTS)
@pytest.mark.parametrize("dst", INTS)
def test_int_to_int_wraps(impl, src, dst):
    a = buf(impl, [int_range(src)[0], -1 if src[0] == "i" else 0, 1, int_range(src)[1]], src)
    vals = impl.to_numpy(a).tolist()
    assert impl.to_numpy(a.cast(dt(impl, dst))).tolist() == [wrap(v, dst) for v in vals]


@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst", INTS)
def test_float_to_int_truncates(impl, src, dst):
    vals = [0.0, -0.0, 2.75, -2.75, 1.0, 100.5, -100.5]
    a = buf(impl, vals, src)
    want = [int(v) if int_range(dst)[0] <= int(v) <= int_range(dst)[1] else None for v in vals]
    got = impl.to_numpy(a.cast(dt(impl, dst)))
    assert got.dtype == np.dtype(dst)
    assert [g for g, w in zip(got.tolist(), want, strict=True) if w is not None] == [w for w in want if w is not None]


@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst", INTS)
def test_float_to_int_unspecified_does_not_trap(impl, src, dst):
    a = buf(impl, [math.nan, math.inf, -math.inf, 1e30 if src != "float16" else 65504.0, -1e30], src)
    assert impl.to_numpy(a.cast(dt(impl, dst))).dtype == np.dtype(dst)  # some value, no error


@pytest.mark.parametrize("src", ALL)
def test_cast_to_bool_is_nonzero(impl, src):
    if src in FLOATS:
        vals, want = [0.0, -0.0, math.nan, -2.5], [False, False, True, True]  # NaN != 0
    else:
        vals, want = [0, 1, 0, 1] if src == "bool" else [0, 3, 0, 1], [False, True, False, True]
    assert impl.to_numpy(buf(impl, vals, src).cast(impl.dtypes.bool)).tolist() == want


@pytest.mark.parametrize("dst", [n for n in ALL if n != "bool"])
def test_cast_from_bool(impl, dst):
    got = impl.to_numpy(buf(impl, [False, True], "bool").cast(dt(impl, dst)))
    assert got.tolist() == [0, 1] and got.dtype == dt(impl, dst).np


def test_int_to_float_rounds_to_nearest_even(impl):
    v = 2**60 + 2**36 + 1  # a float64 detour would round to a tie, then down to 2**60
    assert impl.to_numpy(buf(impl, [v], "int64").cast(impl.dtypes.float32)).tolist() == [2.0**60 + 2.0**37]
    assert impl.to_numpy(buf(impl, [2**64 - 1], "uint64").cast(impl.dtypes.float64)).tolist() == [2.0**64]
    assert impl.to_numpy(buf(impl, [2049, 2051, 70000], "int32").cast(impl.dtypes.float16)).tolist() == \
        [2048.0, 2052.0, math.inf]
    assert impl.to_numpy(buf(impl, [257, 259], "int32").cast(impl.dtypes.bfloat16)).tolist() == [256.0, 260.0]


@pytest.mark.parametrize("name,tiny", [("float16", 2.0**-11), ("bfloat16", 2.0**-8)])
def test_float64_to_half_goes_through_float32(impl, name, tiny):
    x = buf(impl, [1.0 + tiny + 2.0**-40, 1.0 + tiny + 2.0**-20], "float64")
    # 2**-40 vanishes in float32, leaving a tie that rounds to even; 2**-20 survives and rounds up
    assert impl.to_numpy(x.cast(dt(impl, name))).tolist() == [1.0, 1.0 + 2 * tiny]


@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst", FLOATS)
def test_float_to_float(impl, src, dst):
    vals = [0.0, -0.0, 1.0, -2.5, math.inf, -math.inf, math.nan, 0.1, 1e-30, 70000.0]
    a = buf(impl, vals, src)
    got = impl.to_numpy(a.cast(dt(impl, dst)))
    want = impl.to_numpy(buf(impl, impl.to_numpy(a).astype(np.float32), dst)) if dst != "float64" else \
        impl.to_numpy(a).astype(np.float64)
    if src == "float64" and dst != "float64":
        want = impl.to_numpy(buf(impl, np.asarray(vals, np.float64).astype(np.float32), dst))
    assert same_float(got, want) and got.dtype == dt(impl, dst).np


def test_bfloat16_every_pattern_round_trips(impl):
    pats = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    b = bits(impl, pats)
    f = impl.to_numpy(b)
    assert f.dtype == np.float32
    assert np.array_equal(f.view(np.uint32) >> 16, pats.astype(np.uint32))  # exactly the bf16 value
    assert np.array_equal(f.view(np.uint32) & 0xFFFF, np.zeros(2**16, np.uint32))
    back = to_bits(impl, impl.from_numpy(f, DEV).cast(impl.dtypes.bfloat16))
    nan = np.isnan(f)
    assert np.array_equal(back[~nan], pats[~nan]) and np.all(np.isnan(impl.to_numpy(bits(impl, back[nan]))))


def test_bfloat16_rne_ties_and_overflow(impl):
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 3.4e38, -3.4e38, 1e-45], np.float32)
    got = to_bits(impl, impl.from_numpy(x, DEV).cast(impl.dtypes.bfloat16)).tolist()
    assert got == [0x3F80, 0x3F82, 0x3F81, 0x7F80, 0xFF80, 0x0000]


def test_bitcast_same_itemsize(impl):
    f = buf(impl, [1.0, -2.0], "float32")
    assert impl.to_numpy(f.cast(impl.dtypes.int32, bitcast=True)).tolist() == [0x3F800000, -0x40000000]
    assert impl.to_numpy(f.cast(impl.dtypes.uint32, bitcast=True)).tolist() == [0x3F800000, 0xC0000000]
    h = bits(impl, [0x3C00, 0x7C00], "float16")
    assert impl.to_numpy(h).tolist() == [1.0, math.inf]
    assert impl.to_numpy(bits(impl, [0x3F80]).cast(impl.dtypes.float16, bitcast=True)).tolist() == [1.875]
    i = buf(impl, [-1], "int64")
    assert same_float(impl.to_numpy(i.cast(impl.dtypes.float64, bitcast=True)), [math.nan])
    assert impl.to_numpy(i.cast(impl.dtypes.uint64, bitcast=True)).tolist() == [2**64 - 1]


@pytest.mark.parametrize("name,val,want", [
    ("uint16", -1, 65535), ("int8", 200, -56), ("uint8", 300, 44), ("int64", 2**63, -(2**63)),
    ("float16", 0.1, 0.0999755859375), ("bfloat16", 0.1, 0.10009765625), ("float32", 0.1, float(np.float32(0.1))),
    ("float64", 0.1, 0.1), ("bool", 2, True), ("bool", 0.0, False), ("int32", True, 1), ("int32", -2.75, -2),
    ("float32", 2**60 + 2**36 + 1, 2.0**60 + 2.0**37), ("float16", 1e6, math.inf),
])
def test_const_is_normalised_to_dtype(impl, name, val, want):
    c = buf(impl, [0], name).const(val, (2,))
    assert c.base.arg == want and type(c.base.arg) is type(want)
    assert impl.to_numpy(c).tolist() == [want, want]
