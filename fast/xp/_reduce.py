"""Statistical, utility and searching functions: reductions over SUM and MAX.

`sum`/`prod` without a dtype widen small integers to the default integer dtype (int32; numpy uses
int64), bool to int32, unsigned to uint32, and keep floats. `min` is `-max(-x)` for floats (NaN
kept) and `~max(~x)` for integers (exact at the extremes). `prod` multiplies in a balanced tree
(pairs, then pairs of pairs), materializing every 6 levels so no kernel inlines more than 64
factors: float products differ from numpy's order by rounding only. `max`, `min`, `argmax`,
`argmin` over zero elements raise ValueError (numpy does too). `argmax`/`argmin` return the
first index of the extreme value (or of the first NaN), in the default index dtype (int32).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fast.xp import _dtypes as rules
from fast.xp._array import Array
from fast.xp._backend import LB
from fast.xp._base import broadcast_shapes, normalize_axes, normalize_axis
from fast.xp._creation import CreationMixin
from fast.xp._elementwise import ANY, NUMERIC

Axis = int | tuple[int, ...] | None


class ReduceMixin(CreationMixin):
    """sum prod max min mean var std cumulative_sum all any count_nonzero argmax argmin where."""

    def _finish(self, lb: LB, axes: tuple[int, ...], keepdims: bool) -> Array:
        """`lb` reduced over `axes` (kept with size 1); drop them unless keepdims."""
        if not keepdims:
            lb = lb.reshape(tuple(int(s) for i, s in enumerate(lb.shape) if i not in axes))
        return self._wrap(lb)

    def _r(self, lb: LB, op: Any, axes: tuple[int, ...]) -> LB:
        return lb.r(op, axes) if axes else lb

    def _accumulator(self, fname: str, arr: Array, dtype: Any) -> LB:
        if dtype is not None:
            return self._cast(arr._lb, self._dtype_name(fname, dtype))
        name = arr.dtype.name
        kind = rules.kind(name)
        if kind in "bi" and rules.BITS[name] < rules.BITS[rules.DEFAULT_INT] or kind == "b":
            name = rules.DEFAULT_INT
        elif kind == "u" and rules.BITS[name] < rules.BITS[rules.DEFAULT_INT]:
            name = "u" + rules.DEFAULT_INT
        return self._cast(arr._lb, name)

    def sum(self, x: Any, /, *, axis: Axis = None, dtype: Any = None, keepdims: bool = False) -> Array:
        arr = self._array("sum", x)
        axes = normalize_axes("sum", axis, arr.ndim)
        lb = self._accumulator("sum", arr, dtype)
        return self._finish(self._r(lb, self._backend.Reduce.SUM, axes), axes, keepdims)

    def prod(self, x: Any, /, *, axis: Axis = None, dtype: Any = None, keepdims: bool = False) -> Array:
        arr = self._array("prod", x)
        axes = normalize_axes("prod", axis, arr.ndim)
        layout = arr.sharding
        if layout is not None and layout.axis in axes:
            raise ValueError(f"prod: the product over sharded axis {layout.axis} is not supported (reductions "
                             "across devices are SUM and MAX only); gather first with x.to_device(device)")
        lb = self._accumulator("prod", arr, dtype)
        return self._finish(self._tree_product(lb, axes), axes, keepdims)

    def _tree_product(self, lb: LB, axes: tuple[int, ...]) -> LB:
        """Product over `axes` (kept with size 1): move them last, flatten, pad with ones to a power
        of two and multiply halves until one factor is left."""
        shape = tuple(int(s) for s in lb.shape)
        if not axes:
            return lb
        keep = [i for i in range(len(shape)) if i not in axes]
        outer = tuple(shape[i] for i in keep)
        n = int(np.prod([shape[i] for i in axes], dtype=np.int64))
        flat = lb.permute((*keep, *axes)).reshape((*outer, n))
        width = 1 << max(n - 1, 0).bit_length()
        if width != n:
            pad = ((0, 0),) * len(outer) + ((0, width - n),)
            inside = self._backend.const(True, (*outer, n), self._dt("bool"), lb.device).pad(pad)
            flat = self._where(inside, flat.pad(pad), self._backend.const(1, (*outer, width), lb.dtype, lb.device))
        level = 0
        while width > 1:
            halves = flat.reshape((*outer, 2, width // 2))
            whole = tuple((0, s) for s in outer)
            first = halves.shrink((*whole, (0, 1), (0, width // 2)))
            second = halves.shrink((*whole, (1, 2), (0, width // 2)))
            width //= 2
            flat = first.e(self._backend.Binary.MUL, second).reshape((*outer, width))
            level += 1
            if level % 6 == 0 and width > 1:
                flat = flat.contiguous()
        if width == 0:
            flat = self._backend.const(1, (*outer, 1), lb.dtype, lb.device)
        return flat.reshape(tuple(1 if i in axes else s for i, s in enumerate(shape)))

    def _extreme(self, fname: str, x: Any, axis: Axis, largest: bool) -> tuple[LB, tuple[int, ...]]:
        arr = self._array(fname, x)
        self._check_kind(fname, arr.dtype.name, NUMERIC)
        axes = normalize_axes(fname, axis, arr.ndim)
        if any(arr.shape[a] == 0 for a in axes):
            raise ValueError(f"{fname}: zero-size reduction over axes {axes} of shape {arr.shape}")
        lb, rmax = arr._lb, self._backend.Reduce.MAX
        if largest:
            return self._r(lb, rmax, axes), axes
        if rules.kind(lb.dtype.name) == "f":
            neg = self._backend.Unary.NEG
            return self._r(lb.e(neg), rmax, axes).e(neg), axes
        return self._invert(self._r(self._invert(lb), rmax, axes)), axes

    def max(self, x: Any, /, *, axis: Axis = None, keepdims: bool = False) -> Array:
        lb, axes = self._extreme("max", x, axis, True)
        return self._finish(lb, axes, keepdims)

    def min(self, x: Any, /, *, axis: Axis = None, keepdims: bool = False) -> Array:
        lb, axes = self._extreme("min", x, axis, False)
        return self._finish(lb, axes, keepdims)

    def _count(self, arr: Array, axes: tuple[int, ...]) -> int:
        return int(np.prod([arr.shape[a] for a in axes], dtype=np.int64))

    def mean(self, x: Any, /, *, axis: Axis = None, keepdims: bool = False) -> Array:
        arr = self._array("mean", x)
        self._check_kind("mean", arr.dtype.name, "f")
        axes = normalize_axes("mean", axis, arr.ndim)
        total = self._r(arr._lb, self._backend.Reduce.SUM, axes)
        return self._finish(self._div(total, total.const(float(self._count(arr, axes)))), axes, keepdims)

    def var(self, x: Any, /, *, axis: Axis = None, correction: float = 0.0, keepdims: bool = False) -> Array:
        """Mean of squared deviations from the mean, divided by (N - correction)."""
        arr = self._array("var", x)
        self._check_kind("var", arr.dtype.name, "f")
        axes = normalize_axes("var", axis, arr.ndim)
        n = float(self._count(arr, axes))
        rsum = self._backend.Reduce.SUM
        mean = self._r(arr._lb, rsum, axes)
        mean = self._expand(self._div(mean, mean.const(n)), arr.shape)
        centered = self._sub(arr._lb, mean)
        squares = self._r(self._mul(centered, centered), rsum, axes)
        return self._finish(self._div(squares, squares.const(n - correction)), axes, keepdims)

    def std(self, x: Any, /, *, axis: Axis = None, correction: float = 0.0, keepdims: bool = False) -> Array:
        v = self.var(x, axis=axis, correction=correction, keepdims=keepdims)
        return self._wrap(v._lb.e(self._backend.Unary.SQRT))

    def cumulative_sum(self, x: Any, /, *, axis: int | None = None, dtype: Any = None,
                       include_initial: bool = False) -> Array:
        """Running sums as one masked reduction: out[i] = sum(x[j] for j <= i) (O(n^2) work)."""
        arr = self._array("cumulative_sum", x)
        if axis is None:
            if arr.ndim > 1:
                raise ValueError(f"cumulative_sum: axis is required for {arr.ndim}-d input")
            axis = 0
        ax = normalize_axis("cumulative_sum", axis, arr.ndim)
        lb = self._accumulator("cumulative_sum", arr, dtype)
        moved = lb.permute((*(i for i in range(arr.ndim) if i != ax), ax))
        n = arr.shape[ax]
        m = n + 1 if include_initial else n
        lower = np.tri(m, n, -1 if include_initial else 0, dtype=bool)
        outer = tuple(int(s) for s in moved.shape[:-1])
        full = (*outer, m, n)
        mask = self._expand(self._upload(lower, "bool", arr.device)._lb, full)
        rows = moved.reshape((*outer, 1, n)).expand(full)
        summed = self._r(self._where(mask, rows, rows.const(0)), self._backend.Reduce.SUM, (len(full) - 1,))
        back = list(range(len(outer)))
        back.insert(ax, len(outer))
        return self._wrap(summed.reshape((*outer, m)).permute(tuple(back)))

    def any(self, x: Any, /, *, axis: Axis = None, keepdims: bool = False) -> Array:
        arr = self._array("any", x)
        axes = normalize_axes("any", axis, arr.ndim)
        truth = arr._lb if arr.dtype.name == "bool" else self._not(self._eq(arr._lb, arr._lb.const(0)))
        return self._finish(self._r(truth, self._backend.Reduce.MAX, axes), axes, keepdims)

    def all(self, x: Any, /, *, axis: Axis = None, keepdims: bool = False) -> Array:
        arr = self._array("all", x)
        axes = normalize_axes("all", axis, arr.ndim)
        false = self._eq(arr._lb, arr._lb.const(0))
        return self._finish(self._not(self._r(false, self._backend.Reduce.MAX, axes)), axes, keepdims)

    def count_nonzero(self, x: Any, /, *, axis: Axis = None, keepdims: bool = False) -> Array:
        arr = self._array("count_nonzero", x)
        axes = normalize_axes("count_nonzero", axis, arr.ndim)
        nonzero = self._cast(self._not(self._eq(arr._lb, arr._lb.const(0))), rules.DEFAULT_INDEX)
        return self._finish(self._r(nonzero, self._backend.Reduce.SUM, axes), axes, keepdims)

    # ------------------------------------------------------------ searching

    def _arg(self, fname: str, x: Any, axis: int | None, keepdims: bool, largest: bool) -> Array:
        arr = self._array(fname, x)
        if axis is None:
            flat = self._wrap(arr._lb.reshape((arr.size,)))
            out = self._arg(fname, flat, 0, False, largest)
            return self._wrap(out._lb.reshape((1,) * arr.ndim)) if keepdims else out
        ax = normalize_axis(fname, axis, arr.ndim)
        extreme, _ = self._extreme(fname, arr, ax, largest)
        lb = arr._lb
        hit = self._eq(lb, self._expand(extreme, arr.shape))
        if rules.kind(lb.dtype.name) == "f":
            hit = self._or(hit, self._isnan(lb))
        n = arr.shape[ax]
        iota = self._upload(np.arange(n), rules.DEFAULT_INDEX, arr.device)._lb
        iota = self._expand(iota.reshape(tuple(n if i == ax else 1 for i in range(arr.ndim))), arr.shape)
        candidates = self._invert(self._where(hit, iota, iota.const(n)))
        first = self._invert(self._r(candidates, self._backend.Reduce.MAX, (ax,)))
        return self._finish(first, (ax,), keepdims)

    def argmax(self, x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> Array:
        return self._arg("argmax", x, axis, keepdims, True)

    def argmin(self, x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> Array:
        return self._arg("argmin", x, axis, keepdims, False)

    def where(self, condition: Any, x1: Any, x2: Any, /) -> Array:
        cond = self._array("where", condition)
        (a, b), name = self._operands("where", x1, x2)
        self._same_device("where", [cond, *(v for v in (x1, x2) if isinstance(v, Array))])
        self._check_kind("where", name, ANY)
        shape = tuple(int(s) for s in a.shape)
        full = broadcast_shapes("where", cond.shape, shape)
        c = cond._lb if cond.dtype.name == "bool" else self._not(self._eq(cond._lb, cond._lb.const(0)))
        return self._wrap(self._where(self._expand(c, full), self._expand(a, full), self._expand(b, full)))
