"""The one place where the array front end touches a lazy-buffer implementation.

A *backend* is a module with the public LazyBuffer API of docs/api.md: `LazyBuffer`, `dtypes`,
`LoadOps`, `UnaryOps`, `BinaryOps`, `TernaryOps`, `ReduceOps`, `from_numpy`, `to_numpy`, `realize`
(and optionally a `Device` registry with `DEFAULT`). `fast` and `reference` both are. Nothing in
fast/xp/ imports a backend's internals: everything goes through a `Backend`, so the same front-end
code runs over either package (invariant: no module in fast/xp/ imports `fast.<anything>` except
`fast.xp`, and `fast/xp/__init__.py`, which picks `fast` as the default backend).
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

LB = Any  # a backend's LazyBuffer (the type depends on the backend)
DT = Any  # a backend's DType

DTYPE_NAMES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
               "float16", "bfloat16", "float32", "float64")
REQUIRED = ("LazyBuffer", "dtypes", "LoadOps", "UnaryOps", "BinaryOps", "TernaryOps", "ReduceOps",
            "from_numpy", "to_numpy", "realize")


class Backend:
    """A lazy-buffer package seen through its public API only.

    Invariants: `dtype(name).name == name` for every name in DTYPE_NAMES; `const` returns a buffer
    broadcast from one scalar CONST (so the scheduler treats it as a constant, never a load).
    """

    def __init__(self, module: ModuleType) -> None:
        missing = [name for name in REQUIRED if not hasattr(module, name)]
        if missing:
            raise TypeError(f"namespace_for: {module.__name__} lacks the LazyBuffer API names {missing}")
        self.module = module
        self.name: str = module.__name__
        self.LazyBuffer = module.LazyBuffer
        self.dtypes = module.dtypes
        self.Load, self.Unary, self.Binary = module.LoadOps, module.UnaryOps, module.BinaryOps
        self.Ternary, self.Reduce = module.TernaryOps, module.ReduceOps
        registry = getattr(module, "Device", None)
        self.default_device: str = getattr(registry, "DEFAULT", None) or "CLANG"
        self._by_name: dict[str, DT] = {name: getattr(module.dtypes, name) for name in DTYPE_NAMES}

    def dtype(self, name: str) -> DT:
        """The backend's DType called `name` (one of DTYPE_NAMES)."""
        return self._by_name[name]

    def is_dtype(self, value: Any) -> bool:
        """Whether `value` is one of this backend's 13 dtype objects."""
        name = getattr(value, "name", None)
        return isinstance(name, str) and name in self._by_name and self._by_name[name] == value

    def const(self, value: bool | int | float, shape: tuple[int, ...], dtype: DT, device: str) -> LB:
        """`value` (normalised to `dtype` as a CONST is) broadcast to `shape` on `device`."""
        scalar = self.LazyBuffer.loadop(self.Load.CONST, (), dtype, device, value)
        return scalar.reshape((1,) * len(shape)).expand(shape) if shape else scalar

    def from_numpy(self, array: np.ndarray, device: str) -> LB:
        return self.module.from_numpy(array, device)

    def to_numpy(self, lb: LB) -> np.ndarray:
        """The realized values of `lb` (bfloat16 arrives as float32, as the backend documents)."""
        out: np.ndarray = self.module.to_numpy(lb)
        return out

    def custom(self, fn: Any, shape: tuple[int, ...], dtype: DT, device: str, srcs: tuple[LB, ...]) -> LB:
        """A CUSTOM node: `fn(out, *inputs)` fills `out` on the host when the node is realized."""
        return self.LazyBuffer.loadop(self.Load.CUSTOM, shape, dtype, device, fn, srcs)
