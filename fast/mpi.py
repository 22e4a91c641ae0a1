"""Collective read-back helpers for SPMD programs under MPI (docs/mpi.md).

`gather(buffer, root)` and `allgather(buffer)` must be called by every rank, in the same order, with
the same (identically built) buffer: they realize it (collectively) and then move each needed shard's
bytes from the rank that owns it. Data local to every rank (a device name without `@RANK`) is read
where it is and never moves. The result is what `to_numpy` would give on a rank holding everything:
real shards joined along the axis, or one real replica for axis None (a rank holding a replica reads
its own; all replicas hold the same bits after an all-reduce).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fast.engine.readback import concrete_shape, to_numpy
from fast.engine.realize import realize
from fast.graph.node import LazyBuffer
from fast.runtime.mpi import owner, rank, size, transfer

__all__ = ["allgather", "gather", "rank", "size"]


def gather(buffer: Any, root: int = 0) -> np.ndarray | None:
    """The values of `buffer` (LazyBuffer or MultiLazyBuffer) on rank `root`; None on other ranks."""
    if not isinstance(root, int) or not 0 <= root < size():
        raise ValueError(f"gather: root {root!r} is not a rank of a communicator of size {size()}")
    return _collect(buffer, [root])


def allgather(buffer: Any) -> np.ndarray:
    """The values of `buffer` (LazyBuffer or MultiLazyBuffer) on every rank."""
    result = _collect(buffer, list(range(size())))
    if result is None:  # (every rank is a target)
        raise RuntimeError(f"allgather: rank {rank()} received nothing for {buffer!r}")
    return result


def _collect(buffer: Any, targets: list[int]) -> np.ndarray | None:
    if not hasattr(buffer, "real_lbs"):
        if not isinstance(buffer, LazyBuffer):
            raise TypeError(f"gather: {buffer!r} is not a LazyBuffer or MultiLazyBuffer")
        realize(buffer)
        return _shard(buffer, targets)
    realize(buffer)
    if buffer.axis is None:
        return _replica(list(buffer.real_lbs), targets)
    shards = [_shard(shard, targets) for shard in buffer.real_lbs]
    if rank() not in targets:
        return None
    return np.concatenate([shard for shard in shards if shard is not None], axis=buffer.axis)


def _replica(real: list[LazyBuffer], targets: list[int]) -> np.ndarray | None:
    """One replica's values on `targets`: read locally where a target holds one, else sent by the
    owner of the first real replica."""
    holders = {owner(shard.device) for shard in real}
    if None in holders:
        return _shard(next(shard for shard in real if owner(shard.device) is None), targets)
    needy = [target for target in targets if target not in holders]
    received = _shard(real[0], needy)
    if rank() in targets and rank() not in needy:
        return to_numpy(next(shard for shard in real if owner(shard.device) == rank()))
    return received


def _shard(lb: LazyBuffer, targets: list[int]) -> np.ndarray | None:
    """A realized buffer's values on `targets` (None elsewhere); its owner sends them to the others."""
    source, me = owner(lb.device), rank()
    if source is None or not targets:
        return to_numpy(lb) if me in targets else None
    if me == source:
        out = to_numpy(lb)
    else:
        out = np.empty(concrete_shape(lb.shape), dtype=lb.dtype.np)
    raw = out.reshape(-1).view(np.uint8)
    transfer(raw, raw, source, targets)
    return out if me in targets else None
