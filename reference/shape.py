"""Shapes: bound Variables, device names, and the six movement ops (validation and numpy form).

Each movement op is a pure function of the input shape (``check_*`` returns the output shape or
raises ValueError naming the op and the bad values) plus its numpy equivalent in ``apply_movement``.
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from reference.dtype import Array

Shape = tuple[int, ...]


class Variable:
    """A named integer in ``[min, max]``; ``bind(val)`` returns a bound copy usable in shapes."""

    def __init__(self, name: str, min: int, max: int, val: int | None = None) -> None:
        if min > max:
            raise ValueError(f"Variable {name!r}: min {min} > max {max}")
        self.name, self.min, self.max, self._val = name, min, max, val

    def bind(self, val: int) -> Variable:
        """A copy of this variable bound to ``val``; ValueError if ``val`` is outside [min, max]."""
        if not self.min <= val <= self.max:
            raise ValueError(f"Variable {self.name!r}: bind value {val} outside [{self.min}, {self.max}]")
        return Variable(self.name, self.min, self.max, val)

    @property
    def val(self) -> int:
        """The bound value (ValueError when unbound)."""
        if self._val is None:
            raise ValueError(f"Variable {self.name!r} is not bound (bind it first: .bind(value))")
        return self._val

    def unbind(self) -> tuple[Variable, int]:
        """(the unbound variable, its bound value)."""
        return Variable(self.name, self.min, self.max), self.val

    def __repr__(self) -> str:
        return f"Variable({self.name!r}, {self.min}, {self.max}, val={self._val})"


def resolve_int(op: str, x: Any) -> int:
    """One int (a bound Variable gives its value); ValueError for anything else."""
    x = x.val if isinstance(x, Variable) else x
    if not isinstance(x, (int, np.integer)) or isinstance(x, bool):
        raise ValueError(f"{op}: {x!r} is not an int")
    return int(x)


def _ints(op: str, arg: Any) -> tuple[int, ...]:
    if not isinstance(arg, (tuple, list)):
        raise ValueError(f"{op}: expected a tuple of ints, got {arg!r}")
    return tuple(resolve_int(op, d) for d in arg)


def resolve(op: str, dims: Any) -> Shape:
    """A shape-like tuple with bound Variables replaced by their values; ValueError if negative."""
    out = _ints(op, dims)
    if any(d < 0 for d in out):
        raise ValueError(f"{op}: {dims!r} must hold non-negative ints")
    return out


_DEVICE = re.compile(r"(CLANG|LLVM|CUDA)(?::([0-9]+))?(?:@([0-9]+))?|DISK:.+", re.DOTALL)


def canonical_device(device: Any) -> str:
    """The canonical device name ('X:0' -> 'X', 'X:0@01' -> 'X@1'); ValueError naming any unknown
    device. `@RANK` (the MPI rank owning a device) is only a label here: numpy computes everything."""
    m = _DEVICE.fullmatch(device) if isinstance(device, str) else None
    if m is None:
        raise ValueError(f"unknown device {device!r}")
    if m.group(1) is None:
        return str(device)
    n = int(m.group(2) or 0)
    local = m.group(1) if n == 0 else f"{m.group(1)}:{n}"
    return local if m.group(3) is None else f"{local}@{int(m.group(3))}"


def _pairs(op: str, shape: Shape, arg: Any) -> tuple[tuple[int, int], ...]:
    """``arg`` as one (int, int) pair per axis of ``shape``; ValueError otherwise."""
    if not (isinstance(arg, (tuple, list)) and len(arg) == len(shape) and
            all(isinstance(p, (tuple, list)) and len(p) == 2 for p in arg)):
        raise ValueError(f"{op}: {arg!r} needs one (int, int) pair per axis of shape {shape}")
    return tuple((resolve_int(op, p[0]), resolve_int(op, p[1])) for p in arg)


def _reshape(shape: Shape, arg: Any) -> tuple[Any, Shape]:
    new = resolve("reshape", arg)
    if math.prod(new) != math.prod(shape):
        raise ValueError(f"reshape: cannot reshape {shape} to {new} (element count "
                         f"{math.prod(shape)} != {math.prod(new)})")
    return new, new


def _expand(shape: Shape, arg: Any) -> tuple[Any, Shape]:
    new = resolve("expand", arg)
    if len(new) != len(shape) or any(o != n and o != 1 for o, n in zip(shape, new, strict=True)):
        raise ValueError(f"expand: cannot expand {shape} to {new} (only axes of size 1 may change)")
    return new, new


def _permute(shape: Shape, arg: Any) -> tuple[Any, Shape]:
    order = _ints("permute", arg)
    if sorted(order) != list(range(len(shape))):
        raise ValueError(f"permute: {arg!r} is not a permutation of the axes of shape {shape}")
    return order, tuple(shape[a] for a in order)


def _stride(shape: Shape, arg: Any) -> tuple[Any, Shape]:
    steps = _ints("stride", arg)
    if len(steps) != len(shape) or 0 in steps:
        raise ValueError(f"stride: {arg!r} needs one non-zero step per axis of shape {shape}")
    return steps, tuple(len(range(0, s, abs(k))) for s, k in zip(shape, steps, strict=True))


def _pad(shape: Shape, arg: Any) -> tuple[Any, Shape]:
    pairs = _pairs("pad", shape, arg)
    if any(b < 0 or a < 0 for b, a in pairs):
        raise ValueError(f"pad: {arg!r} has a negative padding for shape {shape}")
    return pairs, tuple(b + s + a for (b, a), s in zip(pairs, shape, strict=True))


def _shrink(shape: Shape, arg: Any) -> tuple[Any, Shape]:
    pairs = _pairs("shrink", shape, arg)
    if any(not 0 <= b <= e <= s for (b, e), s in zip(pairs, shape, strict=True)):
        raise ValueError(f"shrink: {arg!r} is outside shape {shape} (need 0 <= start <= end <= size)")
    return pairs, tuple(e - b for b, e in pairs)


_CHECKS = {"reshape": _reshape, "expand": _expand, "permute": _permute, "stride": _stride, "pad": _pad,
           "shrink": _shrink}


def check_movement(name: str, shape: Shape, arg: Any) -> tuple[Any, Shape]:
    """Validate movement op ``name`` on ``shape``; returns (normalised arg, output shape)."""
    return _CHECKS[name](shape, arg)


def apply_movement(arr: Array, name: str, arg: Any) -> Array:
    """The numpy equivalent of a validated movement op."""
    if name == "reshape":
        return arr.reshape(arg)
    if name == "expand":
        return np.broadcast_to(arr, arg)
    if name == "permute":
        return arr.transpose(arg)
    if name == "pad":
        return np.pad(arr, arg)
    if name == "shrink":
        return arr[tuple(slice(b, e) for b, e in arg)]
    return arr[tuple(slice(None, None, k) for k in arg)]  # stride: like numpy [::k]

