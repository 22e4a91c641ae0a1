"""The lazy graphs the benchmark times, written the way users write them with the LazyBuffer API.

Every builder takes realized input buffers and returns the (unrealized) output buffer. Nothing here
realizes, schedules or times anything.
"""
from __future__ import annotations

import math
from typing import Any

from fast import BinaryOps, LazyBuffer, ReduceOps, UnaryOps

LOG2_E = 1.0 / math.log(2.0)


def dims(x: LazyBuffer) -> tuple[int, ...]:
    """The shape of `x` as plain integers (the benchmark builds no symbolic shapes)."""
    sizes: list[int] = []
    for size in x.shape:
        if not isinstance(size, int):
            raise TypeError(f"symbolic shape {x.shape} is not supported here")
        sizes.append(size)
    return tuple(sizes)


def exp(x: LazyBuffer) -> LazyBuffer:
    """e**x as the LazyBuffer API spells it: EXP2(x * log2(e)) (two ops)."""
    return x.e(BinaryOps.MUL, x.const(LOG2_E)).e(UnaryOps.EXP2)


def elementwise_chain(a: LazyBuffer, b: LazyBuffer, c: LazyBuffer) -> LazyBuffer:
    """exp(a*b + c) * 0.5 + a - b*c: eight elementwise ops (MUL ADD MUL EXP2 MUL ADD MUL SUB)."""
    e = exp(a.e(BinaryOps.MUL, b).e(BinaryOps.ADD, c))
    left = e.e(BinaryOps.MUL, e.const(0.5)).e(BinaryOps.ADD, a)
    return left.e(BinaryOps.SUB, b.e(BinaryOps.MUL, c))


def total_sum(x: LazyBuffer) -> LazyBuffer:
    """The sum of every element (shape (1,) for a 1-d input)."""
    return x.r(ReduceOps.SUM, tuple(range(len(x.shape))))


def mul_add_sum(a: Any, b: Any, c: Any) -> Any:
    """(a*b + c).sum() over every axis; the operands are LazyBuffers or MultiLazyBuffers (sharded
    alike: the sum over the sharded axis is then all-reduced)."""
    return a.e(BinaryOps.MUL, b).e(BinaryOps.ADD, c).r(ReduceOps.SUM, tuple(range(len(a.shape))))


def axis_sum(x: LazyBuffer, axis: int) -> LazyBuffer:
    """Sums over one axis of a matrix, reduced axis kept with size 1."""
    return x.r(ReduceOps.SUM, (axis,))


def _broadcast_rows(x: LazyBuffer, reduced: LazyBuffer) -> LazyBuffer:
    """A (rows, 1) per-row value expanded back to the shape of `x`."""
    return reduced.expand(x.shape)


def softmax(x: LazyBuffer) -> LazyBuffer:
    """Row softmax of a matrix: exp(x - rowmax) / rowsum."""
    shifted = x.e(BinaryOps.SUB, _broadcast_rows(x, x.r(ReduceOps.MAX, (1,))))
    numerator = exp(shifted)
    return numerator.e(BinaryOps.DIV, _broadcast_rows(x, numerator.r(ReduceOps.SUM, (1,))))


def layernorm(x: LazyBuffer, eps: float = 1e-5) -> LazyBuffer:
    """(x - mean) / sqrt(var + eps) over the rows of a matrix (no scale or shift)."""
    inv_n = 1.0 / dims(x)[1]
    mean = x.r(ReduceOps.SUM, (1,))
    mean = mean.e(BinaryOps.MUL, mean.const(inv_n))
    centered = x.e(BinaryOps.SUB, _broadcast_rows(x, mean))
    var = centered.e(BinaryOps.MUL, centered).r(ReduceOps.SUM, (1,))
    var = var.e(BinaryOps.MUL, var.const(inv_n))
    std = var.e(BinaryOps.ADD, var.const(eps)).e(UnaryOps.SQRT)
    return centered.e(BinaryOps.DIV, _broadcast_rows(x, std))


def matmul(a: LazyBuffer, b: LazyBuffer) -> LazyBuffer:
    """a @ b (M, K) @ (K, N): `LazyBuffer.matmul`, the expand-multiply-sum a as (M, 1, K), b
    transposed as (1, N, K), SUM over K."""
    return a.matmul(b)


def matrix_transpose(x: LazyBuffer) -> LazyBuffer:
    """x with its last two axes swapped (a view): `W.T` of a linear layer's weight, `k.mT` of attention."""
    order = tuple(range(len(x.shape)))
    return x.permute((*order[:-2], order[-1], order[-2]))


def batched_matmul(a: LazyBuffer, b: LazyBuffer) -> LazyBuffer:
    """a (..., M, K) @ b (..., K, N): `LazyBuffer.matmul`, the expand-multiply-sum over K of a as
    (..., M, 1, K) and b transposed as (..., 1, N, K)."""
    return a.matmul(b)


def matmul_bt(a: LazyBuffer, b: LazyBuffer) -> LazyBuffer:
    """a @ b.T, b stored (..., N, K) as PyTorch stores a linear layer's weight (and attention's k)."""
    return batched_matmul(a, matrix_transpose(b))


def matmul_at(a: LazyBuffer, b: LazyBuffer) -> LazyBuffer:
    """a.T @ b, a stored (..., K, M): the layout of a weight's gradient, x.T @ dy."""
    return batched_matmul(matrix_transpose(a), b)


def sliding_windows(x: LazyBuffer, k: int) -> LazyBuffer:
    """Windows of size k (stride 1) over the last two axes of (N, C, H, W) -> (N, C, H-k+1, W-k+1, k, k).

    The movement-op trick, per axis of size i: repeat the axis r = ceil(k*(i+1)/i) times (expand a new
    axis and flatten, so flat position p holds x[p mod i]), keep the first k*(i+1) positions, view them
    as (k, i+1) (row ky, column j holds x[(ky+j) mod i] = x[ky+j] for j < i-k+1) and keep the first
    i-k+1 columns. No data moves: every step is a view.
    """
    n, c, h, w = dims(x)
    oh, ow = h - k + 1, w - k + 1
    rh, rw = math.ceil(k * (h + 1) / h), math.ceil(k * (w + 1) / w)
    x = x.reshape((n, c, 1, h, 1, w)).expand((n, c, rh, h, rw, w)).reshape((n, c, rh * h, rw * w))
    x = x.shrink(((0, n), (0, c), (0, k * (h + 1)), (0, k * (w + 1))))
    x = x.reshape((n, c, k, h + 1, k, w + 1)).shrink(((0, n), (0, c), (0, k), (0, oh), (0, k), (0, ow)))
    return x.permute((0, 1, 3, 5, 2, 4))


def conv2d(x: LazyBuffer, weight: LazyBuffer, padding: int) -> LazyBuffer:
    """Cross-correlation of (N, Cin, H, W) with (Cout, Cin, k, k), stride 1, zero padding -> (N, Cout, OH, OW)."""
    n, cin, _, _ = dims(x)
    cout, _, k, _ = dims(weight)
    padded = x.pad(((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = sliding_windows(padded, k)  # (N, Cin, OH, OW, k, k)
    oh, ow = dims(windows)[2:4]
    full = (n, cout, cin, oh, ow, k, k)
    left = windows.reshape((n, 1, cin, oh, ow, k, k)).expand(full)
    right = weight.reshape((1, cout, cin, 1, 1, k, k)).expand(full)
    return left.e(BinaryOps.MUL, right).r(ReduceOps.SUM, (2, 5, 6)).reshape((n, cout, oh, ow))


def graph_chain(leaf: LazyBuffer, nodes: int) -> LazyBuffer:
    """`nodes` elementwise nodes alternating ADD of a fresh constant and MUL by the leaf."""
    x = leaf
    for step in range(nodes):
        if step % 2 == 0:
            x = x.e(BinaryOps.ADD, x.const(float(step + 2)))
        else:
            x = x.e(BinaryOps.MUL, leaf)
    return x


def add_const(x: LazyBuffer, value: float) -> LazyBuffer:
    """x + value: a scalar constant that a program changes from call to call (a learning rate, a step)."""
    return x.e(BinaryOps.ADD, x.const(value))
