"""Creation functions, dtype functions and `__array_namespace_info__`.

Laziness: `zeros`, `ones`, `full`, `empty` (which is `zeros`: contents are defined) and the
`*_like` forms are unrealized broadcast constants (they fuse into whatever uses them); `asarray`
of host data, `arange`, `linspace`, `eye`, `tril`/`triu` masks are computed with numpy on the host
and uploaded (`from_numpy`, realized at once). Python data infers the namespace's default dtypes
(bool, int32 (int64 when a value does not fit), float32); numpy arrays keep their dtype.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fast.xp import _dtypes as rules
from fast.xp._array import Array
from fast.xp._backend import DT, DTYPE_NAMES, Device
from fast.xp._rounding import RoundingMixin

Shape = int | Sequence[int]


def shape_tuple(fname: str, shape: Shape) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0 for d in dims):
        raise ValueError(f"{fname}: shape must be non-negative ints, got {shape!r}")
    return tuple(int(d) for d in dims)


class Info:
    """The object `__array_namespace_info__()` returns (the standard's inspection API)."""

    def __init__(self, ns: Any) -> None:
        self._ns = ns

    def capabilities(self) -> dict[str, Any]:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 32}

    def default_device(self) -> str:
        return str(self._ns._backend.default_device)

    def devices(self) -> list[str]:
        """The compute device kinds the backend can use here (for `fast`: those its `Device` registry
        opens). Any numbered name of a listed kind (`CLANG:1`, ...) works too, and so does a tuple
        of names (a replicated array; `xp.shard` splits one)."""
        return list(self._ns._backend.usable_devices)

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        dt = self._ns._dt
        return {"real floating": dt(rules.DEFAULT_FLOAT), "integral": dt(rules.DEFAULT_INT),
                "indexing": dt(rules.DEFAULT_INDEX)}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, Any]:
        out = {name: self._ns._dt(name) for name in DTYPE_NAMES}
        if kind is None:
            return out
        return {name: dt for name, dt in out.items() if self._ns.isdtype(dt, kind)}


class CreationMixin(RoundingMixin):
    """asarray, zeros/ones/full/empty(_like), arange, linspace, eye, tril/triu and dtype functions."""

    def __array_namespace_info__(self) -> Info:
        return Info(self)

    def _device(self, device: Any, fname: str) -> Device:
        """None: the default device; a tuple or list of names: those devices (a replicated array)."""
        if device is None:
            return self._backend.default_device
        return self._devices(fname, device) if isinstance(device, (tuple, list)) else str(device)

    def _infer(self, data: np.ndarray, python: bool) -> str:
        kind = data.dtype.kind
        if kind not in "biuf" or data.dtype.name not in DTYPE_NAMES:
            raise TypeError(f"asarray: unsupported data type {data.dtype} (kinds bool, int, uint, float only)")
        if not python:
            return data.dtype.name
        if kind == "b":
            return "bool"
        if kind == "f":
            return rules.DEFAULT_FLOAT
        low, high = rules.int_range(rules.DEFAULT_INT)
        return rules.DEFAULT_INT if data.size == 0 or (low <= data.min() and data.max() <= high) else "int64"

    def _upload(self, data: np.ndarray, name: str, device: Device) -> Array:
        """Host values as a realized buffer of dtype `name` (bfloat16 through float32); a tuple of
        devices gets a copy on each (replicated)."""
        via = "float32" if name == "bfloat16" else name
        lb = self._backend.from_numpy(np.array(data, dtype=np.dtype(via), order="C"), device)
        return self._wrap(self._cast(lb, name))

    def asarray(self, obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Array:
        """An array from an array of this namespace (no copy needed: arrays have value semantics),
        a Python scalar or nested sequence, a numpy array or anything with `__array__`/`__dlpack__`,
        or (extension) a LazyBuffer or MultiLazyBuffer of this namespace's backend, wrapped lazily
        (DISK: copied to `device`). `device` may be a tuple of names: the array is replicated on them
        (an array already on exactly those devices, sharded or not, is kept as it is)."""
        want = None if dtype is None else self._dtype_name("asarray", dtype)
        if isinstance(obj, Array) and obj._ns is self:
            place = None if device is None else self._device(device, "asarray")
            if copy is False and ((want and want != obj.dtype.name) or (place is not None and place != obj.device)):
                raise ValueError("asarray: copy=False, but the dtype or device change needs a copy")
            out = obj if place is None else obj.to_device(place)
            return out if want is None else self._wrap(self._cast(out._lb, want))
        if isinstance(obj, self._backend.LazyBuffer) or self._backend.is_multi(obj):  # extension: wrap it
            disk = isinstance(obj.device, str) and obj.device.startswith("DISK")
            out = self._wrap(obj.copy_to_device(self._device(device, "asarray")) if disk else obj)
            out = out if device is None or disk else out.to_device(device)
            return out if want is None else self._wrap(self._cast(out._lb, want))
        if copy is False:
            raise ValueError(f"asarray: copy=False is impossible for {type(obj).__name__} (uploads always copy)")
        python = not (isinstance(obj, (np.ndarray, np.generic, Array)) or hasattr(obj, "__array__"))
        data = np.asarray(obj)
        name = want or self._infer(data, python)
        return self._upload(data, name, self._device(device, "asarray"))

    def from_dlpack(self, x: Any, /, *, device: Any = None, copy: bool | None = None) -> Array:
        return self.asarray(np.from_dlpack(x), device=device, copy=copy)

    def _fill_dtype(self, fname: str, value: Any, dtype: Any) -> str:
        if dtype is not None:
            return self._dtype_name(fname, dtype)
        if isinstance(value, bool):
            return "bool"
        if isinstance(value, int):
            return rules.DEFAULT_INT
        if isinstance(value, float):
            return rules.DEFAULT_FLOAT
        raise TypeError(f"{fname}: fill_value must be a bool, int or float, got {type(value).__name__}")

    def full(self, shape: Shape, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Array:
        name = self._fill_dtype("full", fill_value, dtype)
        dims = shape_tuple("full", shape)
        value = self._scalar_value("full", fill_value, name) if rules.kind(name) != "f" else float(fill_value)
        return self._wrap(self._backend.const(value, dims, self._dt(name), self._device(device, "full")))

    def zeros(self, shape: Shape, *, dtype: Any = None, device: Any = None) -> Array:
        return self.full(shape, 0, dtype=dtype or self._dt(rules.DEFAULT_FLOAT), device=device)

    def ones(self, shape: Shape, *, dtype: Any = None, device: Any = None) -> Array:
        return self.full(shape, 1, dtype=dtype or self._dt(rules.DEFAULT_FLOAT), device=device)

    def empty(self, shape: Shape, *, dtype: Any = None, device: Any = None) -> Array:
        """Zeros (the contents of `empty` are unspecified; ours are defined)."""
        return self.zeros(shape, dtype=dtype, device=device)

    def _like(self, fname: str, x: Any, value: Any, dtype: Any, device: Any) -> Array:
        """A constant shaped like `x`; on a sharded `x` (and no other device asked) laid out like it."""
        arr = self._array(fname, x)
        if device is None and self._is_sharded(arr):
            name = self._fill_dtype(fname, value, dtype or arr.dtype)
            fill = self._scalar_value(fname, value, name) if rules.kind(name) != "f" else float(value)
            return self._wrap(self._cast(arr._lb, name).const(fill))
        return self.full(arr.shape, value, dtype=dtype or arr.dtype, device=device or arr.device)

    def full_like(self, x: Any, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Array:
        return self._like("full_like", x, fill_value, dtype, device)

    def zeros_like(self, x: Any, /, *, dtype: Any = None, device: Any = None) -> Array:
        return self._like("zeros_like", x, 0, dtype, device)

    def ones_like(self, x: Any, /, *, dtype: Any = None, device: Any = None) -> Array:
        return self._like("ones_like", x, 1, dtype, device)

    def empty_like(self, x: Any, /, *, dtype: Any = None, device: Any = None) -> Array:
        return self._like("empty_like", x, 0, dtype, device)

    def arange(self, start: int | float, /, stop: int | float | None = None, step: int | float = 1, *,
               dtype: Any = None, device: Any = None) -> Array:
        if step == 0:
            raise ValueError("arange: step must not be 0")
        start, stop = (0, start) if stop is None else (start, stop)
        python_ints = all(isinstance(v, int) for v in (start, stop, step))
        name = self._dtype_name("arange", dtype) if dtype is not None else \
            (rules.DEFAULT_INT if python_ints else rules.DEFAULT_FLOAT)
        via = "float32" if name == "bfloat16" else name
        return self._upload(np.arange(start, stop, step, dtype=np.dtype(via)), name, self._device(device, "arange"))

    def linspace(self, start: float, stop: float, /, num: int, *, dtype: Any = None, device: Any = None,
                 endpoint: bool = True) -> Array:
        name = self._dtype_name("linspace", dtype) if dtype is not None else rules.DEFAULT_FLOAT
        self._check_kind("linspace", name, "f")
        return self._upload(np.linspace(start, stop, num, endpoint=endpoint), name, self._device(device, "linspace"))

    def eye(self, n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None,
            device: Any = None) -> Array:
        name = self._dtype_name("eye", dtype) if dtype is not None else rules.DEFAULT_FLOAT
        return self._upload(np.eye(n_rows, n_cols, k), name, self._device(device, "eye"))

    def _triangle(self, fname: str, x: Any, k: int, lower: bool) -> Array:
        arr = self._array(fname, x)
        if arr.ndim < 2:
            raise ValueError(f"{fname}: needs at least 2 dimensions, got shape {arr.shape}")
        rows, cols = arr.shape[-2:]
        mask = np.tri(rows, cols, k, dtype=bool) if lower else ~np.tri(rows, cols, k - 1, dtype=bool)
        keep = self._expand(self._upload(mask, "bool", arr.device)._lb, arr.shape)
        return self._wrap(self._where(keep, arr._lb, arr._lb.const(0)))

    def tril(self, x: Any, /, *, k: int = 0) -> Array:
        return self._triangle("tril", x, k, True)

    def triu(self, x: Any, /, *, k: int = 0) -> Array:
        return self._triangle("triu", x, k, False)

    # ------------------------------------------------------------ dtype functions

    def astype(self, x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Array:
        """Value conversion (float -> int truncates; out-of-range values are unspecified)."""
        arr = self._array("astype", x)
        out = self._wrap(self._cast(arr._lb, self._dtype_name("astype", dtype)))
        return out if device is None else out.to_device(device)

    def _name_of(self, fname: str, x: Any) -> str:
        return x.dtype.name if isinstance(x, Array) else self._dtype_name(fname, x)

    def result_type(self, *arrays_and_dtypes: Any) -> DT:
        names = [self._name_of("result_type", x) for x in arrays_and_dtypes]
        if not names:
            raise ValueError("result_type: needs at least one array or dtype")
        out = names[0]
        for name in names[1:]:
            out = rules.promote(out, name)
        return self._dt(out)

    def can_cast(self, from_: Any, to: Any, /) -> bool:
        return rules.can_cast(self._name_of("can_cast", from_), self._dtype_name("can_cast", to))

    def finfo(self, type: Any, /) -> rules.FInfo:  # noqa: A002
        name = self._name_of("finfo", type)
        self._check_kind("finfo", name, "f")
        return rules.finfo(name, self._dt(name))

    def iinfo(self, type: Any, /) -> rules.IInfo:  # noqa: A002
        name = self._name_of("iinfo", type)
        self._check_kind("iinfo", name, "iu")
        return rules.iinfo(name, self._dt(name))

    def isdtype(self, dtype: Any, kind: Any) -> bool:
        name = self._dtype_name("isdtype", dtype)
        if isinstance(kind, tuple):
            return any(self.isdtype(dtype, k) for k in kind)
        if isinstance(kind, str):
            if kind not in rules.KINDS:
                raise ValueError(f"isdtype: unknown kind {kind!r}; known {sorted(rules.KINDS)}")
            return rules.kind(name) in rules.KINDS[kind] if rules.KINDS[kind] else False
        return name == self._dtype_name("isdtype", kind)
