"""A float SUM of products rounds each product to its dtype before adding it (docs/semantics.md),
so a product that overflows is an infinity in the sum, whatever the accumulation order. A fused
multiply-add in the accumulation would keep the exact product instead: the conformance full profile
caught it (a column `max * x` summed, where `-inf + inf` must give NaN and the fused sum gave -inf),
see docs/architecture.md. These are that program, shrunk, and matmuls (scalar, vector and tail
accumulators) whose products overflow."""
from __future__ import annotations

import numpy as np
import pytest
from kernel_values import matmul_graph

import fast
import reference

DEVICES = ["CLANG", "LLVM"]
BIG = np.float32(3.4028234663852886e38)


@pytest.mark.parametrize("device", DEVICES)
def test_the_conformance_program_agrees_with_reference(device: str) -> None:
    data = np.zeros(30, np.float32)
    data[6], data[26] = -8.0, BIG
    results = []
    for pkg in (reference, fast):
        x = pkg.from_numpy(data.reshape((6, 5, 1)), device)
        products = x.r(pkg.ReduceOps.MAX, (0,)).expand((6, 5, 1)).e(pkg.BinaryOps.MUL, x)
        total = products.r(pkg.ReduceOps.SUM, (0,)).expand((6, 5, 1)).e(pkg.BinaryOps.ADD, products)
        results.append(pkg.to_numpy(total.e(pkg.BinaryOps.ADD, total)))
    np.testing.assert_array_equal(results[1], results[0])
    assert np.isnan(results[1][0, 1, 0])  # -inf + inf in the column holding both overflows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,pad", [(1, 0), (16, 0), (37, 0), (256, 253)])
def test_overflowing_products_are_infinities_in_the_sum(device: str, n: int, pad: int) -> None:
    """Column 0 multiplies by (4, 4), the others by (1, 2). Row 0: an overflow to +inf and one to
    -inf (NaN) in column 0, 2e38 + (-inf) elsewhere; row 1: NaN in column 0, elsewhere -3e38 plus a
    product 5e38 that overflows (+inf, though the exact sum 2e38 is finite); the rest: finite. With
    `pad` rows the kernel is large enough to be lowered with FMA, and the guard runs it unfused."""
    x = np.array([[2e38, -2e38], [-3e38, 2.5e38]] + [[1.5, -2.0]] * (1 + pad), np.float32)
    y = np.tile(np.array([[1.0], [2.0]], np.float32), (1, n))
    y[:, 0] = [4.0, 4.0]
    with np.errstate(over="ignore", invalid="ignore"):
        want = (x[:, :, None] * y[None, :, :]).sum(axis=1)  # products rounded to float32, then summed
    got = fast.to_numpy(matmul_graph(fast.from_numpy(x, device), fast.from_numpy(y, device)))
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[:2, 0]).all() and (got[0, 1:] == -np.inf).all() and (got[1, 1:] == np.inf).all()
    assert (got[2:] == np.where(np.arange(n) == 0, -2.0, -2.5)).all()
