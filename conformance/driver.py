"""Replays a Program through a package's public API and records what happened.

`replay(pkg, program, tolerances=..., run=...)` runs the steps in order. It records, for every value
step, the value's shape and dtype name; for every `Fetch`, the array `to_numpy` returned (and, on the
expected side, the tolerance array of the same shape); and the first exception raised (its type
name, message and step index), after which it stops. A driver never lets an exception escape:
whatever the package does is an outcome to compare.

A symbolic program is replayed for one binding (`run`): each `Var` becomes the package's
`Variable(name, low, high).bind(value)`, and recorded shapes hold each size's value (`fast` keeps
symbolic sizes in `.shape`). For a package with a compile counter (`fast.runtime.base.COMPILE_COUNTER`)
the outcome also counts the kernels compiled or loaded from the disk cache during the replay.
"""
from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from conformance.analysis import Info, analyze
from conformance.program import (
    Assign,
    Cast,
    ConstLike,
    Contiguous,
    Copy,
    Custom,
    Elementwise,
    Fetch,
    Gather,
    Leaf,
    LoadConst,
    LoadEmpty,
    Movement,
    Program,
    Realize,
    Reduce,
    Shard,
    Step,
    StepVisitor,
    Var,
    bind_step,
    custom_function,
    produces_value,
)
from conformance.tolerance import ToleranceBuilder
from conformance.vocab import OP_CLASS, canonical_device


@dataclass(frozen=True)
class Fetched:
    step: int
    item: int
    dtype: str
    shape: tuple[int, ...]
    array: np.ndarray
    tolerance: np.ndarray | None = None


@dataclass(frozen=True)
class Raised:
    step: int
    kind: str
    message: str


@dataclass
class Outcome:
    shapes: dict[int, tuple[tuple[int, ...], str, object]] = field(default_factory=dict)  # shape, dtype, device
    fetched: list[Fetched] = field(default_factory=list)
    error: Raised | None = None
    tolerance_failures: int = 0  # tolerance graphs the expected side could not build (elements skipped)
    kernels_built: int | None = None  # kernels compiled or loaded during the replay (None: not counted)


class _Replay(StepVisitor[Any]):
    """One replay of a program (`run`); `visit(step)` applies one step (Fetch is `fetch`)."""

    def __init__(self, pkg: ModuleType, program: Program, tolerances: bool, run: int = 0) -> None:
        self.pkg, self.program = pkg, program
        self.infos: list[Info | None] = analyze(program, run)
        self.bound: dict[Var, Any] = {var: pkg.Variable(var.name, var.low, var.high).bind(value)
                                      for var, value in program.values(run).items()}
        self.values: dict[int, Any] = {}
        self.tols: dict[int, Any] = {}
        self.builder = ToleranceBuilder(pkg) if tolerances else None
        self.outcome = Outcome()

    def dtype(self, name: str) -> Any:
        return getattr(self.pkg.dtypes, name)

    # -- one method per value step (and Realize): the value it builds through the package's API
    def visit_leaf(self, step: Leaf) -> Any:
        return self.pkg.from_numpy(step.data.build(), step.device)

    def visit_load_const(self, step: LoadConst) -> Any:
        return self.pkg.LazyBuffer.loadop(self.pkg.LoadOps.CONST, step.shape, self.dtype(step.dtype), step.device,
                                          arg=step.value)

    def visit_load_empty(self, step: LoadEmpty) -> Any:
        return self.pkg.LazyBuffer.loadop(self.pkg.LoadOps.EMPTY, step.shape, self.dtype(step.dtype), step.device)

    def visit_custom(self, step: Custom) -> Any:
        return self.pkg.LazyBuffer.loadop(self.pkg.LoadOps.CUSTOM, step.shape, self.dtype(step.dtype), step.device,
                                          arg=custom_function(step.fn), src=tuple(self.values[s] for s in step.srcs))

    def visit_const_like(self, step: ConstLike) -> Any:
        base = self.values[step.src]
        return base.const(step.value) if step.shape is None else base.const(step.value, step.shape)

    def visit_elementwise(self, step: Elementwise) -> Any:
        op = getattr(getattr(self.pkg, OP_CLASS[step.op]), step.op)
        return self.values[step.srcs[0]].e(op, *(self.values[s] for s in step.srcs[1:]))

    def visit_reduce(self, step: Reduce) -> Any:
        return self.values[step.src].r(getattr(self.pkg.ReduceOps, step.op), step.axes)

    def visit_movement(self, step: Movement) -> Any:
        return getattr(self.values[step.src], step.kind)(step.arg)

    def visit_gather(self, step: Gather) -> Any:
        return self.values[step.src].gather(self.values[step.indices], step.axis)

    def visit_cast(self, step: Cast) -> Any:
        source, dtype = self.values[step.src], self.dtype(step.dtype)
        return source.cast(dtype, bitcast=step.bitcast) if step.bitcast else source.cast(dtype)

    def visit_contiguous(self, step: Contiguous) -> Any:
        return self.values[step.src].contiguous()

    def visit_copy(self, step: Copy) -> Any:
        source = self.values[step.src]
        return source.copy_to_device(step.device, force=True) if step.force else source.copy_to_device(step.device)

    def visit_shard(self, step: Shard) -> Any:
        return self.pkg.MultiLazyBuffer.from_sharded(self.values[step.src], step.devices, step.axis)

    def visit_assign(self, step: Assign) -> Any:
        return self.values[step.target].assign(self.values[step.value])

    def visit_realize(self, step: Realize) -> Any:
        return self.pkg.realize(*(self.values[i] for i in step.items))

    def fetch(self, index: int, step: Fetch) -> None:
        value, tol = self.values[step.item], self.tols.get(step.item)
        if tol is not None and tol is not _UNBUILT:
            self.pkg.realize(value, tol)
        array = self.pkg.to_numpy(value)
        if tol is _UNBUILT:
            tolerance: np.ndarray | None = np.full(array.shape, np.nan)
        else:
            tolerance = None if tol is None else np.asarray(self.pkg.to_numpy(tol), dtype=np.float64)
        self.outcome.fetched.append(Fetched(index, step.item, value.dtype.name, _sizes(value.shape), array, tolerance))

    def build_tolerance(self, index: int, step: Step, value: Any) -> None:
        info = self.infos[index]
        if self.builder is None or info is None or not info.aux:
            return
        refs = step.refs()
        srcs = [self.infos[i] for i in refs]
        try:
            tol = self.builder.build(step, info, srcs, [self.values[i] for i in refs],  # type: ignore[arg-type]
                                     [self.tols.get(i) for i in refs], value)
        except Exception:  # noqa: BLE001 - the expected side could not build it: skip these elements
            self.outcome.tolerance_failures += 1
            tol = _UNBUILT
        self.tols[index] = tol

    def run(self) -> Outcome:
        for index, step in enumerate(self.program.steps):
            step = bind_step(step, self.bound.__getitem__) if self.bound else step
            try:
                if isinstance(step, Fetch):
                    self.fetch(index, step)
                    continue
                value = self.visit(step)
                if produces_value(step):
                    self.outcome.shapes[index] = (_sizes(value.shape), value.dtype.name, _device(value.device))
            except Exception as error:  # noqa: BLE001 - every error is an outcome
                self.outcome.error = Raised(index, type(error).__name__, str(error)[:300])
                break
            if produces_value(step):
                self.values[index] = value
                self.build_tolerance(index, step, value)
        return self.outcome


_UNBUILT = object()


def _sizes(shape: Any) -> tuple[int, ...]:
    """A shape as ints: a symbolic size (fast keeps bound Variables and expressions of them) at its value."""
    return tuple(int(size.evaluate({})) if hasattr(size, "evaluate") else int(getattr(size, "val", size))
                 for size in shape)


def _kernels_built(pkg: ModuleType) -> int | None:
    """Kernels the package has compiled or loaded from its disk cache so far (fast's compile counter:
    compiler runs plus cache hits), or None for a package without one (reference)."""
    try:
        counter = importlib.import_module(pkg.__name__ + ".runtime.base").COMPILE_COUNTER
    except (ImportError, AttributeError):
        return None
    compiles, _, hits = counter.snapshot()
    return int(compiles + hits)


def _device(device: str | tuple[str, ...]) -> str | tuple[str, ...]:
    """The device property in canonical spelling (`X:0` is `X`)."""
    return tuple(map(canonical_device, device)) if isinstance(device, tuple) else canonical_device(device)


@contextlib.contextmanager
def _ring(pkg: ModuleType, ring: int | None) -> Iterator[None]:
    """`config.override(ring=...)` when the package has one (fast); nothing otherwise."""
    if ring is None:
        yield
        return
    try:
        config = importlib.import_module(pkg.__name__ + ".config")
    except ImportError:
        yield
        return
    with config.override(ring=ring):
        yield


def replay(pkg: ModuleType, program: Program, tolerances: bool = False, run: int = 0) -> Outcome:
    """Run `program` on `pkg` (a symbolic one with binding `run`); with `tolerances`, also fetch each
    fetched value's tolerance array."""
    before = _kernels_built(pkg)
    with _ring(pkg, program.ring):
        outcome = _Replay(pkg, program, tolerances, run).run()
    after = _kernels_built(pkg)
    if before is not None and after is not None:
        outcome.kernels_built = after - before
    return outcome
