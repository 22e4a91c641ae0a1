"""The Array object: a lazy buffer plus the namespace it belongs to.

Invariants: `_lb` is a LazyBuffer of the namespace's backend with plain-int shape, or (a sharded
or replicated array, see `xp.shard`) one of its MultiLazyBuffers, whose `device` is the tuple of
its devices' names; `device` is then that tuple and `to_device(name)` gathers it. Nothing here
computes: operators build graph nodes through the namespace's functions, and only the conversions
(`__array__`, `__dlpack__`, `__bool__`, `__int__`, `__float__`, `__index__`, `__complex__`,
`__repr__`, `__iter__` over realized rows) realize. In-place operators and `__setitem__` rebind
`_lb` to a new node (arrays have value semantics: an array made from `x` before the update keeps
the old value), after checking the result keeps `x`'s dtype and shape as the standard requires.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

API_VERSIONS = ("2021.12", "2022.12", "2023.12")
READ_HOOK: Callable[[Array], None] | None = None  # told of every read-back first (fast/xp/_tape.py sets it)


class Sharding(NamedTuple):
    """How an array spans several devices: shard i of `axis` on `devices[i]` (axis None: each device
    holds the whole array)."""

    devices: tuple[str, ...]
    axis: int | None


class Array:
    """An Array API array over a lazy buffer (see the module docstring)."""

    __slots__ = ("_lb", "_ns", "__weakref__")
    __hash__ = None  # type: ignore[assignment]  # arrays compare elementwise, so they are unhashable
    __array_priority__ = 100.0  # numpy defers `ndarray op Array` to our reflected operators

    def __init__(self, lb: Any, ns: Any) -> None:
        self._lb, self._ns = lb, ns

    # ------------------------------------------------------------ attributes

    @property
    def dtype(self) -> Any:
        return self._lb.dtype

    @property
    def device(self) -> str | tuple[str, ...]:
        """The device's name; for a sharded or replicated array, the tuple of its devices' names."""
        device = self._lb.device
        return tuple(str(d) for d in device) if isinstance(device, tuple) else str(device)

    @property
    def sharding(self) -> Sharding | None:
        """Extension: None for an array on one device, else its devices and sharded axis."""
        device = self.device
        return Sharding(device, self._lb.axis) if isinstance(device, tuple) else None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self._lb.shape)

    @property
    def ndim(self) -> int:
        return len(self._lb.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def lazy(self) -> Any:
        """Extension: the LazyBuffer this array stands for (for `fast.schedule`, `fast.realize`, debugging)."""
        return self._lb

    @property
    def T(self) -> Array:  # noqa: N802  (the standard's name)
        if self.ndim != 2:
            raise ValueError(f"Array.T: needs a 2-d array, got shape {self.shape} (use mT or permute_dims)")
        return self._ns.permute_dims(self, (1, 0))

    @property
    def mT(self) -> Array:  # noqa: N802
        return self._ns.matrix_transpose(self)

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        if api_version is not None and api_version not in API_VERSIONS:
            raise ValueError(f"__array_namespace__: unsupported api_version {api_version!r}; known {API_VERSIONS}")
        return self._ns.module

    def to_device(self, device: Any, /, *, stream: Any = None) -> Array:
        """A copy on `device`: a name gathers a sharded array there; a tuple of names is `xp.shard`
        onto those devices keeping the sharded axis (an unsharded array is replicated)."""
        if stream is not None:
            raise ValueError(f"to_device: streams are not supported, got stream={stream!r}")
        return self._ns._to_device(self, device)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ conversions (these realize)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("__array__: copy=False is impossible, the values live in the lazy buffer's memory")
        if READ_HOOK is not None:
            READ_HOOK(self)
        out = self._ns._backend.to_numpy(self._lb)
        return out if dtype is None else out.astype(dtype)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        kwargs = {"max_version": max_version} if max_version is not None else {}
        return self.__array__().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: the host arrays that __dlpack__ exports

    def _scalar(self, what: str) -> Any:
        if self.size != 1 or self.ndim:
            raise TypeError(f"{what}: only a 0-d array converts to a Python scalar, got shape {self.shape}")
        return self.__array__().reshape(()).item()

    def __bool__(self) -> bool:
        return bool(self._scalar("__bool__"))

    def __int__(self) -> int:
        return int(self._scalar("__int__"))

    def __float__(self) -> float:
        return float(self._scalar("__float__"))

    def __complex__(self) -> complex:
        return complex(self._scalar("__complex__"))

    def __index__(self) -> int:
        if self.dtype.name not in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"):
            raise TypeError(f"__index__: needs an integer array, got dtype {self.dtype.name}")
        return int(self._scalar("__index__"))

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __iter__(self) -> Iterator[Array]:
        if not self.ndim:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        body = np.array2string(self.__array__(), separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype.name}, device={self.device!r})"

    __str__ = __repr__

    # ------------------------------------------------------------ indexing

    def __getitem__(self, key: Any) -> Array:
        return self._ns._getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._lb = self._ns._setitem(self, key, value)._lb

    # ------------------------------------------------------------ operators

    def _inplace(self, fname: str, other: Any) -> Array:
        out = getattr(self._ns, fname)(self, other)
        if out.dtype != self.dtype or out.shape != self.shape:
            raise TypeError(f"in-place {fname}: the result ({out.dtype.name}, shape {out.shape}) would change "
                            f"the array's dtype or shape ({self.dtype.name}, {self.shape})")
        self._lb = out._lb
        return self

    def __add__(self, o: Any) -> Array: return self._ns.add(self, o)  # noqa: E704
    def __radd__(self, o: Any) -> Array: return self._ns.add(o, self)  # noqa: E704
    def __iadd__(self, o: Any) -> Array: return self._inplace("add", o)  # noqa: E704
    def __sub__(self, o: Any) -> Array: return self._ns.subtract(self, o)  # noqa: E704
    def __rsub__(self, o: Any) -> Array: return self._ns.subtract(o, self)  # noqa: E704
    def __isub__(self, o: Any) -> Array: return self._inplace("subtract", o)  # noqa: E704
    def __mul__(self, o: Any) -> Array: return self._ns.multiply(self, o)  # noqa: E704
    def __rmul__(self, o: Any) -> Array: return self._ns.multiply(o, self)  # noqa: E704
    def __imul__(self, o: Any) -> Array: return self._inplace("multiply", o)  # noqa: E704
    def __truediv__(self, o: Any) -> Array: return self._ns.divide(self, o)  # noqa: E704
    def __rtruediv__(self, o: Any) -> Array: return self._ns.divide(o, self)  # noqa: E704
    def __itruediv__(self, o: Any) -> Array: return self._inplace("divide", o)  # noqa: E704
    def __floordiv__(self, o: Any) -> Array: return self._ns.floor_divide(self, o)  # noqa: E704
    def __rfloordiv__(self, o: Any) -> Array: return self._ns.floor_divide(o, self)  # noqa: E704
    def __ifloordiv__(self, o: Any) -> Array: return self._inplace("floor_divide", o)  # noqa: E704
    def __mod__(self, o: Any) -> Array: return self._ns.remainder(self, o)  # noqa: E704
    def __rmod__(self, o: Any) -> Array: return self._ns.remainder(o, self)  # noqa: E704
    def __imod__(self, o: Any) -> Array: return self._inplace("remainder", o)  # noqa: E704
    def __pow__(self, o: Any) -> Array: return self._ns.pow(self, o)  # noqa: E704
    def __rpow__(self, o: Any) -> Array: return self._ns.pow(o, self)  # noqa: E704
    def __ipow__(self, o: Any) -> Array: return self._inplace("pow", o)  # noqa: E704
    def __matmul__(self, o: Any) -> Array: return self._ns.matmul(self, o)  # noqa: E704
    def __rmatmul__(self, o: Any) -> Array: return self._ns.matmul(o, self)  # noqa: E704
    def __imatmul__(self, o: Any) -> Array: return self._inplace("matmul", o)  # noqa: E704
    def __and__(self, o: Any) -> Array: return self._ns.bitwise_and(self, o)  # noqa: E704
    def __rand__(self, o: Any) -> Array: return self._ns.bitwise_and(o, self)  # noqa: E704
    def __iand__(self, o: Any) -> Array: return self._inplace("bitwise_and", o)  # noqa: E704
    def __or__(self, o: Any) -> Array: return self._ns.bitwise_or(self, o)  # noqa: E704
    def __ror__(self, o: Any) -> Array: return self._ns.bitwise_or(o, self)  # noqa: E704
    def __ior__(self, o: Any) -> Array: return self._inplace("bitwise_or", o)  # noqa: E704
    def __xor__(self, o: Any) -> Array: return self._ns.bitwise_xor(self, o)  # noqa: E704
    def __rxor__(self, o: Any) -> Array: return self._ns.bitwise_xor(o, self)  # noqa: E704
    def __ixor__(self, o: Any) -> Array: return self._inplace("bitwise_xor", o)  # noqa: E704
    def __lshift__(self, o: Any) -> Array: return self._ns.bitwise_left_shift(self, o)  # noqa: E704
    def __rlshift__(self, o: Any) -> Array: return self._ns.bitwise_left_shift(o, self)  # noqa: E704
    def __ilshift__(self, o: Any) -> Array: return self._inplace("bitwise_left_shift", o)  # noqa: E704
    def __rshift__(self, o: Any) -> Array: return self._ns.bitwise_right_shift(self, o)  # noqa: E704
    def __rrshift__(self, o: Any) -> Array: return self._ns.bitwise_right_shift(o, self)  # noqa: E704
    def __irshift__(self, o: Any) -> Array: return self._inplace("bitwise_right_shift", o)  # noqa: E704
    def __lt__(self, o: Any) -> Array: return self._ns.less(self, o)  # noqa: E704
    def __le__(self, o: Any) -> Array: return self._ns.less_equal(self, o)  # noqa: E704
    def __gt__(self, o: Any) -> Array: return self._ns.greater(self, o)  # noqa: E704
    def __ge__(self, o: Any) -> Array: return self._ns.greater_equal(self, o)  # noqa: E704
    def __eq__(self, o: Any) -> Array: return self._ns.equal(self, o)  # type: ignore[override]  # noqa: E704
    def __ne__(self, o: Any) -> Array: return self._ns.not_equal(self, o)  # type: ignore[override]  # noqa: E704
    def __neg__(self) -> Array: return self._ns.negative(self)  # noqa: E704
    def __pos__(self) -> Array: return self._ns.positive(self)  # noqa: E704
    def __abs__(self) -> Array: return self._ns.abs(self)  # noqa: E704
    def __invert__(self) -> Array: return self._ns.bitwise_invert(self)  # noqa: E704
