"""Running the items of one schedule on several devices at once (driven by realize.run_schedule).

Model. Each item belongs to a *lane*: the device of its first buffer (a copy runs on its destination's
lane), except that every item touching a DISK buffer runs on the one lane "DISK" (the disk runtime's
mapping bookkeeping is not thread-safe). Each lane runs its items in schedule order on its own thread
(the caller's thread runs the first item's lane). An item also waits for the items of other lanes it
depends on (`dependencies`): the last earlier item writing memory it reads or writes, and every earlier
item reading memory it writes, memory compared by `Buffer.base` (views share their base's allocation).
Kernels (ctypes) and copies (numpy) drop the GIL, so lanes overlap.

Errors. An item's exception is recorded; items later in schedule order than the earliest failure are
not started (those already running finish), earlier ones still run, and once every lane has stopped
the earliest error in schedule order is raised: the error sequential execution would have raised.

Threads. `launch` splits a large kernel over `cpu.thread_count()` threads; while k lanes are running an
item (a lane waiting for another lane does not count), each kernel gets `max(1, thread_count() // k)`
(`launch.thread_cap`). Results never depend on the thread count.

When it is not worth it. `lane_plan` returns None, and the caller runs the items sequentially on
its own thread with no thread round trip, when every item's output is on one device or when fewer
than two lanes touch at least `min_work` bytes (waking a thread costs tens of microseconds); so does
a call from inside a lane (`in_lane`: a CUSTOM function that realizes). Only the items up to the
last one touching at least `min_work` bytes run in lanes (`parallel_prefix`); the small items after
it (the tail of a sharded reduction's all-reduce: partial sums copied and added) run on the
caller's thread once every lane has finished, in schedule order, instead of handing each other off
between threads.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from fast.device import Buffer
from fast.engine.schedule import ScheduleItem
from fast.runtime import cpu, workers
from fast.runtime.launch import thread_cap

RunOne = Callable[[int, ScheduleItem], None]

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()
_MIN_POOL = 64
PRINT_LOCK = threading.Lock()  # DEBUG lines printed from lane threads
_LOCAL = threading.local()  # `in_lane`: this thread is running a lane now


def lane_of(item: ScheduleItem) -> str:
    """The lane an item runs on: its first buffer's device, or "DISK" when it touches a DISK buffer."""
    if any(buffer.device.startswith("DISK:") for buffer in item.bufs):
        return "DISK"
    return item.bufs[0].device


def item_work(item: ScheduleItem) -> int:
    """The bytes an item touches (its buffers' sizes): what `min_work` is compared with."""
    return sum(buffer.nbytes for buffer in item.bufs)


def parallel_prefix(items: Sequence[ScheduleItem], min_work: int) -> int:
    """How many leading items run in lanes: up to and including the last item touching at least
    `min_work` bytes (every item when none does, so `parallel_lanes` then decides alone)."""
    large = [index for index, item in enumerate(items) if item_work(item) >= min_work]
    return large[-1] + 1 if large else len(items)


def in_lane() -> bool:
    """Whether this thread is running a lane now (a CUSTOM function that realizes): it then runs
    its items sequentially."""
    return getattr(_LOCAL, "in_lane", False)  # type: ignore[no-any-return]


class LanePlan(NamedTuple):
    """How a schedule runs in lanes: items[:cut] in `lanes`, each waiting for `waits[i]` (items of
    other lanes), the rest on the caller's thread afterwards. A function of the items' devices,
    sizes and memory, so a replayed schedule keeps the plan of its template."""

    cut: int
    lanes: list[list[int]]
    waits: list[list[int]]


def lane_plan(items: Sequence[ScheduleItem], min_work: int) -> LanePlan | None:
    """The plan for running `items` in lanes, or None when it is not worth it (module docstring)."""
    cut = parallel_prefix(items, min_work)
    lanes = parallel_lanes(items[:cut], min_work)
    return None if lanes is None else LanePlan(cut, lanes, _waits(items[:cut], lanes))


def parallel_lanes(items: Sequence[ScheduleItem], min_work: int) -> list[list[int]] | None:
    """Item indices per lane (schedule order; lanes in order of their first item) when running the
    lanes concurrently is worth it (see the module docstring), else None."""
    if len(items) < 2:
        return None
    first = items[0].bufs[0].device
    if all(item.bufs[0].device == first for item in items):
        return None
    found: dict[str, list[int]] = {}
    work: dict[str, int] = {}
    for index, item in enumerate(items):
        lane = lane_of(item)
        found.setdefault(lane, []).append(index)
        work[lane] = work.get(lane, 0) + item_work(item)
    busy = sum(1 for touched in work.values() if touched >= min_work)
    return list(found.values()) if len(found) > 1 and busy >= 2 else None


def dependencies(items: Sequence[ScheduleItem]) -> list[set[int]]:
    """deps[i]: earlier items item i must follow: the last writer of each base it reads or writes
    (read after write, write after write) and the readers since then of each base it writes
    (write after read). Memory is compared by `Buffer.base`."""
    last_writer: dict[Buffer, int] = {}
    readers: dict[Buffer, list[int]] = {}
    deps: list[set[int]] = []
    for index, item in enumerate(items):
        reads = [buffer.base for buffer in item.inputs]
        writes = [buffer.base for buffer in item.outputs]
        needed = {last_writer[root] for root in (*reads, *writes) if root in last_writer}
        for root in writes:
            needed.update(readers.get(root, ()))
        for root in reads:
            readers.setdefault(root, []).append(index)
        for root in writes:
            last_writer[root] = index
            readers[root] = []
        needed.discard(index)
        deps.append(needed)
    return deps


def _pool(size: int) -> ThreadPoolExecutor:
    """The lane threads' pool, allowing at least `size` workers. Threads start only when a lane finds
    none idle, so the generous minimum costs nothing; it keeps lanes of schedules run at once from
    several user threads from queueing behind each other's blocked lanes."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < size:
            _POOL_SIZE = max(size, _MIN_POOL)
            _POOL = ThreadPoolExecutor(max_workers=_POOL_SIZE, thread_name_prefix="fast-lane")
        return _POOL


def _waits(items: Sequence[ScheduleItem], lanes: list[list[int]]) -> list[list[int]]:
    """Per item, the items of other lanes it depends on (`dependencies`)."""
    lane_number = [0] * len(items)
    for number, indices in enumerate(lanes):
        for index in indices:
            lane_number[index] = number
    return [[dep for dep in deps if lane_number[dep] != lane_number[index]]
            for index, deps in enumerate(dependencies(items))]


class LaneRun:
    """One parallel run. Everything mutable (`finished`, `errors`, `stop_at`, `running`: lanes running
    an item now) is guarded by `state`, whose waiters are lanes waiting for another lane's item."""

    def __init__(self, items: Sequence[ScheduleItem], lanes: list[list[int]], run_one: RunOne,
                 waits: list[list[int]] | None = None) -> None:
        self.items, self.lanes, self.run_one = items, lanes, run_one
        self.waits = _waits(items, lanes) if waits is None else waits
        self.finished = [False] * len(items)
        self.errors: dict[int, BaseException] = {}
        self.stop_at = len(items)  # items after this index are not started
        self.state = threading.Condition()
        self.running = sum(1 for indices in lanes if not self.waits[indices[0]])
        self.cores = cpu.thread_count()

    def run(self) -> None:
        """Run every lane (the first on this thread), wait for all, raise the earliest error. The
        other lanes go to the hot workers of runtime/workers.py when they are free (a lane then
        starts within microseconds, not the 100-500 µs a pool thread takes to wake on a VM), else
        to the thread pool."""
        team = workers.crew(len(self.lanes) - 1)
        if team is not None and team.lock.acquire(blocking=False):
            try:
                team.run(lambda: self.lane(self.lanes[0]), [(self.lane, (indices,), {}) for indices in self.lanes[1:]])
            finally:
                team.lock.release()
        else:
            pool = _pool(len(self.lanes) - 1)
            futures: list[Future[None]] = [pool.submit(self.lane, indices) for indices in self.lanes[1:]]
            try:
                self.lane(self.lanes[0])
            finally:
                for future in futures:
                    future.result()
        if self.errors:
            raise self.errors[min(self.errors)]

    def _ready(self, index: int) -> bool:
        return all(self.finished[dep] for dep in self.waits[index])

    def _start(self, index: int, counted: bool) -> int | None:
        """Wait until item `index` may start; the number of lanes then running (this one counted from
        now on), or None when it must not start because an earlier item failed (this one uncounted).
        `counted`: this lane is counted in `running` now (a lane waiting for another is not)."""
        with self.state:
            if not self._ready(index):
                self.running -= 1 if counted else 0
                self.state.wait_for(lambda: self._ready(index))
                counted = False
            if index > self.stop_at:
                self.running -= 1 if counted else 0
                return None
            self.running += 0 if counted else 1
            return self.running

    def lane(self, indices: list[int]) -> None:
        """Run one lane's items in order, waiting for the other lanes' items they depend on."""
        _LOCAL.in_lane = True
        counted, ran = not self.waits[indices[0]], 0
        try:
            for index in indices:
                previous, counted = counted, False  # `_start` uncounts this lane when it waits or stops
                running = self._start(index, previous)
                counted = running is not None
                if running is None:
                    break
                self._run(index, running)
                ran += 1
        finally:  # also reached when a wait is interrupted (KeyboardInterrupt on the caller's thread)
            with self.state:
                self.running -= 1 if counted else 0
                if ran < len(indices):  # nothing after an item that did not run may start
                    self.stop_at = min(self.stop_at, indices[ran] - 1)
                for index in indices:
                    self.finished[index] = True  # skipped items too: their waiters then see stop_at
                self.state.notify_all()
            _LOCAL.in_lane = False

    def _run(self, index: int, running: int) -> None:
        """Run item `index` with the kernel thread cap for `running` busy lanes; record its error."""
        error: BaseException | None = None
        try:
            with thread_cap(max(1, self.cores // max(1, running))):
                self.run_one(index, self.items[index])
        except BaseException as raised:  # re-raised by `run`, in schedule order
            error = raised
        with self.state:
            self.finished[index] = True
            if error is not None:
                self.errors[index] = error
                self.stop_at = min(self.stop_at, index)
            self.state.notify_all()


def run_parallel(items: Sequence[ScheduleItem], lanes: list[list[int]], run_one: RunOne,
                 waits: list[list[int]] | None = None) -> None:
    """Run `items` lane by lane concurrently (`lanes` and `waits` from `lane_plan`; see the module docstring);
    `run_one(index, item)` runs one item and does its bookkeeping. Raises the earliest error in
    schedule order."""
    LaneRun(items, lanes, run_one, waits).run()
