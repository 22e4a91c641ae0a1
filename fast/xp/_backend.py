"""The one place where the array front end touches a lazy-buffer implementation.

A *backend* is a module with the public LazyBuffer API of docs/api.md: `LazyBuffer`, `dtypes`,
`LoadOps`, `UnaryOps`, `BinaryOps`, `TernaryOps`, `ReduceOps`, `from_numpy`, `to_numpy`, `realize`
(and optionally `MultiLazyBuffer`, for sharding, and a `Device` registry with `DEFAULT`). `fast`
and `reference` both are. Nothing in fast/xp/ imports a backend's internals: everything goes
through a `Backend`, so the same front-end code runs over either package (invariant: no module in
fast/xp/ imports `fast.<anything>` except `fast.xp`, and `fast/xp/__init__.py`, which picks `fast`
as the default backend).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

LB = Any  # a backend's LazyBuffer (the type depends on the backend)
DT = Any  # a backend's DType
Device = str | tuple[str, ...]  # one device name, or the devices of a sharded (multi-device) buffer

DTYPE_NAMES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
               "float16", "bfloat16", "float32", "float64")
COMPUTE_KINDS = ("CLANG", "LLVM", "CUDA")  # docs/api.md's compute device kinds (DISK stores, never computes)
REQUIRED = ("LazyBuffer", "dtypes", "LoadOps", "UnaryOps", "BinaryOps", "TernaryOps", "ReduceOps",
            "from_numpy", "to_numpy", "realize")


class Backend:
    """A lazy-buffer package seen through its public API only.

    Invariants: `dtype(name).name == name` for every name in DTYPE_NAMES; `const` returns a buffer
    broadcast from one scalar CONST (so the scheduler treats it as a constant, never a load). A
    device is a name (a LazyBuffer) or a tuple of canonical names (a MultiLazyBuffer); `const` and
    `from_numpy` given a tuple build a replicated MultiLazyBuffer (axis None, one shard per device).
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
        self.MultiLazyBuffer: Any = getattr(module, "MultiLazyBuffer", None)
        self._registry = getattr(module, "Device", None)
        self._by_name: dict[str, DT] = {name: getattr(module.dtypes, name) for name in DTYPE_NAMES}

    @property
    def default_device(self) -> str:
        """The backend's default device (its registry's `DEFAULT`, read now; `CLANG` without one)."""
        return str(getattr(self._registry, "DEFAULT", None) or "CLANG")

    def canonical(self, name: Any) -> str:
        """The backend's canonical spelling of a device name (`CLANG:0` -> `CLANG`); ValueError naming
        it when the backend does not accept it. Asks the backend itself: the device of a scalar CONST."""
        if not isinstance(name, str):
            raise ValueError(f"device name must be a string, got {name!r}")
        return str(self.LazyBuffer.loadop(self.Load.CONST, (), self.dtype("bool"), name, False).device)

    @functools.cached_property
    def usable_devices(self) -> tuple[str, ...]:
        """The compute device kinds this process can use: each kind the backend accepts and, when the
        backend has a `Device` registry, the registry can open (opening imports the kind's runtime; a
        missing runtime or library, e.g. llvmlite for LLVM, raises there and leaves the kind out) and
        run on (`can_run`: CUDA needs a driver and a GPU)."""
        usable = []
        for kind in COMPUTE_KINDS:
            try:
                self.canonical(kind)
                if self._registry is not None and not getattr(self._registry[kind], "can_run", lambda: True)():
                    continue
            except (ImportError, RuntimeError, ValueError, OSError):
                continue
            usable.append(kind)
        return tuple(usable)

    def is_multi(self, lb: LB) -> bool:
        """Whether `lb` is one of the backend's MultiLazyBuffers (a sharded or replicated value)."""
        return self.MultiLazyBuffer is not None and isinstance(lb, self.MultiLazyBuffer)

    def replicate(self, lbs: Sequence[LB]) -> LB:
        """One value held whole on each device of `lbs` (a MultiLazyBuffer with axis None)."""
        if self.MultiLazyBuffer is None:
            raise ValueError(f"{self.name} has no MultiLazyBuffer: arrays cannot span several devices")
        return self.MultiLazyBuffer(list(lbs), None)

    def shard(self, lb: LB, devices: tuple[str, ...], axis: int | None) -> LB:
        """`lb` split along `axis` over `devices` (axis None: copied whole to each): `from_sharded`."""
        if self.MultiLazyBuffer is None:
            raise ValueError(f"{self.name} has no MultiLazyBuffer: arrays cannot span several devices")
        return self.MultiLazyBuffer.from_sharded(lb, list(devices), axis)

    def dtype(self, name: str) -> DT:
        """The backend's DType called `name` (one of DTYPE_NAMES)."""
        return self._by_name[name]

    def is_dtype(self, value: Any) -> bool:
        """Whether `value` is one of this backend's 13 dtype objects."""
        name = getattr(value, "name", None)
        return isinstance(name, str) and name in self._by_name and self._by_name[name] == value

    def const(self, value: bool | int | float, shape: tuple[int, ...], dtype: DT, device: Device) -> LB:
        """`value` (normalised to `dtype` as a CONST is) broadcast to `shape` on `device` (on each of
        them, replicated, for a tuple)."""
        if isinstance(device, tuple):
            return self.replicate([self.const(value, shape, dtype, name) for name in device])
        scalar = self.LazyBuffer.loadop(self.Load.CONST, (), dtype, device, value)
        return scalar.reshape((1,) * len(shape)).expand(shape) if shape else scalar

    def from_numpy(self, array: np.ndarray, device: Device) -> LB:
        """Host values uploaded to `device` (to each of them, replicated, for a tuple)."""
        if isinstance(device, tuple):
            return self.replicate([self.module.from_numpy(array, name) for name in device])
        return self.module.from_numpy(array, device)

    def to_numpy(self, lb: LB) -> np.ndarray:
        """The realized values of `lb` (bfloat16 arrives as float32, as the backend documents)."""
        out: np.ndarray = self.module.to_numpy(lb)
        return out

    def custom(self, fn: Any, shape: tuple[int, ...], dtype: DT, device: Device, srcs: tuple[LB, ...]) -> LB:
        """A CUSTOM node: `fn(out, *inputs)` fills `out` on the host when the node is realized (one device
        only: callers refuse sharded arrays first, naming themselves)."""
        if isinstance(device, tuple) or any(self.is_multi(src) for src in srcs):
            raise ValueError(f"custom: a CUSTOM node runs on one device, not {device}")
        return self.LazyBuffer.loadop(self.Load.CUSTOM, shape, dtype, device, fn, srcs)
