"""Sorting, set functions, `nonzero` and `searchsorted`.

`sort` and `argsort` are lazy CUSTOM nodes: numpy's stable sort runs on the host when the graph is
realized (a documented eager fallback inside the graph; NaNs sort last ascending, first
descending). Set functions and `nonzero` have data-dependent output shapes, which a lazy graph
cannot express: they realize their input at once and upload numpy's result (eager, documented).
`searchsorted` stays lazy: the insertion point is a count of smaller elements, one reduction.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from fast.xp import _dtypes as rules
from fast.xp._array import Array
from fast.xp._backend import Device
from fast.xp._base import normalize_axis
from fast.xp._linalg import LinalgMixin

UniqueAll = namedtuple("UniqueAll", ["values", "indices", "inverse_indices", "counts"])
UniqueCounts = namedtuple("UniqueCounts", ["values", "counts"])
UniqueInverse = namedtuple("UniqueInverse", ["values", "inverse_indices"])


def _argsort(values: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort; descending keeps equal elements in their original order."""
    if not descending:
        return np.argsort(values, axis=axis, kind="stable")
    flipped = np.argsort(np.flip(values, axis=axis), axis=axis, kind="stable")
    result: np.ndarray = values.shape[axis] - 1 - np.flip(flipped, axis=axis)
    return result


class SortingMixin(LinalgMixin):
    """sort argsort unique_* nonzero searchsorted."""

    def sort(self, x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Array:
        arr = self._array("sort", x)
        self._unsharded("sort", arr)
        ax = normalize_axis("sort", axis, arr.ndim)

        def run(out: np.ndarray, values: np.ndarray) -> None:
            out[...] = np.take_along_axis(values, _argsort(values, ax, descending), axis=ax)

        return self._wrap(self._backend.custom(run, arr.shape, arr.dtype, arr.device, (arr._lb,)))

    def argsort(self, x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Array:
        arr = self._array("argsort", x)
        self._unsharded("argsort", arr)
        ax = normalize_axis("argsort", axis, arr.ndim)

        def run(out: np.ndarray, values: np.ndarray) -> None:
            out[...] = _argsort(values, ax, descending)

        return self._wrap(self._backend.custom(run, arr.shape, self._dt(rules.DEFAULT_INDEX), arr.device, (arr._lb,)))

    def _host(self, fname: str, x: Any) -> tuple[Array, np.ndarray]:
        arr = self._array(fname, x)
        return arr, np.asarray(arr)

    def _index_array(self, values: np.ndarray, device: Device) -> Array:
        return self._upload(values.astype(np.int64), rules.DEFAULT_INDEX, device)

    def unique_values(self, x: Any, /) -> Array:
        """Realizes x (data-dependent shape); NaNs are all distinct, as the standard asks."""
        arr, host = self._host("unique_values", x)
        return self._upload(self._unique(host)[0], arr.dtype.name, arr.device)

    def _unique(self, host: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        flat = host.reshape(-1)
        values, index, inverse, counts = np.unique(flat, return_index=True, return_inverse=True,
                                                   return_counts=True, equal_nan=False)
        return values, index, inverse.reshape(host.shape), counts

    def unique_counts(self, x: Any, /) -> UniqueCounts:
        arr, host = self._host("unique_counts", x)
        values, _, _, counts = self._unique(host)
        return UniqueCounts(self._upload(values, arr.dtype.name, arr.device), self._index_array(counts, arr.device))

    def unique_inverse(self, x: Any, /) -> UniqueInverse:
        arr, host = self._host("unique_inverse", x)
        values, _, inverse, _ = self._unique(host)
        return UniqueInverse(self._upload(values, arr.dtype.name, arr.device), self._index_array(inverse, arr.device))

    def unique_all(self, x: Any, /) -> UniqueAll:
        arr, host = self._host("unique_all", x)
        values, index, inverse, counts = self._unique(host)
        return UniqueAll(self._upload(values, arr.dtype.name, arr.device), self._index_array(index, arr.device),
                         self._index_array(inverse, arr.device), self._index_array(counts, arr.device))

    def nonzero(self, x: Any, /) -> tuple[Array, ...]:
        """Realizes x (data-dependent shape). A 0-d array is an error, as in numpy 2."""
        arr, host = self._host("nonzero", x)
        if not arr.ndim:
            raise ValueError("nonzero: not defined for 0-d arrays")
        return tuple(self._index_array(i, arr.device) for i in np.nonzero(host))

    def searchsorted(self, x1: Any, x2: Any, /, *, side: str = "left", sorter: Any = None) -> Array:
        """Insertion points of x2 in the sorted 1-d x1: a count of the elements before each (lazy,
        O(len(x1) * x2.size) work)."""
        if side not in ("left", "right"):
            raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        base, values = self._array("searchsorted", x1), self._array("searchsorted", x2)
        if base.ndim != 1:
            raise ValueError(f"searchsorted: x1 must be 1-d, got shape {base.shape}")
        if sorter is not None:
            self._unsharded("searchsorted", base, sorter)
            base = self.take(base, sorter)
        (a, v), _ = self._operands("searchsorted", base, self.reshape(values, (*values.shape, 1)))
        before = self._lt(a, v) if side == "left" else self._not(self._lt(v, a))
        counts = self._cast(before, rules.DEFAULT_INDEX).r(self._backend.Reduce.SUM, (len(a.shape) - 1,))
        return self._wrap(counts.reshape(values.shape))
