"""Reading values back: `to_numpy` realizes a buffer and copies its values into a fresh numpy array
(through a contiguous host-readable copy when the buffer is a view or lives on DISK).

Under MPI (docs/mpi.md) the realize is collective (every rank runs it); reading values is local: a
buffer on another rank's device is a RuntimeError after the realize (use fast.mpi.gather/allgather),
and a MultiLazyBuffer with axis None reads a real replica that this rank holds."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fast import config
from fast.device import Buffer
from fast.engine import fusion
from fast.engine.items import to_public
from fast.engine.realize import realize
from fast.graph.node import LazyBuffer
from fast.runtime import mpi
from fast.shape.symbolic import Node

# Called with the buffer of every `to_numpy`, before anything is realized (fast/engine/capture.py raises
# there when a traced function reads a value computed from its inputs).
READ_OBSERVERS: list[Callable[[Any], None]] = []


def _readable_on_host(lb: LazyBuffer) -> LazyBuffer:
    """A lazy buffer holding lb's values contiguously in a Buffer of its own: a node of the read's own,
    built with the weak node cache off. Through the cache, `lb.contiguous()` would be the program's
    own node when it holds one, and reading would realize that node (on the reading rank only, under
    MPI), so it would no longer count as built before a later assign (SPEC §4)."""
    if lb.realized is not None and fusion.is_identity_view(lb, lb.base):
        return lb
    with config.override(lazycache=False):
        if lb.device.startswith("DISK:") and not lb.st.consecutive:
            return lb.copy_to_device("CLANG").contiguous()
        return lb.contiguous()


def to_numpy(buffer: Any) -> np.ndarray:
    """Realize `buffer` and return a fresh array of its shape and `dtype.np` (bfloat16 as float32).
    A MultiLazyBuffer gives its real shards joined along its axis, or its first real shard."""
    for observe in READ_OBSERVERS:
        observe(buffer)
    if hasattr(buffer, "real_lbs"):
        realize(buffer)
        if buffer.axis is None:
            return to_numpy(local_replica(buffer))
        elsewhere = [shard.device for shard in buffer.real_lbs if not mpi.is_mine(shard.device)]
        if elsewhere:
            raise RuntimeError(f"to_numpy: shards of {buffer!r} on {elsewhere} belong to other ranks than this "
                               f"rank {mpi.rank()}; use fast.mpi.gather(buffer, root) or fast.mpi.allgather(buffer)")
        shards = [to_numpy(shard) for shard in buffer.real_lbs]
        return np.concatenate(shards, axis=buffer.axis)
    if not isinstance(buffer, LazyBuffer):
        raise TypeError(f"to_numpy: {buffer!r} is not a LazyBuffer or MultiLazyBuffer")
    shape = concrete_shape(buffer.shape)
    realize(buffer)
    if not mpi.is_mine(buffer.device):
        raise RuntimeError(f"to_numpy: {buffer!r} is on {buffer.device}, owned by rank {mpi.owner(buffer.device)}, "
                           f"not this rank {mpi.rank()}; use fast.mpi.gather(buffer, root) or "
                           "fast.mpi.allgather(buffer) on every rank")
    if math.prod(shape) == 0:  # a zero-size graph is a constant with no elements: nothing to read
        return np.empty(shape, dtype=buffer.dtype.np)
    readable = _readable_on_host(buffer)
    realize(readable)
    stored: Buffer | None = readable.base.realized
    if stored is None:
        raise RuntimeError(f"to_numpy: {buffer!r} did not realize")
    # as_numpy is already a fresh copy: copy again only to drop storage past the shape's elements
    values = to_public(stored.as_numpy(), buffer.dtype)
    count = math.prod(shape)
    return (values if values.size == count else values[:count].copy()).reshape(shape)


def local_replica(buffer: Any) -> LazyBuffer:
    """The first real shard of an unsharded (axis None) MultiLazyBuffer that this rank holds."""
    for shard in buffer.real_lbs:
        if mpi.is_mine(shard.device):
            return shard  # type: ignore[no-any-return]
    raise RuntimeError(f"to_numpy: no real replica of {buffer!r} is on this rank {mpi.rank()} "
                       f"(devices {buffer.device}); use fast.mpi.gather(buffer, root) or fast.mpi.allgather(buffer)")


def concrete_shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """A shape with every symbolic size evaluated at its bound Variables' values."""
    return tuple(size.evaluate({}) if isinstance(size, Node) else int(size) for size in shape)
