"""Indexing: `__getitem__`, `__setitem__` and `take`.

Basic indexing (ints, slices with any step, `None`, `...`) is a view: one shrink, one stride, one
reshape. `__setitem__` with a basic key builds the inverse view of the value (pads, and a dilation
for steps other than 1) and selects it with WHERE against the old value (the array is rebound,
nothing is written in place); with a boolean array key (same shape as the leading dims) it is a
WHERE too. `x[bool_array]` has a data-dependent shape: the mask is realized at once and the
result is a `take` of the flattened array. `take` (and `x[int_array]`) is the backend's
`LazyBuffer.gather` node: in `fast` a gathered load inside a kernel, fused with what reads it.
Negative indices in [-n, -1] count from the end; any other out-of-range index raises IndexError
(naming take and the index) when the result is realized (the standard leaves them unspecified;
docs/semantics.md, "Gather").
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fast.xp import _dtypes as rules
from fast.xp._array import Array
from fast.xp._backend import LB
from fast.xp._base import normalize_axis
from fast.xp._manip import ManipulationMixin

Item = tuple[str, Any]  # ("int", i) | ("slice", range) | ("new", None)


class IndexMixin(ManipulationMixin):
    """`_getitem`, `_setitem` (used by Array) and `take`."""

    def _items(self, arr: Array, key: Any) -> list[Item]:
        """The key as one item per axis, in order, with `None` items for new axes."""
        key = key if isinstance(key, tuple) else (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError("__getitem__: an index can only have a single ellipsis")
        real = sum(k is not None and k is not Ellipsis for k in key)
        if real > arr.ndim:
            raise IndexError(f"__getitem__: too many indices ({real}) for an array of shape {arr.shape}")
        items: list[Item] = []
        axis = 0
        for k in key:
            if k is Ellipsis:
                for _ in range(arr.ndim - real):
                    items.append(("slice", range(arr.shape[axis])))
                    axis += 1
            elif k is None:
                items.append(("new", None))
            else:
                items.append(self._item(k, arr.shape[axis], axis))
                axis += 1
        items.extend(("slice", range(arr.shape[i])) for i in range(axis, arr.ndim))
        return items

    def _item(self, k: Any, size: int, axis: int) -> Item:
        if isinstance(k, slice):
            return ("slice", range(*k.indices(size)))
        if isinstance(k, bool) or isinstance(k, Array) and k.dtype.name not in rules.SIGNED + rules.UNSIGNED:
            raise IndexError(f"__getitem__: {k!r} is not a valid index for axis {axis}")
        if isinstance(k, Array) and k.ndim:
            raise IndexError("__getitem__: integer arrays index alone (x[idx]); use take for other axes")
        try:
            i = int(k.__index__())
        except (AttributeError, TypeError):
            raise IndexError(f"__getitem__: {k!r} is not a valid index for axis {axis}") from None
        if not -size <= i < size:
            raise IndexError(f"__getitem__: index {i} is out of bounds for axis {axis} with size {size}")
        return ("int", i % size)

    def _basic(self, arr: Array, items: list[Item]) -> LB:
        real = [it for it in items if it[0] != "new"]
        bounds, steps = [], []
        for kind, value in real:
            if kind == "int":
                bounds.append((value, value + 1))
                steps.append(1)
            elif len(value) == 0:
                bounds.append((0, 0))
                steps.append(1)
            else:
                lo, hi = min(value[0], value[-1]), max(value[0], value[-1]) + 1
                bounds.append((lo, hi))
                steps.append(value.step)
        lb = arr._lb.shrink(tuple(bounds)).stride(tuple(steps))
        shape = tuple(1 if kind == "new" else len(value) for kind, value in items if kind != "int")
        return lb.reshape(shape)

    def _getitem(self, arr: Array, key: Any) -> Array:
        if isinstance(key, Array) and key.ndim:
            self._unsharded("__getitem__", arr, key)
            if key.dtype.name == "bool":
                return self._masked(arr, key)
            if not arr.ndim:
                raise IndexError("__getitem__: a 0-d array cannot be indexed by an array")
            return self.take(arr, key, axis=0)
        return self._wrap(self._basic(arr, self._items(arr, key)))

    def _masked(self, arr: Array, mask: Array) -> Array:
        """x[mask]: realize the mask, then gather the selected rows of x flattened over the mask's dims."""
        if mask.shape != arr.shape[:mask.ndim]:
            raise IndexError(f"__getitem__: boolean index of shape {mask.shape} does not match {arr.shape}")
        rest = arr.shape[mask.ndim:]
        flat = self._wrap(arr._lb.reshape((int(np.prod(mask.shape, dtype=np.int64)), *rest)))
        picked = np.flatnonzero(np.asarray(mask))
        return self.take(flat, self._upload(picked, rules.DEFAULT_INDEX, arr.device), axis=0)

    def take(self, x: Any, indices: Any, /, *, axis: int | None = None) -> Array:
        arr, idx = self._array("take", x), self._array("take", indices)
        self._unsharded("take", arr, idx)
        if idx.dtype.name not in rules.SIGNED + rules.UNSIGNED:
            raise TypeError(f"take: indices must have an integer dtype, got {idx.dtype.name}")
        if axis is None:
            if arr.ndim != 1:
                raise ValueError(f"take: axis is required for a {arr.ndim}-d array")
            axis = 0
        ax = normalize_axis("take", axis, arr.ndim)
        n = arr.shape[ax]
        if n == 0 and idx.size:
            raise IndexError(f"take: cannot take from an empty axis {ax} of shape {arr.shape}")
        if idx.device != arr.device:
            raise ValueError(f"take: x on {arr.device} and indices on {idx.device}")
        return self._wrap(arr._lb.gather(idx._lb, ax))

    # ------------------------------------------------------------ __setitem__

    def _value(self, arr: Array, value: Any, shape: tuple[int, ...]) -> LB:
        name = arr.dtype.name
        if isinstance(value, Array):
            self._same_device("__setitem__", [arr, self._array("__setitem__", value)])
            return self._expand(self._cast(self._array("__setitem__", value)._lb, name), shape)
        return self._backend.const(self._scalar_value("__setitem__", value, name), shape, arr.dtype, arr.device)

    def _setitem(self, arr: Array, key: Any, value: Any) -> Array:
        if isinstance(key, Array) and key.dtype.name == "bool":
            self._same_device("__setitem__", [arr, key])
            if key.shape != arr.shape[:key.ndim]:
                raise IndexError(f"__setitem__: boolean index of shape {key.shape} does not match {arr.shape}")
            mask = self._expand(key._lb.reshape((*key.shape, *(1,) * (arr.ndim - key.ndim))), arr.shape)
            return self._wrap(self._where(mask, self._value(arr, value, arr.shape), arr._lb))
        items = [it for it in self._items(arr, key) if it[0] != "new"]
        region = tuple(len(v) for kind, v in items if kind == "slice")
        if 0 in region:
            return arr
        v = self._value(arr, value, region)
        full = tuple(1 if kind == "int" else len(val) for kind, val in items)
        v = v.reshape(full)
        mask = self._backend.const(True, full, self._dt("bool"), arr.device)
        for axis, (kind, val) in enumerate(items):
            v, mask = self._unview(v, axis, kind, val, arr.shape[axis]), self._unview(mask, axis, kind, val,
                                                                                      arr.shape[axis])
        return self._wrap(self._where(mask, v, arr._lb))

    def _unview(self, lb: LB, axis: int, kind: str, value: Any, size: int) -> LB:
        """Put `lb`'s axis back at the positions the index item selected (zeros elsewhere)."""
        shape = tuple(int(s) for s in lb.shape)
        if kind == "int":
            span, lo = 1, value
        else:
            step = value.step
            if step < 0:
                lb = lb.stride(tuple(-1 if i == axis else 1 for i in range(len(shape))))
                step, lo = -step, value[-1]
            else:
                lo = value[0]
            m = len(value)
            if step > 1:
                lb = lb.reshape((*shape[:axis], m, 1, *shape[axis + 1:]))
                lb = lb.pad(tuple((0, step - 1) if i == axis + 1 else (0, 0) for i in range(len(shape) + 1)))
                lb = lb.reshape((*shape[:axis], m * step, *shape[axis + 1:]))
                lb = lb.shrink(tuple((0, (m - 1) * step + 1) if i == axis else (0, s) for i, s in enumerate(shape)))
            span = (m - 1) * step + 1
        return lb.pad(tuple((lo, size - lo - span) if i == axis else (0, 0) for i in range(len(shape))))
