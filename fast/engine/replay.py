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

The key (`Signature.key`) holds, per unrealized base in a fixed walk order: op, arg, dtype, shape,
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

import threading
from collections import OrderedDict
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
from fast.ops import BinaryOps, KernelOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from fast.runtime import mpi

MAX_TEMPLATES = 256
_ELEMENTWISE = (UnaryOps, BinaryOps, TernaryOps)


ConstKey = tuple[DType, int]  # a constant slot: (dtype, bit pattern), see codegen/const_args.py


class Signature(NamedTuple):  # (a tuple: built on every realize, and a frozen dataclass costs more)
    key: Key
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


_REPLAYABLE = frozenset(id(op) for kind in (*_ELEMENTWISE, ReduceOps) for op in kind) | {id(LoadOps.CONST)}


def _static_entry(base: LazyBuffer) -> tuple[Any, ...]:
    """((op, shape), arg, dtype, device) of a base whose op, device and shape allow a replay, else
    (). Everything it reads is fixed when the base is built, so it is memoized in `base.engine_memo`;
    what can change later (forced realization, values, stale reads) is checked by `signature`. The
    op is there by id() (enum members live as long as the process; Enum's __hash__ is slow Python),
    and (op, shape) first: it is the part `Key` hashes."""
    op, device = base.op, base.device
    replayable = not device.startswith("DISK") and not base.st.symbolic and (
        not base.srcs[0].device.startswith("DISK") if op is LoadOps.COPY else id(op) in _REPLAYABLE)
    arg = None if op is LoadOps.CONST else arg_key(base.arg)  # a constant's value is a slot (`_Walk.entry`)
    entry = ((id(op), base.shape), arg, base.dtype, device) if replayable else ()
    base.engine_memo = entry
    return entry


class Key:
    """A signature key: `parts` decide equality; the hash is computed once, from `light`, a function
    of the parts that hashes in C alone (op ids, shapes, numbers: no ShapeTracker or DType, whose
    hashes are Python calls). Equal parts have equal light parts, so equal keys hash alike; keys
    that differ only elsewhere share a hash and are told apart by `parts`."""

    __slots__ = ("parts", "hashed")

    def __init__(self, parts: tuple[Any, ...], light: tuple[Any, ...]) -> None:
        self.parts, self.hashed = parts, hash(light)

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

    __slots__ = ("numbers", "bases", "leaf_numbers", "leaves", "const_numbers", "consts", "light")

    def __init__(self) -> None:
        self.numbers: dict[int, int] = {}
        self.bases: list[LazyBuffer] = []
        self.leaf_numbers: dict[int, int] = {}
        self.leaves: list[LazyBuffer] = []
        self.const_numbers: dict[ConstKey, int] = {}
        self.consts: list[ConstKey] = []
        self.light: list[Any] = []  # (op, shape) per base: what `Key` hashes

    def const_slot(self, base: LazyBuffer) -> int:
        """The slot of a CONST base: equal (dtype, bits) share one, as in a kernel's parameters."""
        key = (base.dtype, const_bits(base.arg, base.dtype))
        number = self.const_numbers.get(key)
        if number is None:
            number = self.const_numbers[key] = len(self.consts)
            self.consts.append(key)
        return number

    def base_number(self, base: LazyBuffer) -> int:
        number = self.numbers.get(id(base))
        if number is None:
            number = self.numbers[id(base)] = len(self.bases)
            self.bases.append(base)
        return number

    def entry(self, base: LazyBuffer) -> tuple[Any, ...] | None:
        """The key entry of an unrealized base (its static entry and how it reads each source), or
        None when it may not be replayed: forced to realize, or reading memory assigned since.
        (The hot path of a repeated realize: attribute reads are inlined.)"""
        static = base.engine_memo
        if static is None:
            static = _static_entry(base)
        if not static or (base.forced_realize and base.op is not LoadOps.COPY):
            return None
        self.light.append(static[0])
        if base.op is LoadOps.CONST:
            return (static, self.const_slot(base))
        refs: list[tuple[Any, ...]] = []
        leaf_numbers = self.leaf_numbers
        for src, version in zip(base.srcs, base.src_versions, strict=True):
            source = src if src._base is None else src._base
            buffer = source._buffer
            if buffer is None or buffer._handle is None:
                refs.append(("b", self.base_number(source), src.st))
                continue
            current = (buffer._base or buffer)._version
            if current > version:
                return None  # a stale read: the scheduler raises for it
            if source.op is LoadOps.ASSIGN and current <= source._assign_version:
                return None  # an unrealized assign: scheduled, not replayed
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
    key = Key((tuple(entries), tuple(outputs), config.get()), tuple(walk.light))
    return Signature(key, walk.bases, walk.leaves, walk.consts)


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
    devices = {step.item.bufs[0].device for step in steps}
    direct = all(step.item.ast.op is KernelOps.SINK for step in steps) and len(devices) <= 1 \
        and all(mpi.is_mine(device) for device in devices)  # another rank's kernels never launch here
    slot_maps, structures = _slot_maps(sig, [ast for ast, _ in items]) if direct else ((), ())
    return Template(tuple(items), tuple(realized), direct, tuple(sig.consts), slot_maps, structures)


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
    if template is not None and any(out._base is not None for out in outs):
        check_stale_outputs(outs)  # only a view can be stale: a replayable base holds its op's value
    return sig, template
