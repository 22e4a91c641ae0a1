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
from fast.device import Buffer
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


def _replayable(base: LazyBuffer) -> bool:
    op = base.op
    if op is LoadOps.COPY:
        return not base.srcs[0].device.startswith("DISK") and not base.device.startswith("DISK") \
            and all(isinstance(size, int) for size in base.shape)
    return (isinstance(op, (*_ELEMENTWISE, ReduceOps)) or op is LoadOps.CONST) and not base.forced_realize \
        and not base.device.startswith("DISK") and all(isinstance(size, int) for size in base.shape)


class Key:
    """A signature key whose hash is computed once (tuples rehash every element on every lookup)."""

    __slots__ = ("parts", "hashed")

    def __init__(self, parts: tuple[Any, ...]) -> None:
        self.parts, self.hashed = parts, hash(parts)

    def __hash__(self) -> int:
        return self.hashed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and self.hashed == other.hashed and self.parts == other.parts


def _base_of(lb: LazyBuffer) -> LazyBuffer:
    """`lb.base` without the property call (the walk below is the hot path of a repeated realize)."""
    return lb if lb._base is None else lb._base


def _holds_values(base: LazyBuffer) -> bool:
    """`base.realized is not None` for a base (same rule, inlined for speed)."""
    buffer = base._buffer
    if buffer is None or not buffer.is_allocated():
        return False
    return base.op is not LoadOps.ASSIGN or buffer.version > base._assign_version


def _reads_stale(base: LazyBuffer) -> bool:
    """`bool(base.stale_reads())` for a replayable base (it reads every source: never an ASSIGN)."""
    for src, version in zip(base.srcs, base.src_versions, strict=False):
        buffer = _base_of(src)._buffer
        if buffer is not None and buffer.version > version:
            return True
    return False


def _refs(base: LazyBuffer, numbers: dict[int, int], leaf_numbers: dict[int, int],
          leaves: list[LazyBuffer]) -> tuple[tuple[Any, ...], ...]:
    """How `base` reads each source: ("b", number, view) or ("l", leaf number, view, dtype, device)."""
    refs: list[tuple[Any, ...]] = []
    for src in base.srcs:
        source = _base_of(src)
        number = numbers.get(id(source))
        if number is not None:
            refs.append(("b", number, src.st))
            continue
        if id(source) not in leaf_numbers:
            leaf_numbers[id(source)] = len(leaves)
            leaves.append(source)
        refs.append(("l", leaf_numbers[id(source)], src.st, source.dtype, source.device))
    return tuple(refs)


def signature(outs: Sequence[LazyBuffer]) -> Signature | None:
    """The structure of the graph below `outs`, or None when it may not be replayed."""
    numbers: dict[int, int] = {}
    leaf_numbers: dict[int, int] = {}
    bases: list[LazyBuffer] = []
    leaves: list[LazyBuffer] = []
    entries: list[tuple[Any, ...]] = []
    stack: list[tuple[LazyBuffer, bool]] = [(_base_of(out), False) for out in reversed(outs)]
    while stack:
        base, expanded = stack.pop()
        if id(base) in numbers:
            continue
        if not expanded:
            if _holds_values(base) or not _replayable(base) or _reads_stale(base):
                return None
            stack.append((base, True))
            for src in reversed(base.srcs):
                source = _base_of(src)
                if not _holds_values(source):
                    stack.append((source, False))
            continue
        refs = _refs(base, numbers, leaf_numbers, leaves)
        numbers[id(base)] = len(bases)
        bases.append(base)
        entries.append((base.op, _arg_key(base), base.dtype, base.shape, base.device, refs))
    outputs = tuple((numbers[id(out.base)], out.st) for out in outs)
    return Signature(Key((tuple(entries), outputs, config.get())), bases, leaves)


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
    """The template's items over the buffers of the graph of `sig`."""
    def buffer(ref: tuple[str, int]) -> Buffer:
        kind, number = ref
        found = sig.bases[number].buffer if kind == "base" else sig.leaves[number].realized
        assert found is not None  # noqa: S101 - leaves are realized (checked by `signature`)
        return found

    return [ScheduleItem(ast, tuple(buffer(ref) for ref in refs)) for ast, refs in template.items]


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
