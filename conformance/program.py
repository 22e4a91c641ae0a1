"""The neutral program form: a frozen list of steps replayed through the public API of a package.

A `Program` is independent of both implementations. Each step names ops and dtypes by string and
refers to earlier steps' results by index. Invariants: a step only refers to steps before it; the
steps that produce values are exactly those listed in `VALUE_STEPS`; `Realize` and `Fetch` produce
nothing (a `Fetch` records `to_numpy` of its operand). `expect` names the error type the last step
must raise (an invalid program on purpose), or is None. `ring` asks the `fast` driver to run under
`config.override(ring=...)` (reference ignores it). `render` gives a runnable snippet.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from conformance.vocab import FLOATS, OP_CLASS, SIGNED

Scalar = bool | int | float
Shape = tuple[int, ...]

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


class Step:
    """Base of all steps. `refs()` lists the earlier steps this one reads."""

    def refs(self) -> tuple[int, ...]:
        out: list[int] = []
        for f in fields(self):  # type: ignore[arg-type]
            if f.metadata.get("ref"):
                value = getattr(self, f.name)
                out.extend(value if isinstance(value, tuple) else (value,))
        return tuple(out)

    def render(self, name: Callable[[int], str]) -> str:  # pragma: no cover - every step overrides
        raise NotImplementedError


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
    shape: Shape
    dtype: str
    device: str
    value: Scalar

    def render(self, name: Callable[[int], str]) -> str:
        return (f"T.LazyBuffer.loadop(T.LoadOps.CONST, {self.shape!r}, T.dtypes.{self.dtype}, "
                f"{self.device!r}, arg={render_scalar(self.value)})")


@dataclass(frozen=True)
class LoadEmpty(Step):
    shape: Shape
    dtype: str
    device: str

    def render(self, name: Callable[[int], str]) -> str:
        return f"T.LazyBuffer.loadop(T.LoadOps.EMPTY, {self.shape!r}, T.dtypes.{self.dtype}, {self.device!r})"


@dataclass(frozen=True)
class Custom(Step):
    fn: str
    srcs: tuple[int, ...] = ref()
    shape: Shape = ()
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
    shape: Shape | None = None

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


VALUE_STEPS = (Leaf, LoadConst, LoadEmpty, Custom, ConstLike, Elementwise, Reduce, Movement, Cast, Contiguous,
               Copy, Shard, Assign)


def produces_value(step: Step) -> bool:
    return isinstance(step, VALUE_STEPS)


@dataclass(frozen=True)
class Program:
    steps: tuple[Step, ...]
    expect: str | None = None
    ring: int | None = None

    def render(self, candidate: str = "fast", expected: str = "reference") -> str:
        """A runnable snippet: the program as `program(T)`, run on both packages, results printed."""
        lines = ["import importlib", "import numpy as np", "from numpy import nan, inf",
                 f"import {expected}, {candidate}", "", "def program(T):", "    out = []"]
        for index, step in enumerate(self.steps):
            text = step.render(lambda i: f"v{i}")
            lines.append(f"    v{index} = {text}" if produces_value(step) else f"    {text}")
        lines += ["    return out", "", "def attempt(T):", "    try:", "        return program(T)",
                  "    except Exception as error:", "        return f'{type(error).__name__}: {error}'", "",
                  f"print('{expected}:', attempt({expected}))"]
        if self.ring is not None:  # the candidate's config (fast.config) forces the ring all-reduce
            lines += ["import contextlib, importlib.util",
                      f"config = importlib.import_module('{candidate}.config') "
                      f"if importlib.util.find_spec('{candidate}.config') else None",
                      f"with config.override(ring={self.ring}) if config else contextlib.nullcontext():",
                      f"    print('{candidate}:', attempt({candidate}))"]
        else:
            lines.append(f"print('{candidate}:', attempt({candidate}))")
        if self.expect:
            lines.append(f"# expected: the last step raises {self.expect}")
        if candidate == "fast":
            lines += self._debug_tail()
        return "\n".join(lines)

    def _debug_tail(self) -> list[str]:
        """Snippet lines ending in the program's buffers (left lazy), for `python -m fast.debug`: the
        fetched values (else the last value) of the steps that do not raise."""
        steps = self.steps[:-1] if self.expect else self.steps
        lines = ["", "# The program's buffers, left lazy: `python -m fast.debug` runs this file under",
                 "# fast.debug.trace() and compares the graph of its last expression with reference node by",
                 "# node: the first node that differs, its inputs and the kernel it is fused into",
                 "# (docs/debugging.md).", "def graph(T):"]
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
