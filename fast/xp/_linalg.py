"""Linear algebra: matmul, tensordot, vecdot, and the `linalg` extension functions we provide.

`matmul` is the expand-multiply-sum of the backend's `LazyBuffer.matmul` (docs/api.md): a as
(..., M, 1, K), b transposed as (..., 1, N, K), multiplied and summed over K: one reduce, so it
fuses with elementwise work before it and after it like any reduction. Batch dimensions
broadcast; 1-d operands are promoted and the added axis removed, as the standard says. Integer
products wrap in the promoted dtype. Sharded operands (MultiLazyBuffer) build the same graph op by
op here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fast.xp._array import Array
from fast.xp._backend import LB
from fast.xp._base import broadcast_shapes, normalize_axis
from fast.xp._elementwise import NUMERIC
from fast.xp._index import IndexMixin


class LinalgMixin(IndexMixin):
    """matmul tensordot vecdot (matrix_transpose is in the manipulation group) and linalg helpers."""

    def matmul(self, x1: Any, x2: Any, /) -> Array:
        a, b = self._array("matmul", x1), self._array("matmul", x2)
        self._same_device("matmul", [a, b])
        if not a.ndim or not b.ndim:
            raise ValueError(f"matmul: operands must be at least 1-d, got shapes {a.shape} and {b.shape}")
        name = self.result_type(a, b).name
        self._check_kind("matmul", name, "b" + NUMERIC)
        la, lb = self._cast(a._lb, name), self._cast(b._lb, name)
        sa = a.shape if a.ndim > 1 else (1, a.shape[0])
        sb = b.shape if b.ndim > 1 else (b.shape[0], 1)
        if sa[-1] != sb[-2]:
            raise ValueError(f"matmul: inner dimensions differ: shapes {a.shape} and {b.shape}")
        batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
        (m, k), n = sa[-2:], sb[-1]
        shape = (*batch, *((m,) if a.ndim > 1 else ()), *((n,) if b.ndim > 1 else ()))
        plain = self._backend.LazyBuffer
        if type(la) is plain and type(lb) is plain:  # the backend's matmul: the same graph, built faster
            return self._wrap(la.reshape(sa).matmul(lb.reshape(sb)).reshape(shape))
        full = (*batch, m, n, k)
        left = self._expand(la.reshape((*sa[:-2], m, 1, k)), full)
        right = lb.reshape(sb)
        right = right.permute((*range(len(sb) - 2), len(sb) - 1, len(sb) - 2)).reshape((*sb[:-2], 1, n, k))
        out = self._mul(left, self._expand(right, full)).r(self._backend.Reduce.SUM, (len(full) - 1,))
        return self._wrap(out.reshape(shape))

    def tensordot(self, x1: Any, x2: Any, /, *, axes: int | tuple[Sequence[int], Sequence[int]] = 2) -> Array:
        a, b = self._array("tensordot", x1), self._array("tensordot", x2)
        if isinstance(axes, int):
            if axes < 0 or axes > min(a.ndim, b.ndim):
                raise ValueError(f"tensordot: axes={axes} is out of range for shapes {a.shape} and {b.shape}")
            ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
        else:
            ax_a = [normalize_axis("tensordot", i, a.ndim) for i in axes[0]]
            ax_b = [normalize_axis("tensordot", i, b.ndim) for i in axes[1]]
        if len(ax_a) != len(ax_b) or any(a.shape[i] != b.shape[j] for i, j in zip(ax_a, ax_b, strict=True)):
            raise ValueError(f"tensordot: axes {axes} do not pair equal dimensions of {a.shape} and {b.shape}")
        free_a = [i for i in range(a.ndim) if i not in ax_a]
        free_b = [i for i in range(b.ndim) if i not in ax_b]
        k = self._size(a, ax_a)
        left = self.reshape(self.permute_dims(a, (*free_a, *ax_a)), (self._size(a, free_a), k))
        right = self.reshape(self.permute_dims(b, (*ax_b, *free_b)), (k, self._size(b, free_b)))
        out = self.matmul(left, right)
        return self.reshape(out, (*(a.shape[i] for i in free_a), *(b.shape[i] for i in free_b)))

    def _size(self, arr: Array, axes: Sequence[int]) -> int:
        size = 1
        for i in axes:
            size *= arr.shape[i]
        return size

    def vecdot(self, x1: Any, x2: Any, /, *, axis: int = -1) -> Array:
        (a, b), name = self._operands("vecdot", x1, x2)
        self._check_kind("vecdot", name, NUMERIC)
        ax = normalize_axis("vecdot", axis, len(a.shape))
        if int(self._array("vecdot", x1).shape[axis]) != int(self._array("vecdot", x2).shape[axis]):
            raise ValueError("vecdot: the contracted axis differs in size")
        out: LB = self._mul(a, b).r(self._backend.Reduce.SUM, (ax,))
        return self._wrap(out.reshape(tuple(int(s) for i, s in enumerate(a.shape) if i != ax)))

    def vector_norm(self, x: Any, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False,
                    ord: float = 2) -> Array:  # noqa: A002
        """linalg.vector_norm for ord 1, 2, inf, -inf and other positive finite ord (via pow)."""
        arr = self._array("vector_norm", x)
        self._check_kind("vector_norm", arr.dtype.name, "f")
        mag = self.abs(arr)
        if ord == float("inf"):
            return self.max(mag, axis=axis, keepdims=keepdims)
        if ord == float("-inf"):
            return self.min(mag, axis=axis, keepdims=keepdims)
        if ord == 1:
            return self.sum(mag, axis=axis, keepdims=keepdims)
        if ord == 2:
            return self.sqrt(self.sum(mag * mag, axis=axis, keepdims=keepdims))
        if ord <= 0:
            raise ValueError(f"vector_norm: ord={ord} is not supported (1, 2, inf, -inf or positive)")
        return self.pow(self.sum(self.pow(mag, float(ord)), axis=axis, keepdims=keepdims), 1.0 / ord)

    def outer(self, x1: Any, x2: Any, /) -> Array:
        a, b = self._array("outer", x1), self._array("outer", x2)
        if a.ndim != 1 or b.ndim != 1:
            raise ValueError(f"outer: needs 1-d arrays, got shapes {a.shape} and {b.shape}")
        return self.multiply(self.reshape(a, (-1, 1)), self.reshape(b, (1, -1)))
