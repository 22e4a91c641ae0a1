"""The records of what compare is given: trace records where the user traced, else rebuilt from the graph.

`collect(buffers)` returns every record the buffers depend on, in program order, with each record's
inputs resolved to records. An object without a record becomes graph records:
- a realized base (not on DISK): a "value" record holding its values (a realized input, copied over);
- a realized DISK buffer or a zero-copy VIEW base: a "value" record of the object itself (only the bytes
  it reads; DISK files may be large);
- an unrealized base: the call that makes its op (`e`, `r`, `cast`, `loadop`, `contiguous`,
  `copy_to_device`, `assign`) over its sources' records, with an exact clone (`fast.graph.node.create`: same op,
  arg, view and sources, so the clone schedules like the original);
- a view: its base's record, then the movement ops of movement.py (the last one clones as
  `view_of(base clone, same tracker)`);
- a MultiLazyBuffer: the constructor over its shards' records.
Walks are iterative (graphs may be deep). Values are read with recording paused; reading realizes
nothing the user asked for except a zero-copy VIEW base (a view of memory that already holds values).
"""
from __future__ import annotations

import heapq
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import fast
from fast.debug.movement import view_moves
from fast.debug.records import DeviceMap, DTypeRef, EnumRef, Record, Slot
from fast.debug.trace import Unrecorded, is_buffer, lookup, paused
from fast.debug.values import read
from fast.graph import node
from fast.graph.multi import MultiLazyBuffer
from fast.graph.node import LazyBuffer
from fast.ops import BinaryOps, GatherOps, LoadOps, ReduceOps, TernaryOps, UnaryOps

Item = Record | Unrecorded


@dataclass
class Nodes:
    """The collected records: `order` (program order: trace order, graph records just before their first
    user), `inputs` (each record's inputs as records) and `outputs` (the records of what was asked)."""

    order: list[Record] = field(default_factory=list)
    inputs: dict[Record, tuple[Record, ...]] = field(default_factory=dict)
    outputs: list[Record] = field(default_factory=list)

    def users(self) -> dict[Record, list[Record]]:
        found: dict[Record, list[Record]] = {record: [] for record in self.order}
        for record in self.order:
            for source in self.inputs[record]:
                found[source].append(record)
        return found


class Collector:
    """Resolves items (records, or objects to rebuild from the graph) into records (module docstring)."""

    def __init__(self) -> None:
        self.nodes = Nodes()
        self.made: dict[int, tuple[Any, Record]] = {}  # id(object) -> (object kept alive, its record)

    def entry(self, obj: Any) -> Item:
        if not is_buffer(obj):
            raise TypeError(f"fast.debug: expected LazyBuffer or MultiLazyBuffer arguments, got {obj!r}")
        return lookup(obj) or Unrecorded(obj)

    def done(self, item: Item) -> bool:
        return item in self.nodes.inputs if isinstance(item, Record) else id(item.obj) in self.made

    def result(self, item: Item) -> Record:
        return item if isinstance(item, Record) else self.made[id(item.obj)][1]

    def deps(self, item: Item) -> list[Item]:
        if isinstance(item, Record):
            return list(item.inputs)
        obj = item.obj
        if isinstance(obj, MultiLazyBuffer):
            return [self.entry(lb) for lb in obj.lbs]
        return [] if _is_leaf(obj) else [self.entry(src) for src in obj.base.srcs]

    def resolve(self, item: Item) -> Record:
        """The record of `item`, resolving everything below it first (iterative post-order)."""
        stack = [item]
        while stack:
            top = stack[-1]
            if self.done(top):
                stack.pop()
                continue
            missing = [dep for dep in self.deps(top) if not self.done(dep)]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if isinstance(top, Record):
                self.add(top, tuple(self.result(dep) for dep in top.inputs))
            else:
                self.made[id(top.obj)] = (top.obj, self.rebuild(top.obj))
        return self.result(item)

    def add(self, record: Record, inputs: tuple[Record, ...]) -> Record:
        self.nodes.order.append(record)
        self.nodes.inputs[record] = inputs
        return record

    def rebuild(self, obj: Any) -> Record:
        """Graph records for an object without a record (its sources are resolved already)."""
        if isinstance(obj, MultiLazyBuffer):
            shards = tuple(self.result(self.entry(lb)) for lb in obj.lbs)
            args = ([Slot(i) for i in range(len(shards))], obj.axis, list(obj.real))
            return self.add(Record("MultiLazyBuffer", "__init__", args, {}, shards, weakref.ref(obj), "graph"), shards)
        base = obj.base
        if _is_leaf(obj) and (base.op is LoadOps.VIEW or base.device.startswith("DISK:")):
            return self.add(_value_record(obj), ())
        root = self.root(base)
        return root if obj is base else self.view(root, obj)

    def root(self, base: LazyBuffer) -> Record:
        """The record of a base: its values when realized, else its op over its sources."""
        known = self.made.get(id(base))
        if known is not None:
            return known[1]
        if base.realized is not None:
            record = self.add(_value_record(base), ())
        else:
            sources = tuple(self.result(self.entry(src)) for src in base.srcs)
            record = self.add(_op_record(base, sources), _call_inputs(base, sources))
        self.made[id(base)] = (base, record)
        return record

    def view(self, root: Record, lb: LazyBuffer) -> Record:
        """Records of the movement ops that read `root` (the base of `lb`) as `lb` does."""
        record = root
        moves = view_moves(lb.base.shape, lb.st.views)
        for number, (method, argument) in enumerate(moves):
            last = number == len(moves) - 1
            record = self.add(Record("self", method, (argument,), {}, (record,), weakref.ref(lb) if last else None,
                                     "graph", clone=_view_clone(root, lb) if last else None), (record,))
        return record


def _is_leaf(obj: LazyBuffer) -> bool:
    return obj.base.realized is not None or obj.base.op is LoadOps.VIEW


def _value_record(obj: LazyBuffer) -> Record:
    with paused():
        value = read(fast, obj)
    return Record("value", "input", (value,), {}, (), weakref.ref(obj), "graph")


def _view_clone(root: Record, lb: LazyBuffer) -> Any:
    st = lb.st
    return lambda get, devices: node.view_of(get(root), st)


def _call_inputs(base: LazyBuffer, sources: tuple[Record, ...]) -> tuple[Record, ...]:
    """A base's sources in call order (ASSIGN is called on its target: srcs (value, target))."""
    return (sources[1], sources[0]) if base.op is LoadOps.ASSIGN else sources


def _op_call(base: LazyBuffer, count: int) -> tuple[str, str, tuple[Any, ...], dict[str, Any]]:
    """(target, method, args, kwargs) of the public call that makes `base`'s op."""
    op, slots = base.op, [Slot(i) for i in range(count)]
    dtype, shape = DTypeRef(base.dtype.name), tuple(base.shape)
    if op in (LoadOps.CONST, LoadOps.EMPTY, LoadOps.CUSTOM):
        extra: dict[str, Any] = {} if op is LoadOps.EMPTY else {"arg": base.arg}
        if op is LoadOps.CUSTOM:
            extra["src"] = tuple(slots)
        return "LazyBuffer", "loadop", (EnumRef("LoadOps", op.name), shape, dtype, base.device), extra
    calls: dict[Any, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
        LoadOps.CONTIGUOUS: ("contiguous", (), {}), LoadOps.ASSIGN: ("assign", (Slot(1),), {}),
        LoadOps.COPY: ("copy_to_device", (base.device,), {"force": True}),
        UnaryOps.CAST: ("cast", (dtype,), {}), UnaryOps.BITCAST: ("cast", (dtype,), {"bitcast": True})}
    if op in calls:
        method, args, kwargs = calls[op]
        return "self", method, args, kwargs
    if isinstance(op, ReduceOps):
        return "self", "r", (EnumRef("ReduceOps", op.name), tuple(base.arg)), {}
    if op is GatherOps.GATHER:
        return "self", "gather", (slots[1], base.arg), {}
    if isinstance(op, (UnaryOps, BinaryOps, TernaryOps)):
        return "self", "e", (EnumRef(type(op).__name__, op.name), *slots[1:]), {}
    raise ValueError(f"fast.debug: cannot replay {op} of {base!r}")


def _op_record(base: LazyBuffer, sources: tuple[Record, ...]) -> Record:
    target, method, args, kwargs = _op_call(base, len(sources))

    def clone(get: Any, devices: DeviceMap) -> Any:
        return node.create(devices(base.device), base.st, base.dtype, base.op, base.arg,
                           tuple(get(source) for source in sources))
    return Record(target, method, args, kwargs, _call_inputs(base, sources), weakref.ref(base), "graph", clone=clone)


def program_order(nodes: Nodes) -> list[Record]:
    """Records in program order: trace records by number, each graph record just before its first
    user; ties (and records no trace record uses) in collection order. Topological."""
    users, rank = nodes.users(), {record: index for index, record in enumerate(nodes.order)}
    key: dict[Record, float] = {}
    for record in reversed(nodes.order):
        mine = float(record.seq) if record.origin == "trace" else math.inf
        key[record] = min([mine, *(key[user] for user in users[record])])
    waiting = {record: len(nodes.inputs[record]) for record in nodes.order}
    ready = [(key[r], rank[r], r.seq, r) for r in nodes.order if not waiting[r]]
    heapq.heapify(ready)
    out: list[Record] = []
    while ready:
        record = heapq.heappop(ready)[-1]
        out.append(record)
        for user in users[record]:
            waiting[user] -= 1
            if not waiting[user]:
                heapq.heappush(ready, (key[user], rank[user], user.seq, user))
    return out


def collect(buffers: Sequence[Any]) -> Nodes:
    """The records of `buffers` and everything they depend on (module docstring)."""
    collector = Collector()
    outputs = [collector.resolve(collector.entry(obj)) for obj in buffers]
    nodes = collector.nodes
    nodes.order = program_order(nodes)
    nodes.outputs = outputs
    return nodes
