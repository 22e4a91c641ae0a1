"""Host memory for the CPU devices (CLANG, LLVM): 64-byte aligned numpy byte arrays, recycled.

Why recycle: the first write to each 4 KiB page of a fresh large allocation takes a page fault (the
kernel maps and zeroes the page), which costs about as much as the kernel's own pass over the memory.
A loop that realizes same-sized results (every benchmark, every training step) would pay it on every
output. So memory freed through `HostAllocator.free` goes to `RECYCLER`, a process-wide pool keyed by
exact size, and a later `alloc` of that size takes it back instead of asking the OS.

Invariants:
- Only memory nothing else can reach is pooled: a freed allocation is kept only when no view
  (`offset` handle) or other Python reference still holds its array (checked with the reference
  count), so a pooled array is never visible to anyone while it is reused.
- `alloc(nbytes)` (zeroed) is always zero-filled, pooled or fresh. `alloc(nbytes, zeroed=False)` may
  hold old bytes; the engine asks for it only for buffers a kernel or copy overwrites entirely.
  With `ALLOC_POISON=1` such memory is filled with 0xFF bytes (NaN, -1) to expose any reader.
- The pool holds at most `ALLOC_CACHE_MB` megabytes (least recently freed dropped first).
- Allocations under `MIN_POOLED` bytes go to `SMALL` instead, a lock-free free list per size with
  their addresses (`SmallPool`, a few MiB at most): malloc would reuse them cheaply, but a new
  numpy array and the lookup of its address cost microseconds on the path of every small realize.
  The same rules hold there (nothing reachable is kept, zeroed when asked, poisoned when asked);
  `ALLOC_CACHE_MB=0` turns both pools off.

Fresh memory of `MAPPED_MIN` bytes and more is an anonymous mapping of its own (`_mapped`), advised
to use huge pages only once it is filled from host data (`copyin`: weights, tables, inputs, which are
kept and read many times, an embedding table at random). numpy advises huge pages for all its arrays
from 4 MiB on, and where the OS makes huge pages only for advised memory (transparent huge pages
"madvise", a common default) each first write to 2 MiB of such memory may wait while the OS compacts
memory to find a free huge page: a cost kernel outputs, mostly transient, would pay on every fresh
allocation. Measured on the 2-vCPU VM of session 12: touching 800 MB of fresh 8 MB arrays took
0.07-6.7 s with the advice and 0.45-0.59 s without; MiniLM 32 x 128's first eager call (790 MB of
intermediates) 2.7-4.8 s with it, 1.04-1.18 s without, later calls the same either way (medians of
20 calls: 558-590 ms without, 559-578 with, in three alternating pairs). But `take` of 4,096 rows
from a 47 MB table ran 0.88-0.98 ms with the table on huge pages and 1.19 ms without (a TLB miss per
row). Making the pages present in the mapping call (MAP_POPULATE) was slower for the first call
(1.13-1.18 s): the allocating thread then takes every fault, where a threaded kernel's first writes
take them on every thread. `HOST_HUGE_PAGES=1` advises every large buffer when it is mapped.
(fast/debug/pages.py turns numpy's own advice off while `compare` runs, for the same reason.)
"""
from __future__ import annotations

import ctypes
import mmap
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from fast import config
from fast.runtime.base import Allocator

ALIGNMENT = 64
MIN_POOLED = 1 << 16
MAPPED_MIN = 4 << 20  # fresh allocations of this many bytes or more are `_mapped`
_CAN_MAP = hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS")  # not on Windows
_MAP_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS if _CAN_MAP else 0


def address_of(raw: np.ndarray) -> int:
    """The address of a writable array's first byte (through a ctypes view of its buffer: numpy's
    `raw.ctypes.data` builds a helper object and costs several times more)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(raw.data))


class HostMemory:
    """`nbytes` of host memory at byte `start` of `owner`, the whole raw allocation (shared by every
    view made with `offset`, so a view keeps the memory alive). `owner` is None once freed.
    `origin` is the address of owner's first byte (asking numpy for it costs microseconds). A plain
    slotted class: one is made per allocation, on the path of every realize."""

    __slots__ = ("owner", "start", "nbytes", "origin")

    def __init__(self, owner: np.ndarray | None, start: int, nbytes: int, origin: int = -1) -> None:
        self.owner, self.start, self.nbytes = owner, start, nbytes
        self.origin = address_of(owner) if origin < 0 and owner is not None else origin  # -1: not given

    def __repr__(self) -> str:
        return f"HostMemory(start={self.start}, nbytes={self.nbytes}, freed={self.owner is None})"

    def window(self) -> np.ndarray:
        if self.owner is None:
            raise ValueError("HostMemory: buffer used after free")
        return self.owner[self.start:self.start + self.nbytes]

    @property
    def address(self) -> int:
        if self.owner is None:
            raise ValueError("HostMemory: buffer used after free")
        return self.origin + self.start


class Recycler:
    """Freed raw arrays by size, least recently freed first; `held` bytes in all (thread-safe)."""

    def __init__(self) -> None:
        self.pool: OrderedDict[int, list[np.ndarray]] = OrderedDict()
        self.held = 0
        self.lock = threading.Lock()

    def take(self, size: int) -> np.ndarray | None:
        """A pooled array of exactly `size` bytes, or None."""
        with self.lock:
            arrays = self.pool.get(size)
            if not arrays:
                return None
            raw = arrays.pop()
            if not arrays:
                del self.pool[size]
            self.held -= size
            return raw

    def keep(self, raw: np.ndarray, limit: int) -> None:
        """Pool `raw`, then drop the least recently freed arrays until at most `limit` bytes are held."""
        if raw.nbytes > limit:
            return
        with self.lock:
            self.pool.setdefault(raw.nbytes, []).append(raw)
            self.pool.move_to_end(raw.nbytes)
            self.held += raw.nbytes
            while self.held > limit:
                size, arrays = next(iter(self.pool.items()))
                arrays.pop(0)
                self.held -= size
                if not arrays:
                    del self.pool[size]

    def clear(self) -> None:
        """Give every pooled array back to the OS."""
        with self.lock:
            self.pool.clear()
            self.held = 0


RECYCLER = Recycler()

SMALL_SIZES = 64  # distinct sizes the small pool keeps arrays of
SMALL_BYTES_PER_SIZE = 1 << 16  # and the bytes it keeps of each (always room for one array)


class SmallPool:
    """Freed arrays under MIN_POOLED bytes with their addresses, by size: at most SMALL_SIZES sizes,
    and of each at most SMALL_BYTES_PER_SIZE bytes or one array (8 MiB in all at worst). Lock-free:
    a free list is only ever popped and appended to, each atomic under the GIL (a lock would cost
    more than the allocation it saves); two threads may both append past the limit, by one each."""

    def __init__(self) -> None:
        self.pool: dict[int, list[tuple[np.ndarray, int]]] = {}

    @property
    def held(self) -> int:
        """Bytes pooled now."""
        return sum(size * len(arrays) for size, arrays in list(self.pool.items()))

    def take(self, size: int) -> tuple[np.ndarray, int] | None:
        """A pooled (array, address of its first byte) of exactly `size` bytes, or None."""
        arrays = self.pool.get(size)
        if arrays:
            try:
                return arrays.pop()
            except IndexError:  # another thread took the last one
                return None
        return None

    def keep(self, raw: np.ndarray, origin: int) -> None:
        size = raw.nbytes
        arrays = self.pool.get(size)
        if arrays is None:
            if len(self.pool) >= SMALL_SIZES:
                return
            arrays = self.pool.setdefault(size, [])
        if not arrays or (len(arrays) + 1) * size <= SMALL_BYTES_PER_SIZE:
            arrays.append((raw, origin))

    def clear(self) -> None:
        self.pool.clear()


SMALL = SmallPool()


def addresses(kernel: str, device: str, handles: Sequence[object]) -> list[int]:
    """The addresses of `handles` for a call of `kernel`; TypeError naming the kernel and `device`
    when one is not host memory."""
    found: list[int] = []
    for handle in handles:
        if type(handle) is HostMemory and handle.owner is not None:
            found.append(handle.origin + handle.start)  # (what `address` answers, without the call)
        elif isinstance(handle, HostMemory):
            found.append(handle.address)  # raises: freed
        else:
            raise TypeError(f"{kernel}: expected {device} buffers, got {type(handle).__name__}")
    return found


def _fresh(size: int, zeroed: bool) -> np.ndarray:
    """`size` new bytes (zero when `zeroed`): `_mapped` when large and the OS maps anonymous memory."""
    if size >= MAPPED_MIN and _CAN_MAP:
        return _mapped(size)
    return np.zeros(size, dtype=np.uint8) if zeroed else np.empty(size, dtype=np.uint8)


def _mapped(size: int) -> np.ndarray:
    """`size` zero bytes, page aligned, in an anonymous private mapping of their own (module docstring),
    unmapped once the array and every view of it are gone. MemoryError naming the size when the OS
    refuses the mapping."""
    try:
        memory = mmap.mmap(-1, size, flags=_MAP_FLAGS)
    except OSError as error:
        raise MemoryError(f"alloc: cannot map {size} bytes of host memory: {error}") from error
    raw = np.frombuffer(memory, dtype=np.uint8)
    if config.get().host_huge_pages:
        _advise_huge_pages(raw)
    return raw


def _advise_huge_pages(raw: np.ndarray) -> None:
    """Ask for huge pages under `raw` when it is one of `_mapped`'s mappings (a hint: pages already
    present stay as they are until the OS collapses them in the background; a kernel built without
    transparent huge pages refuses the advice, and nothing changes)."""
    base = raw.base
    memory = base.obj if isinstance(base, memoryview) else None
    if isinstance(memory, mmap.mmap) and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            memory.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass


class HostAllocator(Allocator):
    """64-byte aligned host memory backed by numpy byte arrays, recycled through `RECYCLER`."""

    alignment = ALIGNMENT

    def alloc(self, nbytes: int, zeroed: bool = True) -> HostMemory:
        if type(nbytes) is not int or nbytes < 0:
            raise ValueError(f"alloc: nbytes must be a non-negative int, got {nbytes!r}")
        size = nbytes + self.alignment
        if size < MIN_POOLED:
            found = SMALL.take(size)
            raw, origin = found if found is not None else (None, -1)
        else:
            raw, origin = RECYCLER.take(size), -1
        if raw is None:
            raw = _fresh(size, zeroed)
        elif zeroed:
            raw.fill(0)
        if not zeroed and config.get().alloc_poison:
            raw.fill(0xFF)
        if origin < 0:
            origin = address_of(raw)
        return HostMemory(raw, (-origin) % self.alignment, nbytes, origin)

    def free(self, handle: HostMemory, nbytes: int | None = None,
             _finalizing: Callable[[], bool] = sys.is_finalizing,
             _references: Callable[[object], int] = sys.getrefcount) -> None:
        """Release the handle; its memory is pooled unless a view or anything else still holds it
        (`nbytes` is accepted and ignored). While the interpreter shuts down nothing is pooled: the
        module's names may already be gone (None), so the two functions it needs are bound here."""
        raw, handle.owner = handle.owner, None
        if raw is None or _finalizing() or _references(raw) != 2:  # this frame's name and the argument: nobody else
            return
        limit = config.get().alloc_cache_mb << 20
        if raw.nbytes >= MIN_POOLED:
            RECYCLER.keep(raw, limit)
        elif limit:
            SMALL.keep(raw, handle.origin)

    def as_memoryview(self, handle: HostMemory) -> memoryview:
        """Zero-copy byte view of the memory (host devices only)."""
        return handle.window().data

    def copyin(self, handle: HostMemory, src: memoryview) -> None:
        """Fill the memory from host bytes; a large mapping gets the huge-page advice first (module docstring)."""
        source = memoryview(src).cast("B")
        if source.nbytes != handle.nbytes:
            raise ValueError(f"copyin: source has {source.nbytes} bytes, buffer has {handle.nbytes}")
        if handle.owner is not None and handle.owner.nbytes >= MAPPED_MIN:
            _advise_huge_pages(handle.owner)
        self.as_memoryview(handle)[:] = source

    def copyout(self, dest: memoryview, handle: HostMemory) -> None:
        target = memoryview(dest).cast("B")
        if target.nbytes != handle.nbytes:
            raise ValueError(f"copyout: destination has {target.nbytes} bytes, buffer has {handle.nbytes}")
        target[:] = self.as_memoryview(handle)

    def offset(self, handle: HostMemory, byte_offset: int, nbytes: int) -> HostMemory:
        if handle.owner is None:
            raise ValueError("offset: buffer used after free")
        if byte_offset < 0 or nbytes < 0 or byte_offset + nbytes > handle.nbytes:
            raise ValueError(f"offset: bytes [{byte_offset}, {byte_offset + nbytes}) are outside a "
                             f"{handle.nbytes}-byte buffer")
        return HostMemory(handle.owner, handle.start + byte_offset, nbytes, handle.origin)
