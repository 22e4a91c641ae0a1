"""Every documented error: its type, and a message that names the op (docs/api.md error table)."""
from __future__ import annotations

import numpy as np
import pytest
from ref_util import DEV, buf, disk, op

F = lambda impl: buf(impl, np.ones((2, 3)), "float32")  # noqa: E731
I = lambda impl: buf(impl, np.ones((2, 3)), "int32")  # noqa: E731
B = lambda impl: buf(impl, np.ones((2, 3)), "bool")  # noqa: E731

CASES = [
    # (expected type, text the message must contain, failing call)
    (ValueError, "GPU", lambda impl: impl.from_numpy(np.ones(2), "GPU")),
    (ValueError, "CLANG:-1", lambda impl: impl.from_numpy(np.ones(2), "CLANG:-1")),
    (ValueError, "DISK:", lambda impl: F(impl).copy_to_device("DISK:")),
    (ValueError, "clang", lambda impl: F(impl).copy_to_device("clang")),
    (ValueError, "ADD", lambda impl: F(impl).e(op(impl, "ADD"), F(impl).reshape((3, 2)))),
    (ValueError, "reshape", lambda impl: F(impl).reshape((4, 2))),
    (ValueError, "reshape", lambda impl: F(impl).reshape((-1, 6))),
    (ValueError, "permute", lambda impl: F(impl).permute((0, 0))),
    (ValueError, "permute", lambda impl: F(impl).permute((0,))),
    (ValueError, "pad", lambda impl: F(impl).pad(((0, -1), (0, 0)))),
    (ValueError, "pad", lambda impl: F(impl).pad(((0, 1),))),
    (ValueError, "shrink", lambda impl: F(impl).shrink(((0, 3), (0, 3)))),
    (ValueError, "shrink", lambda impl: F(impl).shrink(((2, 1), (0, 3)))),
    (ValueError, "shrink", lambda impl: F(impl).shrink(((0, 1),))),
    (ValueError, "expand", lambda impl: F(impl).expand((4, 3))),
    (ValueError, "expand", lambda impl: F(impl).expand((2, 3, 1))),
    (ValueError, "stride", lambda impl: F(impl).stride((0, 1))),
    (ValueError, "stride", lambda impl: F(impl).stride((1,))),
    (ValueError, "SUM", lambda impl: F(impl).r(impl.ReduceOps.SUM, (2,))),
    (ValueError, "MAX", lambda impl: F(impl).r(impl.ReduceOps.MAX, (0, 0))),
    (ValueError, "ASSIGN", lambda impl: F(impl).assign(F(impl).reshape((3, 2)))),
    (ValueError, "n", lambda impl: impl.Variable("n", 1, 4).bind(5)),
    (TypeError, "ADD", lambda impl: F(impl).e(op(impl, "ADD"), I(impl))),
    (TypeError, "WHERE", lambda impl: I(impl).e(op(impl, "WHERE"), F(impl), F(impl))),
    (TypeError, "WHERE", lambda impl: B(impl).e(op(impl, "WHERE"), F(impl), I(impl))),
    (TypeError, "NEG", lambda impl: B(impl).e(op(impl, "NEG"))),
    (TypeError, "SUB", lambda impl: B(impl).e(op(impl, "SUB"), B(impl))),
    (TypeError, "DIV", lambda impl: B(impl).e(op(impl, "DIV"), B(impl))),
    (TypeError, "MOD", lambda impl: F(impl).e(op(impl, "MOD"), F(impl))),
    (TypeError, "XOR", lambda impl: F(impl).e(op(impl, "XOR"), F(impl))),
    (TypeError, "EXP2", lambda impl: I(impl).e(op(impl, "EXP2"))),
    (TypeError, "LOG2", lambda impl: B(impl).e(op(impl, "LOG2"))),
    (TypeError, "SIN", lambda impl: I(impl).e(op(impl, "SIN"))),
    (TypeError, "SQRT", lambda impl: I(impl).e(op(impl, "SQRT"))),
    (TypeError, "CAST", lambda impl: F(impl).e(op(impl, "CAST"))),
    (TypeError, "BITCAST", lambda impl: F(impl).e(op(impl, "BITCAST"))),
    (TypeError, "SUM", lambda impl: F(impl).e(impl.ReduceOps.SUM)),
    (TypeError, "ADD", lambda impl: F(impl).r(op(impl, "ADD"), (0,))),
    (TypeError, "BITCAST", lambda impl: F(impl).cast(impl.dtypes.int16, bitcast=True)),
    (TypeError, "BITCAST", lambda impl: B(impl).cast(impl.dtypes.int8, bitcast=True)),
    (TypeError, "BITCAST", lambda impl: buf(impl, [1], "uint8").cast(impl.dtypes.bool, bitcast=True)),
    (TypeError, "ASSIGN", lambda impl: F(impl).assign(I(impl))),
    (TypeError, "complex", lambda impl: impl.from_numpy(np.ones(2, np.complex64), DEV)),
    (RuntimeError, "ASSIGN", lambda impl: F(impl).reshape((3, 2)).assign(F(impl).reshape((3, 2)))),
    (RuntimeError, "ASSIGN", lambda impl: F(impl).reshape((3, 2)).assign(F(impl))),  # a view: checked first
    (RuntimeError, "ASSIGN", lambda impl: F(impl).e(op(impl, "ADD"), F(impl)).assign(I(impl))),  # unrealized
]


@pytest.mark.parametrize("kind,text,call", CASES)
def test_documented_errors(impl, kind, text, call):
    with pytest.raises(kind) as info:
        call(impl)
    assert text.lower() in str(info.value).lower()


@pytest.mark.parametrize("name,call", [
    ("ADD", lambda impl, d: d.e(op(impl, "ADD"), d)),
    ("NEG", lambda impl, d: d.e(op(impl, "NEG"))),
    ("SUM", lambda impl, d: d.r(impl.ReduceOps.SUM, (0,))),
    ("CAST", lambda impl, d: d.cast(impl.dtypes.float32)),
    ("CONTIGUOUS", lambda impl, d: d.stride((-1,)).contiguous()),
    ("CONTIGUOUS", lambda impl, d: d.pad(((1, 0),)).contiguous()),
    ("BITCAST", lambda impl, d: d.stride((2,)).cast(impl.dtypes.int16, bitcast=True)),
    ("CONST", lambda impl, d: d.const(1)),
])
def test_compute_on_disk_is_runtime_error(impl, tmp_path, name, call):
    d = buf(impl, np.arange(8, dtype=np.int32), "int32").copy_to_device(disk(tmp_path))
    with pytest.raises(RuntimeError) as info:
        call(impl, d)
    assert name in str(info.value) and "DISK" in str(info.value)


def test_disk_shape_changing_bitcast_errors(impl, tmp_path):
    d = buf(impl, np.arange(6, dtype=np.int8).reshape(2, 3), "int8").copy_to_device(disk(tmp_path))
    with pytest.raises(ValueError, match="BITCAST"):
        d.cast(impl.dtypes.int16, bitcast=True)  # 3 bytes do not divide into int16
    with pytest.raises(TypeError, match="BITCAST"):
        d.cast(impl.dtypes.bool, bitcast=True)


def test_errors_leave_nothing_half_built(impl):
    a = F(impl)
    with pytest.raises(TypeError):
        a.e(op(impl, "ADD"), I(impl))
    assert np.array_equal(impl.to_numpy(a.e(op(impl, "ADD"), a)), np.full((2, 3), 2.0))
