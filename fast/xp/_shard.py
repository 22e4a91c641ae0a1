"""Sharding (an extension of the standard): one array held on several devices.

`shard(x, devices, axis)` splits `x` along `axis` over `devices` (axis None: a whole copy on each)
with the backend's `MultiLazyBuffer.from_sharded`; the result is an ordinary Array whose `device`
is the tuple of names. Every namespace function takes such arrays: the element-wise ones, the
reductions (over the sharded axis: the MultiLazyBuffer all-reduce), views that keep the sharded
axis and `matmul` work shard by shard; what a sharded layout cannot express raises.

Invariant (the guard): a namespace function given a sharded array returns the right value or raises
an exception whose message starts with its own name. The front end's own checks already name it;
errors raised below it (in the backend: a MultiLazyBuffer names its own op, e.g. `pad`) are
re-raised, same type, with the function's name and "unsupported for this sharded array" in front,
and an AttributeError anywhere becomes such a ValueError, so no caller sees an error from deep inside.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from fast.xp._array import Array
from fast.xp._base import normalize_axis
from fast.xp._sorting import SortingMixin

UNSUPPORTED = "unsupported for this sharded array"
FRONT_END = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _raised_below(err: BaseException) -> bool:
    """Whether `err` was raised outside the front end (in the backend's code)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(FRONT_END)


def _any_sharded(values: Any) -> bool:
    """Whether an argument (or an element of a list/tuple argument) is a sharded array."""
    for value in values:
        if isinstance(value, (list, tuple)) and _any_sharded(value):
            return True
        if isinstance(value, Array) and isinstance(value.device, tuple):
            return True
    return False


def guarded(fname: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` with the guard of the module docstring (no cost unless it raises)."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (TypeError, ValueError, IndexError, AttributeError) as err:
            attribute, text = isinstance(err, AttributeError), str(err)
            inner = UNSUPPORTED in text and not text.startswith(f"{fname}:")  # from a namespace function it calls
            if not (attribute or inner or _raised_below(err)) or not _any_sharded((*args, *kwargs.values())):
                raise
            kind = ValueError if attribute else type(err)
            message = f"{fname}: {text}" if inner else \
                f"{fname}: {UNSUPPORTED} (gather it with x.to_device(device) first): {text}"
            try:
                wrapped = kind(message)
            except TypeError:  # an exception class with another constructor: keep the original
                raise err from None
            raise wrapped from err

    return call


class ShardMixin(SortingMixin):
    """shard, and `Array.to_device` (which gathers or reshards)."""

    def shard(self, x: Any, /, devices: Any, axis: int | None = None) -> Array:
        """Extension: `x` split along `axis` over `devices` (a tuple of device names; axis None: the whole
        array on each). Shard i is the range [s*i, min(n, s*(i+1))) with s = ceil(n / len(devices));
        every shard must be non-empty (ValueError). A sharded `x` is gathered onto the first device
        first, unless it is already laid out that way."""
        arr = self._array("shard", x)
        names = self._devices("shard", devices)
        ax = None if axis is None else normalize_axis("shard", axis, arr.ndim)
        if not arr.ndim and ax is not None:
            raise IndexError("shard: a 0-d array has no axis to shard; use axis=None to replicate it")
        if arr.sharding == (names, ax):
            return self._wrap(arr._lb)  # a new array of the same value (in-place ops on it leave `x` alone)
        if ax is not None:
            size, count = arr.shape[ax], len(names)
            step = -(-size // count)
            if step * (count - 1) >= size:
                raise ValueError(f"shard: axis {ax} of size {size} cannot be split over {count} devices "
                                 f"(shards of {step} leave the last ones empty)")
        lb = arr._lb if arr.sharding is None else arr._lb.copy_to_device(names[0])
        return self._wrap(self._backend.shard(lb, names, ax))

    def _to_device(self, arr: Array, device: Any) -> Array:
        """`Array.to_device`: a name copies (gathers a sharded array: its shards joined on that device);
        a tuple of names shards onto them keeping the sharded axis (None: replicated)."""
        if isinstance(device, (tuple, list)):
            names = self._devices("to_device", device)
            layout = arr.sharding
            return self.shard(arr, names, axis=None if layout is None else layout.axis)
        return self._wrap(arr._lb.copy_to_device(str(device)))
