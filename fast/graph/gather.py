"""`LazyBuffer.gather(indices, axis)`: the graph node of an indexed read (`xp.take`, `x[int_array]`).

The node is a base of op `GatherOps.GATHER`, arg `axis`, srcs `(x, indices)`, of shape
`x.shape[:axis] + indices.shape + x.shape[axis + 1:]` and x's dtype. Its value at position
`(a..., i..., b...)` is `x[a..., indices[i...], b...]`, an index `k` in `[-n, -1]` reading `k + n`
(n = `x.shape[axis]`); any other index outside `[0, n)` is an IndexError raised when the node is
realized (docs/semantics.md, "Gather").

Invariants that the scheduler and lowering rely on:
- `indices` is read through a contiguous view of its whole base (`contiguous()` makes it so, copying
  a strided, flipped, padded or constant view first): the engine checks exactly the first
  `indices.size` elements of that base's buffer for out-of-range values before the kernel runs
  (engine/gathers.py), the same values `reference` checks.
- `x` is read through any view; the scheduler realizes x's base and the indices' base
  (fusion.py), so a kernel reads both from buffers: x as a gathered LOAD (codegen/gather.py).
Nothing is folded: a gather of a constant still checks its indices.
"""
from __future__ import annotations

from fast.graph import node
from fast.graph.keys import tracker
from fast.graph.node import OPERATIONS, LazyBuffer
from fast.ops import GatherOps


def gather(x: LazyBuffer, indices: LazyBuffer, axis: int) -> LazyBuffer:
    """The GATHER node of validated arguments (checks.check_gather ran); see the module docstring."""
    idx = node.redirect(indices).contiguous()
    source = node.redirect(x)
    shape = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])
    return node.create(x.device, tracker(shape), x.dtype, GatherOps.GATHER, axis, (source, idx))


OPERATIONS.gather = gather
