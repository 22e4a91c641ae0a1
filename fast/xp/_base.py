"""What every group of namespace functions shares: wrapping, operand checks, promotion, broadcasting.

Invariants: `_operands` returns lazy buffers of one shape (the broadcast shape), one dtype (the
promoted one) and one device; Python scalars become broadcast CONSTs of that dtype, never loads,
so `x * 2.0` fuses like `x.e(MUL, x.const(2.0))` (for sharded operands the constant is the first
array operand's `const`, laid out like it on every shard). Arrays mix only when they live on the same
device, or the same tuple of devices (sharded or replicated alike). Errors name the function and the
bad values: TypeError for dtypes and argument types, ValueError for shapes and devices.
"""
from __future__ import annotations

import functools
import math
from types import ModuleType
from typing import Any

import numpy as np

from fast.xp import _dtypes as rules
from fast.xp._array import Array
from fast.xp._backend import DT, LB, Backend, Device

Scalar = bool | int | float


def normalize_axis(fname: str, axis: int, ndim: int) -> int:
    """`axis` in [-ndim, ndim) as a non-negative index; IndexError otherwise (the standard's type)."""
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{fname}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        raise IndexError(f"{fname}: axis {axis} is out of range for {ndim} dimensions")
    return int(axis) % max(ndim, 1)


def normalize_axes(fname: str, axis: int | tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    """Distinct non-negative axes; None means every axis."""
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(normalize_axis(fname, a, ndim) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fname}: repeated axis in {axis!r}")
    return axes


def broadcast_shapes(fname: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The standard's broadcasting: align on the right; each dim equal, or 1."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"{fname}: shapes {list(shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


class NamespaceBase:
    """State and helpers of one namespace: its backend and the module object users see."""

    def __init__(self, backend: Backend, module: ModuleType) -> None:
        self._backend = backend
        self.module = module

    # ------------------------------------------------------------ wrapping and checks

    def _wrap(self, lb: LB) -> Array:
        return Array(lb, self)

    def _dt(self, name: str) -> DT:
        return self._backend.dtype(name)

    def _array(self, fname: str, x: Any) -> Array:
        """`x` as an array of this namespace; TypeError for anything else."""
        if isinstance(x, Array):
            if x._ns is not self:
                raise TypeError(f"{fname}: array belongs to the {x._ns._backend.name} namespace, not "
                                f"{self._backend.name} (convert with asarray)")
            return x
        raise TypeError(f"{fname}: expected an array, got {type(x).__name__}")

    def _dtype_name(self, fname: str, dtype: Any) -> str:
        """The name of one of this namespace's dtypes; TypeError for anything else."""
        if not self._backend.is_dtype(dtype):
            raise TypeError(f"{fname}: {dtype!r} is not a dtype of this namespace")
        return str(dtype.name)

    def _check_kind(self, fname: str, name: str, kinds: str) -> None:
        if rules.kind(name) not in kinds:
            allowed = {"b": "bool", "i": "signed integer", "u": "unsigned integer", "f": "floating"}
            raise TypeError(f"{fname}: not defined for dtype {name} (needs {' or '.join(allowed[k] for k in kinds)})")

    # ------------------------------------------------------------ devices

    def _is_sharded(self, x: Any) -> bool:
        """Whether `x` is an array whose value spans several devices (a MultiLazyBuffer)."""
        return isinstance(x, Array) and isinstance(x.device, tuple)

    def _same_device(self, fname: str, arrays: list[Array]) -> Device:
        """The one device (name, or tuple of names) all `arrays` live on; ValueError otherwise."""
        devices = list(dict.fromkeys(a.device for a in arrays))
        if len(devices) > 1:
            hint = " (a sharded array mixes only with arrays on the same devices: move the other with " \
                   "y.to_device(x.device), which replicates it)" if any(isinstance(d, tuple) for d in devices) else ""
            raise ValueError(f"{fname}: operands live on different devices {devices}{hint}")
        return devices[0]

    def _devices(self, fname: str, devices: Any) -> tuple[str, ...]:
        """A tuple or list of device names as the canonical tuple a MultiLazyBuffer reports; ValueError
        for an empty or repeated tuple, a name the backend rejects, or a DISK device (it cannot compute)."""
        if not isinstance(devices, (tuple, list)) or not devices:
            raise ValueError(f"{fname}: devices must be a non-empty tuple of device names, got {devices!r}")
        try:
            names = tuple(self._backend.canonical(d) for d in devices)
        except ValueError as err:
            raise ValueError(f"{fname}: {err}") from None
        if len(set(names)) != len(names) or any(n.startswith("DISK") for n in names):
            raise ValueError(f"{fname}: devices {tuple(devices)} must be distinct compute devices")
        return names

    def _unsharded(self, fname: str, *arrays: Array) -> None:
        """ValueError for functions that have no sharded form (they run numpy on one host buffer)."""
        if any(self._is_sharded(a) for a in arrays):
            raise ValueError(f"{fname}: sharded arrays are not supported here; gather first with "
                             "x.to_device(device)")

    # ------------------------------------------------------------ operands

    def _expand(self, lb: LB, shape: tuple[int, ...]) -> LB:
        """`lb` broadcast to `shape` (a view: reshape to the rank, then expand)."""
        have = tuple(int(s) for s in lb.shape)
        if have == shape:
            return lb
        lb = lb.reshape((1,) * (len(shape) - len(have)) + have)
        return lb.expand(shape)

    def _cast(self, lb: LB, name: str) -> LB:
        return lb if lb.dtype.name == name else lb.cast(self._dt(name))

    def _scalar_value(self, fname: str, value: Any, name: str) -> Scalar:
        """A Python scalar checked against an array dtype (the standard's mixing rules)."""
        if isinstance(value, np.generic) and not isinstance(value, (np.complexfloating, np.str_, np.bytes_)):
            value = value.item()
        if not isinstance(value, (bool, int, float)):
            raise TypeError(f"{fname}: expected an array or a Python scalar, got {type(value).__name__}")
        if not rules.scalar_fits(value, name):
            raise TypeError(f"{fname}: a Python {type(value).__name__} cannot join an array of dtype {name}")
        if isinstance(value, int) and not isinstance(value, bool) and rules.kind(name) in "iu":
            low, high = rules.int_range(name)
            if not low <= value <= high:
                raise OverflowError(f"{fname}: Python int {value} is out of range for dtype {name}")
        return value

    def _operands(self, fname: str, *args: Any, dtype: str | None = None) -> tuple[list[LB], str]:
        """Arrays and scalars promoted to one dtype (or `dtype`) and broadcast to one shape."""
        arrays = [self._array(fname, a) for a in args if isinstance(a, Array)]
        if not arrays:
            raise TypeError(f"{fname}: needs at least one array operand, got {[type(a).__name__ for a in args]}")
        device = self._same_device(fname, arrays)
        name = dtype or functools.reduce(rules.promote, [a.dtype.name for a in arrays])
        shape = broadcast_shapes(fname, *[a.shape for a in arrays])
        lbs = [self._expand(self._cast(a._lb, name), shape) if isinstance(a, Array) else None for a in args]
        template = next(lb for lb in lbs if lb is not None)
        for i, a in enumerate(args):
            if lbs[i] is None:
                value = self._scalar_value(fname, a, name)
                lbs[i] = template.const(value) if isinstance(device, tuple) else \
                    self._backend.const(value, shape, self._dt(name), device)
        return lbs, name

    # ------------------------------------------------------------ small graph helpers

    def _const(self, like: LB, value: Scalar) -> LB:
        """`value` in `like`'s dtype, broadcast to `like`'s shape and device."""
        return like.const(value)

    def _not(self, b: LB) -> LB:
        return b.e(self._backend.Binary.XOR, b.const(True))

    def _or(self, a: LB, b: LB) -> LB:
        return a.e(self._backend.Binary.ADD, b)

    def _and(self, a: LB, b: LB) -> LB:
        return a.e(self._backend.Binary.MUL, b)

    def _where(self, cond: LB, a: LB, b: LB) -> LB:
        return cond.e(self._backend.Ternary.WHERE, a, b)

    def _lt(self, a: LB, b: LB) -> LB:
        return a.e(self._backend.Binary.CMPLT, b)

    def _eq(self, a: LB, b: LB) -> LB:
        return a.e(self._backend.Binary.CMPEQ, b)

    def _isnan(self, x: LB) -> LB:
        return self._not(self._eq(x, x))

    def _inf(self, like: LB, sign: float = 1.0) -> LB:
        return like.const(math.copysign(math.inf, sign))
