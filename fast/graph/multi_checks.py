"""Validation of MultiLazyBuffer arguments and layouts (SPEC §5), split out of fast/graph/multi.py.

Pure checks: each reads its arguments only and raises ValueError naming the op and the offending
values, so a multi-buffer method validates everything before it builds anything.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, itemgetter
from typing import Any, NoReturn, Protocol

import numpy as np

from fast.graph.allreduce import Bound, Shape, dims
from fast.graph.node import LazyBuffer
from fast.shape.symbolic import all_int

_DTYPE, _SHAPE = attrgetter("dtype"), attrgetter("shape")


class Layout(Protocol):
    """What `check_operands` reads of a multi buffer (fast/graph/multi.py's MultiLazyBuffer)."""

    @property
    def device(self) -> tuple[str, ...]: ...

    @property
    def shape(self) -> Shape: ...


def check_ints(op: str, name: str, values: Any, length: int | None = None) -> tuple[int, ...]:
    """`values` as a tuple of Python ints (of `length` entries when given), else ValueError."""
    try:
        items = tuple(values)
    except TypeError as error:
        raise ValueError(f"{op}: {name} must be a sequence of ints, got {values!r}") from error
    if not all_int(items):  # (the common case, plain ints, needs no conversion)
        if not all(isinstance(item, (int, np.integer)) and not isinstance(item, bool) for item in items):
            raise ValueError(f"{op}: {name} must be a sequence of ints, got {values!r}")
        items = tuple(int(item) for item in items)
    if length is not None and len(items) != length:
        raise ValueError(f"{op}: {name} {items} needs {length} entries")
    return items


def check_pairs(op: str, arg: Any, shape: Shape) -> tuple[Bound, ...]:
    """`arg` as one (int, int) pair per dimension of `shape`, else ValueError."""
    try:
        pairs = tuple(check_ints(op, "each pair", pair, 2) for pair in arg)
    except TypeError as error:
        raise ValueError(f"{op}: argument must be a sequence of pairs, got {arg!r}") from error
    if len(pairs) != len(shape):
        raise ValueError(f"{op}: argument {arg!r} needs {len(shape)} pairs for shape {shape}")
    return tuple((pair[0], pair[1]) for pair in pairs)


def check_operands(op: str, operands: Sequence[Any], multi_type: type[Layout]) -> None:
    """Every operand is a `multi_type` (the MultiLazyBuffer class: this module, which multi.py imports,
    never imports multi.py) on the same devices, with the same shape."""
    for operand in operands:
        if not isinstance(operand, multi_type):
            raise ValueError(f"{op}: every operand must be a MultiLazyBuffer, got {type(operand).__name__}")
        if operand.device != operands[0].device:
            raise ValueError(f"{op}: operands live on different devices {operands[0].device} and {operand.device}")
        if operand.shape != operands[0].shape:
            raise ValueError(f"{op}: operand shapes differ: {operands[0].shape} and {operand.shape}")


def check_layout(shards: Sequence[LazyBuffer], axis: int | None, real: Sequence[bool]) -> Shape:
    """Validate a multi buffer's layout (module docstring of fast/graph/multi.py); returns its logical shape
    (the first shard's, with the real shards' sizes summed along `axis`). Loops, no generators."""
    if not shards:
        raise ValueError("MultiLazyBuffer: needs at least one shard")
    if len(real) != len(shards) or not any(real):
        raise ValueError(f"MultiLazyBuffer: real={list(real)} needs one flag per shard ({len(shards)}), "
                         "at least one True")
    if not all(map(isinstance, shards, repeat(LazyBuffer))):
        raise ValueError(f"MultiLazyBuffer: shards must be LazyBuffers, got {[type(x).__name__ for x in shards]}")
    dtypes = list(map(_DTYPE, shards))
    if dtypes.count(dtypes[0]) != len(dtypes):  # (C-level: identical dtypes compare by identity)
        raise ValueError(f"MultiLazyBuffer: shards have different dtypes {dtypes}")
    first = concrete("MultiLazyBuffer", shards[0])
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(first)):
        raise ValueError(f"MultiLazyBuffer: axis {axis!r} is out of range for shape {first}")
    shapes: list[Shape] = list(map(_SHAPE, shards))
    if not all_int(chain.from_iterable(shapes)):
        shapes = [concrete("MultiLazyBuffer", lb) for lb in shards]  # raises for the first symbolic shard
    if axis is None:
        if shapes.count(first) != len(shapes):
            _shapes_differ(shards, axis)
        return first
    rank = len(first)
    same_rank = list(map(len, shapes)).count(rank) == len(shapes)
    if not same_rank or (rank > 1 and _unequal(shapes, first, [d for d in range(rank) if d != axis])):
        _shapes_differ(shards, axis)
    return (*first[:axis], sum(compress(map(itemgetter(axis), shapes), real)), *first[axis + 1:])


def _unequal(shapes: list[Shape], first: Shape, axes: list[int]) -> bool:
    """Whether some shape differs from `first` on `axes` (non-empty; C-level passes only)."""
    pick = itemgetter(*axes)
    return list(map(pick, shapes)).count(pick(first)) != len(shapes)


def _shapes_differ(shards: Sequence[LazyBuffer], axis: int | None) -> NoReturn:
    raise ValueError(f"MultiLazyBuffer: shard shapes {[dims(x) for x in shards]} differ "
                     f"{'' if axis is None else f'outside axis {axis}'}")


def concrete(op: str, lb: LazyBuffer) -> Shape:
    """`lb`'s shape, or ValueError when it is symbolic (sharding needs concrete sizes)."""
    if not all_int(lb.shape) and not all(isinstance(size, int) for size in lb.shape):
        raise ValueError(f"{op}: symbolic shape {lb.shape} is not supported for sharded buffers")
    return dims(lb)
