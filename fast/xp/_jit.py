"""`jit` for arrays: a captured function of Arrays, built on a backend's LazyBuffer capture (`fast.jit`).

`array_jit(fn, capture, asarray)`: `capture` is the backend's `jit` (LazyBuffers in and out) and
`asarray` this namespace's, which wraps a LazyBuffer lazily. The captured inner function receives
each LazyBuffer argument as an Array of this namespace, calls `fn`, and returns the LazyBuffers of
`fn`'s Arrays; the outer function unwraps Array arguments and wraps the results. Every rule (what
retraces, what raises) is the backend capture's (docs/api.md, "Capture"); `fn` must return an Array
or a tuple or list of Arrays (TypeError otherwise). Sharded arrays are refused by the capture.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fast.xp._array import Array


def array_jit(fn: Callable[..., Any], capture: Callable[[Callable[..., Any]], Any],
              asarray: Callable[[Any], Array]) -> Callable[..., Any]:
    """`fn` (Arrays in, Arrays out) captured through the backend's `capture` (module docstring)."""
    name = getattr(fn, "__qualname__", repr(fn))

    def on_lazy(*args: Any, **kwargs: Any) -> Any:
        result = fn(*[_as_array(value, asarray) for value in args],
                    **{key: _as_array(value, asarray) for key, value in kwargs.items()})
        if isinstance(result, Array):
            return result._lb
        if isinstance(result, (tuple, list)) and all(isinstance(out, Array) for out in result):
            return type(result)(out._lb for out in result)
        raise TypeError(f"xp.jit({name}): the function must return an Array or a tuple or list of Arrays, "
                        f"got {type(result).__name__}")

    on_lazy.__qualname__ = name
    captured = capture(on_lazy)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        result = captured(*[_lazy(value) for value in args], **{key: _lazy(value) for key, value in kwargs.items()})
        if isinstance(result, (tuple, list)):
            return type(result)(asarray(out) for out in result)
        return asarray(result)

    call.captured = captured  # type: ignore[attr-defined]  # (traces, plans: for tests and debugging)
    return call


def _lazy(value: Any) -> Any:
    return value._lb if isinstance(value, Array) else value


def _as_array(value: Any, asarray: Callable[[Any], Array]) -> Any:
    return value if isinstance(value, Array) or not hasattr(value, "st") else asarray(value)
