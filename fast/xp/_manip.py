"""Manipulation functions: all are views (movement ops) except `concat`/`stack`/`roll`, which pad each
piece into place and select it with WHERE (exact for every dtype, signed zeros and NaNs included).

Invariant: no function here computes a value; shapes are checked up front (ValueError naming the
function and the shapes).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fast.xp._array import Array
from fast.xp._backend import LB
from fast.xp._base import broadcast_shapes, normalize_axes, normalize_axis
from fast.xp._reduce import ReduceMixin


class ManipulationMixin(ReduceMixin):
    """reshape permute_dims expand_dims squeeze broadcast_to broadcast_arrays concat stack unstack
    flip roll tile repeat moveaxis meshgrid matrix_transpose."""

    def reshape(self, x: Any, /, shape: Sequence[int], *, copy: bool | None = None) -> Array:
        arr = self._array("reshape", x)
        dims = [int(d) for d in shape]
        if dims.count(-1) > 1 or any(d < -1 for d in dims):
            raise ValueError(f"reshape: bad shape {tuple(shape)}")
        if -1 in dims:
            known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
            if known == 0 or arr.size % known:
                raise ValueError(f"reshape: cannot infer -1 in {tuple(shape)} for size {arr.size}")
            dims[dims.index(-1)] = arr.size // known
        if int(np.prod(dims, dtype=np.int64)) != arr.size:
            raise ValueError(f"reshape: cannot reshape shape {arr.shape} into {tuple(shape)}")
        return self._wrap(arr._lb.reshape(tuple(dims)))

    def permute_dims(self, x: Any, /, axes: Sequence[int]) -> Array:
        arr = self._array("permute_dims", x)
        order = tuple(normalize_axis("permute_dims", a, arr.ndim) for a in axes)
        if sorted(order) != list(range(arr.ndim)):
            raise ValueError(f"permute_dims: {tuple(axes)} is not a permutation of {arr.ndim} axes")
        return self._wrap(arr._lb.permute(order))

    def matrix_transpose(self, x: Any, /) -> Array:
        arr = self._array("matrix_transpose", x)
        if arr.ndim < 2:
            raise ValueError(f"matrix_transpose: needs at least 2 dimensions, got shape {arr.shape}")
        return self.permute_dims(arr, (*range(arr.ndim - 2), arr.ndim - 1, arr.ndim - 2))

    def moveaxis(self, x: Any, source: int | Sequence[int], destination: int | Sequence[int], /) -> Array:
        arr = self._array("moveaxis", x)
        src = normalize_axes("moveaxis", tuple(source) if not isinstance(source, int) else source, arr.ndim)
        dst = normalize_axes("moveaxis", tuple(destination) if not isinstance(destination, int) else destination,
                             arr.ndim)
        if len(src) != len(dst):
            raise ValueError(f"moveaxis: source {source} and destination {destination} differ in length")
        order = [i for i in range(arr.ndim) if i not in src]
        for d, s in sorted(zip(dst, src, strict=True)):
            order.insert(d, s)
        return self.permute_dims(arr, order)

    def expand_dims(self, x: Any, /, *, axis: int = 0) -> Array:
        arr = self._array("expand_dims", x)
        ax = normalize_axis("expand_dims", axis, arr.ndim + 1)
        return self._wrap(arr._lb.reshape((*arr.shape[:ax], 1, *arr.shape[ax:])))

    def squeeze(self, x: Any, /, axis: int | tuple[int, ...]) -> Array:
        arr = self._array("squeeze", x)
        axes = normalize_axes("squeeze", axis, arr.ndim)
        if any(arr.shape[a] != 1 for a in axes):
            raise ValueError(f"squeeze: axes {axis} of shape {arr.shape} do not all have size 1")
        return self._wrap(arr._lb.reshape(tuple(s for i, s in enumerate(arr.shape) if i not in axes)))

    def broadcast_to(self, x: Any, /, shape: Sequence[int]) -> Array:
        arr = self._array("broadcast_to", x)
        target = tuple(int(s) for s in shape)
        if broadcast_shapes("broadcast_to", arr.shape, target) != target:
            raise ValueError(f"broadcast_to: shape {arr.shape} does not broadcast to {target}")
        return self._wrap(self._expand(arr._lb, target))

    def broadcast_arrays(self, *arrays: Any) -> list[Array]:
        arrs = [self._array("broadcast_arrays", a) for a in arrays]
        shape = broadcast_shapes("broadcast_arrays", *[a.shape for a in arrs])
        return [self._wrap(self._expand(a._lb, shape)) for a in arrs]

    def _place(self, pieces: list[LB], axis: int, total: int) -> LB:
        """Pieces (same shape but along `axis`) joined along `axis`: each padded into place, chosen by WHERE."""
        out: LB | None = None
        start = 0
        for piece in pieces:
            size = int(piece.shape[axis])
            pad = tuple((start, total - start - size) if i == axis else (0, 0) for i in range(len(piece.shape)))
            start += size
            if size == 0:
                continue
            placed = piece.pad(pad)
            if out is None:
                out = placed
                continue
            inside = self._backend.const(True, tuple(int(s) for s in piece.shape), self._dt("bool"), piece.device)
            out = self._where(inside.pad(pad), placed, out)
        if out is None:
            raise ValueError("concat: internal error, no piece")  # unreachable: callers pass a non-empty axis
        return out

    def concat(self, arrays: Sequence[Any], /, *, axis: int | None = 0) -> Array:
        arrs = [self._array("concat", a) for a in arrays]
        if not arrs:
            raise ValueError("concat: needs at least one array")
        if axis is None:
            arrs = [self._wrap(a._lb.reshape((a.size,))) for a in arrs]
            axis = 0
        ndim = arrs[0].ndim
        if any(a.ndim != ndim for a in arrs):
            raise ValueError(f"concat: arrays differ in rank: {[a.shape for a in arrs]}")
        ax = normalize_axis("concat", axis, ndim)
        rest = {a.shape[:ax] + a.shape[ax + 1:] for a in arrs}
        if len(rest) > 1:
            raise ValueError(f"concat: shapes {[a.shape for a in arrs]} differ outside axis {axis}")
        self._same_device("concat", arrs)
        layout = arrs[0].sharding
        if layout is not None and layout.axis == ax and len(arrs) > 1:
            raise ValueError(f"concat: joining along sharded axis {ax} is not supported; gather first with "
                             "x.to_device(device)")
        name = self.result_type(*arrs).name
        lbs = [self._cast(a._lb, name) for a in arrs]
        total = sum(a.shape[ax] for a in arrs)
        if total == 0:
            return self._wrap(lbs[0].reshape(tuple(0 if i == ax else s for i, s in enumerate(arrs[0].shape))))
        return self._wrap(self._place(lbs, ax, total))

    def stack(self, arrays: Sequence[Any], /, *, axis: int = 0) -> Array:
        arrs = [self._array("stack", a) for a in arrays]
        if not arrs or len({a.shape for a in arrs}) != 1:
            raise ValueError(f"stack: needs arrays of one shape, got {[a.shape for a in arrs]}")
        ax = normalize_axis("stack", axis, arrs[0].ndim + 1)
        return self.concat([self.expand_dims(a, axis=ax) for a in arrs], axis=ax)

    def unstack(self, x: Any, /, *, axis: int = 0) -> tuple[Array, ...]:
        arr = self._array("unstack", x)
        ax = normalize_axis("unstack", axis, arr.ndim)
        keep = tuple(s for i, s in enumerate(arr.shape) if i != ax)
        pieces = []
        for k in range(arr.shape[ax]):
            bounds = tuple((k, k + 1) if i == ax else (0, s) for i, s in enumerate(arr.shape))
            pieces.append(self._wrap(arr._lb.shrink(bounds).reshape(keep)))
        return tuple(pieces)

    def flip(self, x: Any, /, *, axis: int | tuple[int, ...] | None = None) -> Array:
        arr = self._array("flip", x)
        axes = normalize_axes("flip", axis, arr.ndim)
        return self._wrap(arr._lb.stride(tuple(-1 if i in axes else 1 for i in range(arr.ndim))))

    def roll(self, x: Any, /, shift: int | tuple[int, ...], *, axis: int | tuple[int, ...] | None = None) -> Array:
        arr = self._array("roll", x)
        if axis is None:
            flat = self._wrap(arr._lb.reshape((arr.size,)))
            return self.reshape(self.roll(flat, shift, axis=0), arr.shape)
        shifts = (shift,) if isinstance(shift, int) else tuple(shift)
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        if len(shifts) != len(axes):
            raise ValueError(f"roll: shift {shift} and axis {axis} differ in length")
        lb = arr._lb
        for s, a in zip(shifts, axes, strict=True):
            ax = normalize_axis("roll", a, arr.ndim)
            n = arr.shape[ax]
            k = s % n if n else 0
            if k == 0:
                continue
            cut = [tuple((lo, hi) if i == ax else (0, d) for i, d in enumerate(arr.shape))
                   for lo, hi in ((n - k, n), (0, n - k))]
            lb = self._place([lb.shrink(cut[0]), lb.shrink(cut[1])], ax, n)
        return self._wrap(lb)

    def tile(self, x: Any, repetitions: Sequence[int], /) -> Array:
        arr = self._array("tile", x)
        reps = tuple(int(r) for r in repetitions)
        if any(r < 0 for r in reps):
            raise ValueError(f"tile: repetitions must be non-negative, got {reps}")
        ndim = max(arr.ndim, len(reps))
        reps = (1,) * (ndim - len(reps)) + reps
        shape = (1,) * (ndim - arr.ndim) + arr.shape
        lb = arr._lb.reshape(tuple(v for s in shape for v in (1, s)))
        lb = lb.expand(tuple(v for r, s in zip(reps, shape, strict=True) for v in (r, s)))
        return self._wrap(lb.reshape(tuple(r * s for r, s in zip(reps, shape, strict=True))))

    def repeat(self, x: Any, repeats: int | Any, /, *, axis: int | None = None) -> Array:
        """Each element `repeats` times along `axis` (a view). An array of repeats makes a data-dependent
        shape: it is realized and the result computed eagerly with numpy."""
        arr = self._array("repeat", x)
        if isinstance(repeats, Array):
            out = np.repeat(np.asarray(arr), np.asarray(repeats), axis=axis)
            return self._upload(out, arr.dtype.name, arr.device)
        if axis is None:
            arr, axis = self._wrap(arr._lb.reshape((arr.size,))), 0
        ax = normalize_axis("repeat", axis, arr.ndim)
        if repeats < 0:
            raise ValueError(f"repeat: repeats must be non-negative, got {repeats}")
        s = arr.shape
        lb = arr._lb.reshape((*s[:ax + 1], 1, *s[ax + 1:])).expand((*s[:ax + 1], repeats, *s[ax + 1:]))
        return self._wrap(lb.reshape((*s[:ax], s[ax] * repeats, *s[ax + 1:])))

    def meshgrid(self, *arrays: Any, indexing: str = "xy") -> list[Array]:
        if indexing not in ("xy", "ij"):
            raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
        arrs = [self._array("meshgrid", a) for a in arrays]
        sizes = [a.size for a in arrs]
        if indexing == "xy" and len(sizes) > 1:
            sizes[0], sizes[1] = sizes[1], sizes[0]
        out = []
        for i, a in enumerate(arrs):
            at = 1 - i if indexing == "xy" and i < 2 and len(arrs) > 1 else i
            view = a._lb.reshape(tuple(a.size if j == at else 1 for j in range(len(arrs))))
            out.append(self._wrap(view.expand(tuple(sizes))))
        return out
