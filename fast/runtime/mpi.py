"""MPI plumbing for SPMD runs (docs/mpi.md): ranks, the owner of a device name, placeholder memory
for devices of other ranks, and timed point-to-point transfers.

Invariants:
- mpi4py is imported only when something asks for a rank (`communicator()`); `import fast` never
  needs it. Without mpi4py this process is rank 0 of a communicator of size 1.
- Every transfer goes over a private duplicate of COMM_WORLD (user messages never match ours), with
  tag 0: MPI delivers messages between one pair of ranks on one communicator and tag in the order they
  were sent, and every rank walks the same schedule in the same order, so the n-th send from rank a
  to rank b is the n-th receive on b from a.
- A blocking wait (`_wait`) polls its request and raises RuntimeError naming the peer and the byte
  count after `config.get().mpi_timeout` seconds, so a dead or diverged peer is an error, not a hang.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fast import config
from fast.runtime.base import Allocator


@functools.lru_cache(maxsize=1)
def communicator() -> Any:
    """The private duplicate of COMM_WORLD, or None when mpi4py is not installed."""
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD.Dup()


def rank() -> int:
    """This process's rank (0 without MPI)."""
    comm = communicator()
    return 0 if comm is None else int(comm.Get_rank())


def size() -> int:
    """The number of processes (1 without MPI)."""
    comm = communicator()
    return 1 if comm is None else int(comm.Get_size())


def owner(device: str) -> int | None:
    """The rank named by a canonical device name's `@RANK` suffix; None for a name local to every rank."""
    at = device.rfind("@") if not device.startswith("DISK:") else -1
    return None if at < 0 else int(device[at + 1:])


def local_name(device: str) -> str:
    """A canonical device name without its `@RANK` suffix (`LLVM:1@2` -> `LLVM:1`)."""
    return device if owner(device) is None else device[:device.rfind("@")]


def is_mine(device: str) -> bool:
    """Whether this process holds the memory of `device` (a name without a rank: every process does)."""
    found = owner(device)
    return found is None or found == rank()


def check_rank(device: str) -> None:
    """ValueError naming `device` when its rank is outside the communicator."""
    found = owner(device)
    if found is not None and found >= size():
        raise ValueError(f"device {device!r}: rank {found} does not exist (communicator size {size()}; "
                         f"run under mpiexec with more processes, with mpi4py installed)")


@dataclass(frozen=True)
class RemoteHandle:
    """The placeholder for memory that another rank holds: only its device and size."""

    device: str
    nbytes: int


class RemoteAllocator(Allocator):
    """The allocator of a device owned by another rank: hands out placeholders, holds no data.
    `copyin` ignores the bytes (every rank passes the same data; only the owner keeps it); `copyout`
    is a RuntimeError naming the owner."""

    def __init__(self, device: str) -> None:
        self.device = device

    def alloc(self, nbytes: int, zeroed: bool = True) -> RemoteHandle:
        return RemoteHandle(self.device, nbytes)

    def free(self, handle: Any, nbytes: int | None = None) -> None:
        return None

    def copyin(self, handle: Any, src: memoryview) -> None:
        return None

    def copyout(self, dest: memoryview, handle: Any) -> None:
        raise RuntimeError(f"{self.device} is owned by rank {owner(self.device)}, not this rank {rank()}: "
                           "its values are not here (use fast.mpi.gather or fast.mpi.allgather)")

    def offset(self, handle: Any, byte_offset: int, nbytes: int) -> RemoteHandle:
        return RemoteHandle(self.device, nbytes)


WAIT_POLL_MAX_S = 1e-4  # longest sleep between two polls of a transfer: its most added latency


def _wait(request: Any, what: str) -> None:
    """Complete `request`, or cancel it and raise RuntimeError after the configured timeout. Polls
    with sleeps growing from 1 µs to WAIT_POLL_MAX_S (docs/mpi.md: never spinning inside MPI)."""
    timeout = config.get().mpi_timeout
    deadline = time.monotonic() + timeout
    pause = 1e-6
    while not request.Test():
        if time.monotonic() > deadline:
            request.Cancel()
            raise RuntimeError(f"MPI: {what} on rank {rank()} did not complete within MPI_TIMEOUT={timeout} s "
                               "(a peer failed or the ranks ran different programs)")
        time.sleep(pause)
        pause = min(pause * 2, WAIT_POLL_MAX_S)


def send(data: np.ndarray, destination: int) -> None:
    """Send the bytes of contiguous `data` to rank `destination` (matched by one `receive` there)."""
    comm = communicator()
    _wait(comm.Isend(data, dest=destination, tag=0), f"send of {data.nbytes} bytes to rank {destination}")


def receive(out: np.ndarray, source: int) -> None:
    """Fill contiguous `out` with the bytes the matching `send` on rank `source` sent."""
    comm = communicator()
    _wait(comm.Irecv(out, source=source, tag=0), f"receive of {out.nbytes} bytes from rank {source}")


def transfer(data: np.ndarray | None, out: np.ndarray | None, source: int | None, targets: list[int]) -> None:
    """One schedule-ordered transfer, called alike on every rank: rank `source` sends `data` to each of
    `targets` (in order); each target receives into `out`. Ranks neither source nor target do nothing.
    `source` None: the data is on every rank already (nothing moves)."""
    me = rank()
    if source is None:
        return
    if me == source:
        if data is None:
            raise RuntimeError(f"MPI transfer: rank {me} sends but has no data")
        for target in targets:
            if target != me:
                send(data, target)
    elif me in targets:
        if out is None:
            raise RuntimeError(f"MPI transfer: rank {me} receives but has no buffer")
        receive(out, source)
