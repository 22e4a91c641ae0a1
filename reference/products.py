"""``LazyBuffer.matmul``: a (..., M, K) @ b (..., K, N) as the expand-multiply-sum that defines it (the
same definition as fast/graph/products.py, op by op): a read as (..., M, 1, K), b with its last two
axes swapped as (..., 1, N, K), both expanded to (..., M, N, K) (batch axes broadcast as numpy's
do), multiplied, summed over K, and the kept axis of size 1 dropped."""
from __future__ import annotations

from typing import TYPE_CHECKING

from reference.ops import BinaryOps, ReduceOps

if TYPE_CHECKING:
    from reference.lazy import LazyBuffer


def matmul(a: LazyBuffer, b: LazyBuffer) -> LazyBuffer:
    """a @ b (``b`` already known to be a LazyBuffer); ValueError/TypeError/RuntimeError as
    docs/api.md states for ``matmul``."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ValueError(f"matmul: operands must be at least 2-d, got shapes {a.shape} and {b.shape}")
    if b.device != a.device:
        raise ValueError(f"matmul: operands live on different devices {a.device} and {b.device}")
    if a.device.startswith("DISK:"):
        raise RuntimeError(f"matmul: cannot compute on device {a.device} (DISK holds data only)")
    if b.dtype != a.dtype:
        raise TypeError(f"matmul: operand dtypes differ: {a.dtype.name} and {b.dtype.name}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: the inner sizes differ: shapes {a.shape} and {b.shape}")
    batch = _broadcast(a.shape, b.shape)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    full = (*batch, m, n, k)
    left = a.reshape((1,) * (len(full) - 1 - len(a.shape)) + (*a.shape[:-1], 1, k)).expand(full)
    order = tuple(range(len(b.shape)))
    swapped = b.permute((*order[:-2], order[-1], order[-2]))
    right = swapped.reshape((1,) * (len(full) - 1 - len(b.shape)) + (*b.shape[:-2], 1, n, k)).expand(full)
    return left.e(BinaryOps.MUL, right).r(ReduceOps.SUM, (len(full) - 1,)).reshape((*batch, m, n))


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The batch axes of a @ b: the axes before the last two, aligned on the right, each pair equal or
    one of them 1."""
    left, right = a[:-2], b[:-2]
    rank = max(len(left), len(right))
    left, right = (1,) * (rank - len(left)) + left, (1,) * (rank - len(right)) + right
    if any(x != y and x != 1 and y != 1 for x, y in zip(left, right, strict=True)):
        raise ValueError(f"matmul: the batch axes of shapes {a} and {b} do not broadcast")
    return tuple(y if x == 1 else x for x, y in zip(left, right, strict=True))
