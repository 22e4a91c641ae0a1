"""Running the schedule items that are not kernels: copies between devices (through host memory, or
between MPI ranks: docs/mpi.md) and CUSTOM calls, with the storage <-> public array conversions
they and readback share.

Invariants: an item's inputs are allocated before it runs (`require_allocated` raises otherwise);
its output is allocated just before it is filled, so a lazy base is realized exactly when its Buffer
is allocated. Each runner returns its DEBUG=2 description.
"""
from __future__ import annotations

import math

import numpy as np

from fast.device import Buffer
from fast.dtype import DType, dtypes
from fast.engine.schedule import CustomCall, ScheduleItem
from fast.runtime import mpi


def require_allocated(item: ScheduleItem) -> None:
    for buffer in item.inputs:
        if not buffer.is_allocated():
            raise RuntimeError(f"run_schedule: input {buffer!r} of {item.ast.op.name} was never computed")


def run_copy(item: ScheduleItem) -> str:
    """Copy between devices (or within one) through host memory: copyout, then copyin."""
    destination, source = item.bufs
    require_allocated(item)
    if "@" in destination.device or "@" in source.device:
        return _run_rank_copy(destination, source)
    _copy_through_host(destination, source)
    return f"copy {source.nbytes} bytes {source.device} -> {destination.device}"


def _copy_through_host(destination: Buffer, source: Buffer) -> None:
    """Both buffers' memory is this process's: copyout into a staging array, then copyin."""
    staging = np.empty(source.nbytes, dtype=np.uint8)
    if source.nbytes:
        source.copyout(staging.data)
    destination.allocate(zeroed=False)
    if destination.nbytes:
        destination.copyin(staging.data)


def _run_rank_copy(destination: Buffer, source: Buffer) -> str:
    """A copy where a device carries an MPI rank (docs/mpi.md), run alike on every rank in schedule
    order: within one rank, the owner copies locally; across ranks, the source's owner sends and the
    destination's owner (every rank for a name without a rank) receives; other ranks only take the
    destination's placeholder. Zero bytes move nothing anywhere."""
    src_owner, dst_owner, me = mpi.owner(source.device), mpi.owner(destination.device), mpi.rank()
    destination.allocate(zeroed=False)  # a placeholder where the destination is another rank's
    description = f"copy {source.nbytes} bytes {source.device} -> {destination.device}"
    if not source.nbytes or not mpi.is_mine(destination.device) and me != src_owner:
        return description + " (elsewhere)"
    if src_owner is None or src_owner == dst_owner:  # the data is on the destination's rank already
        _copy_through_host(destination, source)
        return description
    staging = np.empty(source.nbytes, dtype=np.uint8)
    targets = list(range(mpi.size())) if dst_owner is None else [dst_owner]
    if me == src_owner:
        source.copyout(staging.data)
    mpi.transfer(staging, staging, src_owner, targets)
    if mpi.is_mine(destination.device):
        destination.copyin(staging.data)
    return description + (" (sent)" if me == src_owner else " (received)")


def to_public(storage: np.ndarray, dtype: DType) -> np.ndarray:
    """Storage array -> the array users see (`dtype.np`): bfloat16 bits widen exactly to float32."""
    if dtype == dtypes.bfloat16:
        return (storage.astype(np.uint32) << 16).view(np.float32)
    return storage.view(dtype.np)


def to_storage(public: np.ndarray, dtype: DType) -> np.ndarray:
    """Public array -> storage: bfloat16 rounds float32 to nearest-even (NaN -> quiet NaN)."""
    if dtype != dtypes.bfloat16:
        return np.ascontiguousarray(public, dtype=dtype.np)
    bits = np.ascontiguousarray(public, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    is_nan = ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x7FFFFF) != 0)
    return np.where(is_nan, ((bits >> 16) & 0x8000).astype(np.uint16) | 0x7FC0, rounded).astype(np.uint16)


def run_custom(item: ScheduleItem) -> str:
    """CUSTOM: `fn(out, *inputs)` on fresh host arrays of the public dtypes, then copied in."""
    call: CustomCall = item.ast.arg
    require_allocated(item)
    inputs = [to_public(buffer.as_numpy()[:math.prod(shape)], buffer.dtype).reshape(shape)
              for buffer, shape in zip(item.inputs, call.in_shapes, strict=True)]
    output = item.bufs[0]
    out = np.zeros(call.out_shape, dtype=output.dtype.np)
    with np.errstate(all="ignore"):
        call.fn(out, *inputs)
    data = to_storage(out, output.dtype).reshape(-1)
    if data.size < output.size:  # symbolic sizes: the buffer is allocated for the variables' maxima
        data = np.concatenate([data, np.zeros(output.size - data.size, data.dtype)])
    output.allocate(zeroed=False)
    if output.nbytes:
        output.copyin(data.view(np.uint8).data)
    return f"custom {getattr(call.fn, '__name__', 'fn')} -> {call.out_shape}"
