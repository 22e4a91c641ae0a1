"""The neutral program form: a frozen list of steps replayed through the public API of a package.

A `Program` is independent of both implementations. Each step names ops and dtypes by string and
refers to earlier steps' results by index. Invariants: a step only refers to steps before it; the
steps that produce values are exactly those listed in `VALUE_STEPS`; `Realize` and `Fetch` produce
nothing (a `Fetch` records `to_numpy` of its operand). `expect` names the error type the last step
must raise (an invalid program on purpose), or is None. `ring` asks the `fast` driver to run under
`config.override(ring=...)` (reference ignores it). `render` gives a runnable snippet.

Symbolic programs: a shape or movement argument may hold a `Var` where an int goes. Such a program
declares its `variables` and two or more `bindings` (one value per variable, inside its range); it
is replayed once per binding, each `Var` replaced by the package's `Variable(...).bind(value)`
(`bind_step`). `instantiate(run)` is the same program with plain ints, for everything that only
needs the values (analysis, tolerances, coverage).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from conformance.vocab import FLOATS, OP_CLASS, SIGNED

Scalar = bool | int | float
Shape = tuple[int, ...]
R = TypeVar("R")

# CUSTOM callables, by name: the source is rendered into snippets and evaluated by the drivers.
CUSTOM_FUNCS: dict[str, str] = {
    "copy": "lambda out, x: np.copyto(out, x)",
    "flip": "lambda out, x: np.copyto(out, np.flip(x))",
    "fill3": "lambda out: out.fill(3)",
    "arange": "lambda out: np.copyto(out, np.arange(out.size).reshape(out.shape) % 7, casting='unsafe')",
}
CUSTOM_ARITY: dict[str, int] = {"copy": 1, "flip": 1, "fill3": 0, "arange": 0}


def custom_function(name: str) -> Callable[..., object]:
    """The callable of a CUSTOM step (evaluated from its source, with numpy as `np`)."""
    return eval(CUSTOM_FUNCS[name], {"np": np})  # noqa: S307  (fixed table of our own sources)


def render_scalar(value: Scalar) -> str:
    """A Python literal for a scalar (nan/inf need `from numpy import nan, inf`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return repr(value)


@dataclass(frozen=True)
class ArrayData:
    """Leaf data: explicit `values` (row-major), or, when `seed` is set, numpy random data."""

    dtype: str
    shape: Shape
    values: tuple[Scalar, ...] = ()
    seed: int | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def render(self) -> str:
        """A numpy expression that builds the array."""
        n, dt = self.size, self.dtype
        if self.seed is None:
            body = ", ".join(render_scalar(v) for v in self.values)
            return f"np.array([{body}], dtype='{dt}').reshape({self.shape!r})"
        rng = f"np.random.default_rng({self.seed})"
        if dt in FLOATS:
            expr = f"{rng}.standard_normal({n}).astype('{dt}')"
        elif dt == "bool":
            expr = f"({rng}.integers(0, 2, {n}) == 1)"
        else:
            low = -100 if dt in SIGNED else 0
            expr = f"{rng}.integers({low}, 100, {n}).astype('{dt}')"
        return f"{expr}.reshape({self.shape!r})"

    def build(self) -> np.ndarray:
        """The numpy array (a fresh one each call)."""
        return eval(self.render(), {"np": np, "nan": math.nan, "inf": math.inf})  # noqa: S307


@dataclass(frozen=True)
class Var:
    """A variable of a symbolic program, `Variable(name, low, high)` bound per run. It stands for an
    int in shapes and movement arguments and renders as its name, a Python name the snippet binds."""

    name: str
    low: int
    high: int

    def __repr__(self) -> str:
        return self.name


SymShape = tuple[int | Var, ...]  # a step's shape: ints, and Vars in a symbolic program


def map_vars(value: Any, fn: Callable[[Var], Any]) -> Any:
    """`value` (an int, a Var or nested tuples of them; anything else is kept) with each Var replaced by fn(var)."""
    if isinstance(value, Var):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(map_vars(item, fn) for item in value)
    return value


def has_vars(value: Any) -> bool:
    """Whether `value` (or a tuple nested in it) holds a Var."""
    return isinstance(value, Var) or (isinstance(value, tuple) and any(has_vars(item) for item in value))


class Step:
    """Base of all steps. `refs()` lists the earlier steps this one reads; `visitor_method` names the
    `StepVisitor` method that handles the step's class (`visit_` and the class name in snake case)."""

    visitor_method: ClassVar[str] = "visit_step"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.visitor_method = "visit_" + re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()

    def refs(self) -> tuple[int, ...]:
        out: list[int] = []
        for f in fields(self):  # type: ignore[arg-type]
            if f.metadata.get("ref"):
                value = getattr(self, f.name)
                out.extend(value if isinstance(value, tuple) else (value,))
        return tuple(out)

    def render(self, name: Callable[[int], str]) -> str:  # pragma: no cover - every step overrides
        raise NotImplementedError


class StepVisitor(Generic[R]):
    """A computation over steps with one method per step class, chosen by `visit` (LoadConst ->
    `visit_load_const`, ...): the modules that handle every kind of step (the driver, analysis,
    coverage) subclass it rather than each writing the same chain of isinstance tests. A step whose
    class has no method here goes to `visit_other`, which raises TypeError unless overridden."""

    def visit(self, step: Step) -> R:
        method: Callable[[Step], R] = getattr(self, step.visitor_method, self.visit_other)
        return method(step)

    def visit_other(self, step: Step) -> R:
        raise TypeError(f"{type(self).__name__}: no rule for the step {step!r}")


def bind_step(step: Step, fn: Callable[[Var], Any]) -> Step:
    """`step` with every Var in its non-reference fields replaced by fn(var); the step itself if it has none."""
    changes = {f.name: map_vars(getattr(step, f.name), fn) for f in fields(step)  # type: ignore[arg-type]
               if not f.metadata.get("ref") and has_vars(getattr(step, f.name))}
    return replace(step, **changes) if changes else step  # type: ignore[type-var]


def ref() -> Any:
    """A dataclass field holding step indices (one int or a tuple of them)."""
    return field(metadata={"ref": True})


@dataclass(frozen=True)
class Leaf(Step):
    data: ArrayData
    device: str

    def render(self, name: Callable[[int], str]) -> str:
        return f"T.from_numpy({self.data.render()}, {self.device!r})"


@dataclass(frozen=True)
class LoadConst(Step):
    shape: SymShape
    dtype: str
    device: str
    value: Scalar

    def render(self, name: Callable[[int], str]) -> str:
        return (f"T.LazyBuffer.loadop(T.LoadOps.CONST, {self.shape!r}, T.dtypes.{self.dtype}, "
                f"{self.device!r}, arg={render_scalar(self.value)})")


@dataclass(frozen=True)
class LoadEmpty(Step):
    shape: SymShape
    dtype: str
    device: str

    def render(self, name: Callable[[int], str]) -> str:
        return f"T.LazyBuffer.loadop(T.LoadOps.EMPTY, {self.shape!r}, T.dtypes.{self.dtype}, {self.device!r})"


@dataclass(frozen=True)
class Custom(Step):
    fn: str
    srcs: tuple[int, ...] = ref()
    shape: SymShape = ()
    dtype: str = "float32"
    device: str = "CLANG"

    def render(self, name: Callable[[int], str]) -> str:
        src = ", ".join(name(s) for s in self.srcs)
        return (f"T.LazyBuffer.loadop(T.LoadOps.CUSTOM, {self.shape!r}, T.dtypes.{self.dtype}, {self.device!r}, "
                f"arg={CUSTOM_FUNCS[self.fn]}, src=({src}{',' if len(self.srcs) == 1 else ''}))")


@dataclass(frozen=True)
class ConstLike(Step):
    """`src.const(value, shape)`; `shape` None means the source's shape (always None on multi)."""

    src: int = ref()
    value: Scalar = 0
    shape: SymShape | None = None

    def render(self, name: Callable[[int], str]) -> str:
        shape = "" if self.shape is None else f", {self.shape!r}"
        return f"{name(self.src)}.const({render_scalar(self.value)}{shape})"


@dataclass(frozen=True)
class Elementwise(Step):
    op: str
    srcs: tuple[int, ...] = ref()

    def render(self, name: Callable[[int], str]) -> str:
        rest = "".join(f", {name(s)}" for s in self.srcs[1:])
        return f"{name(self.srcs[0])}.e(T.{OP_CLASS[self.op]}.{self.op}{rest})"


@dataclass(frozen=True)
class Reduce(Step):
    src: int = ref()
    op: str = "SUM"
    axes: tuple[int, ...] = ()

    def render(self, name: Callable[[int], str]) -> str:
        return f"{name(self.src)}.r(T.ReduceOps.{self.op}, {self.axes!r})"


@dataclass(frozen=True)
class Movement(Step):
    src: int = ref()
    kind: str = "reshape"
    arg: tuple = ()  # type: ignore[type-arg]

    def render(self, name: Callable[[int], str]) -> str:
        return f"{name(self.src)}.{self.kind}({self.arg!r})"


@dataclass(frozen=True)
class Gather(Step):
    """`src.gather(indices, axis)`: src indexed along `axis` by the integer value `indices`."""

    src: int = ref()
    indices: int = ref()
    axis: int = 0

    def render(self, name: Callable[[int], str]) -> str:
        return f"{name(self.src)}.gather({name(self.indices)}, {self.axis!r})"


@dataclass(frozen=True)
class Cast(Step):
    src: int = ref()
    dtype: str = "float32"
    bitcast: bool = False

    def render(self, name: Callable[[int], str]) -> str:
        flag = ", bitcast=True" if self.bitcast else ""
        return f"{name(self.src)}.cast(T.dtypes.{self.dtype}{flag})"


@dataclass(frozen=True)
class Contiguous(Step):
    src: int = ref()

    def render(self, name: Callable[[int], str]) -> str:
        return f"{name(self.src)}.contiguous()"


@dataclass(frozen=True)
class Copy(Step):
    """`copy_to_device`; `force` only for single-device values (multi takes no force)."""

    src: int = ref()
    device: str = "CLANG"
    force: bool = False

    def render(self, name: Callable[[int], str]) -> str:
        flag = ", force=True" if self.force else ""
        return f"{name(self.src)}.copy_to_device({self.device!r}{flag})"


@dataclass(frozen=True)
class Shard(Step):
    src: int = ref()
    devices: tuple[str, ...] = ()
    axis: int | None = None

    def render(self, name: Callable[[int], str]) -> str:
        return f"T.MultiLazyBuffer.from_sharded({name(self.src)}, {self.devices!r}, {self.axis!r})"


@dataclass(frozen=True)
class Assign(Step):
    target: int = ref()
    value: int = ref()

    def render(self, name: Callable[[int], str]) -> str:
        return f"{name(self.target)}.assign({name(self.value)})"


@dataclass(frozen=True)
class Realize(Step):
    items: tuple[int, ...] = ref()

    def render(self, name: Callable[[int], str]) -> str:
        return f"T.realize({', '.join(name(i) for i in self.items)})"


@dataclass(frozen=True)
class Fetch(Step):
    item: int = ref()

    def render(self, name: Callable[[int], str]) -> str:
        return f"out.append(T.to_numpy({name(self.item)}))"


VALUE_STEPS = (Leaf, LoadConst, LoadEmpty, Custom, ConstLike, Elementwise, Reduce, Movement, Gather, Cast,
               Contiguous, Copy, Shard, Assign)


def produces_value(step: Step) -> bool:
    return isinstance(step, VALUE_STEPS)


@dataclass(frozen=True)
class Program:
    """Steps, plus: `expect` (the error type of the last step, or None), `ring` (fast's RING setting)
    and, for a symbolic program, `variables` and `bindings` (per run, one value per variable, each
    inside its variable's range; at least two runs). Without variables, `bindings` is empty."""

    steps: tuple[Step, ...]
    expect: str | None = None
    ring: int | None = None
    variables: tuple[Var, ...] = ()
    bindings: tuple[tuple[int, ...], ...] = ()

    @property
    def runs(self) -> int:
        """How many times the program is replayed: once per binding (once when it has no variables)."""
        return len(self.bindings) if self.variables else 1

    def values(self, run: int = 0) -> dict[Var, int]:
        """Each variable's value in binding `run` (empty without variables)."""
        return dict(zip(self.variables, self.bindings[run], strict=True)) if self.variables else {}

    def instantiate(self, run: int = 0) -> Program:
        """The program of binding `run` with plain ints in place of its Vars (itself without variables)."""
        if not self.variables:
            return self
        values = self.values(run)
        return Program(tuple(bind_step(step, values.__getitem__) for step in self.steps), self.expect, self.ring)

    def render(self, candidate: str = "fast", expected: str = "reference") -> str:
        """A runnable snippet: the program as `program(T)` (`program(T, binding)` when symbolic), run on
        both packages (once per binding), results printed."""
        lines = ["import importlib", "import numpy as np", "from numpy import nan, inf",
                 f"import {expected}, {candidate}", ""]
        if self.variables:
            bindings = tuple({v.name: x for v, x in self.values(run).items()} for run in range(self.runs))
            lines += [f"BINDINGS = {bindings!r}  # the program runs once per binding", ""]
        param, arg = (", binding=BINDINGS[0]", ", binding") if self.variables else ("", "")
        lines += [f"def program(T{param}):", *self._variable_lines(), "    out = []"]
        for index, step in enumerate(self.steps):
            text = step.render(lambda i: f"v{i}")
            lines.append(f"    v{index} = {text}" if produces_value(step) else f"    {text}")
        lines += ["    return out", "", f"def attempt(T{param}):", "    try:", f"        return program(T{arg})",
                  "    except Exception as error:", "        return f'{type(error).__name__}: {error}'", ""]
        lines += self._runs(candidate, expected)
        if self.expect:
            lines.append(f"# expected: the last step raises {self.expect}")
        if candidate == "fast":
            lines += self._debug_tail()
        return "\n".join(lines)

    def _variable_lines(self) -> list[str]:
        """Lines binding each variable's name to the package's Variable, bound to this run's value."""
        return [f"    {v.name} = T.Variable({v.name!r}, {v.low}, {v.high}).bind(binding[{v.name!r}])"
                for v in self.variables]

    def _runs(self, candidate: str, expected: str) -> list[str]:
        """Lines running the program on both packages; a symbolic one once per binding, printing how
        many kernels the candidate built in each (none may be built after the first binding)."""
        call = "attempt({}, binding)" if self.variables else "attempt({})"
        first = f"print('{expected}:', {call.format(expected)})"
        second = [f"print('{candidate}:', {call.format(candidate)})"]
        lines: list[str] = []
        if self.ring is not None:  # the candidate's config (fast.config) forces the ring all-reduce
            lines += ["import contextlib, importlib.util",
                      f"config = importlib.import_module('{candidate}.config') "
                      f"if importlib.util.find_spec('{candidate}.config') else None"]
            second = [f"with config.override(ring={self.ring}) if config else contextlib.nullcontext():",
                      f"    {second[0]}"]
        if not self.variables:
            return [*lines, first, *second]
        lines += ["def built(T):", "    try:  # kernels compiled or loaded from the disk cache so far (fast)",
                  "        compiles, _, hits = importlib.import_module(T.__name__ + '.runtime.base')"
                  ".COMPILE_COUNTER.snapshot()", "    except (ImportError, AttributeError):", "        return None",
                  "    return compiles + hits", "", "for binding in BINDINGS:", f"    {first}",
                  f"    before = built({candidate})", *(f"    {line}" for line in second), "    if before is not None:",
                  f"        print('  kernels built:', built({candidate}) - before)"]
        return lines

    def _debug_tail(self) -> list[str]:
        """Snippet lines ending in the program's buffers (left lazy), for `python -m fast.debug`: the
        fetched values (else the last value) of the steps that do not raise (a symbolic program's at
        its first binding)."""
        steps = self.steps[:-1] if self.expect else self.steps
        param = ", binding=BINDINGS[0]" if self.variables else ""
        lines = ["", "# The program's buffers, left lazy: `python -m fast.debug` runs this file under",
                 "# fast.debug.trace() and compares the graph of its last expression with reference node by",
                 "# node: the first node that differs, its inputs and the kernel it is fused into",
                 "# (docs/debugging.md).", f"def graph(T{param}):", *self._variable_lines()]
        for index, step in enumerate(steps):
            if not isinstance(step, Fetch):
                text = step.render(lambda i: f"v{i}")
                lines.append(f"    v{index} = {text}" if produces_value(step) else f"    {text}")
        made = [index for index, step in enumerate(steps) if produces_value(step)]
        fetched = list(dict.fromkeys(s.item for s in steps if isinstance(s, Fetch) and s.item in made))
        lines.append(f"    return [{', '.join(f'v{i}' for i in fetched or made[-1:])}]")
        if self.ring is not None:
            lines += [f"with config.override(ring={self.ring}) if config else contextlib.nullcontext():",
                      "    buffers = graph(fast)"]
        else:
            lines.append("buffers = graph(fast)")
        return [*lines, "buffers  # python -m fast.debug THIS_FILE.py"]
