"""Constant folding and algebraic identities of the graph layer (SPEC §4, §7), on graph structure.

The pure rules (fast/graph/rules.py) are checked alone, including a property test that every identity
decision computes what the kernel would (docs/semantics.md, via exec_alu); then the same rules are
checked on LazyBuffer graphs: what must fold, and what must not.
"""
from __future__ import annotations

import math
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fast.device import Device
from fast.dtype import ALL, ConstType, DType, dtypes
from fast.graph import LazyBuffer, from_numpy
from fast.graph.rules import (
    FOLD_RULES,
    Fold,
    empty_reduce_value,
    exact_reciprocal,
    fold_cast,
    fold_elementwise,
    fold_reduce,
    split_factor,
)
from fast.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps, exec_alu, normalize_const, supports

F32, I32 = dtypes.float32, dtypes.int32


def empty(shape: tuple[int, ...] = (4,), dtype: DType = F32) -> LazyBuffer:
    return LazyBuffer.loadop(LoadOps.EMPTY, shape, dtype, "CLANG")


def const(value: object, shape: tuple[int, ...] = (4,), dtype: DType = F32) -> LazyBuffer:
    return empty((), dtype).const(value, shape)  # type: ignore[arg-type]


def const_value(lb: LazyBuffer) -> object:
    assert lb.is_unrealized_unmasked_const(), lb
    return lb.base.arg


# ---------------------------------------------------------------- pure rules


def values_for(dtype: DType) -> st.SearchStrategy[object]:
    if dtype == dtypes.bool:
        return st.booleans()
    if dtypes.is_int(dtype):
        return st.integers(int(dtypes.min(dtype)), int(dtypes.max(dtype)))
    return st.floats(allow_nan=True, allow_infinity=True).map(lambda v: normalize_const(v, dtype))


SPECIAL_CONSTS = [0, 1, -1, 2, 0.5, 0.25, 4.0, 2.0 ** -24, 2.0 ** -149, 2.0 ** 127, -8.0, 3, -0.0]


def same_value(left: object, right: object) -> bool:
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left) and math.isnan(right):
        return True
    return left == right and type(left) is type(right)  # -0.0 == 0.0: zero signs may differ


@given(st.data())
def test_every_identity_decision_computes_what_the_kernel_computes(data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(sorted(FOLD_RULES, key=lambda o: o.name)))
    dtype = data.draw(st.sampled_from([dt for dt in ALL if supports(op, dt)]))
    raw = data.draw(st.sampled_from(SPECIAL_CONSTS))
    if dtypes.is_int(dtype) and isinstance(raw, float):
        raw = int(raw)
    constant = normalize_const(raw, dtype)  # type: ignore[arg-type]
    value: ConstType = data.draw(values_for(dtype))  # type: ignore[assignment]
    const_first = data.draw(st.booleans())
    operands: tuple[ConstType, ConstType] = (constant, value) if const_first else (value, constant)
    consts = (constant, None) if const_first else (None, constant)
    fold = FOLD_RULES[op](dtype, consts)
    if fold is None:
        return
    expected = exec_alu(op, dtype, operands)  # type: ignore[arg-type]
    other = operands[fold.index]
    got = {"const": lambda: fold.value, "operand": lambda: other,
           "neg": lambda: exec_alu(UnaryOps.NEG, dtype, (other,)),
           "mul_const": lambda: exec_alu(BinaryOps.MUL, dtype, (other, fold.value))}[fold.kind]()
    assert same_value(got, expected) or (got == 0 and expected == 0), (op, dtype, operands, fold)


def test_all_constant_operands_use_exec_alu() -> None:
    assert fold_elementwise(BinaryOps.ADD, dtypes.int8, (127, 1)) == Fold("const", value=-128)
    assert fold_elementwise(BinaryOps.CMPLT, dtypes.uint16, (65535, 5)) == Fold("const", value=False)
    assert fold_elementwise(UnaryOps.NEG, F32, (None,)) is None


def test_identity_decisions() -> None:
    assert fold_elementwise(BinaryOps.ADD, F32, (None, 0.0)) == Fold("operand", 0)
    assert fold_elementwise(BinaryOps.ADD, F32, (0.0, None)) == Fold("operand", 1)
    assert fold_elementwise(BinaryOps.SUB, I32, (None, 0)) == Fold("operand", 0)
    assert fold_elementwise(BinaryOps.SUB, I32, (0, None)) is None
    assert fold_elementwise(BinaryOps.MUL, F32, (None, -1.0)) == Fold("neg", 0)
    assert fold_elementwise(BinaryOps.MUL, dtypes.bool, (None, True)) == Fold("operand", 0)
    assert fold_elementwise(BinaryOps.MUL, F32, (None, 0.0)) is None
    assert fold_elementwise(BinaryOps.MUL, F32, (None, math.nan)) is None
    assert fold_elementwise(BinaryOps.MUL, dtypes.bool, (False, None)) == Fold("const", value=False)
    assert fold_elementwise(BinaryOps.DIV, F32, (None, 4.0)) == Fold("mul_const", 0, 0.25)
    assert fold_elementwise(BinaryOps.DIV, I32, (None, 4)) is None


@pytest.mark.parametrize(("value", "dtype", "expected"), [
    (2.0, F32, 0.5), (0.25, F32, 4.0), (-8.0, dtypes.float16, -0.125), (2.0 ** 15, dtypes.float16, 2.0 ** -15),
    (3.0, F32, None), (0.0, F32, None), (math.inf, F32, None), (math.nan, F32, None),
    (2.0 ** -24, dtypes.float16, None), (2.0 ** -149, F32, None), (2.0 ** -130, F32, None),
    (2.0 ** -1074, dtypes.float64, None), (2.0 ** -1022, dtypes.float64, 2.0 ** 1022),
])
def test_exact_reciprocal(value: float, dtype: DType, expected: float | None) -> None:
    assert exact_reciprocal(value, dtype) == expected


def test_reduce_and_cast_rules() -> None:
    assert fold_reduce(ReduceOps.SUM, dtypes.int8, 100, 3) == 44
    assert fold_reduce(ReduceOps.SUM, dtypes.uint8, 255, 2) == 254
    assert fold_reduce(ReduceOps.SUM, dtypes.bool, True, 7) is True
    assert fold_reduce(ReduceOps.MAX, I32, -5, 9) == -5
    third = normalize_const(0.1, dtypes.float16)
    assert fold_reduce(ReduceOps.SUM, dtypes.float16, third, 3) == normalize_const(third * 3, dtypes.float16)
    assert fold_reduce(ReduceOps.SUM, F32, 3.0e38, 10) == math.inf
    assert empty_reduce_value(ReduceOps.SUM, F32) == 0.0 and empty_reduce_value(ReduceOps.SUM, dtypes.bool) is False
    assert empty_reduce_value(ReduceOps.MAX, dtypes.int16) == -32768
    assert empty_reduce_value(ReduceOps.MAX, F32) == -math.inf
    assert fold_cast(math.nan, F32, I32, False) is None
    assert fold_cast(1e10, F32, dtypes.int8, False) is None
    assert fold_cast(-1, I32, dtypes.uint16, False) == 65535
    assert fold_cast(1.0, F32, I32, True) == 0x3F800000
    assert fold_cast(0x7FC00000, I32, F32, True) is None  # NaN payloads are not folded


@pytest.mark.parametrize(("axis", "outputs", "threshold", "size", "expected"), [
    (2 ** 20, 1, 32768, 22, 256), (3 * 2 ** 15, 1, 32768, 22, 256), (65537, 1, 32768, 22, None),
    (2 ** 20, 2 ** 16, 32768, 22, 64), (2 ** 20, 2 ** 20, 32768, 22, None), (1000, 1, 32768, 22, None),
    (1000, 1, 100, 22, 250), (1000, 1, 100, 6, 50), (1000, 1, 100, 3, 8), (1000, 1, 100, 2, None),
    (999, 1, 100, 22, 111), (3 ** 10, 1, 32768, 22, 243),
])
def test_split_factor(axis: int, outputs: int, threshold: int, size: int, expected: int | None) -> None:
    assert split_factor(axis, outputs, threshold, size) == expected


# ---------------------------------------------------------------- folding on the graph


def test_constants_fold_to_a_const_base_of_the_same_shape() -> None:
    out = const(2, (3, 4), I32).e(BinaryOps.MUL, const(3, (3, 4), I32))
    assert out.shape == (3, 4) and out.dtype == I32 and const_value(out) == 6
    compare = const(2, (2,), I32).e(BinaryOps.CMPEQ, const(2, (2,), I32))
    assert compare.dtype == dtypes.bool and const_value(compare) is True
    where = const(True, (2,), dtypes.bool).e(TernaryOps.WHERE, const(1.5, (2,)), const(2.5, (2,)))
    assert const_value(where) == 1.5


def test_trap_constant_wraps_to_its_dtype() -> None:
    minus_one = const(-1, (3,), dtypes.uint16)
    assert const_value(minus_one) == 65535
    folded = minus_one.e(BinaryOps.CMPLT, const(5, (3,), dtypes.uint16))
    assert const_value(folded) is False
    assert const_value(const(0.1, (1,), dtypes.float16)) == 0.0999755859375


def test_trap_integer_division_is_exact_above_2_53() -> None:
    big = 2 ** 62 + 1
    out = const(big, (2,), dtypes.int64).e(BinaryOps.DIV, const(3, (2,), dtypes.int64))
    assert const_value(out) == big // 3 == 1537228672809129301


def test_trap_division_by_zero_and_sin_inf_do_not_raise() -> None:
    assert const_value(const(7, (2,), I32).e(BinaryOps.DIV, const(0, (2,), I32))) == 0
    assert const_value(const(7, (2,), I32).e(BinaryOps.MOD, const(0, (2,), I32))) == 7
    assert const_value(const(1.0).e(BinaryOps.DIV, const(0.0))) == math.inf
    assert math.isnan(const_value(const(math.inf).e(UnaryOps.SIN)))  # type: ignore[arg-type]
    assert math.isnan(const_value(const(-1.0).e(UnaryOps.LOG2).e(BinaryOps.MUL, const(0.0))))  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_additive_and_multiplicative_identities_return_the_same_object(shape: tuple[int, ...]) -> None:
    x = empty((3, 2)).permute((1, 0)) if shape == (2, 3) else empty(shape)
    assert x.e(BinaryOps.ADD, const(0.0, shape)) is x
    assert const(0.0, shape).e(BinaryOps.ADD, x) is x
    assert x.e(BinaryOps.SUB, const(0.0, shape)) is x
    assert x.e(BinaryOps.MUL, const(1.0, shape)) is x
    assert const(1.0, shape).e(BinaryOps.MUL, x) is x


def test_times_minus_one_is_neg() -> None:
    x = empty(dtype=I32)
    for out in (x.e(BinaryOps.MUL, const(-1, dtype=I32)), const(-1, dtype=I32).e(BinaryOps.MUL, x)):
        assert out.base.op is UnaryOps.NEG and out.base.srcs == (x,)
    flag = empty(dtype=dtypes.bool)
    assert flag.e(BinaryOps.MUL, const(-1, dtype=dtypes.bool)) is flag  # bool -1 is True: x and True


def test_times_zero_folds_only_for_integers_and_bool() -> None:
    assert const_value(empty(dtype=I32).e(BinaryOps.MUL, const(0, dtype=I32))) == 0
    assert const_value(const(0, dtype=dtypes.uint8).e(BinaryOps.MUL, empty(dtype=dtypes.uint8))) == 0
    assert const_value(empty(dtype=dtypes.bool).e(BinaryOps.MUL, const(False, dtype=dtypes.bool))) is False
    x = empty()
    product = x.e(BinaryOps.MUL, const(0.0))
    assert product.op is BinaryOps.MUL and product.srcs[0] is x


def test_float_x_minus_x_is_not_folded() -> None:
    x = empty()
    out = x.e(BinaryOps.SUB, x)
    assert out.op is BinaryOps.SUB and out.srcs == (x, x)


def test_float_division_by_power_of_two_only() -> None:
    x = empty()
    quarter = x.e(BinaryOps.DIV, const(4.0))
    assert quarter.op is BinaryOps.MUL and quarter.srcs[0] is x and const_value(quarter.srcs[1]) == 0.25
    assert x.e(BinaryOps.DIV, const(3.0)).op is BinaryOps.DIV
    half = empty(dtype=dtypes.float16)
    assert half.e(BinaryOps.DIV, const(2.0 ** -24, dtype=dtypes.float16)).op is BinaryOps.DIV
    assert empty(dtype=I32).e(BinaryOps.DIV, const(4, dtype=I32)).op is BinaryOps.DIV


def test_double_negation_returns_x() -> None:
    x = empty()
    assert x.e(UnaryOps.NEG).e(UnaryOps.NEG) is x


def test_trap_double_negation_through_a_reshape_keeps_the_shape() -> None:
    x = empty((2, 6))
    out = x.e(UnaryOps.NEG).reshape((3, 4)).e(UnaryOps.NEG)
    assert out.shape == (3, 4) and out.base is x and out is x.reshape((3, 4))
    flipped = x.permute((1, 0)).e(UnaryOps.NEG).stride((-1, 1)).e(UnaryOps.NEG)
    assert flipped.shape == (6, 2) and flipped.base is x and flipped.st == x.permute((1, 0)).stride((-1, 1)).st


def test_masked_constants_are_not_plain_constants() -> None:
    padded_zero = const(0.0, (2,)).pad(((1, 1),))
    padded_one = const(1.0, (2,)).pad(((1, 1),))
    x = empty()
    assert padded_zero.is_unrealized_const() and not padded_zero.is_unrealized_unmasked_const()
    assert x.e(BinaryOps.ADD, padded_zero).op is BinaryOps.ADD
    assert x.e(BinaryOps.MUL, padded_one).op is BinaryOps.MUL
    both = padded_one.e(BinaryOps.ADD, padded_one)
    assert both.op is BinaryOps.ADD
    assert padded_one.r(ReduceOps.SUM, (0,)).op is ReduceOps.SUM


class NumpyAllocator:
    """A fake device allocator: handles are numpy uint8 arrays, offsets are numpy views of them."""

    def alloc(self, nbytes: int, zeroed: bool = True) -> np.ndarray: return np.zeros(nbytes, np.uint8)  # noqa: E704
    def free(self, handle: np.ndarray, nbytes: int) -> None: pass  # noqa: E704
    def copyin(self, handle: np.ndarray, src: memoryview) -> None: handle[:] = np.frombuffer(src, np.uint8)  # noqa: E704
    def copyout(self, dest: memoryview, handle: np.ndarray) -> None: dest[:] = handle.tobytes()  # noqa: E704
    def offset(self, handle: np.ndarray, byte_offset: int, nbytes: int) -> np.ndarray:  # noqa: E704
        return handle[byte_offset:byte_offset + nbytes]


def test_realized_buffers_never_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Device, "opened", {"CLANG": types.SimpleNamespace(allocator=NumpyAllocator())})
    zeros = from_numpy(np.zeros(4, np.float32), "CLANG")
    x = empty()
    assert x.e(BinaryOps.ADD, zeros).op is BinaryOps.ADD
    negated = x.e(UnaryOps.NEG)
    negated.buffer.allocate()  # as if the engine had realized it
    assert negated.realized is not None
    again = negated.e(UnaryOps.NEG)
    assert again.op is UnaryOps.NEG and again.srcs == (negated,)


def test_reduce_of_a_constant_folds() -> None:
    assert const_value(const(100, (3, 2), dtypes.int8).r(ReduceOps.SUM, (0,))) == 44
    summed = const(100, (3, 2), dtypes.int8).r(ReduceOps.SUM, (0, 1))
    assert summed.shape == (1, 1) and const_value(summed) == wrap(600, dtypes.int8)
    assert const_value(const(1.5, (4, 4)).r(ReduceOps.SUM, (1,))) == 6.0
    assert const_value(const(-2.5, (4, 4)).r(ReduceOps.MAX, (0,))) == -2.5
    assert const_value(const(True, (5,), dtypes.bool).r(ReduceOps.SUM, (0,))) is True


def wrap(value: int, dtype: DType) -> int:
    return int(np.array([value]).astype(dtype.np)[0])


def test_trap_max_of_an_empty_integer_axis() -> None:
    out = empty((0, 3), I32).r(ReduceOps.MAX, (0,))
    assert out.shape == (1, 3) and const_value(out) == -(2 ** 31)
    assert const_value(empty((2, 0), dtypes.uint8).r(ReduceOps.MAX, (1,))) == 0
    assert const_value(empty((0,)).r(ReduceOps.MAX, (0,))) == -math.inf
    assert const_value(empty((0,), dtypes.bool).r(ReduceOps.SUM, (0,))) is False
    assert const_value(empty((0, 2)).r(ReduceOps.SUM, (0,))) == 0.0


def test_zero_size_graphs_are_constant_zero() -> None:
    x = empty((0, 3))
    assert x.base.op is LoadOps.EMPTY  # a zero-size EMPTY stays a real (0-byte) buffer: it can be assigned into
    for out in (x.e(UnaryOps.SQRT), x.e(BinaryOps.ADD, x), x.reshape((3, 0)).e(UnaryOps.NEG), x.cast(I32)):
        assert out.base.op is LoadOps.CONST and out.base.arg == normalize_const(0, out.dtype)
    folded = empty((0,), I32).e(BinaryOps.ADD, empty((0,), I32))
    assert folded.base.arg == 0 and type(folded.base.arg) is int


def test_cast_of_a_constant() -> None:
    assert const_value(const(-1, (2,), I32).cast(dtypes.uint16)) == 65535
    assert const_value(const(3.7, (2,)).cast(I32)) == 3
    assert const_value(const(1, (2,), I32).cast(dtypes.float16)) == 1.0
    assert const_value(const(1.0, (2,)).cast(I32, bitcast=True)) == 0x3F800000
    for value, target in ((math.nan, I32), (1e10, dtypes.int8), (math.inf, dtypes.uint8)):
        out = const(value, (2,)).cast(target)
        assert out.base.op is UnaryOps.CAST and out.dtype == target and out.shape == (2,)  # never folded
