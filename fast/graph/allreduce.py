"""The all-reduce of sharded reductions (SPEC §5), split out of fast/graph/multi.py: naive or ring.

Every function takes equally shaped per-device lazy buffers and builds lazy graphs only (copies and
elementwise combines); nothing runs until realized. Combination order is fixed (part order, or the
ring's chunk order), so every device ends up with the same bits.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import reduce
from itertools import accumulate

from fast import config
from fast.graph.node import LazyBuffer
from fast.ops import BinaryOps, ReduceOps

Shape = tuple[int, ...]
Bound = tuple[int, int]

RING_MIN_ELEMENTS = 256_000  # RING=1: ring only above this many elements (and more than 2 devices)
RING_FACTORS = (32, 16, 8, 4, 2, 1)  # chunk sizes are multiples of the largest of these dividing numel
_COMBINE = {ReduceOps.SUM: BinaryOps.ADD, ReduceOps.MAX: BinaryOps.MAX}


# ---------------------------------------------------------------- all-reduce

def use_ring(ndev: int, numel: int, ring_level: int) -> bool:
    """SPEC §5: ring when RING >= 2, or RING >= 1 with more than 2 devices and > 256,000 elements."""
    if ring_level >= 2:
        return True
    return ring_level >= 1 and ndev > 2 and numel > RING_MIN_ELEMENTS


def ring_chunks(numel: int, ndev: int) -> list[Bound]:
    """The ring's chunks of a flat tensor of `numel` elements, as ordered, disjoint, non-empty
    `[start, end)` ranges covering `range(numel)` exactly once; at most `ndev` of them."""
    if ndev < 1 or numel < 0:
        raise ValueError(f"ring_chunks: need ndev >= 1 and numel >= 0, got ndev={ndev}, numel={numel}")
    factor = next(f for f in RING_FACTORS if numel % f == 0)
    base, extra = divmod(numel // factor, ndev)
    sizes = [factor * (base + (1 if index < extra else 0)) for index in range(ndev)]
    return [(start, end) for start, end in cumulative(sizes) if end > start]


def all_reduce(op: ReduceOps, parts: Sequence[LazyBuffer]) -> list[LazyBuffer]:
    """Combine equally shaped `parts` (one per device) with `op`; returns one buffer per part, on the
    part's device, each holding the combination of all parts. Naive or ring per `use_ring`."""
    if op not in _COMBINE:
        raise TypeError(f"all_reduce: {op} is not a reduce op")
    if len(parts) == 1:
        return list(parts)
    numel = math.prod(dims(parts[0]))
    if use_ring(len(parts), numel, config.get().ring):
        return _ring_all_reduce(_COMBINE[op], parts)
    return _naive_all_reduce(_COMBINE[op], parts)


def fold(op: BinaryOps, buffers: Sequence[LazyBuffer]) -> LazyBuffer:
    """`buffers[0] op buffers[1] op ...`, left to right (a fixed order: every device gets the same bits)."""
    return reduce(lambda total, buffer: total.e(op, buffer), buffers[1:], buffers[0])


def _naive_all_reduce(op: BinaryOps, parts: Sequence[LazyBuffer]) -> list[LazyBuffer]:
    """Every device combines copies of all parts, in part order."""
    return [fold(op, [part.copy_to_device(target.device) for part in parts]) for target in parts]


def _ring_all_reduce(op: BinaryOps, parts: Sequence[LazyBuffer]) -> list[LazyBuffer]:
    """Reduce-scatter then all-gather around the ring of devices, on flattened chunks.

    After reduce-scatter step s, device (c+s+1) % ndev holds chunk c combined over devices
    c .. c+s+1; so after ndev-1 steps chunk c is complete on device (c-1) % ndev, from which the
    all-gather passes it on, one device per step."""
    ndev, shape = len(parts), dims(parts[0])
    numel = math.prod(shape)
    chunks = ring_chunks(numel, ndev)
    if not chunks:  # zero elements: nothing to combine
        return list(parts)
    devices = [part.device for part in parts]
    flat = [part.reshape((numel,)) for part in parts]
    pieces = [[row.shrink((chunk,)) for chunk in chunks] for row in flat]  # pieces[device][chunk]
    for step in range(ndev - 1):
        for chunk in range(len(chunks)):
            source, target = (chunk + step) % ndev, (chunk + step + 1) % ndev
            incoming = pieces[source][chunk].copy_to_device(devices[target])
            pieces[target][chunk] = pieces[target][chunk].e(op, incoming)
    for step in range(ndev - 1):
        for chunk in range(len(chunks)):
            source = (chunk + ndev - 1 + step) % ndev
            target = (source + 1) % ndev
            pieces[target][chunk] = pieces[source][chunk].copy_to_device(devices[target])
    return [_assemble(row, chunks, numel).reshape(shape) for row in pieces]


def _assemble(pieces: Sequence[LazyBuffer], chunks: Sequence[Bound], numel: int) -> LazyBuffer:
    """Concatenate flat chunks: pad each into place and add (the padding is zeros)."""
    if len(pieces) == 1:
        return pieces[0]
    placed = [piece.pad(((start, numel - end),)) for piece, (start, end) in zip(pieces, chunks, strict=True)]
    return fold(BinaryOps.ADD, placed)


def dims(lb: LazyBuffer) -> Shape:
    """A shard's shape as ints (multi buffers hold concrete shapes only: checked by `_concrete`)."""
    return lb.shape  # type: ignore[return-value]  # (no typing.cast call: a hot path)


def cumulative(sizes: Sequence[int]) -> list[Bound]:
    """Consecutive `[start, end)` ranges of the given sizes, starting at 0."""
    edges = list(accumulate(sizes, initial=0))
    return list(zip(edges[:-1], edges[1:], strict=True))
