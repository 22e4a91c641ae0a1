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
non-array argument value, another configuration (`config.override`: the kernels were chosen and
lowered under the trace's), or an assign realized since the trace into a Buffer the plan reads as a
constant (a weight). Python values `fn` reads from elsewhere (globals, closures) are constants of
the trace: changing them later is not seen (pass them as arguments). Errors: a call with another
number of positional arguments or other keyword names than the first call (TypeError), an array
inside a container argument (TypeError: pass arrays as top-level arguments, or close over them), an
unhashable argument (TypeError), a MultiLazyBuffer argument or result (TypeError), reading a value
computed from the inputs while tracing (`to_numpy`, `bool()` ...: capture.TraceError), an assign
inside the function (TraceError; into an input: mutating a captured input). Sequence lengths: a
Variable bound in an argument's view (`x.shrink(((0, n.bind(12)), (0, d)))`) is not part of the key
(bound Variables compare equal whatever their value): one trace serves every value, the kernels
take the call's value as a parameter and the results carry it. (A plan that replays a CUSTOM call
keeps the trace's shapes, so it is keyed by the values too.) Concrete shapes are each a trace.
Calls of one captured function
run one at a time (a lock): the replays of a plan share its intermediate buffers.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any

from fast import config
from fast.device import Buffer
from fast.engine import capture
from fast.engine.realize import realize
from fast.graph.keys import tracker
from fast.graph.multi import MultiLazyBuffer
from fast.graph.node import LazyBuffer, view_of
from fast.ops import LoadOps
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Node, Variable, as_sint
from fast.shape.view import View

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
        if self.arity is not None and self.arity != (len(args), names):
            raise TypeError(f"jit({self.name}): traced with {self.arity[0]} positional arguments and keywords "
                            f"{list(self.arity[1])}, called with {len(args)} and {list(names)}")
        values = [*args, *(kwargs[name] for name in names)]
        arrays = _realized_arrays(self.name, values)
        key, bound = _signature(self.name, values, arrays), _bound(self.name, values)
        with self.lock:
            found = self.plans.get(key)
            if found is None and bound:
                found = self.plans.get((key, _values_key(bound)))
            if found is None or not found[0].current():
                return self._trace(key, args, kwargs, arrays, bound)
            plan, structure = found
            buffers = plan.run([arrays[k] for k in sorted(arrays)], bound)
        return _pack(structure, [_wrap(buffer, out, bound) for buffer, out
                                 in zip(buffers, plan.outputs, strict=True)])

    def _trace(self, key: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any], arrays: dict[int, Buffer],
               bound: dict[Variable, int]) -> Any:
        recorder = capture.Recorder(self.name, [arrays[k] for k in sorted(arrays)], bound)
        try:
            with recorder:
                result = self.fn(*args, **kwargs)
                structure, outs = _unpack(self.name, result)
                realize(*outs)
                held = [out if out.base.realized is not None or capture.is_empty(out) else out.contiguous()
                        for out in outs]
                if any(out is not held_out for out, held_out in zip(outs, held, strict=True)):
                    realize(*held)  # a constant result is realized by no item: replays return a copy of it
            plan = capture.build_plan(recorder, held)
        finally:
            recorder.release()
        self.traces += 1
        if self.arity is None:  # the first call that traced fixes the arguments every call passes
            self.arity = (len(args), tuple(sorted(kwargs)))
        if plan.per_length and bound:
            key = (key, _values_key(bound))
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


def _bound(name: str, values: list[Any]) -> dict[Variable, int]:
    """The bound Variables of the array arguments' views and their values (one value per Variable)."""
    bound: dict[Variable, int] = {}
    for number, value in enumerate(values):
        if isinstance(value, LazyBuffer) and value.st.symbolic:
            for variable, val in value.st.var_vals.items():
                if bound.setdefault(variable, val) != val:
                    raise ValueError(f"jit({name}): argument {number} binds {variable.expr} to {val}, an earlier "
                                     f"argument to {bound[variable]}")
    return bound


def _values_key(bound: dict[Variable, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((variable.expr, val) for variable, val in bound.items()))


def _rebind(size: Any, bound: dict[Variable, int]) -> Any:
    """A symbolic size with each of its Variables bound to its value in `bound` (others unchanged)."""
    if not isinstance(size, Node):
        return size
    mapping: dict[Variable, Node | int] = {variable: Variable(variable.expr, variable.min, variable.max, val=val)
                                           for variable, val in bound.items()}
    return as_sint(size.substitute(mapping))


def _rebind_tracker(st: ShapeTracker, bound: dict[Variable, int]) -> ShapeTracker:
    if not bound or not st.symbolic:
        return st
    views = tuple(View.create(tuple(_rebind(size, bound) for size in view.shape),
                              tuple(_rebind(stride, bound) for stride in view.strides), _rebind(view.offset, bound),
                              None if view.mask is None else
                              tuple((_rebind(b, bound), _rebind(e, bound)) for b, e in view.mask))
                  for view in st.views)
    return ShapeTracker(views)


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
    parts.append(config.get())  # a trace's kernels were lowered under this configuration
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


def _wrap(buffer: Buffer | None, output: tuple[int, Any, Any, str, Any], bound: dict[Variable, int]) -> LazyBuffer:
    """A realized LazyBuffer over `buffer` (a base of the recorded base shape), read through the
    recorded view, with the call's values of the bound Variables; a new zero-size one when `buffer`
    is None (a zero-size output has no memory)."""
    _, shape, dtype, device, st = output
    if bound:
        shape, st = tuple(_rebind(size, bound) for size in shape), _rebind_tracker(st, bound)
    base = LazyBuffer(device, tracker(shape), dtype, LoadOps.EMPTY)
    if buffer is None:
        return view_of(base, st)
    base._buffer = buffer
    buffer.ref(1)
    return view_of(base, st)
