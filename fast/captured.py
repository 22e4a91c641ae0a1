"""`fast.jit(fn)`: capture the kernels a function of LazyBuffers runs, and replay them on new inputs.

A call's *signature* is, per positional or keyword argument: for a LazyBuffer, its shape, dtype,
device, the view it reads its base through, the size of its base's Buffer and which earlier argument
shares its memory; for anything else, the value itself (it must be hashable: a Python number, a
string, a tuple ...). The first call of a signature *traces*: the arguments are realized, then `fn`
runs as usual while fast/engine/capture.py records every item realize runs; the returned buffers are
realized and the recording becomes a `Plan`. Every later call of that signature realizes its
arguments and replays the plan on their Buffers: no graph is built, nothing is scheduled or looked
up, only the recorded kernels (and copies, CUSTOM host functions) run. The result is fresh lazy
buffers over fresh output Buffers, bit-identical to what `fn` would return.

What forces a new trace: another shape, dtype, device or view of an array argument, another
non-array argument value, or an assign realized since the trace into a Buffer the plan reads as a
constant (a weight). Python values `fn` reads from elsewhere (globals, closures) are constants of
the trace: changing them later is not seen (pass them as arguments). Errors: a call with another
number of positional arguments or other keyword names than the first call (TypeError), an array
inside a container argument (TypeError: pass arrays as top-level arguments, or close over them), an
unhashable argument (TypeError), a MultiLazyBuffer argument or result (TypeError), reading a value
computed from the inputs while tracing (`to_numpy`, `bool()` ...: capture.TraceError), an assign
inside the function (TraceError; into an input: mutating a captured input). Shapes are concrete: a
symbolic (Variable) shape in an argument is a TypeError, so each sequence length is its own trace;
pad to a few lengths (with a mask) to bound the number of traces. Calls of one captured function
run one at a time (a lock): the replays of a plan share its intermediate buffers.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any

from fast.device import Buffer
from fast.engine import capture
from fast.engine.realize import realize
from fast.graph.keys import tracker
from fast.graph.multi import MultiLazyBuffer
from fast.graph.node import LazyBuffer, view_of
from fast.ops import LoadOps

MAX_TRACES = 64  # signatures kept per captured function; the oldest trace is dropped past it


class Captured:
    """A captured function (see the module docstring); `traces` counts the traces it ran."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"jit: expected a callable, got {fn!r}")
        self.fn = fn
        self.name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
        self.plans: dict[Hashable, tuple[capture.Plan, Any]] = {}
        self.arity: tuple[int, tuple[str, ...]] | None = None
        self.traces = 0
        self.lock = threading.Lock()  # one call at a time: the calls of a plan share its intermediates
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if capture.active() is not None:  # called from a function being traced: inlined into that trace
            return self.fn(*args, **kwargs)
        names = tuple(sorted(kwargs))
        if self.arity is None:
            self.arity = (len(args), names)
        elif self.arity != (len(args), names):
            raise TypeError(f"jit({self.name}): traced with {self.arity[0]} positional arguments and keywords "
                            f"{list(self.arity[1])}, called with {len(args)} and {list(names)}")
        values = [*args, *(kwargs[name] for name in names)]
        arrays = _realized_arrays(self.name, values)
        key = _signature(self.name, values, arrays)
        with self.lock:
            found = self.plans.get(key)
            if found is None or not found[0].current():
                return self._trace(key, args, kwargs, arrays)
            plan, structure = found
            buffers = plan.run([arrays[k] for k in sorted(arrays)])
        return _pack(structure, [_wrap(buffer, out) for buffer, out in zip(buffers, plan.outputs, strict=True)])

    def _trace(self, key: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any], arrays: dict[int, Buffer]) -> Any:
        recorder = capture.Recorder(self.name, [arrays[k] for k in sorted(arrays)])
        try:
            with recorder:
                result = self.fn(*args, **kwargs)
                structure, outs = _unpack(self.name, result)
                realize(*outs)
                held = [out if out.base.realized is not None else out.contiguous() for out in outs]
                if any(out is not held_out for out, held_out in zip(outs, held, strict=True)):
                    realize(*held)  # a constant result is realized by no item: replays return a copy of it
            plan = capture.build_plan(recorder, held)
        finally:
            recorder.release()
        self.traces += 1
        self.plans.pop(key, None)
        if len(self.plans) >= MAX_TRACES:
            self.plans.pop(next(iter(self.plans)))
        self.plans[key] = (plan, structure)
        return result


def jit(fn: Callable[..., Any]) -> Captured:
    """Capture `fn` (LazyBuffers in, a LazyBuffer or a tuple/list of them out): see the module docstring."""
    return Captured(fn)


def _realized_arrays(name: str, values: list[Any]) -> dict[int, Buffer]:
    """Realize the LazyBuffer arguments; {argument index: its base's Buffer}."""
    pending = []
    for number, value in enumerate(values):
        if isinstance(value, MultiLazyBuffer):
            raise TypeError(f"jit({name}): argument {number} is a MultiLazyBuffer; sharded arrays are not captured")
        if isinstance(value, LazyBuffer):
            if value.st.symbolic:
                raise TypeError(f"jit({name}): argument {number} has the symbolic shape {value.shape}; captured "
                                "functions take concrete shapes (one trace per shape)")
            if value.base.realized is None:
                pending.append(value)
        elif isinstance(value, (tuple, list, dict)):
            _refuse_nested(name, number, value)
    if pending:
        realize(*pending)
    arrays = {}
    for number, value in enumerate(values):
        if isinstance(value, LazyBuffer):
            buffer = value.base.realized
            if buffer is None:
                raise RuntimeError(f"jit({name}): argument {number} ({value!r}) did not realize")
            arrays[number] = buffer
    return arrays


def _refuse_nested(name: str, number: int, value: Any) -> None:
    inner = value.values() if isinstance(value, dict) else value
    for element in inner:
        if isinstance(element, (LazyBuffer, MultiLazyBuffer)) or hasattr(element, "__array_namespace__"):
            raise TypeError(f"jit({name}): argument {number} ({type(value).__name__}) holds an array; pass arrays "
                            "as top-level arguments, or close over arrays that do not change")
        if isinstance(element, (tuple, list, dict)):
            _refuse_nested(name, number, element)


def _signature(name: str, values: list[Any], arrays: dict[int, Buffer]) -> Hashable:
    """The trace key of a call (module docstring)."""
    parts: list[Any] = []
    first_of_root: dict[int, int] = {}
    for number, value in enumerate(values):
        buffer = arrays.get(number)
        if buffer is None:
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"jit({name}): argument {number} ({type(value).__name__}) is unhashable; non-array "
                                "arguments are part of the trace key") from None
            parts.append((type(value), value))
            continue
        root = buffer.base
        shared = first_of_root.setdefault(id(root), number)
        layout = (buffer.offset, root.size, shared) if buffer is not root or shared != number else None
        parts.append((value.st, value.dtype, value.device, buffer.size, layout))
    return tuple(parts)


def _unpack(name: str, result: Any) -> tuple[Any, list[LazyBuffer]]:
    """(how to rebuild the result, its LazyBuffers): one LazyBuffer, or a tuple or list of them."""
    if isinstance(result, LazyBuffer):
        return None, [result]
    if isinstance(result, (tuple, list)) and all(isinstance(out, LazyBuffer) for out in result):
        return type(result), list(result)
    raise TypeError(f"jit({name}): the function must return a LazyBuffer or a tuple or list of them, "
                    f"got {type(result).__name__}")


def _pack(structure: Any, outs: list[LazyBuffer]) -> Any:
    return outs[0] if structure is None else structure(outs)


def _wrap(buffer: Buffer, output: tuple[int, Any, Any, str, Any]) -> LazyBuffer:
    """A realized LazyBuffer over `buffer` (a base of the recorded base shape), read through the
    recorded view."""
    _, shape, dtype, device, st = output
    base = LazyBuffer(device, tracker(shape), dtype, LoadOps.EMPTY)
    base._buffer = buffer
    buffer.ref(1)
    return view_of(base, st)
