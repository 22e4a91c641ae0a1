"""Reference-only structure and choices (not part of the shared contract; see docs/api.md)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import reference as ref
from reference.dtype import f32_to_bf16

DEV = "CLANG"


def test_exports_and_enum_members():
    assert sorted(ref.__all__) == sorted(["LazyBuffer", "MultiLazyBuffer", "dtypes", "DType", "LoadOps", "UnaryOps",
                                        "BinaryOps", "TernaryOps", "ReduceOps", "Variable", "from_numpy", "realize",
                                        "to_numpy", "safe_load", "safe_load_metadata", "safe_save"])
    assert list(ref.UnaryOps.__members__) == "EXP2 LOG2 CAST BITCAST SIN SQRT NEG".split()
    assert list(ref.BinaryOps.__members__) == "ADD SUB MUL DIV MAX MOD CMPLT CMPEQ XOR".split()
    assert list(ref.TernaryOps.__members__) == ["WHERE", "MULACC"]
    assert list(ref.ReduceOps.__members__) == ["SUM", "MAX"]
    assert list(ref.LoadOps.__members__) == "EMPTY CONST COPY CONTIGUOUS CUSTOM ASSIGN VIEW".split()
    assert repr(ref.dtypes.bfloat16) == "dtypes.bfloat16"


def test_every_buffer_is_its_own_base_and_views_are_view_nodes():
    a = ref.from_numpy(np.arange(6, dtype=np.int32), DEV)
    v = a.reshape((2, 3)).stride((1, -1))
    assert v.base is v and v.op is ref.LoadOps.VIEW and v.arg == ("stride", (1, -1)) and v.srcs[0].arg[0] == "reshape"
    assert a.op is ref.LoadOps.EMPTY and a.is_realized() and not v.is_realized()
    x = a.assign(a.e(ref.BinaryOps.ADD, a))
    assert x.op is ref.LoadOps.ASSIGN and x.srcs[1] is a


def test_storage_is_read_only_and_to_numpy_is_a_copy():
    b = ref.from_numpy(np.array([1.0, -2.0], np.float32), DEV).cast(ref.dtypes.bfloat16)
    ref.realize(b)
    stored = b.realized
    assert stored is not None and stored.dtype == np.uint16 and stored.tolist() == [0x3F80, 0xC000]
    with pytest.raises(ValueError):
        stored[0] = 0
    out = ref.to_numpy(b)
    out[0] = 5
    assert ref.to_numpy(b).tolist() == [1.0, -2.0]


def test_bf16_nan_is_quiet_with_sign():
    x = np.array([math.nan, -math.nan, np.float32(np.uint32(0x7F800001).view(np.float32))], np.float32)
    assert f32_to_bf16(x).tolist() == [0x7FC0, 0xFFC0, 0x7FC0]


def test_unspecified_results_are_zero():
    f = ref.from_numpy(np.array([math.nan, math.inf, -1e30, 300.0], np.float32), DEV)
    assert ref.to_numpy(f.cast(ref.dtypes.int32)).tolist() == [0, 0, 0, 300]
    assert ref.to_numpy(f.cast(ref.dtypes.uint8)).tolist() == [0, 0, 0, 0]
    assert ref.to_numpy(f.cast(ref.dtypes.uint64)).tolist() == [0, 0, 0, 300]
    c = ref.LazyBuffer.loadop(ref.LoadOps.CONST, (1,), ref.dtypes.int8, DEV, math.nan)
    assert c.arg == 0 and ref.LazyBuffer.loadop(ref.LoadOps.CONST, (1,), ref.dtypes.uint8, DEV, 300.5).arg == 0
    big_endian = ref.from_numpy(np.array([1], dtype=">i4"), DEV).cast(ref.dtypes.uint32, bitcast=True)
    assert ref.to_numpy(big_endian).tolist() == [1]
    e = ref.LazyBuffer.loadop(ref.LoadOps.EMPTY, (2,), ref.dtypes.float16, DEV)
    assert ref.to_numpy(e).tolist() == [0.0, 0.0]


def test_device_names():
    for name, canon in [("CLANG:007", "CLANG:7"), ("CUDA:0", "CUDA"), ("DISK:a:b", "DISK:a:b"), ("LLVM:12", "LLVM:12")]:
        assert ref.from_numpy(np.ones(1), name).device == canon
    for bad in ["CPU", "CLANG:", "CLANG:x", "disk:/a", "DISK", "", None, "CLANG:1:2"]:
        with pytest.raises(ValueError):
            ref.from_numpy(np.ones(1), bad)  # type: ignore[arg-type]  # misuse on purpose


def test_structural_misuse():
    a = ref.from_numpy(np.ones(2, np.float32), DEV)
    with pytest.raises(TypeError, match="realize"):
        ref.realize(np.ones(2))  # type: ignore[arg-type]  # misuse on purpose
    with pytest.raises(TypeError, match="loadop"):
        ref.LazyBuffer.loadop(ref.LoadOps.COPY, (1,), ref.dtypes.int8, DEV)
    with pytest.raises(TypeError, match="CUSTOM"):
        ref.LazyBuffer.loadop(ref.LoadOps.CUSTOM, (1,), ref.dtypes.int8, DEV, arg=3)
    with pytest.raises(ValueError, match="ADD"):
        a.e(ref.BinaryOps.ADD, a.copy_to_device("CLANG:1"))
    with pytest.raises(ValueError, match="ASSIGN"):
        a.assign(a.copy_to_device("CLANG:1"))
    with pytest.raises(TypeError, match="ADD"):
        a.e(ref.BinaryOps.ADD)
    with pytest.raises(ValueError, match="n"):
        _ = ref.Variable("n", 1, 3).val
    with pytest.raises(ValueError):
        ref.Variable("n", 3, 1)
    m = ref.MultiLazyBuffer.from_sharded(a, ("CLANG", "CLANG:1"), 0)
    with pytest.raises(ValueError, match="MultiLazyBuffer"):
        m.e(ref.BinaryOps.ADD, a)  # type: ignore[arg-type]  # misuse on purpose
    assert m.real == [True, True] and m.bounds == [(0, 1), (1, 2)] and m.real_lbs == m.lbs


def test_long_chains_do_not_recurse():
    a = ref.from_numpy(np.zeros(3, np.int32), DEV)
    one = a.const(1)
    for _ in range(5000):
        a = a.e(ref.BinaryOps.ADD, one)
    assert ref.to_numpy(a).tolist() == [5000] * 3


def test_multi_with_non_real_shards_after_reduce():
    x = ref.from_numpy(np.arange(8, dtype=np.int32).reshape(4, 2), DEV)
    m = ref.MultiLazyBuffer.from_sharded(x, ("CLANG", "CLANG:1"), 0).shrink(((2, 4), (0, 2)))
    r = m.r(ref.ReduceOps.SUM, (0,))
    assert r.axis is None and r.real == [False, True] and ref.to_numpy(r).tolist() == [[10, 12]]
    assert r.shape == (1, 2) and r.size == 2
