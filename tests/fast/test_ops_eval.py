"""The scalar evaluator in fast/ops.py against docs/semantics.md, edge by edge."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fast.dtype import ALL, dtypes
from fast.ops import (
    BinaryOps,
    TernaryOps,
    UnaryOps,
    bitcast_const,
    cast_const,
    exec_alu,
    normalize_const,
    round_float,
    supports,
    wrap_int,
)

INT_DTYPES = [dt for dt in ALL if dtypes.is_int(dt)]


@pytest.mark.parametrize("dt", [dt for dt in INT_DTYPES if not dtypes.is_unsigned(dt)])
def test_signed_division_edges(dt):
    low = dtypes.min(dt)
    assert exec_alu(BinaryOps.DIV, dt, (7, 0)) == 0
    assert exec_alu(BinaryOps.MOD, dt, (7, 0)) == 7
    assert exec_alu(BinaryOps.DIV, dt, (low, -1)) == low
    assert exec_alu(BinaryOps.MOD, dt, (low, -1)) == 0
    assert exec_alu(BinaryOps.DIV, dt, (-7, 2)) == -3
    assert exec_alu(BinaryOps.MOD, dt, (-7, 2)) == -1
    assert exec_alu(BinaryOps.MOD, dt, (7, -2)) == 1
    assert exec_alu(UnaryOps.NEG, dt, (low,)) == low
    assert exec_alu(BinaryOps.ADD, dt, (dtypes.max(dt), 1)) == low


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1))
def test_division_identity_holds_for_every_divisor(a, b):
    q = exec_alu(BinaryOps.DIV, dtypes.int64, (a, b))
    r = exec_alu(BinaryOps.MOD, dtypes.int64, (a, b))
    assert wrap_int(q * b + r, dtypes.int64) == a


def test_integer_division_exact_above_2_pow_53():
    big = 2**62 + 1
    assert exec_alu(BinaryOps.DIV, dtypes.int64, (big, 3)) == big // 3


def test_unsigned_wraps_and_constants_normalise():
    assert exec_alu(UnaryOps.NEG, dtypes.uint8, (1,)) == 255
    assert exec_alu(BinaryOps.SUB, dtypes.uint32, (0, 1)) == 2**32 - 1
    assert normalize_const(-1, dtypes.uint16) == 65535
    assert exec_alu(BinaryOps.CMPLT, dtypes.uint16, (normalize_const(-1, dtypes.uint16), 5)) is False
    assert normalize_const(0.1, dtypes.float16) == 0.0999755859375
    assert normalize_const(3, dtypes.bool) is True
    assert normalize_const(-2.75, dtypes.int32) == -2  # converts as CAST would
    assert normalize_const(float("nan"), dtypes.int8) == 0  # unspecified cast: deterministic 0


def test_float_nan_rules():
    nan = math.nan
    for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        assert math.isnan(exec_alu(BinaryOps.MAX, dt, (nan, 1.0)))
        assert math.isnan(exec_alu(BinaryOps.MAX, dt, (1.0, nan)))
        assert exec_alu(BinaryOps.CMPLT, dt, (nan, 1.0)) is False
        assert exec_alu(BinaryOps.CMPLT, dt, (1.0, nan)) is False
        assert exec_alu(BinaryOps.CMPEQ, dt, (nan, nan)) is False
        assert exec_alu(BinaryOps.DIV, dt, (1.0, 0.0)) == math.inf
        assert math.isnan(exec_alu(UnaryOps.SIN, dt, (math.inf,)))  # no exception at build time


def test_half_rounds_every_op():
    # 2049 is not a float16: float32 computes 2048 + 1 exactly, the result rounds to even (2048).
    assert exec_alu(BinaryOps.ADD, dtypes.float16, (2048.0, 1.0)) == 2048.0
    assert exec_alu(BinaryOps.ADD, dtypes.float16, (2048.0, 3.0)) == 2052.0
    assert exec_alu(BinaryOps.ADD, dtypes.bfloat16, (256.0, 1.0)) == 256.0
    assert exec_alu(BinaryOps.MUL, dtypes.float16, (300.0, 300.0)) == math.inf
    # MULACC is never fused: the product is rounded first.
    a = float(np.float16(1.0009765625))
    fused = a * a - 1.0
    assert exec_alu(TernaryOps.MULACC, dtypes.float16, (a, a, -1.0)) != fused


def test_bool_rules():
    assert exec_alu(BinaryOps.ADD, dtypes.bool, (True, True)) is True
    assert exec_alu(BinaryOps.MUL, dtypes.bool, (True, False)) is False
    assert exec_alu(BinaryOps.MOD, dtypes.bool, (True, False)) is True
    assert exec_alu(BinaryOps.CMPLT, dtypes.bool, (False, True)) is True
    for op in (UnaryOps.NEG, BinaryOps.SUB, BinaryOps.DIV, UnaryOps.SQRT):
        assert not supports(op, dtypes.bool)
        with pytest.raises(TypeError, match=op.name):
            exec_alu(op, dtypes.bool, (True,) * (1 if isinstance(op, UnaryOps) else 2))


def test_float_only_and_int_only_ops():
    assert not supports(BinaryOps.MOD, dtypes.float32) and not supports(BinaryOps.XOR, dtypes.float64)
    assert not supports(UnaryOps.EXP2, dtypes.int32) and not supports(UnaryOps.SQRT, dtypes.uint8)


def test_casts():
    assert cast_const(-2.7, dtypes.float32, dtypes.int32) == -2
    assert cast_const(math.nan, dtypes.float32, dtypes.int32) is None
    assert cast_const(1e10, dtypes.float32, dtypes.int32) is None
    assert cast_const(-1.0, dtypes.float32, dtypes.uint8) is None
    assert cast_const(300, dtypes.int32, dtypes.uint8) == 44
    assert cast_const(math.nan, dtypes.float32, dtypes.bool) is True
    assert cast_const(2**63 - 1, dtypes.int64, dtypes.float32) == float(np.float32(2**63))
    assert cast_const(2049, dtypes.int32, dtypes.float16) == 2048.0
    assert cast_const(1.0000001, dtypes.float64, dtypes.float32) == float(np.float32(1.0000001))


def test_bitcast_and_bfloat16_round_trip():
    assert bitcast_const(1.0, dtypes.float32, dtypes.int32) == 0x3F800000
    assert bitcast_const(0x3F80, dtypes.uint16, dtypes.bfloat16) == 1.0
    assert bitcast_const(1.0, dtypes.bfloat16, dtypes.int16) == 0x3F80
    # RNE tie: 1 + 2^-8 is halfway between two bfloat16 values; rounds to even (1.0).
    assert round_float(1.0 + 2**-8, dtypes.bfloat16) == 1.0
    assert round_float(1.0 + 3 * 2**-8, dtypes.bfloat16) == 1.0 + 2**-6
    assert math.isnan(round_float(math.nan, dtypes.bfloat16))
