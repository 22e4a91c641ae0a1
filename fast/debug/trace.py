"""`trace()`: record the calls that build a `fast` graph, so `compare` can replay them on `reference`.

Building a graph in `fast` already rewrites it: constants fold, `x*1` is `x`, a sharded reduction is
expanded into copies and adds, a large reduction is split. The lazy graph keeps only the result, so a
bug in one of those rewrites cannot be seen in it. Inside `with fast.debug.trace():` every call the user
makes on `LazyBuffer`, `MultiLazyBuffer`, `fast.from_numpy`, `fast.realize` and `fast.to_numpy` is
recorded as it was made (records.py), keyed by the object it returned; `compare` then replays the calls
themselves.

Invariants:
- Only the outermost call is recorded (`fast` calling itself inside a method is not the user's program);
  `paused()` stops recording for the current thread (compare's own calls).
- A record's inputs are the records their objects had when the call was made, so an object that a call
  returns unchanged (`x + 0` is `x`) gets the new record without creating a cycle.
- `lb.const(value, shape)` is recorded as the CONST loadop it makes (no input): constants are cached
  and shared between graphs, and their value depends on lb's dtype, device and shape only.
- `lb.matmul(other)` is recorded as the calls of its definition (reshape, expand, permute, the
  multiply, the sum, the reshape that drops the summed axis): the nodes are the same, and a report
  can name the step of the product that is wrong.
- Entering patches the classes' current attributes (a test that plants a bug must do so before tracing,
  and undo it after); leaving the outermost trace restores them. Records outlive the trace, held as long
  as the objects they describe (weak keys).
"""
from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import fast
from fast import config
from fast.debug.records import SEQUENCE, Record, neutral
from fast.graph import checks, products
from fast.graph.multi import MultiLazyBuffer
from fast.graph.node import LazyBuffer
from fast.ops import LoadOps

BUILDERS = ("const", "e", "r", "reshape", "pad", "expand", "permute", "shrink", "stride", "cast", "contiguous",
            "copy_to_device", "assign")
_LOCAL = threading.local()
_LOCK = threading.Lock()
_RECORDS: weakref.WeakKeyDictionary[Any, Record] = weakref.WeakKeyDictionary()
_SAVED: list[tuple[Any, str, Any]] = []  # (owner, attribute, original) while tracing
_ACTIVE = [0]  # nesting depth of trace()
# called with the arguments of each outermost `fast.realize` / `fast.to_numpy` while tracing, before
# it runs (`python -m fast.debug --realize`); a hook may raise to stop the program there
READ_HOOKS: list[Callable[[tuple[Any, ...]], None]] = []


class Unrecorded:
    """An input whose object has no record (made before tracing, or by `fast` itself): compare rebuilds
    it from the lazy graph (fromgraph.py). Holds the object."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj


def is_buffer(value: Any) -> bool:
    return isinstance(value, (LazyBuffer, MultiLazyBuffer))


def lookup(obj: Any) -> Record | None:
    """The latest record of `obj`, if it has one."""
    try:
        return _RECORDS.get(obj)
    except TypeError:  # not weakly referenceable: never recorded
        return None


def _depth() -> int:
    return getattr(_LOCAL, "depth", 0)


@contextmanager
def paused() -> Iterator[None]:
    """Record nothing on this thread inside the block (nested calls count as fast's own)."""
    _LOCAL.depth = _depth() + 1
    try:
        yield
    finally:
        _LOCAL.depth = _depth() - 1


def _as_loadop(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str, tuple[Any, ...], dict[str, Any]]:
    """`lb.const(val, shape)` as the CONST loadop it makes: the constant depends on lb's dtype, device and
    shape only, and a cached constant may be shared by unrelated graphs, so it records no input."""
    lb, rest = args[0], dict(zip(("val", "shape"), args[1:], strict=False)) | kwargs
    shape = rest.get("shape") if rest.get("shape") is not None else lb.shape
    return "LazyBuffer", "loadop", (LoadOps.CONST, shape, lb.dtype, lb.device), {"arg": rest.get("val")}


def _record(target: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
    """Store the call that returned `result` (a buffer) as its record."""
    if method == "const" and isinstance(args[0], LazyBuffer):
        target, method, args, kwargs = _as_loadop(args, kwargs)
    found: list[Any] = []
    values = neutral(args, found, is_buffer)
    named = {key: neutral(value, found, is_buffer) for key, value in kwargs.items()}
    inputs = tuple(lookup(obj) or Unrecorded(obj) for obj in found)
    record = Record(target, method, values[1:] if target == "self" else values, named, inputs,
                    weakref.ref(result), "trace", config.get())
    _RECORDS[result] = record


def _mark_realized(args: tuple[Any, ...]) -> None:
    """A user's realize: remember its number on each argument's record (the first one counts)."""
    number = next(SEQUENCE)
    for obj in args:
        record = lookup(obj) if is_buffer(obj) else None
        if record is not None and record.realized_at is None:
            record.realized_at = number


def _wrapper(function: Callable[..., Any], target: str, method: str) -> Callable[..., Any]:
    """`function` recording its outermost calls while tracing."""
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _depth() or not _ACTIVE[0]:
            return function(*args, **kwargs)
        if method in ("realize", "to_numpy"):
            for hook in READ_HOOKS:  # before the call runs: its buffers are as the user built them
                hook(args)
        with paused():
            result = function(*args, **kwargs)
        if method in ("realize", "to_numpy"):
            _mark_realized(args)
        elif method == "__init__":
            _record(target, method, args[1:], kwargs, args[0])
        elif is_buffer(result):
            _record(target, method, args, kwargs, result)
        return result
    return wrapper


def _patch(owner: Any, name: str, target: str) -> None:
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    is_static = isinstance(original, staticmethod)
    wrapped = _wrapper(original.__func__ if is_static else original, target, name)
    setattr(owner, name, staticmethod(wrapped) if is_static else wrapped)
    _SAVED.append((owner, name, original))


def _install() -> None:
    for name in BUILDERS:
        _patch(LazyBuffer, name, "self")
        _patch(MultiLazyBuffer, name, "self")
    _patch(LazyBuffer, "gather", "self")  # (LazyBuffer only: a MultiLazyBuffer has no gather)
    _SAVED.append((LazyBuffer, "matmul", LazyBuffer.__dict__["matmul"]))
    LazyBuffer.matmul = _matmul_by_definition  # type: ignore[method-assign]
    _patch(LazyBuffer, "loadop", "LazyBuffer")
    _patch(MultiLazyBuffer, "from_sharded", "MultiLazyBuffer")
    _patch(MultiLazyBuffer, "__init__", "MultiLazyBuffer")
    for name in ("from_numpy", "realize", "to_numpy"):
        _patch(fast, name, "module")


def _matmul_by_definition(self: LazyBuffer, other: LazyBuffer) -> LazyBuffer:
    """`matmul` while tracing: validated as `matmul`, then built by its definition's calls
    (fast/graph/products.py `composed`: the same nodes), each one recorded, so `reference` replays
    the expand-multiply-sum and a report names the multiply or the sum that went wrong."""
    right, batch = checks.check_matmul(self, other, LazyBuffer)
    return products.composed(self, right, products.full_shape(self, right, batch))


def _uninstall() -> None:
    while _SAVED:
        owner, name, original = _SAVED.pop()
        setattr(owner, name, original)


@contextmanager
def trace() -> Iterator[None]:
    """Record the graph-building calls made inside the block (see the module docstring)."""
    with _LOCK:
        if _ACTIVE[0] == 0:
            _install()
        _ACTIVE[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                _uninstall()
