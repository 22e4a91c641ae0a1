"""Schedule replay: realizing a graph whose structure equals one realized before (over other buffers)
skips fusion and scheduling and runs the recorded kernels with this graph's buffers.

What may be replayed (`signature` returns None otherwise, and the graph is scheduled as usual):
every unrealized base is an elementwise op, a reduce, a gather or a constant, not forced to realize, or a copy
between compute devices (what a sharded reduction's all-reduce builds), with integer shapes, on
compute devices; every other base it reads is realized. No assign, view, custom or contiguous op
takes part, so no buffer version or aliasing decides anything; stale reads and stale outputs are
checked exactly as the scheduler checks them. A gather (GATHER base) is replayed too when its
indices are a realized leaf: the template keeps its index checks (engine/gathers.py), which run
before any of its items. Only schedules whose items are kernels and copies
over the graph's own buffers are recorded (`record`); one-device kernel-only templates run directly
(`Template.direct`), the others through `run_schedule` (devices in parallel, copies).

The key (`Signature.parts`) holds, per unrealized base in a fixed walk order: op, arg, dtype, shape,
device and, per source, whether it is an unrealized base (by number) or a realized one (by number
among the distinct realized bases) and the view it is read through; plus the outputs' views and
the configuration. A constant's value is not in the key: constants are slots, one per distinct
(dtype, bit pattern) in first-appearance order (`Signature.consts`), so the key records which
constants are equal but not what they hold. Equal keys give equal fusion decisions and kernel ASTs
equal up to constant values, so the recorded items, with each buffer replaced by the same-numbered
base's buffer, are the schedule of the new graph; new constant values reach the kernels as
parameters (`slot_bits`, realize.kernel_for). The cache is a small LRU (`MAX_TEMPLATES`).
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fast import config
from fast.codegen.const_args import const_bits, kernel_slots
from fast.device import Buffer
from fast.dtype import DType
from fast.engine.schedule import ScheduleItem, Step, check_stale_outputs
from fast.graph.keys import arg_key
from fast.graph.node import LazyBuffer
from fast.ops import (
    KERNEL_SINK,
    LOAD_ASSIGN,
    LOAD_CONST,
    LOAD_COPY,
    BinaryOps,
    GatherOps,
    ReduceOps,
    TernaryOps,
    UnaryOps,
)
from fast.runtime import mpi

MAX_TEMPLATES = 256
_ELEMENTWISE = (UnaryOps, BinaryOps, TernaryOps)


ConstKey = tuple[DType, int]  # a constant slot: (dtype, bit pattern), see codegen/const_args.py


class Signature(NamedTuple):  # (a tuple: built on every realize, with tuple.__new__, which is C)
    parts: tuple[Any, ...]  # the key: equal parts, equal structure (module docstring)
    hashed: int  # the hash of a function of `parts` that hashes in C alone (`signature`)
    bases: list[LazyBuffer]  # unrealized bases, in discovery order
    leaves: list[LazyBuffer]  # realized bases read, in first-read order
    consts: list[ConstKey]  # the graph's constant slots, in first-appearance order


@dataclass(frozen=True)
class Template:
    """Recorded items: each buffer as ("base", n) or ("leaf", k); `realized`: the numbers of the
    bases the items realize (their sources are dropped after the run, as `realize` does).
    `consts`: the graph's constant slots when recorded. `slot_maps`, for direct templates whose every
    kernel constant is a graph constant: per item, the graph slot of each of its kernel's constant
    slots (the order of `kernel_keys`' bits), and `structures` the items' kernel structures; both
    empty otherwise (other constant values are then scheduled afresh)."""

    items: tuple[tuple[Any, tuple[tuple[str, int], ...]], ...]
    realized: tuple[int, ...]
    direct: bool = True  # only kernels, on one device: run without `run_schedule`
    consts: tuple[ConstKey, ...] = ()
    slot_maps: tuple[tuple[int, ...], ...] = ()
    structures: tuple[Any, ...] = ()
    kernels: list[Any] = field(default_factory=list, compare=False)  # per item, (kernel, constants) or None (a copy)
    plans: list[Any] = field(default_factory=list, compare=False)  # its lane plan, found on first replay
    native: list[Any] = field(default_factory=list, compare=False)  # its replay_lanes plan, found from `plans`
    index_checks: tuple[tuple[int, DType, int, int, int], ...] = ()  # (leaf, dtype, count, size, axis) per gather


_REPLAYABLE = frozenset(id(op) for kind in (*_ELEMENTWISE, ReduceOps) for op in kind) | {id(LOAD_CONST)} \
    | {id(GatherOps.GATHER)}


def _static_entry(base: LazyBuffer) -> tuple[Any, ...]:
    """((op, shape), arg, dtype, device) of a base whose op, device and shape allow a replay, else
    (). Everything it reads is fixed when the base is built, so it is memoized in `base.engine_memo`;
    what can change later (forced realization, values, stale reads) is checked by `signature`. The
    op is there by id() (enum members live as long as the process; Enum's __hash__ is slow Python),
    and (op, shape) first: it is the part a signature hashes. A constant's value is a slot, not its arg
    (`_Walk.const_slot`); a float arg is keyed by its bits (`arg_key`)."""
    op, device, arg = base.op, base.device, base.arg
    if op is LOAD_COPY:
        replayable = not base.srcs[0].device.startswith("DISK")
    else:
        replayable = id(op) in _REPLAYABLE
    if not replayable or device.startswith("DISK") or base.st.symbolic:
        base.engine_memo = ()
        return ()
    if op is LOAD_CONST:
        arg = None
    elif type(arg) is float:
        arg = arg_key(arg)
    entry = ((id(op), base.shape), arg, base.dtype, device)
    base.engine_memo = entry
    return entry


def _holds_values(base: LazyBuffer) -> bool:
    """`base.realized is not None` for a base (same rule, inlined for speed)."""
    buffer = base._buffer
    if buffer is None or not buffer.is_allocated():
        return False
    return base.op is not LOAD_ASSIGN or buffer.version > base._assign_version


class _Walk:
    """The numbering of one signature walk: unrealized bases in discovery order (breadth first from
    the outputs, sources in order), realized bases read (leaves) in first-read order, constant slots
    in first-appearance order. Equal structures are discovered in the same order, so equal keys
    number their buffers alike. (The hot path of a repeated realize: `entries` is one function with
    its attribute reads inlined; a method call per source would cost more than the rest.)"""

    __slots__ = ("numbers", "bases", "leaf_numbers", "leaves", "const_numbers", "consts")

    def __init__(self) -> None:
        self.numbers: dict[LazyBuffer, int] = {}  # (by identity: LazyBuffer keeps object's hash)
        self.bases: list[LazyBuffer] = []
        self.leaf_numbers: dict[LazyBuffer, int] = {}
        self.leaves: list[LazyBuffer] = []
        self.const_numbers: dict[ConstKey, int] = {}
        self.consts: list[ConstKey] = []

    def const_slot(self, base: LazyBuffer) -> int:
        """The slot of a CONST base: equal (dtype, bits) share one, as in a kernel's parameters."""
        key = (base.dtype, const_bits(base.arg, base.dtype))
        number = self.const_numbers.get(key)
        if number is None:
            number = self.const_numbers[key] = len(self.consts)
            self.consts.append(key)
        return number

    def entries(self) -> tuple[list[tuple[Any, ...]], list[Any]] | None:
        """(the key entry of each unrealized base, walked from `bases` as it grows; the (op, shape)
        part of each, what the signature hashes), or None when one may not be replayed: forced to realize,
        reading memory assigned since (a stale read: the scheduler raises for it), or reading an
        unrealized assign (scheduled, not replayed)."""
        numbers, bases, leaf_numbers, leaves = self.numbers, self.bases, self.leaf_numbers, self.leaves
        entries: list[tuple[Any, ...]] = []
        light: list[Any] = []
        for base in bases:  # (grows while walked: breadth first)
            static = base.engine_memo
            if static is None:
                static = _static_entry(base)
            if not static or (base.forced_realize and base.op is not LOAD_COPY):
                return None
            light.append(static[0])
            if base.op is LOAD_CONST:
                entries.append((static, self.const_slot(base)))
                continue
            refs: list[tuple[Any, ...]] = []
            for src, version in zip(base.srcs, base.src_versions, strict=True):
                source = src._base or src
                buffer = source._buffer
                if buffer is None or buffer._handle is None:
                    number = numbers.get(source)
                    if number is None:
                        number = numbers[source] = len(bases)
                        bases.append(source)
                    refs.append(("b", number, src.st))
                    continue
                current = (buffer._base or buffer)._version
                if current > version or (source.op is LOAD_ASSIGN and current <= source._assign_version):
                    return None
                number = leaf_numbers.get(source)
                if number is None:
                    number = leaf_numbers[source] = len(leaves)
                    leaves.append(source)
                refs.append(("l", number, src.st, source.dtype, source.device))
            entries.append((static, tuple(refs)))
        return entries, light


def signature(outs: Sequence[LazyBuffer]) -> Signature | None:
    """The structure of the graph below `outs`, or None when it may not be replayed."""
    walk = _Walk()
    numbers, bases = walk.numbers, walk.bases
    outputs: list[tuple[int, Any]] = []
    for out in outs:
        base = out._base or out
        if _holds_values(base):
            return None
        number = numbers.get(base)
        if number is None:
            number = numbers[base] = len(bases)
            bases.append(base)
        outputs.append((number, out.st))
    found = walk.entries()
    if found is None:
        return None
    entries, light = found
    parts = (tuple(entries), tuple(outputs), config.get())
    return tuple.__new__(Signature, (parts, hash(tuple(light)), bases, walk.leaves, walk.consts))


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
    checks: list[tuple[int, DType, int, int, int]] = []
    for step in steps:
        item = step.item
        if item.ast.op not in (KERNEL_SINK, LOAD_COPY) or item.assign or item.var_vals \
                or any(id(buffer) not in where for buffer in item.bufs):
            return None
        for check in item.index_checks:  # gather indices: leaves only, so all are checked before any item runs
            kind, number = where.get(id(check.buffer), ("", -1))
            if kind != "leaf":
                return None
            checks.append((number, check.dtype, check.count, check.size, check.axis))
        items.append((item.ast, tuple(where[id(buffer)] for buffer in item.bufs)))
        realized.extend(numbers[id(owner)] for owner in step.owners if id(owner) in numbers)
    devices = {step.item.bufs[0].device for step in steps}
    direct = all(step.item.ast.op is KERNEL_SINK for step in steps) and len(devices) <= 1 \
        and all(mpi.is_mine(device) for device in devices)  # another rank's kernels never launch here
    slot_maps, structures = _slot_maps(sig, [ast for ast, _ in items]) if direct else ((), ())
    return Template(tuple(items), tuple(realized), direct, tuple(sig.consts), slot_maps, structures,
                    index_checks=tuple(checks))


def _slot_maps(sig: Signature, asts: list[Any]) -> tuple[tuple[tuple[int, ...], ...], tuple[Any, ...]]:
    """(per kernel, the graph slot of each of its constant slots; per kernel, its structure), or
    ((), ()) when a kernel holds a constant that is no graph constant's value."""
    numbers = {key: number for number, key in enumerate(sig.consts)}
    maps: list[tuple[int, ...]] = []
    structures: list[Any] = []
    for ast in asts:
        structure, keys = kernel_slots(ast)
        if any(key not in numbers for key in keys):
            return (), ()
        maps.append(tuple(numbers[key] for key in keys))
        structures.append(structure)
    return tuple(maps), tuple(structures)


def slot_bits(template: Template, sig: Signature) -> list[tuple[int, ...]] | None:
    """Per item, the bits of its kernel's constant slots in the graph of `sig`; None when the
    template cannot take other constant values than those it was recorded with."""
    if not template.slot_maps:
        return None
    consts = sig.consts
    return [tuple(consts[number][1] for number in slot_map) for slot_map in template.slot_maps]


def buffers_of(template: Template, sig: Signature) -> list[tuple[Buffer, ...]]:
    """Per item of the template, its buffers in the graph of `sig` (leaves are realized: `signature`
    only numbers sources that hold values as leaves)."""
    bases, leaves = sig.bases, sig.leaves
    return [tuple([bases[number].buffer if kind == "base" else leaves[number]._buffer  # type: ignore[misc]
                   for kind, number in refs]) for _, refs in template.items]


def instantiate(template: Template, sig: Signature) -> list[ScheduleItem]:
    """The template's items over the buffers of the graph of `sig`."""
    return [ScheduleItem(ast, bufs) for (ast, _), bufs in zip(template.items, buffers_of(template, sig), strict=True)]


class _Cached:
    """A template, the signature parts it was recorded for, and the clock reading of its last use."""

    __slots__ = ("parts", "template", "used")

    def __init__(self, parts: tuple[Any, ...], template: Template, used: int) -> None:
        self.parts, self.template, self.used = parts, template, used


class TemplateCache(dict[int, list[_Cached]]):
    """Least recently used templates, at most MAX_TEMPLATES, by signature hash (each bucket a list,
    nearly always of one; equal `parts` decide). The hash is an int and the parts are compared in C:
    a lookup makes no Python call. A hit only stamps its entry with the clock (no reordering, no
    lock: `dict.get` and an attribute store are atomic, and lanes may realize concurrently); a store
    replaces its bucket by a new list and, past the limit, evicts the entry with the oldest stamp,
    under the lock (a store follows a scheduled realize, which costs far more than the scan)."""

    lock = threading.Lock()
    clock = itertools.count()

    def lookup(self, sig: Signature) -> Template | None:
        for cached in self.get(sig.hashed, ()):
            if cached.parts == sig.parts:
                cached.used = next(self.clock)
                return cached.template
        return None

    def store(self, sig: Signature, template: Template) -> None:
        with self.lock:
            kept = [cached for cached in self.get(sig.hashed, ()) if cached.parts != sig.parts]
            self[sig.hashed] = [*kept, _Cached(sig.parts, template, next(self.clock))]
            while sum(map(len, self.values())) > MAX_TEMPLATES:
                self._evict_oldest()

    def _evict_oldest(self) -> None:
        hashed, oldest = min(((hashed, cached) for hashed, bucket in self.items() for cached in bucket),
                             key=lambda found: found[1].used)
        kept = [cached for cached in self[hashed] if cached is not oldest]
        if kept:
            self[hashed] = kept
        else:
            del self[hashed]


TEMPLATES = TemplateCache()


def drop_sources(template: Template, sig: Signature) -> None:
    """After a replay: the bases it realized drop their sources (as `realize` does after a schedule)."""
    bases = sig.bases
    for number in template.realized:
        if _holds_values(bases[number]):
            bases[number].srcs = ()


def prepare(outs: Sequence[LazyBuffer]) -> tuple[Signature | None, Template | None]:
    """(signature, template) for a replayable graph seen before, (signature, None) for one to
    schedule and `record`, (None, None) for one that is never replayed."""
    sig = signature(outs)
    if sig is None:
        return None, None
    template = TEMPLATES.lookup(sig)
    if template is not None:
        for out in outs:
            if out._base is not None:  # only a view can be stale: a replayable base holds its op's value
                check_stale_outputs(outs)
                break
    return sig, template
