"""Host memory recycling (fast/runtime/host.py): freed allocations come back for the same size, zeroed
when asked, never while a view still holds them; the pool stays within its budget; kernels never read
the old bytes of an output they were handed unzeroed (checked with ALLOC_POISON on awkward views)."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import fast
from fast import BinaryOps, ReduceOps, config, from_numpy
from fast.runtime import host
from fast.runtime.host import MIN_POOLED, RECYCLER, SMALL, HostAllocator

SIZE = MIN_POOLED * 2


@pytest.fixture(autouse=True)
def empty_pool() -> Iterator[None]:
    """Each test starts and ends with an empty pool (tests in one process must not see each other's)."""
    RECYCLER.clear()
    SMALL.clear()
    yield
    RECYCLER.clear()
    SMALL.clear()


def test_freed_memory_is_reused_for_the_same_size() -> None:
    allocator = HostAllocator()
    first = allocator.alloc(SIZE)
    address = first.address  # an int: holding the array itself would (rightly) keep it out of the pool
    allocator.free(first)
    assert first.owner is None
    second = allocator.alloc(SIZE, zeroed=False)
    assert second.address == address
    assert second.address % allocator.alignment == 0
    other = allocator.alloc(SIZE + 8)
    assert other.address != address


def test_freeing_while_the_interpreter_shuts_down_needs_no_module_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A LazyBuffer that outlives the modules (freed while the interpreter shuts down, after host.py's
    names were set to None) releases its memory without an error ("Exception ignored in
    LazyBuffer.__del__" at exit) and pools nothing; until then the same call pools as usual."""
    allocator = HostAllocator()
    kept, pooled = allocator.alloc(SIZE), allocator.alloc(SIZE)
    for name in ("sys", "config", "RECYCLER", "SMALL", "MIN_POOLED"):
        monkeypatch.setattr(host, name, None)
    allocator.free(kept, _finalizing=lambda: True)
    assert kept.owner is None
    monkeypatch.undo()
    assert RECYCLER.held == 0
    allocator.free(pooled)
    assert RECYCLER.held >= SIZE


def test_memory_still_referenced_elsewhere_is_not_pooled() -> None:
    allocator = HostAllocator()
    handle = allocator.alloc(SIZE)
    raw = handle.owner
    allocator.free(handle)
    assert RECYCLER.held == 0
    assert raw is not None


def test_reused_memory_is_zeroed_when_asked() -> None:
    allocator = HostAllocator()
    first = allocator.alloc(SIZE)
    first.window()[:] = 7
    allocator.free(first)
    second = allocator.alloc(SIZE)
    assert not second.window().any()


def test_memory_held_by_a_view_is_not_pooled() -> None:
    allocator = HostAllocator()
    base = allocator.alloc(SIZE)
    base.window()[:] = 5
    view = allocator.offset(base, 64, 128)
    allocator.free(base)
    assert RECYCLER.held == 0
    again = allocator.alloc(SIZE, zeroed=False)
    again.window()[:] = 9
    assert (view.window() == 5).all()


@pytest.mark.parametrize("nbytes", [0, 1, 16, 61, MIN_POOLED - 65])
def test_small_allocations_come_back_from_the_small_pool(nbytes: int) -> None:
    """Under MIN_POOLED: the free list by size, with the address it recorded (still 64-byte aligned),
    zeroed when asked; never in the large pool."""
    allocator = HostAllocator()
    first = allocator.alloc(nbytes)
    address = first.address
    first.window()[:] = 7
    allocator.free(first)
    assert RECYCLER.held == 0 and SMALL.held == nbytes + allocator.alignment
    second = allocator.alloc(nbytes)
    assert second.address == address and second.address % allocator.alignment == 0
    assert not second.window().any()
    assert SMALL.held == 0


def test_small_memory_still_referenced_is_not_pooled() -> None:
    allocator = HostAllocator()
    base = allocator.alloc(256)
    base.window()[:] = 5
    view = allocator.offset(base, 64, 64)
    allocator.free(base)
    assert SMALL.held == 0
    allocator.alloc(256, zeroed=False).window()[:] = 9
    assert (view.window() == 5).all()


def test_small_pool_stays_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most SMALL_BYTES_PER_SIZE of a size (but always one array), at most SMALL_SIZES sizes."""
    monkeypatch.setattr(host, "SMALL_BYTES_PER_SIZE", 4096)
    monkeypatch.setattr(host, "SMALL_SIZES", 3)
    allocator = HostAllocator()
    handles = [allocator.alloc(1024 - allocator.alignment) for _ in range(6)]
    handles += [allocator.alloc(8000 - allocator.alignment) for _ in range(2)]
    handles += [allocator.alloc(size - allocator.alignment) for size in (2048, 3072)]
    for handle in handles:
        allocator.free(handle)
    assert sorted(SMALL.pool) == [1024, 2048, 8000]  # the fourth size found no room
    assert [len(SMALL.pool[size]) for size in (1024, 2048, 8000)] == [4, 1, 1]
    assert SMALL.held == 4096 + 2048 + 8000


def test_small_pool_poisons_unzeroed_memory() -> None:
    allocator = HostAllocator()
    allocator.free(allocator.alloc(100))
    with config.override(alloc_poison=True):
        reused = allocator.alloc(100, zeroed=False)
    assert SMALL.held == 0 and (reused.window() == 0xFF).all()


def test_pool_stays_within_its_budget_dropping_the_oldest() -> None:
    allocator = HostAllocator()
    sizes = [(1 << 19) + index * 64 for index in range(3)]  # raw sizes; three do not fit in 1 MiB
    handles = [allocator.alloc(size - allocator.alignment) for size in sizes]
    with config.override(alloc_cache_mb=1):
        for handle in handles:
            allocator.free(handle)
    assert RECYCLER.held <= 1 << 20
    assert RECYCLER.take(sizes[0]) is None  # the least recently freed went first
    assert RECYCLER.take(sizes[2]) is not None


def test_budget_zero_turns_pooling_off() -> None:
    allocator = HostAllocator()
    with config.override(alloc_cache_mb=0):
        allocator.free(allocator.alloc(SIZE))
        allocator.free(allocator.alloc(16))
    assert RECYCLER.held == 0 and SMALL.held == 0


def test_poison_fills_unzeroed_memory() -> None:
    allocator = HostAllocator()
    with config.override(alloc_poison=True):
        fresh = allocator.alloc(SIZE, zeroed=False)
        zeroed = allocator.alloc(SIZE)
    assert (fresh.window() == 0xFF).all()
    assert not zeroed.window().any()


def _realize(lb: fast.LazyBuffer) -> np.ndarray:
    fast.realize(lb)
    return fast.to_numpy(lb)


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_outputs_overwrite_recycled_poisoned_memory(device: str) -> None:
    """Each graph's output reuses the poisoned memory of the one before (same byte size): masked pads,
    flipped and strided views, column sums chunked over rows, prime sizes."""
    rng = np.random.default_rng(3)
    rows, columns = 131, 257  # primes: vector tails everywhere
    x = rng.standard_normal((rows, columns)).astype(np.float32)
    lb = from_numpy(x, device)
    fast.realize(lb)
    cases = [
        (lambda: lb.e(BinaryOps.ADD, lb), lambda: x + x),
        (lambda: lb.shrink(((1, rows), (0, columns))).pad(((0, 1), (0, 0))), lambda: np.pad(x[1:], ((0, 1), (0, 0)))),
        (lambda: lb.stride((-1, 1)).e(BinaryOps.MUL, lb), lambda: x[::-1] * x),
        (lambda: lb.permute((1, 0)).contiguous(), lambda: np.ascontiguousarray(x.T)),
        (lambda: lb.r(ReduceOps.SUM, (0,)).expand((rows, columns)).contiguous(),
         lambda: np.broadcast_to(x.sum(0), x.shape)),
        (lambda: lb.r(ReduceOps.MAX, (1,)).expand((rows, columns)).e(BinaryOps.SUB, lb),
         lambda: x.max(1, keepdims=True) - x),
    ]
    with config.override(alloc_poison=True):
        for build, want in cases:
            out = build()
            got = _realize(out)
            np.testing.assert_allclose(got, want(), rtol=1e-5, atol=1e-5)
            del out


def test_repeated_realize_reuses_the_dropped_output() -> None:
    x = from_numpy(np.arange(1 << 16, dtype=np.float32), "CLANG")
    fast.realize(x)
    first = x.e(BinaryOps.MUL, x)
    fast.realize(first)
    address = first.buffer.handle.address
    del first
    second = x.e(BinaryOps.ADD, x)
    fast.realize(second)
    assert second.buffer.handle.address == address
    np.testing.assert_array_equal(fast.to_numpy(second), np.arange(1 << 16, dtype=np.float32) * 2)


def _thp_mode() -> str:
    """The transparent huge page mode in brackets ("madvise", "always", "never"), or "" where unknown."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as file:
            text = file.read()
    except OSError:
        return ""
    return text[text.index("[") + 1:text.index("]")] if "[" in text else ""


def _advice_observable() -> bool:
    """Whether huge-page advice shows in /proc/self/smaps here: anonymous mappings, transparent huge
    pages in madvise mode (elsewhere the advice changes nothing) and a kernel that prints THPeligible."""
    try:
        with open("/proc/self/smaps") as file:
            printed = "THPeligible:" in file.read()
    except OSError:
        return False
    return host._CAN_MAP and _thp_mode() == "madvise" and printed


def _thp_eligible(address: int) -> bool | None:
    """Whether the mapping holding `address` may get transparent huge pages (smaps "THPeligible"),
    or None where /proc does not say."""
    try:
        with open("/proc/self/smaps") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0] if line else ""
        if "-" in head and all(part and all(c in "0123456789abcdef" for c in part) for part in head.split("-")):
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("THPeligible:"):
            return line.split()[1] == "1"
    return None


@pytest.mark.parametrize("zeroed", [True, False])
def test_large_fresh_memory_is_a_mapping_of_its_own(zeroed: bool) -> None:
    allocator = HostAllocator()
    nbytes = host.MAPPED_MIN + 4093  # not a whole number of pages
    with config.override(alloc_poison=True):
        memory = allocator.alloc(nbytes, zeroed=zeroed)
    window = memory.window()
    assert window.nbytes == nbytes and memory.address % allocator.alignment == 0
    if host._CAN_MAP:
        assert isinstance(memory.owner.base.obj, host.mmap.mmap)  # type: ignore[union-attr]
        assert memory.origin % host.mmap.PAGESIZE == 0
    assert (window == (0 if zeroed else 0xFF)).all()
    window[:] = 7
    window[-1] = 9
    assert int(window[-1]) == 9 and int(window[0]) == 7
    address = memory.address
    del window
    allocator.free(memory)
    again = allocator.alloc(nbytes)  # pooled, and zeroed since it was asked zeroed
    assert again.address == address and not again.window().any()


@pytest.mark.skipif(not _advice_observable(), reason="huge-page advice is observable only with anonymous "
                    "mappings, transparent huge pages in madvise mode and smaps' THPeligible")
@pytest.mark.parametrize("huge", [False, True])
def test_huge_pages_are_advised_for_memory_filled_from_the_host(huge: bool) -> None:
    allocator = HostAllocator()
    with config.override(host_huge_pages=huge):
        output = allocator.alloc(host.MAPPED_MIN, zeroed=False)  # as a kernel's output
        table = allocator.alloc(host.MAPPED_MIN, zeroed=False)
    assert _thp_eligible(output.address) is huge  # advised at once only with HOST_HUGE_PAGES=1
    assert _thp_eligible(table.address) is huge
    allocator.copyin(table, np.arange(host.MAPPED_MIN, dtype=np.uint8).data)  # as from_numpy
    assert _thp_eligible(table.address) is True
    assert _thp_eligible(output.address) is huge
    assert (table.window()[:300] == np.arange(300, dtype=np.uint8)).all()


def test_a_refused_mapping_raises_memory_error_naming_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(host.mmap, "mmap", refuse)
    if not host._CAN_MAP:
        pytest.skip("no anonymous mappings on this platform: large buffers come from numpy")
    with pytest.raises(MemoryError, match=f"cannot map {host.MAPPED_MIN + 64} bytes"):
        HostAllocator().alloc(host.MAPPED_MIN)


@pytest.mark.skipif(not _advice_observable(), reason="huge-page advice is observable only with anonymous "
                    "mappings, transparent huge pages in madvise mode and smaps' THPeligible")
@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_from_numpy_tables_get_huge_pages_and_kernel_outputs_do_not(device: str) -> None:
    table = from_numpy(np.arange(host.MAPPED_MIN // 4, dtype=np.float32), device)  # 4 MiB + the slack
    doubled = table.e(BinaryOps.ADD, table)
    fast.realize(doubled)
    assert _thp_eligible(table.realized.handle.address) is True  # type: ignore[union-attr]
    assert _thp_eligible(doubled.realized.handle.address) is False  # type: ignore[union-attr]
    assert (np.frombuffer(doubled.realized.as_numpy().tobytes(), np.float32)[:5] == [0, 2, 4, 6, 8]).all()  # type: ignore[union-attr]



def test_refused_huge_page_advice_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    if not host._CAN_MAP or not hasattr(host.mmap, "MADV_HUGEPAGE"):
        pytest.skip("no anonymous mappings or no huge-page advice on this platform")
    monkeypatch.setattr(host.mmap, "MADV_HUGEPAGE", 0x7FFF)  # an advice the kernel refuses (EINVAL)
    with pytest.raises(OSError):
        host.mmap.mmap(-1, 4096, flags=host._MAP_FLAGS).madvise(0x7FFF)
    values = np.arange(host.MAPPED_MIN // 4, dtype=np.float32)
    with config.override(host_huge_pages=True):
        table = from_numpy(values, "CLANG")  # advised when mapped and again when filled: both refused
    assert np.array_equal(np.frombuffer(table.realized.as_numpy().tobytes(), np.float32), values)  # type: ignore[union-attr]
