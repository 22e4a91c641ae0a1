"""`LazyBuffer.matmul`: a (..., M, K) @ b (..., K, N) as the expand-multiply-sum that defines it. a
is read as (..., M, 1, K), b with its last two axes swapped as (..., 1, N, K), both expanded to
(..., M, N, K) (batch axes broadcast), multiplied and summed over K; the kept axis of size 1 is
then dropped. There is no matmul node: the engine's GEMM lowering recognises the reduce
(codegen/gemm.py), which also fuses with the work around it like any reduce.

Two builders make the same nodes (the weak cache gives the same objects for the same keys):
- `composed`: the definition, op by op, through the public methods. It takes every case: symbolic
  sizes, constant or redirected operands, K of 0 or 1, zero sizes, a reduce that splits.
- `direct`, for the common case (two non-constant buffers of integer shapes, no contiguous child, K
  > 1, nothing empty): each operand's final tracker composed in one step (memoised per input
  tracker), the views built straight on the bases, then the multiply, the reduce (unless it splits)
  and the result's view, skipping the four intermediate views and the re-validation of arguments
  made here. A `p @ v` call builds its graph in about a quarter of the composed path's time: the
  eager cost that sits beside a 1 ms kernel (docs/performance.md, session 22).

Invariant: `direct(a, b, batch)` is `composed(a, b, batch)` node for node wherever it applies
(tests/fast/test_products.py builds both and compares the objects).
"""
from __future__ import annotations

import functools

from fast.graph import node
from fast.graph.node import OPERATIONS, LazyBuffer
from fast.graph.operations import reduce_node, split_plan
from fast.ops import LOAD_CONST, BinaryOps, ReduceOps
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import sint


def matmul(a: LazyBuffer, b: LazyBuffer, batch: tuple[sint, ...]) -> LazyBuffer:
    """a @ b for validated operands (checks.check_matmul), `batch` the result's batch axes."""
    full = full_shape(a, b, batch)
    k = full[-1]
    if type(k) is int and k > 1 and _plain(a) and _plain(b) and 0 not in full:
        return direct(a, b, full)  # type: ignore[arg-type]
    return composed(a, b, full)


OPERATIONS.matmul = matmul


def full_shape(a: LazyBuffer, b: LazyBuffer, batch: tuple[sint, ...]) -> tuple[sint, ...]:
    """(*batch, M, N, K): the shape the operands are expanded to."""
    return (*batch, a.shape[-2], b.shape[-1], a.shape[-1])


def _plain(x: LazyBuffer) -> bool:
    """x's graph takes the direct path: its base is not a constant and has no contiguous child, and its
    tracker holds no symbolic value (sizes, strides, offset or mask)."""
    base = x._base or x
    return base.op is not LOAD_CONST and base.contiguous_child is None and not x.st.symbolic


def composed(a: LazyBuffer, b: LazyBuffer, full: tuple[sint, ...]) -> LazyBuffer:
    """The definition, one public op at a time (`full`: (*batch, M, N, K))."""
    *batch, m, n, k = full
    a_lead, b_lead = (1,) * (len(batch) + 2 - len(a.shape)), (1,) * (len(batch) + 2 - len(b.shape))
    left = a.reshape((*a_lead, *a.shape[:-1], 1, k)).expand(full)
    order = tuple(range(len(b.shape)))
    swapped = b.permute((*order[:-2], order[-1], order[-2]))
    right = swapped.reshape((*b_lead, *b.shape[:-2], 1, n, k)).expand(full)
    return left.e(BinaryOps.MUL, right).r(ReduceOps.SUM, (len(full) - 1,)).reshape((*batch, m, n))


def direct(a: LazyBuffer, b: LazyBuffer, full: tuple[int, ...]) -> LazyBuffer:
    """The nodes `composed` ends with, built without its intermediate views (module docstring)."""
    left = node.view_of(a._base or a, _left_tracker(a.st, full))
    right = node.view_of(b._base or b, _right_tracker(b.st, full))
    product = left.e(BinaryOps.MUL, right)
    axes = (len(full) - 1,)
    base = product._base or product
    if product is base and base.op is BinaryOps.MUL and base.contiguous_child is None \
            and split_plan(product, axes) is None:
        total = reduce_node(product, ReduceOps.SUM, axes)
    else:  # folded or split: the reduce as `r` builds it
        total = OPERATIONS.reduce(product, ReduceOps.SUM, axes)
    return node.move(total, ShapeTracker.reshape, full[:-1])


@functools.lru_cache(maxsize=1024)
def _left_tracker(st: ShapeTracker, full: tuple[int, ...]) -> ShapeTracker:
    """a's tracker read as (..., M, 1, K) and expanded to `full` (a non-symbolic tracker: memoised)."""
    shape = st.shape
    lead = (1,) * (len(full) - 1 - len(shape))
    return st.reshape((*lead, *shape[:-1], 1, shape[-1])).expand(full)


@functools.lru_cache(maxsize=1024)
def _right_tracker(st: ShapeTracker, full: tuple[int, ...]) -> ShapeTracker:
    """b's tracker with its last two axes swapped, read as (..., 1, N, K) and expanded to `full`."""
    shape = st.shape
    order = tuple(range(len(shape)))
    lead = (1,) * (len(full) - 1 - len(shape))
    swapped = st.permute((*order[:-2], order[-1], order[-2]))
    return swapped.reshape((*lead, *shape[:-2], 1, shape[-1], shape[-2])).expand(full)
