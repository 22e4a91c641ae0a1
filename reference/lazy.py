"""LazyBuffer: a node of the lazy graph. Building one validates its arguments and computes nothing.

Every buffer is its own base. Movement ops are ``VIEW`` nodes whose ``arg`` is (method, argument);
a movement op that changes nothing returns the buffer itself. A realized buffer holds its value as a
read-only numpy array of the dtype's storage type (``realized``); ``_version`` counts the assigns
written into it, and every node records at creation the versions of its sources, so that reading a
value that was overwritten is detected. ``_pending`` is (a weak reference to) the last ASSIGN built
into the buffer. DISK nodes carry ``pos``, the bytes of the file buffer they read (reference/disk.py).
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reference import disk
from reference.dtype import Array, ConstType, DType, as_const, dtypes
from reference.ops import ARITY, BinaryOps, LoadOps, Op, ReduceOps, TernaryOps, UnaryOps, check_op_dtype
from reference.shape import Shape, canonical_device, check_movement, resolve, resolve_int

Operand = tuple[Shape, DType, tuple[str, ...]]  # (shape, dtype, devices) of an operand


@dataclass(frozen=True)
class View:
    """The view of a buffer; in reference only its shape (every buffer is contiguous)."""

    shape: Shape


def no_disk(what: str, devices: Sequence[str]) -> None:
    """RuntimeError when ``what`` (a compute op) is asked of a DISK device."""
    for d in devices:
        if d.startswith("DISK:"):
            raise RuntimeError(f"{what}: cannot compute on device {d} (DISK holds data only)")


def check_e(op: Any, operands: Sequence[Operand]) -> DType:
    """Validate an elementwise op on its operands; returns the result dtype."""
    if op in (UnaryOps.CAST, UnaryOps.BITCAST):
        raise TypeError(f"e: {op.name} is not allowed through e(); use cast(dtype, bitcast=...)")
    if type(op) not in ARITY:
        raise TypeError(f"e: {op!r} is not a unary, binary or ternary op")
    name = op.name
    if len(operands) != ARITY[type(op)]:
        raise TypeError(f"{name}: takes {ARITY[type(op)]} operands, got {len(operands)}")
    no_disk(name, operands[0][2])
    if any(o[2] != operands[0][2] for o in operands):
        raise ValueError(f"{name}: operands live on different devices {[o[2] for o in operands]}")
    if any(o[0] != operands[0][0] for o in operands):
        raise ValueError(f"{name}: operand shapes differ: {[o[0] for o in operands]}")
    values = operands[1:] if op is TernaryOps.WHERE else operands
    if op is TernaryOps.WHERE and operands[0][1] != dtypes.bool:
        raise TypeError(f"WHERE: condition dtype is {operands[0][1].name}, must be bool")
    if any(o[1] != values[0][1] for o in values):
        raise TypeError(f"{name}: operand dtypes differ: {[o[1].name for o in values]}")
    check_op_dtype(op, values[0][1])
    return dtypes.bool if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ) else values[0][1]


def check_r(op: Any, shape: Shape, devices: Sequence[str], axis: Any) -> tuple[tuple[int, ...], Shape]:
    """Validate a reduce; returns (axes, output shape)."""
    if not isinstance(op, ReduceOps):
        raise TypeError(f"r: {op!r} is not a ReduceOps")
    no_disk(op.name, devices)
    axes = tuple(resolve_int(op.name, a) for a in axis) if isinstance(axis, (tuple, list)) else None
    if axes is None or len(set(axes)) != len(axes) or any(not 0 <= a < len(shape) for a in axes):
        raise ValueError(f"{op.name}: axes {axis!r} must be distinct and in range for shape {shape}")
    return axes, tuple(1 if i in axes else s for i, s in enumerate(shape))


def check_bitcast(shape: Shape, src: DType, dst: DType, device: str) -> Shape:
    """Validate BITCAST; returns the output shape (last axis rescaled on DISK)."""
    if src == dtypes.bool or dst == dtypes.bool:
        raise TypeError(f"BITCAST: cannot bitcast {src.name} to {dst.name} (bool has no bit layout)")
    if src.itemsize == dst.itemsize:
        return shape
    if not device.startswith("DISK:"):
        raise TypeError(f"BITCAST: {src.name} -> {dst.name} changes the itemsize; only allowed on DISK, not {device}")
    if not shape or (shape[-1] * src.itemsize) % dst.itemsize:
        raise ValueError(f"BITCAST: last axis of shape {shape} ({src.name}) does not divide into {dst.name}")
    return shape[:-1] + (shape[-1] * src.itemsize // dst.itemsize,)


class LazyBuffer:
    """A lazy buffer: ``op`` applied to ``srcs`` with ``arg``; ``realized`` once evaluated."""

    def __init__(self, device: str, shape: Shape, dtype: DType, op: Op, arg: Any = None,
                 srcs: tuple[LazyBuffer, ...] = (), value: Array | None = None) -> None:
        self.device, self.shape, self.dtype, self.op, self.arg, self.srcs = device, shape, dtype, op, arg, srcs
        self._value: Array | None = None
        self._version = 0
        self._src_versions = tuple(s._version for s in srcs)
        self._pending: weakref.ref[LazyBuffer] | None = None
        self.pos = disk.fresh(shape, dtype.itemsize) if device.startswith("DISK:") else None
        if value is not None:
            self._store(value)

    def _store(self, value: Array) -> None:
        value = np.asarray(value).view()
        value.flags.writeable = False
        self._value = value

    def __repr__(self) -> str:
        return f"<LazyBuffer {self.device} {self.shape} {self.dtype} {self.op.name}>"

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def st(self) -> View:
        """The view (only its shape)."""
        return View(self.shape)

    @property
    def base(self) -> LazyBuffer:
        """Every reference buffer is its own base."""
        return self

    @property
    def realized(self) -> Array | None:
        """The stored numpy array (read-only; bfloat16 as uint16 patterns) or None."""
        return self._value

    def is_realized(self) -> bool:
        """True once the buffer holds a value."""
        return self._value is not None

    @staticmethod
    def loadop(op: LoadOps, shape: Any, dtype: DType, device: str, arg: Any = None,
               src: Sequence[LazyBuffer] = ()) -> LazyBuffer:
        """A new EMPTY (zeros in reference), CONST (arg: the value) or CUSTOM (arg: fn) buffer."""
        if op not in (LoadOps.EMPTY, LoadOps.CONST, LoadOps.CUSTOM):
            raise TypeError(f"loadop: {op!r} is not EMPTY, CONST or CUSTOM")
        shp, device = resolve(f"{op.name} shape", shape), canonical_device(device)
        if not isinstance(dtype, DType):
            raise TypeError(f"{op.name}: {dtype!r} is not a DType")
        if op is LoadOps.CONST:
            no_disk("CONST", (device,))
            arg = as_const(arg, dtype)
        if op is LoadOps.CUSTOM and (not callable(arg) or not all(isinstance(s, LazyBuffer) for s in src)):
            raise TypeError(f"CUSTOM: arg {arg!r} must be callable and src {src!r} LazyBuffers")
        return LazyBuffer(device, shp, dtype, op, arg, tuple(src) if op is LoadOps.CUSTOM else ())

    def const(self, val: ConstType, shape: Any = None) -> LazyBuffer:
        """A constant with this buffer's dtype and device, of ``shape`` (default: own shape)."""
        return LazyBuffer.loadop(LoadOps.CONST, self.shape if shape is None else shape, self.dtype, self.device, val)

    def e(self, op: UnaryOps | BinaryOps | TernaryOps, *srcs: LazyBuffer, arg: Any = None) -> LazyBuffer:
        """Elementwise ``op`` with self as the first operand."""
        if not all(isinstance(s, LazyBuffer) for s in srcs):
            raise TypeError(f"e: operands of {op!r} must be LazyBuffers, got {srcs!r}")
        operands = (self, *srcs)
        out = check_e(op, [(s.shape, s.dtype, (s.device,)) for s in operands])
        return LazyBuffer(self.device, self.shape, out, op, arg, operands)

    def r(self, op: ReduceOps, axis: tuple[int, ...]) -> LazyBuffer:
        """Reduce over ``axis``; reduced axes keep size 1."""
        axes, shape = check_r(op, self.shape, (self.device,), axis)
        return LazyBuffer(self.device, shape, self.dtype, op, axes, (self,))

    def _view(self, name: str, arg: Any) -> LazyBuffer:
        narg, shape = check_movement(name, self.shape, arg)
        identity = {"permute": tuple(range(len(shape))), "stride": (1,) * len(shape)}.get(name, narg)
        if shape == self.shape and narg == identity:
            return self
        out = LazyBuffer(self.device, shape, self.dtype, LoadOps.VIEW, (name, narg), (self,))
        out.pos = None if self.pos is None else disk.move(self.pos, name, narg)
        return out

    def reshape(self, shape: Any) -> LazyBuffer:
        """Same elements in row-major order, new shape."""
        return self._view("reshape", shape)

    def pad(self, arg: Any) -> LazyBuffer:
        """Zero padding ((before, after), ...) per axis."""
        return self._view("pad", arg)

    def expand(self, shape: Any) -> LazyBuffer:
        """Broadcast axes of size 1 to ``shape``."""
        return self._view("expand", shape)

    def permute(self, order: Any) -> LazyBuffer:
        """Reorder axes (numpy transpose)."""
        return self._view("permute", order)

    def shrink(self, arg: Any) -> LazyBuffer:
        """Keep [start, end) per axis."""
        return self._view("shrink", arg)

    def stride(self, steps: Any) -> LazyBuffer:
        """numpy ``[::k]`` per axis (-1 flips)."""
        return self._view("stride", steps)

    def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        """CAST (value conversion) or BITCAST (reinterpret bits) to ``dtype``."""
        if not isinstance(dtype, DType):
            raise TypeError(f"cast: {dtype!r} is not a DType")
        if not bitcast:
            no_disk("CAST", (self.device,))
            return LazyBuffer(self.device, self.shape, dtype, UnaryOps.CAST, dtype, (self,))
        shape, pos = check_bitcast(self.shape, self.dtype, dtype, self.device), self.pos
        if pos is not None and dtype.itemsize != self.dtype.itemsize:
            pos = disk.bitcast_positions(pos, self.dtype.itemsize, dtype.itemsize, shape)
            if pos is None:
                raise RuntimeError(f"BITCAST: {self.dtype.name} -> {dtype.name} of a non-consecutive view of shape "
                                   f"{self.shape} on {self.device} needs compute (DISK holds data only)")
        out = LazyBuffer(self.device, shape, dtype, UnaryOps.BITCAST, dtype, (self,))
        out.pos = pos
        return out

    def contiguous(self) -> LazyBuffer:
        """Self when realized and not a view, else a CONTIGUOUS node (same value). On DISK only a
        consecutive view can be made contiguous (without compute)."""
        if self.pos is not None and not disk.consecutive(self.pos, self.dtype.itemsize):
            raise RuntimeError(f"CONTIGUOUS: a non-consecutive view of shape {self.shape} on {self.device} needs "
                               "compute (DISK holds data only)")
        if self.is_realized() and self.op is not LoadOps.VIEW:
            return self
        out = LazyBuffer(self.device, self.shape, self.dtype, LoadOps.CONTIGUOUS, None, (self,))
        out.pos = self.pos
        return out

    def copy_to_device(self, device: str, force: bool = False) -> LazyBuffer:
        """A COPY on ``device``; self when it is already there (unless ``force``)."""
        device = canonical_device(device)
        if device == self.device and not force:
            return self
        return LazyBuffer(device, self.shape, self.dtype, LoadOps.COPY, self.device, (self,))

    def assign(self, x: LazyBuffer) -> LazyBuffer:
        """An ASSIGN of ``x`` into this realized buffer (not a view, no other assign pending)."""
        if not isinstance(x, LazyBuffer):
            raise TypeError(f"ASSIGN: {x!r} is not a LazyBuffer")
        if self.op is LoadOps.VIEW or not self.is_realized():
            raise RuntimeError(f"ASSIGN: target {self!r} must be a realized buffer, not a view or an unrealized graph")
        if x.shape != self.shape:
            raise ValueError(f"ASSIGN: shape {x.shape} does not match target shape {self.shape}")
        if x.dtype != self.dtype:
            raise TypeError(f"ASSIGN: dtype {x.dtype.name} does not match target dtype {self.dtype.name}")
        if x.device != self.device:
            raise ValueError(f"ASSIGN: device {x.device} does not match target device {self.device}")
        pending = None if self._pending is None else self._pending()
        if pending is not None and not pending.is_realized():
            raise RuntimeError(f"ASSIGN: target {self!r} already has an unrealized assign; realize it first")
        out = LazyBuffer(self.device, self.shape, self.dtype, LoadOps.ASSIGN, None, (x, self))
        out.pos, self._pending = self.pos, weakref.ref(out)
        return out


def from_numpy(array: Any, device: str) -> LazyBuffer:
    """A realized buffer holding a copy of ``array`` (TypeError for unsupported numpy dtypes)."""
    arr = np.asarray(array)
    dtype, device = dtypes.from_numpy(arr.dtype), canonical_device(device)
    value = arr.astype(dtype.storage, copy=True)  # native byte order
    return LazyBuffer(device, tuple(int(s) for s in arr.shape), dtype, LoadOps.EMPTY, None, (), value)

