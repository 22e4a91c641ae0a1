"""`LazyBuffer.matmul` in both implementations (fast/graph/products.py, reference/products.py): the
direct builder makes the composed definition's nodes, node for node; the cases the direct builder
leaves to the definition; values against numpy and between fast and reference on awkward sizes and
views; and the errors, the same kind in both."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import fast
import reference
from fast.graph import products
from tests.fast.test_gemm import _check

RNG = np.random.default_rng(22)


def _array(shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _realized(array: np.ndarray, module: Any = fast, device: str = "CLANG") -> Any:
    lb = module.from_numpy(array, device)
    module.realize(lb)
    return lb


Views = Callable[[Any], Any]

# (a's array, b's array, a view of a, a view of b): transposed, head-split, shrunk, strided, flipped
# and padded operands, broadcast batches, one row, one column, primes
CASES: list[tuple[tuple[int, ...], tuple[int, ...], Views, Views]] = [
    ((37, 29), (29, 41), lambda x: x, lambda x: x),
    ((1, 7), (7, 1), lambda x: x, lambda x: x),
    ((3, 5, 13, 17), (3, 5, 17, 32), lambda x: x, lambda x: x),
    ((2, 13, 24), (2, 19, 24), lambda x: x, lambda x: x.permute((0, 2, 1))),
    ((24, 13), (24, 19), lambda x: x.permute((1, 0)), lambda x: x),
    ((2, 11, 3 * 8), (2, 11, 3 * 8), lambda x: x.reshape((2, 11, 3, 8)).permute((0, 2, 1, 3)),
     lambda x: x.reshape((2, 11, 3, 8)).permute((0, 2, 3, 1))),
    ((40, 30), (33, 20), lambda x: x.shrink(((3, 40), (2, 30))).stride((-1, 2)),
     lambda x: x.shrink(((4, 18), (1, 20))).stride((1, -1))),
    ((9, 6), (7, 5), lambda x: x.pad(((0, 0), (0, 1))), lambda x: x),
    ((5, 9, 7), (7, 4), lambda x: x, lambda x: x),
    ((9, 7), (4, 1, 7, 6), lambda x: x, lambda x: x),
    ((2, 1, 9, 7), (1, 3, 7, 6), lambda x: x, lambda x: x),
]


def _numpy_view(array: np.ndarray, view: Views) -> np.ndarray:
    """The view applied to the reference implementation's buffer, read back (the same API)."""
    return np.asarray(reference.to_numpy(view(_realized(array, reference))))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_direct_builds_the_definitions_nodes(case: int) -> None:
    a_shape, b_shape, view_a, view_b = CASES[case]
    a, b = view_a(_realized(_array(a_shape))), view_b(_realized(_array(b_shape)))
    out = a.matmul(b)
    *batch, m, n = out.shape
    full = (*batch, m, n, a.shape[-1])
    assert products.composed(a, b, full) is out
    assert products.direct(a, b, full) is out  # type: ignore[arg-type]


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_values_agree_with_numpy_and_reference(device: str, case: int) -> None:
    a_shape, b_shape, view_a, view_b = CASES[case]
    a_np, b_np = _array(a_shape), _array(b_shape)
    got = fast.to_numpy(view_a(_realized(a_np, fast, device)).matmul(view_b(_realized(b_np, fast, device))))
    ref = reference.to_numpy(view_a(_realized(a_np, reference)).matmul(view_b(_realized(b_np, reference))))
    a_view, b_view = _numpy_view(a_np, view_a), _numpy_view(b_np, view_b)
    assert got.shape == ref.shape == np.matmul(a_view, b_view).shape
    _check(got, a_view, b_view)
    _check(ref, a_view, b_view)


def test_the_cases_left_to_the_definition() -> None:
    """K of 1 (the sum is the product) and 0 (zeros), an empty M, a constant operand (folded), a
    symbolic size and an operand read through its contiguous child all build by the definition, and
    give numpy's values."""
    x = _realized(_array((6, 1)))
    y = _realized(_array((1, 5)))
    np.testing.assert_allclose(fast.to_numpy(x.matmul(y)), fast.to_numpy(x) @ fast.to_numpy(y), rtol=1e-5, atol=1e-5)
    empty_k = _realized(np.zeros((4, 0), np.float32)).matmul(_realized(np.zeros((0, 3), np.float32)))
    np.testing.assert_array_equal(fast.to_numpy(empty_k), np.zeros((4, 3), np.float32))
    assert fast.to_numpy(_realized(np.zeros((0, 3), np.float32)).matmul(_realized(_array((3, 2))))).shape == (0, 2)
    w = _realized(_array((3, 4)))
    twos = fast.LazyBuffer.loadop(fast.LoadOps.CONST, (5, 3), fast.dtypes.float32, "CLANG", 2.0)
    want = np.full((5, 3), 2.0) @ fast.to_numpy(w)
    np.testing.assert_allclose(fast.to_numpy(twos.matmul(w)), want, rtol=1e-5, atol=1e-5)
    n = fast.Variable("n", 1, 8).bind(5)
    a = _realized(_array((8, 3))).shrink(((0, n), (0, 3)))
    got = fast.to_numpy(a.matmul(w))
    np.testing.assert_allclose(got, fast.to_numpy(a) @ fast.to_numpy(w), rtol=1e-5, atol=1e-6)
    source = _realized(_array((6, 3)))
    doubled = source.e(fast.BinaryOps.ADD, source)
    child = doubled.contiguous()
    fast.realize(child)  # `doubled` is now read through its contiguous child
    want = fast.to_numpy(child) @ fast.to_numpy(w)
    np.testing.assert_allclose(fast.to_numpy(doubled.matmul(w)), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("module", [fast, reference], ids=["fast", "reference"])
def test_errors_name_matmul(module: Any) -> None:
    a, b = _realized(_array((3, 4)), module), _realized(_array((4, 5)), module)
    cases: list[tuple[type[Exception], Callable[[], Any]]] = [
        (ValueError, lambda: a.reshape((12,)).matmul(b)),
        (ValueError, lambda: a.matmul(_realized(_array((5, 5)), module))),
        (ValueError, lambda: _realized(_array((2, 3, 4)), module).matmul(_realized(_array((3, 4, 5)), module))),
        (TypeError, lambda: a.matmul(_realized(_array((4, 5), np.float64), module))),
        (TypeError, lambda: a.matmul(np.ones((4, 5), np.float32))),
        (ValueError, lambda: a.matmul(_realized(_array((4, 5)), module, "LLVM"))),
    ]
    for kind, call in cases:
        with pytest.raises(kind, match="matmul"):
            call()
    disk = module.LazyBuffer.loadop(module.LoadOps.EMPTY, (3, 4), module.dtypes.float32, "DISK:/tmp/none")
    with pytest.raises(RuntimeError, match="matmul"):
        disk.matmul(disk.reshape((4, 3)))
