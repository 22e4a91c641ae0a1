"""SPEC §7: each trap observed in the original design, pinned as a value test."""
from __future__ import annotations

import math

import numpy as np
from ref_util import buf, disk, op, same_float

D2 = ("CLANG:0", "CLANG:1")


def test_constant_wraps_before_comparing(impl):
    c = buf(impl, [0], "uint16").const(-1, (1,))
    assert c.base.arg == 65535
    assert impl.to_numpy(c.e(op(impl, "CMPLT"), c.const(5))).tolist() == [False]
    x = buf(impl, [-1 & 0xFFFF], "uint16")
    assert impl.to_numpy(x.e(op(impl, "CMPLT"), x.const(5))).tolist() == [False]


def test_integer_division_above_2_53_is_exact(impl):
    c = buf(impl, [0], "int64").const(2**60 + 1, (1,))
    assert impl.to_numpy(c.e(op(impl, "DIV"), c.const(3))).tolist() == [(2**60 + 1) // 3]
    assert impl.to_numpy(c.e(op(impl, "MOD"), c.const(7))).tolist() == [(2**60 + 1) % 7]
    u = buf(impl, [0], "uint64").const(2**64 - 1, (1,))
    assert impl.to_numpy(u.e(op(impl, "DIV"), u.const(3))).tolist() == [(2**64 - 1) // 3]


def test_division_by_zero_and_sin_inf_do_not_raise_at_build(impl):
    i = buf(impl, [0], "int32").const(7, (2,))
    f = buf(impl, [0.0], "float32").const(1.0, (2,))
    q, r = i.e(op(impl, "DIV"), i.const(0)), i.e(op(impl, "MOD"), i.const(0))
    fq, s = f.e(op(impl, "DIV"), f.const(0.0)), f.const(math.inf).e(op(impl, "SIN"))
    assert impl.to_numpy(q).tolist() == [0, 0] and impl.to_numpy(r).tolist() == [7, 7]
    assert impl.to_numpy(fq).tolist() == [math.inf, math.inf] and np.isnan(impl.to_numpy(s)).all()


def test_max_of_empty_int_axis(impl):
    e = impl.from_numpy(np.zeros((3, 0), np.int32), "CLANG")
    assert impl.to_numpy(e.r(impl.ReduceOps.MAX, (1,))).tolist() == [[-(2**31)]] * 3
    u = impl.from_numpy(np.zeros((0,), np.uint8), "CLANG").const(5, (0, 2))
    assert impl.to_numpy(u.r(impl.ReduceOps.MAX, (0,))).tolist() == [[0, 0]]


def test_relu_nan_is_nan_and_nan_compares_false(impl):
    for name in ("float16", "bfloat16", "float32", "float64"):
        x = buf(impl, [math.nan, -1.0, 2.0], name)
        assert same_float(impl.to_numpy(x.e(op(impl, "MAX"), x.const(0.0))), [math.nan, 0.0, 2.0])
        assert same_float(impl.to_numpy(x.const(0.0).e(op(impl, "MAX"), x)), [math.nan, 0.0, 2.0])
        n = x.const(math.nan)
        assert impl.to_numpy(x.e(op(impl, "CMPLT"), n)).tolist() == [False] * 3
        assert impl.to_numpy(n.e(op(impl, "CMPLT"), x)).tolist() == [False] * 3
        assert impl.to_numpy(n.e(op(impl, "CMPEQ"), n)).tolist() == [False] * 3


def test_neg_neg_through_reshape_and_float_x_times_zero(impl):
    x = buf(impl, [[1.0, math.inf, math.nan]], "float32")
    nn = x.e(op(impl, "NEG")).reshape((3, 1)).e(op(impl, "NEG"))
    assert nn.shape == (3, 1) and same_float(impl.to_numpy(nn), [[1.0], [math.inf], [math.nan]])
    assert same_float(impl.to_numpy(x.e(op(impl, "MUL"), x.const(0.0))), [[0.0, math.nan, math.nan]])
    assert same_float(impl.to_numpy(x.e(op(impl, "SUB"), x)), [[0.0, math.nan, math.nan]])
    i = buf(impl, [3, -4], "int8")
    assert impl.to_numpy(i.e(op(impl, "MUL"), i.const(0))).tolist() == [0, 0]


def test_pad_through_non_zero_preserving_ops(impl):
    x = buf(impl, [[1.0, 4.0]], "float32")
    for name in ("LOG2", "EXP2"):
        y = x.e(op(impl, name)).pad(((1, 0), (0, 1))).reshape((6,)).reshape((2, 3, 1)).expand((2, 3, 2))
        got = impl.to_numpy(y)
        assert got[0].tolist() == [[0.0, 0.0]] * 3 and got[1, 2].tolist() == [0.0, 0.0]
    z = x.pad(((0, 1), (0, 0)))
    recip = z.const(1.0).e(op(impl, "DIV"), z)
    assert impl.to_numpy(recip).tolist() == [[1.0, 0.25], [math.inf, math.inf]]  # pad first, then divide
    lt = x.e(op(impl, "CMPLT"), x.const(2.0)).pad(((0, 0), (1, 1))).reshape((4,))
    assert impl.to_numpy(lt).tolist() == [False, True, False, False]


def test_half_chain_rounded_per_op(impl):
    a = buf(impl, [1.0], "float16")
    t = a.const(2.0**-11)
    chain = a.e(op(impl, "ADD"), t).e(op(impl, "ADD"), t).e(op(impl, "SUB"), a)
    assert impl.to_numpy(chain).tolist() == [0.0]


def test_disk_slice_bitcast_and_non_consecutive_copy(impl, tmp_path):
    x = np.arange(32, dtype=np.uint8).reshape(4, 8)
    d = impl.from_numpy(x, disk(tmp_path))
    s = d.shrink(((1, 3), (2, 6))).cast(impl.dtypes.uint32, bitcast=True)
    assert s.shape == (2, 1) and impl.to_numpy(s).tolist() == x[1:3, 2:6].copy().view(np.uint32).tolist()
    v = d.stride((2, -3)).copy_to_device("CLANG")
    assert impl.to_numpy(v).tolist() == x[::2, ::-3].tolist()


def test_partly_real_compare_keeps_bool_dtype(impl):
    m = impl.MultiLazyBuffer.from_sharded(buf(impl, np.arange(6, dtype=np.float32), "float32"), D2, 0)
    one = m.shrink(((3, 6),))
    lt = one.e(op(impl, "CMPLT"), one.const(4.5))
    assert lt.dtype == impl.dtypes.bool and all(lb.dtype == impl.dtypes.bool for lb in lt.lbs)
    assert lt.real == [False, True] and impl.to_numpy(lt).tolist() == [True, True, False]
