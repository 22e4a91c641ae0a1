"""Records: one node of a `fast` graph written as a call that either package can replay.

A `Record` is a call of the public API, `target.method(*args, **kwargs)`, where `target` is "self" (a
method of the first input), "LazyBuffer" or "MultiLazyBuffer" (a static method, or the constructor for
method "__init__"), "module" (a function of the package) or "value" (a realized input given by its
values: `Value`, see values.py). Buffers in the arguments are `Slot(i)`, standing for `inputs[i]`; op
enums and dtypes are kept by name (`EnumRef`, `DTypeRef`), so `apply(pkg, ...)` resolves them on `fast`
or `reference` alike.

Invariants: a record's inputs were made before it (`seq` orders the records of a trace; a record made
from the graph gets its number when made, after its inputs); `apply` builds nodes of `pkg` and realizes
nothing except a "value" record (a realized input); `result` is a weak reference to the `fast` object the
record stands for in the user's graph (None when there is none: an intermediate step of a rewritten view).
"""
from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import ModuleType
from typing import Any

import numpy as np

from fast.config import Config
from fast.debug.values import DeviceMap, materialize, same_device
from fast.dtype import DType

SEQUENCE = itertools.count()  # record numbers: program order within a trace


@dataclass(frozen=True)
class Slot:
    """Argument placeholder: the record's input number `index`."""

    index: int


@dataclass(frozen=True)
class EnumRef:
    """An op enum member by class and member name, e.g. ("BinaryOps", "ADD")."""

    cls: str
    name: str


@dataclass(frozen=True)
class DTypeRef:
    """A dtype by name."""

    name: str


@dataclass(eq=False)
class Record:
    """One call (see the module docstring). `origin` is "trace" (the user made this call under
    `fast.debug.trace()`) or "graph" (rebuilt from the lazy graph). `clone`, for graph records, builds
    the exact `fast` node (same op, view and sources) from a lookup of the inputs' clones and the
    device map; None: the clone is `apply(fast, ...)`. `realized_at`: the number of the user's first
    `realize` of it, if any."""

    target: str
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inputs: tuple[Any, ...]  # Record, or trace.Unrecorded until resolved (fromgraph.py)
    result: weakref.ref[Any] | None = None
    origin: str = "trace"
    config: Config | None = None
    realized_at: int | None = None
    clone: Callable[[Callable[[Record], Any], DeviceMap], Any] | None = None
    seq: int = field(default_factory=lambda: next(SEQUENCE))

    # ------------------------------------------------------------ replay
    def apply(self, pkg: ModuleType, inputs: Sequence[Any], devices: DeviceMap = same_device) -> Any:
        """Build this call on `pkg` over `inputs` (objects of `pkg`, in input order)."""
        args = tuple(resolve(value, pkg, inputs, devices) for value in self.args)
        kwargs = {key: resolve(value, pkg, inputs, devices) for key, value in self.kwargs.items()}
        if self.target == "self":
            return getattr(inputs[0], self.method)(*args, **kwargs)
        if self.target == "value":
            return materialize(pkg, args[0], devices)
        owner: Any = pkg if self.target == "module" else getattr(pkg, self.target)
        return owner(*args, **kwargs) if self.method == "__init__" else getattr(owner, self.method)(*args, **kwargs)

    def fast_object(self) -> Any:
        """The user's `fast` object for this record, or None (none, or no longer alive)."""
        return None if self.result is None else self.result()

    # ------------------------------------------------------------ description
    @property
    def op(self) -> str:
        """The op's name: the enum member for e/r/loadop ("ADD", "SUM", "CONST"), CAST or BITCAST,
        INPUT for a realized input, else the method ("reshape", "copy_to_device", "from_sharded")."""
        if self.method in ("e", "r", "loadop") and self.args and isinstance(self.args[0], EnumRef):
            return self.args[0].name
        if self.method == "cast":
            return "BITCAST" if self.is_bitcast() else "CAST"
        if self.target == "value":
            return "INPUT"
        return "MultiLazyBuffer" if self.method == "__init__" else self.method

    def is_bitcast(self) -> bool:
        return bool(self.kwargs.get("bitcast", self.args[1] if len(self.args) > 1 else False))

    @property
    def arg(self) -> str:
        """The call's other arguments, readable (e.g. "(1,)" for a reduce over axis 1)."""
        skip = 1 if self.method in ("e", "r", "loadop") else 0
        parts = [show(value) for value in self.args[skip:] if not isinstance(value, Slot)]
        parts += [f"{key}={show(value)}" for key, value in self.kwargs.items()]
        return ", ".join(parts)

    def render(self, name: Callable[[Record], str]) -> str:
        """The call as a line of code, inputs named by `name`."""
        def text(value: Any) -> str:
            return name(self.inputs[value.index]) if isinstance(value, Slot) else show(value, text)
        rest = [text(value) for value in self.args] + [f"{key}={text(value)}" for key, value in self.kwargs.items()]
        if self.target == "self":
            return f"{name(self.inputs[0])}.{self.method}({', '.join(rest)})"
        if self.target == "value":
            return f"input({', '.join(rest)})"
        head = {"module": "", "LazyBuffer": "LazyBuffer.", "MultiLazyBuffer": "MultiLazyBuffer."}[self.target]
        return f"{head}{'MultiLazyBuffer' if self.method == '__init__' else self.method}({', '.join(rest)})"


MOVES = frozenset({"reshape", "pad", "expand", "permute", "shrink", "stride"})


def is_movement(record: Record) -> bool:
    """A movement op (a view of its one input)."""
    return record.target == "self" and record.method in MOVES


def show(value: Any, inner: Callable[[Any], str] | None = None) -> str:
    """A short readable form of an argument (arrays by dtype and shape)."""
    again = inner or show
    if isinstance(value, EnumRef):
        return f"{value.cls}.{value.name}"
    if isinstance(value, DTypeRef):
        return f"dtypes.{value.name}"
    if isinstance(value, np.ndarray):
        return f"array({value.dtype.name}{list(value.shape)})"
    if isinstance(value, tuple):
        items = ", ".join(again(item) for item in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, list):
        return f"[{', '.join(again(item) for item in value)}]"
    if callable(value):
        return getattr(value, "__name__", "fn")
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------- neutral arguments

def neutral(value: Any, found: list[Any], is_buffer: Callable[[Any], bool]) -> Any:
    """`value` with buffers replaced by `Slot`s (appended to `found`), enums and dtypes by name and
    numpy arrays copied (a snapshot: later writes to the caller's array do not show)."""
    if is_buffer(value):
        found.append(value)
        return Slot(len(found) - 1)
    if isinstance(value, Enum):
        return EnumRef(type(value).__name__, value.name)
    if isinstance(value, DType):
        return DTypeRef(value.name)
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (tuple, list)):
        return type(value)(neutral(item, found, is_buffer) for item in value)
    return value


def resolve(value: Any, pkg: ModuleType, inputs: Sequence[Any], devices: DeviceMap) -> Any:
    """The argument for `pkg`: slots become inputs, names become `pkg`'s enums and dtypes, device
    names pass through `devices`. A symbolic size is a ValueError (compare does not replay them)."""
    if isinstance(value, Slot):
        return inputs[value.index]
    if isinstance(value, EnumRef):
        return getattr(getattr(pkg, value.cls), value.name)
    if isinstance(value, DTypeRef):
        return getattr(pkg.dtypes, value.name)
    if isinstance(value, str):
        return devices(value)
    if isinstance(value, (tuple, list)):
        return type(value)(resolve(item, pkg, inputs, devices) for item in value)
    if type(value).__module__.startswith("fast.shape"):
        raise ValueError(f"fast.debug: symbolic value {value!r} in a recorded call is not supported")
    return value
