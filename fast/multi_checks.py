"""Validation of MultiLazyBuffer arguments and layouts (SPEC §5), split out of fast/multi.py.

Pure checks: each reads its arguments only and raises ValueError naming the op and the offending
values, so a multi-buffer method validates everything before it builds anything.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fast.allreduce import Bound, Shape, dims
from fast.lazy import LazyBuffer


def check_ints(op: str, name: str, values: Any, length: int | None = None) -> tuple[int, ...]:
    """`values` as a tuple of Python ints (of `length` entries when given), else ValueError."""
    try:
        items = tuple(values)
    except TypeError as error:
        raise ValueError(f"{op}: {name} must be a sequence of ints, got {values!r}") from error
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


def check_operands(op: str, operands: Sequence[Any]) -> None:
    """Every operand is a MultiLazyBuffer on the same devices, with the same shape."""
    from fast.multi import MultiLazyBuffer  # noqa: PLC0415  (multi imports this module)

    for operand in operands:
        if not isinstance(operand, MultiLazyBuffer):
            raise ValueError(f"{op}: every operand must be a MultiLazyBuffer, got {type(operand).__name__}")
        if operand.device != operands[0].device:
            raise ValueError(f"{op}: operands live on different devices {operands[0].device} and {operand.device}")
        if operand.shape != operands[0].shape:
            raise ValueError(f"{op}: operand shapes differ: {operands[0].shape} and {operand.shape}")


def check_layout(shards: Sequence[LazyBuffer], axis: int | None, real: Sequence[bool]) -> None:
    if not shards:
        raise ValueError("MultiLazyBuffer: needs at least one shard")
    if len(real) != len(shards) or not any(real):
        raise ValueError(f"MultiLazyBuffer: real={list(real)} needs one flag per shard ({len(shards)}), "
                         "at least one True")
    if not all(isinstance(lb, LazyBuffer) for lb in shards):
        raise ValueError(f"MultiLazyBuffer: shards must be LazyBuffers, got {[type(lb).__name__ for lb in shards]}")
    if any(lb.dtype != shards[0].dtype for lb in shards):
        raise ValueError(f"MultiLazyBuffer: shards have different dtypes {[lb.dtype for lb in shards]}")
    first = concrete("MultiLazyBuffer", shards[0])
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(first)):
        raise ValueError(f"MultiLazyBuffer: axis {axis!r} is out of range for shape {first}")
    for lb in shards:
        shape = concrete("MultiLazyBuffer", lb)
        if len(shape) != len(first) or any(shape[d] != first[d] for d in range(len(first)) if d != axis):
            raise ValueError(f"MultiLazyBuffer: shard shapes {[dims(lb) for lb in shards]} differ "
                             f"{'' if axis is None else f'outside axis {axis}'}")


def concrete(op: str, lb: LazyBuffer) -> Shape:
    """`lb`'s shape, or ValueError when it is symbolic (sharding needs concrete sizes)."""
    if not all(isinstance(size, int) for size in lb.shape):
        raise ValueError(f"{op}: symbolic shape {lb.shape} is not supported for sharded buffers")
    return dims(lb)
