"""Schedule replay: realizing a graph whose structure equals one realized before (over other buffers)
skips fusion and scheduling and runs the recorded kernels with this graph's buffers.

What may be replayed (`signature` returns None otherwise, and the graph is scheduled as usual):
every unrealized base is an elementwise op, a reduce or a constant, not forced to realize, or a copy
between compute devices (what a sharded reduction's all-reduce builds), with integer shapes, on
compute devices; every other base it reads is realized. No assign, view, custom or contiguous op
takes part, so no buffer version or aliasing decides anything; stale reads and stale outputs are
checked exactly as the scheduler checks them. Only schedules whose items are kernels and copies
over the graph's own buffers are recorded (`record`); one-device kernel-only templates run directly
(`Template.direct`), the others through `run_schedule` (devices in parallel, copies).

The key (`Signature.key`) holds, per unrealized base in a fixed walk order: op, arg (constants by
their bits), dtype, shape, device and, per source, whether it is an unrealized base (by number) or
a realized one (by number among the distinct realized bases) and the view it is read through; plus
the outputs' views and the configuration. Equal keys give equal fusion decisions and equal kernel
ASTs, so the recorded items, with each buffer replaced by the same-numbered base's buffer, are the
schedule of the new graph. The cache is a small LRU (`MAX_TEMPLATES`).
"""
from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fast import config
from fast.engine.schedule import ScheduleItem, Step, check_stale_outputs
from fast.lazy import LazyBuffer
from fast.ops import BinaryOps, KernelOps, LoadOps, ReduceOps, TernaryOps, UnaryOps

MAX_TEMPLATES = 256
_ELEMENTWISE = (UnaryOps, BinaryOps, TernaryOps)


@dataclass(frozen=True)
class Signature:
    key: Key
    bases: list[LazyBuffer]  # unrealized bases, sources first
    leaves: list[LazyBuffer]  # realized bases read, in first-read order


@dataclass(frozen=True)
class Template:
    """Recorded items: each buffer as ("base", n) or ("leaf", k); `realized`: the numbers of the
    bases the items realize (their sources are dropped after the run, as `realize` does)."""

    items: tuple[tuple[Any, tuple[tuple[str, int], ...]], ...]
    realized: tuple[int, ...]
    direct: bool = True  # only kernels, on one device: run without `run_schedule`
    kernels: list[Any] = field(default_factory=list, compare=False)  # per item, found on first replay


def _arg_key(base: LazyBuffer) -> Any:
    arg = base.arg
    if isinstance(arg, float):
        return ("f", struct.pack("<d", arg))
    return (type(arg).__name__, arg) if base.op is LoadOps.CONST else arg


def _static_entry(base: LazyBuffer) -> tuple[Any, ...] | None:
    """(op, arg, dtype, shape, device) of a base whose op, device and shape allow a replay, else None.
    Everything it reads is fixed when the base is built, so it is memoized in `base.engine_memo`;
    what can change later (forced realization, values, stale reads) is checked by `signature`."""
    memo = base.engine_memo
    if memo is not None:
        return memo if memo else None
    op = base.op
    on_compute = not base.device.startswith("DISK")
    integral = not base.st.symbolic
    if op is LoadOps.COPY:
        replayable = on_compute and integral and not base.srcs[0].device.startswith("DISK")
    else:
        replayable = (isinstance(op, (*_ELEMENTWISE, ReduceOps)) or op is LoadOps.CONST) and on_compute and integral
    # the op by id(): enum members live as long as the process, and Enum's __hash__ is slow Python
    entry = (id(op), _arg_key(base), base.dtype, base.shape, base.device) if replayable else ()
    base.engine_memo = entry
    return entry if entry else None


class Key:
    """A signature key whose hash is computed once (tuples rehash every element on every lookup)."""

    __slots__ = ("parts", "hashed")

    def __init__(self, parts: tuple[Any, ...]) -> None:
        self.parts, self.hashed = parts, hash(parts)

    def __hash__(self) -> int:
        return self.hashed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and self.hashed == other.hashed and self.parts == other.parts


def _holds_values(base: LazyBuffer) -> bool:
    """`base.realized is not None` for a base (same rule, inlined for speed)."""
    buffer = base._buffer
    if buffer is None or not buffer.is_allocated():
        return False
    return base.op is not LoadOps.ASSIGN or buffer.version > base._assign_version


class _Walk:
    """The numbering of one signature walk: unrealized bases in discovery order (breadth first from
    the outputs, sources in order), realized bases read (leaves) in first-read order. Equal
    structures are discovered in the same order, so equal keys number their buffers alike."""

    __slots__ = ("numbers", "bases", "leaf_numbers", "leaves")

    def __init__(self) -> None:
        self.numbers: dict[int, int] = {}
        self.bases: list[LazyBuffer] = []
        self.leaf_numbers: dict[int, int] = {}
        self.leaves: list[LazyBuffer] = []

    def base_number(self, base: LazyBuffer) -> int:
        number = self.numbers.get(id(base))
        if number is None:
            number = self.numbers[id(base)] = len(self.bases)
            self.bases.append(base)
        return number

    def entry(self, base: LazyBuffer) -> tuple[Any, ...] | None:
        """The key entry of an unrealized base (its static entry and how it reads each source), or
        None when it may not be replayed: forced to realize, or reading memory assigned since."""
        static = _static_entry(base)
        if static is None or (base.forced_realize and base.op is not LoadOps.COPY):
            return None
        refs: list[tuple[Any, ...]] = []
        leaf_numbers = self.leaf_numbers
        for src, version in zip(base.srcs, base.src_versions, strict=True):
            source = src if src._base is None else src._base
            buffer = source._buffer
            if buffer is not None and buffer.version > version:
                return None  # a stale read: the scheduler raises for it
            holds = buffer is not None and buffer.is_allocated() and \
                (source.op is not LoadOps.ASSIGN or buffer.version > source._assign_version)
            if not holds:
                refs.append(("b", self.base_number(source), src.st))
                continue
            number = leaf_numbers.get(id(source))
            if number is None:
                number = leaf_numbers[id(source)] = len(self.leaves)
                self.leaves.append(source)
            refs.append(("l", number, src.st, source.dtype, source.device))
        return (static, tuple(refs))


def signature(outs: Sequence[LazyBuffer]) -> Signature | None:
    """The structure of the graph below `outs`, or None when it may not be replayed."""
    walk = _Walk()
    outputs: list[tuple[int, Any]] = []
    for out in outs:
        base = out if out._base is None else out._base
        if _holds_values(base):
            return None
        outputs.append((walk.base_number(base), out.st))
    entries: list[tuple[Any, ...]] = []
    while len(entries) < len(walk.bases):
        entry = walk.entry(walk.bases[len(entries)])
        if entry is None:
            return None
        entries.append(entry)
    return Signature(Key((tuple(entries), tuple(outputs), config.get())), walk.bases, walk.leaves)


def record(sig: Signature, steps: Sequence[Step]) -> Template | None:
    """The template of `steps` (the schedule of the graph of `sig`), or None when it holds anything
    but kernels over the graph's own buffers."""
    where: dict[int, tuple[str, int]] = {}
    for number, base in enumerate(sig.bases):
        if base.realized is not None:
            where[id(base.realized)] = ("base", number)
    for number, leaf in enumerate(sig.leaves):
        where[id(leaf.realized)] = ("leaf", number)
    numbers = {id(base): number for number, base in enumerate(sig.bases)}
    items: list[tuple[Any, tuple[tuple[str, int], ...]]] = []
    realized: list[int] = []
    for step in steps:
        item = step.item
        if item.ast.op not in (KernelOps.SINK, LoadOps.COPY) or item.assign or item.var_vals \
                or any(id(buffer) not in where for buffer in item.bufs):
            return None
        items.append((item.ast, tuple(where[id(buffer)] for buffer in item.bufs)))
        realized.extend(numbers[id(owner)] for owner in step.owners if id(owner) in numbers)
    direct = all(step.item.ast.op is KernelOps.SINK for step in steps) \
        and len({step.item.bufs[0].device for step in steps}) <= 1
    return Template(tuple(items), tuple(realized), direct)


def instantiate(template: Template, sig: Signature) -> list[ScheduleItem]:
    """The template's items over the buffers of the graph of `sig` (leaves are realized: `signature`
    only numbers sources that hold values as leaves)."""
    bases, leaves = sig.bases, sig.leaves
    items: list[ScheduleItem] = []
    for ast, refs in template.items:
        bufs = [bases[number].buffer if kind == "base" else leaves[number]._buffer for kind, number in refs]
        items.append(ScheduleItem(ast, tuple(bufs)))  # type: ignore[arg-type]
    return items


class TemplateCache(OrderedDict[Any, Template]):
    """Least recently used templates, at most MAX_TEMPLATES (a lock: lanes may realize concurrently)."""

    lock = threading.Lock()

    def lookup(self, key: Any) -> Template | None:
        with self.lock:
            template = self.get(key)
            if template is not None:
                self.move_to_end(key)
            return template

    def store(self, key: Any, template: Template) -> None:
        with self.lock:
            self[key] = template
            self.move_to_end(key)
            while len(self) > MAX_TEMPLATES:
                self.popitem(last=False)


TEMPLATES = TemplateCache()


def prepare(outs: Sequence[LazyBuffer]) -> tuple[Signature | None, Template | None]:
    """(signature, template) for a replayable graph seen before, (signature, None) for one to
    schedule and `record`, (None, None) for one that is never replayed."""
    sig = signature(outs)
    if sig is None:
        return None, None
    template = TEMPLATES.lookup(sig.key)
    if template is not None:
        check_stale_outputs(outs)
    return sig, template
