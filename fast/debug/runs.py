"""Replaying records in program order on one package, with the user's realizes where they were.

`Replay` builds each record on a package (`make(record, input objects)`), and, before it builds the first
record made after one of the user's `realize` calls (recorded by trace.py), hands that call's group of
records to `on_group` (which realizes them): so `reference` sees the same assign ordering as the user's
program. `run_reference` is the expected side: every record built, realized and read.

Invariants: a record whose input failed is not built (its outcome says so); exceptions of the package
become outcomes (`error`: type name and message), never escape; values are read with `values.read`.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from types import ModuleType
from typing import Any

import reference
from fast import config
from fast.debug.fromgraph import Nodes
from fast.debug.records import Record, is_movement
from fast.debug.values import Value, materialize, read

Make = Callable[[Record, list[Any]], Any]


class Outcome:
    """One record on one side: the object built, its value once read, or the error met. A value can
    be deferred (`defer`): read on first use of `value`; `has_value` tells without reading it."""

    def __init__(self, obj: Any = None, value: Value | None = None, error: str | None = None) -> None:
        self.obj, self.error = obj, error
        self._value = value
        self._pending: Callable[[], Value | None] | None = None

    def __repr__(self) -> str:
        return f"Outcome({self.obj!r}, value={self._value!r}, error={self.error!r})"

    @property
    def value(self) -> Value | None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._value = pending()
        return self._value

    @value.setter
    def value(self, value: Value | None) -> None:
        self._value, self._pending = value, None

    @property
    def has_value(self) -> bool:
        return self._value is not None or self._pending is not None

    def defer(self, read_value: Callable[[], Value | None]) -> None:
        self._pending = read_value


def describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 300 else text[:297] + "..."


def error_kind(error: str | None) -> str | None:
    return None if error is None else error.split(":", 1)[0]


@contextlib.contextmanager
def recorded_config(record: Record) -> Iterator[None]:
    """`fast`'s configuration as it was when the record was traced (RING, split reduces, ...), keeping
    the current diagnostics (DEBUG, GRAPH, DUMP_IR) and lazy cache setting."""
    if record.config is None:
        yield
        return
    now = config.get()
    wanted = replace(record.config, debug=now.debug, graph=False, graph_dir=now.graph_dir, dump_ir=now.dump_ir,
                     lazycache=now.lazycache)
    with config.override(**{f.name: getattr(wanted, f.name) for f in fields(wanted)}):
        yield


def is_realized(obj: Any) -> bool:
    shards = getattr(obj, "lbs", None)
    return all(lb.is_realized() for lb in shards) if shards is not None else bool(obj.is_realized())


class Groups:
    """The user's realize calls among `records`: groups of records by call, oldest first."""

    def __init__(self, records: list[Record]) -> None:
        found: dict[int, list[Record]] = {}
        for record in records:
            if record.realized_at is not None:
                found.setdefault(record.realized_at, []).append(record)
        self.pending = sorted(found.items(), key=lambda item: item[0])

    def due(self, seq: int, built: Callable[[Record], bool]) -> list[list[Record]]:
        """Groups realized before record number `seq` whose records are all built."""
        out: list[list[Record]] = []
        while self.pending and self.pending[0][0] < seq and all(built(r) for r in self.pending[0][1]):
            out.append(self.pending.pop(0)[1])
        return out

    def rest(self) -> list[list[Record]]:
        out = [group for _, group in self.pending]
        self.pending = []
        return out


class Replay:
    """Builds `records` (default: all of `nodes`) on `pkg` with `make` (module docstring)."""

    def __init__(self, pkg: ModuleType, nodes: Nodes, make: Make, records: list[Record] | None = None) -> None:
        self.pkg, self.nodes, self.make = pkg, nodes, make
        self.records = nodes.order if records is None else records
        self.outcomes: dict[Record, Outcome] = {}

    def build(self, on_group: Callable[[list[Record]], None]) -> None:
        groups = Groups(self.records)
        for record in self.records:
            for group in groups.due(record.seq, self.outcomes.__contains__):
                on_group(group)
            self.outcomes[record] = self.build_one(record)
        for group in groups.rest():
            on_group(group)

    def build_one(self, record: Record) -> Outcome:
        sources = [self.outcomes.get(source) for source in self.nodes.inputs[record]]
        if any(source is None or source.obj is None for source in sources):
            return Outcome(error="not built: an input failed")
        try:
            return Outcome(self.make(record, [source.obj for source in sources if source is not None]))
        except Exception as error:  # noqa: BLE001 - what the package raises is an outcome
            return Outcome(error=describe(error))

    def objects(self, records: list[Record]) -> list[Any]:
        return [self.outcomes[r].obj for r in records if r in self.outcomes and self.outcomes[r].obj is not None]

    def realize(self, records: list[Record]) -> str | None:
        """Realize the records' objects together; the error met, if any."""
        try:
            self.pkg.realize(*self.objects(records))
        except Exception as error:  # noqa: BLE001
            return describe(error)
        return None

    def read(self, record: Record) -> None:
        """Read the record's value; a failure to read (e.g. memory an assign has overwritten since) is
        not the package's answer to the program: its outcome says "unreadable"."""
        outcome = self.outcomes[record]
        try:
            outcome.value = read(self.pkg, outcome.obj)
        except Exception as error:  # noqa: BLE001
            outcome.error = f"unreadable: {describe(error)}"


UNCOMPARED = ("not built", "unreadable")  # outcomes that are no answer of the package


def waits_for_assign(replay: Replay, records: list[Record]) -> dict[Record, bool]:
    """For each built record: whether realizing it would run an assign not yet realized."""
    waits: dict[Record, bool] = {}
    for record in records:
        outcome = replay.outcomes.get(record)
        if outcome is None or outcome.obj is None:
            continue
        if is_realized(outcome.obj):
            waits[record] = False
            continue
        waits[record] = record.method == "assign" or any(waits.get(s, False) for s in replay.nodes.inputs[record])
    return waits


def _deferrable(replay: Replay, record: Record, settling: set[Record]) -> bool:
    """A view not asked for nor realized by the user, over a value reference has read (or deferred,
    or reads in this batch, `settling`): reference need not store its own copy of it (an expand of a
    weight may be 1000 times the weight)."""
    if not is_movement(record) or record in replay.nodes.outputs or record.realized_at is not None:
        return False
    outcome, source = replay.outcomes[record], replay.nodes.inputs[record][0]
    return outcome.error is None and not hasattr(outcome.obj, "lbs") and \
        (source in settling or (source in replay.outcomes and replay.outcomes[source].has_value))


def _view_value(replay: Replay, record: Record, copies: dict[Record, Any]) -> Callable[[], Value | None]:
    """Reading a deferred view: the same movement op on reference over a copy of its input's value
    (read when the input was; assigns since then do not matter). The copy is made once per input and
    kept in `copies` for its other views (a safetensors file is shrunk once per tensor): reference never
    changes a realized buffer's array, so the views of one copy cannot see each other."""
    def value() -> Value | None:
        source_record = replay.nodes.inputs[record][0]
        if source_record not in copies:
            source = replay.outcomes[source_record].value
            if source is None:
                return None
            copies[source_record] = materialize(reference, source)
        return read(reference, record.apply(reference, [copies[source_record]]))
    return value


def _defer_views(replay: Replay, ready: list[Record], copies: dict[Record, Any]) -> list[Record]:
    """Defer the reading of the views among `ready` (records about to be realized together, in
    program order) that `_deferrable` allows; the records deferred."""
    settling: set[Record] = set()
    deferred = []
    for record in ready:  # program order: a view's input comes before it
        if _deferrable(replay, record, settling):
            replay.outcomes[record].defer(_view_value(replay, record, copies))
            deferred.append(record)
        settling.add(record)
    return deferred


def run_reference(nodes: Nodes) -> dict[Record, Outcome]:
    """Every record built on `reference`, realized and read: before each of the user's realizes, every
    record built so far that runs no pending assign is realized and read (its value as the user's
    program would see it then); assigns run at the user's realizes; the rest is realized together.
    Views are read only when used (`_deferrable`)."""
    replay = Replay(reference, nodes, lambda record, inputs: record.apply(reference, inputs))
    done: set[Record] = set()
    copies: dict[Record, Any] = {}  # reference copies of the inputs of deferred views (_view_value)

    def settle(records: list[Record]) -> None:
        waits = waits_for_assign(replay, records)
        ready = [r for r in records if r not in done and r in waits and not waits[r]]
        deferred = _defer_views(replay, ready, copies)
        done.update(deferred)
        ready = [r for r in ready if r not in done]
        if replay.realize(ready) is not None:  # e.g. one raises: realize one at a time
            for record in ready:
                error = replay.realize([record])
                replay.outcomes[record].error = error or replay.outcomes[record].error
        for record in ready:
            if replay.outcomes[record].error is None:
                replay.read(record)
            done.add(record)
        for record in deferred:  # a view of a value that failed fails with it
            source = replay.outcomes[nodes.inputs[record][0]]
            if source.error is not None and not source.has_value:
                replay.outcomes[record].value, replay.outcomes[record].error = None, source.error

    def on_group(group: list[Record]) -> None:
        settle(list(replay.outcomes))
        error = replay.realize(group)
        for record in group:
            replay.outcomes[record].error = replay.outcomes[record].error or error
        settle(list(replay.outcomes))
    replay.build(on_group)
    settle(nodes.order)
    rest = [r for r in nodes.order if r not in done and replay.outcomes[r].obj is not None]
    if rest and replay.realize(rest) is not None:  # what waited for an assign, realized with it
        for record in rest:
            replay.outcomes[record].error = replay.realize([record]) or replay.outcomes[record].error
    settle(nodes.order)
    return replay.outcomes
