"""What the tools of fast.debug accept: LazyBuffers, MultiLazyBuffers and fast.xp arrays (their `.lazy`).

`buffers(caller, values)` gives the buffers, or raises TypeError (the same for `compare`, `graph`,
`rebuild` and `python -m fast.debug`) naming the caller and what was given. A message describes a
value by its type, shape, dtype and device only: printing a lazy array would compute it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fast.debug.trace import is_buffer
from fast.xp._array import Array


def describe(value: Any) -> str:
    """A short description of `value` that computes nothing."""
    if isinstance(value, Array) or is_buffer(value):
        kind = "fast.xp array" if isinstance(value, Array) else type(value).__name__
        return f"{kind} of shape {tuple(value.shape)}, {value.dtype.name}, on {value.device}"
    shape = getattr(value, "shape", None)
    return type(value).__name__ + ("" if shape is None else f" of shape {tuple(shape)}")


def buffers(caller: str, values: Sequence[Any]) -> list[Any]:
    """The buffers of `values` (a fast.xp array stands for its `.lazy`); TypeError for anything else."""
    found = []
    for value in values:
        if isinstance(value, Array):
            value = value.lazy
        if not is_buffer(value):
            hint = " (its `.lazy`)" if hasattr(value, "lazy") else ""
            raise TypeError(f"{caller}: expected LazyBuffers, MultiLazyBuffers or fast.xp arrays, got "
                            f"{describe(value)}{hint}; pass `array.lazy` for an array of another wrapper")
        found.append(value)
    if not found:
        raise TypeError(f"{caller}: give at least one LazyBuffer, MultiLazyBuffer or fast.xp array")
    return found
