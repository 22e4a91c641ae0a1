"""Running the items of one schedule on several devices at once (driven by realize.run_schedule).

Model. Each item belongs to a *lane*: the device of its first buffer (a copy runs on its destination's
lane), except that every item touching a DISK buffer runs on the one lane "DISK" (the disk runtime's
mapping bookkeeping is not thread-safe). A lane's items run in schedule order, one at a time. An item
also waits for the items of other lanes it depends on (`dependencies`): the last earlier item writing
memory it reads or writes, and every earlier item reading memory it writes, memory compared by
`Buffer.base` (views share their base's allocation). Kernels (ctypes) and copies (numpy) drop the
GIL, so lanes overlap.

Claiming. The caller's thread and up to `lanes - 1` helper threads claim items (`LaneRun._claim`):
a thread takes a ready item (its lane's previous item finished, its dependencies finished, not
claimed by anyone), preferring the lane of its last item, else the earliest in schedule order. The
caller claims the first item before posting the helpers and keeps claiming until no item may start,
then waits only for items other threads have claimed: a helper that does not get a core strands
nothing, the caller runs its lanes too. This never deadlocks: the earliest unclaimed item's
dependencies and lane predecessor are earlier, so they are finished or running.

Errors. An item's exception is recorded; items later in schedule order than the earliest failure are
not started (those already running finish), earlier ones still run, and once every lane has stopped
the earliest error in schedule order is raised: the error sequential execution would have raised.

Threads. `launch` splits a large kernel over `cpu.thread_count()` threads; an item claimed while k lanes
are live (running an item or holding a ready one; a lane waiting for another lane does not count)
gets `max(1, thread_count() // k)` (`launch.thread_cap`). Results never depend on the thread count.

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
from concurrent.futures import ThreadPoolExecutor
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
            cpu.ensure_kernel_stacks()  # lanes run kernels on these threads
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
    """One parallel run: this thread and up to `len(lanes) - 1` helpers claim items (module docstring).
    Everything mutable (`position`, `busy`, `finished`, `errors`, `stop_at`, `running`) is guarded by
    `state`, whose waiters are threads waiting for an item to become ready."""

    def __init__(self, items: Sequence[ScheduleItem], lanes: list[list[int]], run_one: RunOne,
                 waits: list[list[int]] | None = None) -> None:
        self.items, self.lanes, self.run_one = items, lanes, run_one
        self.waits = _waits(items, lanes) if waits is None else waits
        self.lane_of = [0] * len(items)
        for number, indices in enumerate(lanes):
            for index in indices:
                self.lane_of[index] = number
        self.position = [0] * len(lanes)  # per lane: its next unclaimed item (a position in the lane)
        self.busy = [False] * len(lanes)  # per lane: one of its items is running
        self.finished = [False] * len(items)
        self.errors: dict[int, BaseException] = {}
        self.escaped: BaseException | None = None  # an interrupt that ended a helper outside any item
        self.stop_at = len(items)  # items after this index are not started
        self.running = 0  # items running now
        self.state = threading.Condition()
        self.cores = cpu.thread_count()

    def run(self) -> None:
        """Run every item (this thread claims first, then helpers are posted: the hot workers of
        runtime/workers.py when free, else the pool), wait only for items claimed by others, and
        raise the earliest error in schedule order."""
        first = self._claim(0, wait=False)  # the schedule's first item: nothing precedes it
        helpers = len(self.lanes) - 1
        team = workers.crew(helpers)
        if team is not None and team.lock.acquire(blocking=False):
            try:
                posted = team.python(self._help, helpers)
            finally:
                team.lock.release()
        else:
            posted = 0
        pool = _pool(helpers) if posted < helpers else None
        for _ in range(helpers - posted):
            pool.submit(self._help)  # type: ignore[union-attr]
        try:
            self._work(first)
            with self.state:
                self.state.wait_for(lambda: self.running == 0)
        except BaseException:  # interrupted: start nothing more, let the running items end
            with self.state:
                self.stop_at = -1
                self.state.notify_all()
                self.state.wait_for(lambda: self.running == 0)
            raise
        if self.escaped is not None:
            raise self.escaped
        if self.errors:
            raise self.errors[min(self.errors)]

    def _help(self) -> None:
        """A helper thread's part: claim items until none may start; an interrupt is kept for `run`."""
        try:
            self._work(None)
        except BaseException as error:  # noqa: BLE001 - raised by `run`
            self.escaped = self.escaped or error

    def _work(self, claimed: tuple[int, int] | None) -> None:
        """Run `claimed` (an item and the lanes live when it was claimed), then claim more, preferring
        the last item's lane, until no item may start (waiting while some may later)."""
        _LOCAL.in_lane = True
        lane = 0 if claimed is None else self.lane_of[claimed[0]]
        try:
            while claimed is not None or (claimed := self._claim(lane, wait=True)) is not None:
                index, live = claimed
                lane = self.lane_of[index]
                try:
                    self._run(index, live)
                except BaseException:  # interrupted outside the item: nothing after it may start
                    self._end(index, None, stop=index - 1)
                    raise
                claimed = None
        finally:
            _LOCAL.in_lane = False

    def _ready_lane(self, lane: int) -> bool:
        """Whether `lane`'s next item may be claimed now."""
        position, indices = self.position[lane], self.lanes[lane]
        if self.busy[lane] or position >= len(indices) or indices[position] > self.stop_at:
            return False
        return all(self.finished[dep] for dep in self.waits[indices[position]])

    def _pending(self) -> bool:
        """Whether some item not yet claimed may still start."""
        return any(position < len(indices) and indices[position] <= self.stop_at
                   for position, indices in zip(self.position, self.lanes, strict=True))

    def _claim(self, prefer: int, wait: bool) -> tuple[int, int] | None:
        """Claim a ready item (of lane `prefer` if it has one, else the earliest): (index, lanes live
        then: running or ready). None when no item may start any more (or none is ready, without `wait`)."""
        with self.state:
            while True:
                ready = [lane for lane in range(len(self.lanes)) if self._ready_lane(lane)]
                if ready:
                    lane = prefer if prefer in ready else min(ready, key=lambda n: self.lanes[n][self.position[n]])
                    index = self.lanes[lane][self.position[lane]]
                    self.position[lane] += 1
                    self.busy[lane] = True
                    self.running += 1
                    return index, sum(self.busy) + len(ready) - 1
                if not wait or not self._pending():
                    return None
                self.state.wait()

    def _run(self, index: int, live: int) -> None:
        """Run item `index` with the kernel thread cap for `live` lanes; record its error."""
        error: BaseException | None = None
        try:
            with thread_cap(max(1, self.cores // max(1, live))):
                self.run_one(index, self.items[index])
        except BaseException as raised:  # re-raised by `run`, in schedule order
            error = raised
        self._end(index, error, stop=index if error is not None else self.stop_at)

    def _end(self, index: int, error: BaseException | None, stop: int) -> None:
        """Item `index` is over (ran, failed with `error`, or abandoned): free its lane, wake waiters."""
        with self.state:
            self.finished[index] = True
            self.busy[self.lane_of[index]] = False
            self.running -= 1
            if error is not None:
                self.errors[index] = error
            self.stop_at = min(self.stop_at, stop)
            self.state.notify_all()


def run_parallel(items: Sequence[ScheduleItem], lanes: list[list[int]], run_one: RunOne,
                 waits: list[list[int]] | None = None) -> None:
    """Run `items` lane by lane concurrently (`lanes` and `waits` from `lane_plan`; see the module docstring);
    `run_one(index, item)` runs one item and does its bookkeeping. Raises the earliest error in
    schedule order."""
    LaneRun(items, lanes, run_one, waits).run()
