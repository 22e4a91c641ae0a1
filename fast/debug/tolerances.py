"""Tolerances of docs/semantics.md for compare, from the conformance suite's own rules.

Each record is mapped to the conformance step it is (`Elementwise`, `Reduce`, `Movement`, `Cast`, ...) and
gets the suite's static `Info` (conformance/analysis.py), and its tolerance is built by the suite's
`ToleranceBuilder` (conformance/tolerance.py) on `reference`: so compare accepts exactly the
differences conformance accepts. Two tolerances per record:
- `full`: its value computed from the graph's inputs through the whole graph (the tolerance of a
  transcendental or a float sum carries through later ops), for values of the fused schedule;
- `alone`: the op alone on exact inputs (every input's Info made exact), for the op run unfused.
A record the suite has no step for (a realized input, a CUSTOM, the MultiLazyBuffer constructor) is
exact when its inputs are, else unspecified (NaN: skipped). A tolerance that cannot be built is NaN,
as in conformance (e.g. SQRT of an approximate value), and so is every `full` tolerance built on it
that its Info does not make exact: an unspecified input is never read as an exact one.
Tolerances are built from copies of the recorded values, never the live graph.

Building a tolerance evaluates a graph on `reference` over the record's inputs: for the SUM of a
matmul (an expanded product of 16 x 1536 x 384 elements) that is the costliest step of compare.
`surely_within_alone` answers the common case without building it: a float SUM alone on exact inputs
has the tolerance max(1, total) * EPS * (count + 2) (NaN where total reaches half the largest finite
value), total being the sum of the finite |inputs| in float64. Where reference's sum `want` is finite
every input is finite and |want| <= (1 + delta) * sum|inputs|, delta <= 0.07 for count <= 2**20 (one
rounding per add, then one to the dtype), so max(1, 0.9 |want|) * EPS * (count + 2) <= the tolerance:
a difference within that floor is one conformance accepts. Anything else builds the tolerance.

Arrays: None means exact; otherwise float64 of the value's shape, NaN or inf marking unspecified
elements (conformance/compare.py `bad_elements`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, cast

import numpy as np

import reference
from conformance.analysis import Info, infer
from conformance.compare import bad_elements
from conformance.layout import Layout
from conformance.program import (
    Assign,
    Cast,
    ConstLike,
    Contiguous,
    Copy,
    Elementwise,
    Gather,
    LoadConst,
    LoadEmpty,
    Movement,
    Reduce,
    Shard,
    Step,
)
from conformance.tolerance import ToleranceBuilder
from conformance.vocab import EPS, FLOATS
from fast.debug.records import Record
from fast.debug.values import Value, materialize

MOVES = ("reshape", "pad", "expand", "permute", "shrink", "stride")


def unspecified(shape: tuple[int, ...]) -> np.ndarray:
    """A tolerance of NaN everywhere (skip every element): a read-only broadcast of one NaN, so an
    unspecified tolerance of a large value costs no memory."""
    return np.broadcast_to(np.float64(np.nan), shape)


def _tuples(value: Any) -> Any:
    return tuple(_tuples(item) for item in value) if isinstance(value, (tuple, list)) else value


def _param(record: Record, position: int, name: str, default: Any = None) -> Any:
    """A call argument given by position (after self) or by keyword."""
    if len(record.args) > position:
        return record.args[position]
    return record.kwargs.get(name, default)


def step_of(record: Record, refs: tuple[int, ...]) -> Step | None:
    """The conformance step a record is, its inputs numbered `refs`; None when there is none."""
    method, target = record.method, record.target
    if target == "self":
        src = refs[0]
        simple: dict[str, Callable[[], Step]] = {
            "e": lambda: Elementwise(record.args[0].name, refs),
            "r": lambda: Reduce(src, record.args[0].name, _tuples(_param(record, 1, "axis"))),
            "cast": lambda: Cast(src, _param(record, 0, "dtype").name, record.is_bitcast()),
            "contiguous": lambda: Contiguous(src),
            "gather": lambda: Gather(src, refs[1], _param(record, 1, "axis")),
            "copy_to_device": lambda: Copy(src, _param(record, 0, "device"), bool(_param(record, 1, "force", False))),
            "assign": lambda: Assign(src, refs[1]),
            "const": lambda: ConstLike(src, _param(record, 0, "val"), _tuples(_param(record, 1, "shape"))),
        }
        if method in MOVES:
            return Movement(src, method, _tuples(record.args[0] if record.args else next(iter(record.kwargs.values()))))
        return simple[method]() if method in simple else None
    if target == "LazyBuffer" and method == "loadop" and record.op in ("CONST", "EMPTY"):
        shape, dtype, device = (_tuples(_param(record, 1, "shape")), _param(record, 2, "dtype").name,
                                _param(record, 3, "device"))
        if record.op == "EMPTY":
            return LoadEmpty(shape, dtype, device)
        return LoadConst(shape, dtype, device, _param(record, 4, "arg"))
    if target == "MultiLazyBuffer" and method == "from_sharded":
        return Shard(refs[0], tuple(_param(record, 1, "devices")), _param(record, 2, "axis"))
    return None


def plain_info(value: Value, sources: list[Info]) -> Info:
    """The Info of a value the suite has no step for: exact unless an input is not."""
    layout = None
    if value.shards is not None:
        sizes = () if value.axis is None else tuple(shard.shape[value.axis] for shard in value.shards)
        layout = Layout(tuple(value.device), value.axis, value.real, sizes)
    aux = any(source.aux for source in sources)
    return Info(value.shape, value.dtype, device=value.device if isinstance(value.device, str) else "",
                layout=layout, aux=aux, payload=not aux)


def exact(info: Info) -> Info:
    """The Info of a copy of a value: every element holds definite bits."""
    return replace(info, approx=False, aux=False, zero_sign=False, payload=True, defined=True)


class Tolerances:
    """Infos and tolerances of records (module docstring). `values` are the reference values (a
    mapping that may read a value when it is first looked up: `in` must not read it)."""

    def __init__(self, order: list[Record], inputs: dict[Record, tuple[Record, ...]],
                 values: Mapping[Record, Value], leaves: frozenset[Record] = frozenset()) -> None:
        self.inputs, self.values, self.leaves = inputs, values, leaves  # leaves: exact values given
        self.number = {record: index for index, record in enumerate(order)}
        self.builder = ToleranceBuilder(reference)
        self.steps: dict[Record, Step | None] = {}
        self.infos: dict[int, Info | None] = {}
        self.full_lazy: dict[Record, Any] = {}
        self.full_arrays: dict[Record, np.ndarray | None] = {}
        self.unknown: set[Record] = set()  # records whose `full` tolerance is unspecified (NaN)
        for record in order:
            self.infos[self.number[record]] = self._info(record, self.infos)

    def refs(self, record: Record) -> tuple[int, ...]:
        return tuple(self.number[source] for source in self.inputs[record])

    def _info(self, record: Record, infos: Mapping[int, Info | None]) -> Info | None:
        step = self.steps.setdefault(record, None if record in self.leaves else step_of(record, self.refs(record)))
        if step is not None:
            try:
                return infer(step, cast("list[Info | None]", infos))
            except Exception:  # noqa: BLE001 - a use the suite does not model: fall back to the value
                pass
        sources = [infos.get(number) for number in self.refs(record)]
        value = self.values.get(record)
        return None if value is None else plain_info(value, [s for s in sources if s is not None])

    def info(self, record: Record) -> Info | None:
        return self.infos.get(self.number[record])

    def alone(self, record: Record) -> np.ndarray | None:
        """Tolerance of the op alone on exact inputs."""
        exact_inputs = {number: exact(info) for number in self.refs(record)
                        if (info := self.infos.get(number)) is not None}
        info = self._info(record, exact_inputs) if self.steps.get(record) is not None else None
        return self._build(record, info, exact_inputs, [None] * len(self.inputs[record]))[1]

    def surely_within_alone(self, record: Record, expected: Value, actual: Value) -> bool:
        """True when `actual` is within `alone(record)` of `expected` by a bound that needs no tolerance
        graph (module docstring: float SUMs); False means "build the tolerance and see"."""
        step, sources = self.steps.get(record), self.inputs[record]
        if not isinstance(step, Reduce) or step.op != "SUM" or expected.dtype not in FLOATS \
                or expected.shards is not None or actual.shards is not None or len(sources) != 1:
            return False
        source = self.values.get(sources[0])
        if source is None or source.dtype != expected.dtype or expected.shape != actual.shape:
            return False
        count = math.prod(source.shape[axis] for axis in step.axes)
        if count > 2 ** 20:
            return False
        with np.errstate(invalid="ignore", over="ignore"):
            want, got = expected.array.astype(np.float64), actual.array.astype(np.float64)
            floor = np.maximum(1.0, 0.9 * np.abs(want)) * (EPS[expected.dtype] * (count + 2))
            return bool(np.all(np.isfinite(want) & (np.abs(want - got) <= floor)))

    def full(self, record: Record) -> np.ndarray | None:
        """Tolerance of the record's value through the whole graph (built on first use, after its
        inputs', each once)."""
        stack = [record]
        while stack:
            current = stack[-1]
            if current in self.full_arrays:
                stack.pop()
                continue
            missing = [source for source in self.inputs[current] if source not in self.full_arrays]
            if missing:
                stack.extend(missing)
                continue
            self.full_arrays[stack.pop()] = self._full(current)
        return self.full_arrays[record]

    def _full(self, record: Record) -> np.ndarray | None:
        """`full` of a record whose inputs' are built."""
        tols = [self.full_lazy.get(source) for source in self.inputs[record]]
        info = self.info(record)
        exact_info = info is not None and self.steps.get(record) is not None and not info.aux
        if record in self.values and not exact_info and any(source in self.unknown for source in self.inputs[record]):
            self.unknown.add(record)
            return unspecified(self.shape(record))
        lazy, array = self._build(record, info, self.infos, tols)
        self.full_lazy[record] = lazy
        if lazy is None and array is not None:
            self.unknown.add(record)
        return array

    def _build(self, record: Record, info: Info | None, infos: Mapping[int, Info | None],
               tols: list[Any]) -> tuple[Any, np.ndarray | None]:
        """(lazy tolerance or None, its array or None) of `record` given its Info and its inputs'."""
        step = self.steps.get(record)
        if record not in self.values or (info is not None and step is not None and not info.aux):
            return None, None
        if step is None or info is None:
            unknown = any(tol is not None for tol in tols) or (info is not None and info.aux)
            return None, unspecified(self.shape(record)) if unknown else None
        try:
            sources = [infos.get(number) for number in self.refs(record)]
            values = [materialize(reference, self.values[source]) for source in self.inputs[record]]
            out = materialize(reference, self.values[record])
            lazy = self.builder.build(step, info, sources, values, tols, out)  # type: ignore[arg-type]
            return lazy, None if lazy is None else np.asarray(reference.to_numpy(lazy), dtype=np.float64)
        except Exception:  # noqa: BLE001 - as in conformance: a tolerance not built skips the value
            return None, unspecified(self.shape(record))

    def shape(self, record: Record) -> tuple[int, ...]:
        """The record's shape, from its Info when it has one (its value may not be read yet)."""
        info = self.info(record)
        return tuple(info.shape) if info is not None else self.values[record].shape


def bad(expected: Value, actual: Value, tolerance: np.ndarray | None, rtol: float | None,
        atol: float | None) -> np.ndarray:
    """Boolean mask of the elements that differ (docs/semantics.md; plus |e - a| <= atol + rtol*|e|
    when the caller gives rtol or atol)."""
    mask = bad_elements(expected.array, actual.array, tolerance, expected.dtype)
    if (rtol is None and atol is None) or not mask.any() or expected.dtype == "bool":
        return np.asarray(mask)
    with np.errstate(invalid="ignore", over="ignore"):
        e, a = expected.array.astype(np.float64), actual.array.astype(np.float64)
        close = np.abs(e - a) <= (atol or 0.0) + (rtol or 0.0) * np.abs(e)
    return np.asarray(mask & ~close)
