"""LazyBuffer: a node of the lazy graph. Building one validates its arguments and computes nothing.

Every buffer is its own base. Movement ops are ``VIEW`` nodes whose ``arg`` is (method, argument);
a movement op that changes nothing returns the buffer itself. Identical nodes are built once
(``_node``). Values live in a ``Storage`` (flat bytes) that an ASSIGN shares with its target, and a
zero-copy view (CONTIGUOUS or BITCAST, ``arg = ("zero-copy", byte offset)``) with the realized buffer
it views. ``Storage.version`` counts realized assigns; a node records (storage, version) of each
source it reads in ``_reads``, a view (movement op or zero-copy) that of the memory it stands for in
``_alias``, so reading an overwritten value is detected. DISK nodes carry ``pos``, the bytes of the
file buffer they read (reference/disk.py).
"""
from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from reference import disk
from reference.dtype import Array, ConstType, DType, as_const, dtypes
from reference.ops import (
    ARITY,
    BinaryOps,
    GatherOps,
    LoadOps,
    Op,
    ReduceOps,
    TernaryOps,
    UnaryOps,
    check_op_dtype,
    not_a,
)
from reference.shape import Shape, canonical_device, check_movement, resolve, resolve_int

Operand = tuple[Shape, DType, tuple[str, ...]]  # (shape, dtype, devices) of an operand


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
        raise TypeError(not_a("e", op, "a unary, binary or ternary op"))
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
        raise TypeError(not_a("r", op, "a ReduceOps member"))
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


class Storage:
    """Memory: flat read-only bytes (None until written; a write replaces them, so arrays handed out never
    change), ``version`` (realized assigns into it) and ``pending`` (the last ASSIGN built into it)."""

    def __init__(self) -> None:
        self.data: Array | None = None
        self.version = 0
        self.pending: weakref.ref[LazyBuffer] | None = None

    def write(self, offset: int, value: Array, dtype: DType) -> None:
        """Put ``value`` (as ``dtype``'s storage type) at byte ``offset``."""
        flat = np.ascontiguousarray(value, dtype=dtype.storage)
        raw = flat.reshape(-1).view(np.uint8)
        # an array of its own (a result just computed) is kept as it is and made read-only: no copy
        kept = self.data is None and flat is value and value.flags.owndata and value.flags.writeable
        if self.data is not None:
            data = self.data.copy()
        elif kept:
            data = raw
        else:  # a copy unless ascontiguousarray made one already (a broadcast, a cast, a strided view)
            data = raw if flat is not value and not np.may_share_memory(flat, value) else raw.copy()
        data[offset:offset + raw.size] = raw
        data.flags.writeable = False
        if kept:
            value.flags.writeable = False
        self.data = data


def memory(lb: LazyBuffer) -> tuple[Storage, int]:
    """(the storage ``lb``'s value is read from, the version at which it holds that value)."""
    if lb._alias is not None:
        return lb._alias
    return lb._storage, lb._storage.version + (lb.op is LoadOps.ASSIGN and not lb._done)


_CACHE: weakref.WeakValueDictionary[tuple[Any, ...], LazyBuffer] = weakref.WeakValueDictionary()


def _node(device: str, shape: Shape, dtype: DType, op: Op, arg: Any = None, srcs: tuple[LazyBuffer, ...] = ()
          ) -> LazyBuffer:
    """The node of these fields: the live identical one if any (SPEC §4; EMPTY, CUSTOM and ASSIGN are always
    new). Keyed by the sources' ids (the node keeps its sources alive) and the versions of their memory;
    a float arg by its bits, so -0.0 and 0.0 (or two NaNs) never merge wrongly."""
    if op in (LoadOps.EMPTY, LoadOps.CUSTOM, LoadOps.ASSIGN):
        return LazyBuffer(device, shape, dtype, op, arg, srcs)
    key = (device, shape, dtype, op, struct.pack("<d", arg) if isinstance(arg, float) else arg,
           tuple(id(s) for s in srcs), tuple(memory(s)[0].version for s in srcs))
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = LazyBuffer(device, shape, dtype, op, arg, srcs)
    return hit


class LazyBuffer:
    """A lazy buffer: ``op`` applied to ``srcs`` with ``arg``; ``realized`` once evaluated. Build with
    ``loadop``, ``from_numpy`` and the methods (identical nodes are one object)."""

    def __init__(self, device: str, shape: Shape, dtype: DType, op: Op, arg: Any = None,
                 srcs: tuple[LazyBuffer, ...] = (), value: Array | None = None) -> None:
        self.device, self.shape, self.dtype, self.op, self.arg, self.srcs = device, shape, dtype, op, arg, srcs
        self._storage, self._offset, self._done = Storage(), 0, False
        self._sources = srcs[:1] if op is LoadOps.ASSIGN else srcs  # those it reads: an ASSIGN reads x only
        self._reads = tuple(memory(s) for s in self._sources)
        self._alias = self._reads[0] if op is LoadOps.VIEW else None
        self.pos = disk.fresh(shape, dtype.itemsize) if device.startswith("DISK:") else None
        if value is not None:
            self._store(value)

    def _store(self, value: Array) -> None:
        """Mark realized, writing ``value`` unless the storage is shared (zero-copy, ASSIGN: already there)."""
        if self._storage.data is None:
            self._storage.write(0, value, self.dtype)
        self._done = True

    def __repr__(self) -> str:
        return f"<LazyBuffer {self.device} {self.shape} {self.dtype} {self.op.name}>"

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def st(self) -> SimpleNamespace:
        """The view: in reference only its ``shape`` (every buffer is contiguous)."""
        return SimpleNamespace(shape=self.shape)

    @property
    def base(self) -> LazyBuffer:
        """Every reference buffer is its own base."""
        return self

    @property
    def realized(self) -> Array | None:
        """The stored numpy array (read-only; bfloat16 as uint16 patterns) or None."""
        data = self._storage.data
        if not self._done or data is None:
            return None
        raw = data[self._offset:self._offset + self.size * self.dtype.itemsize]
        return raw.view(self.dtype.storage).reshape(self.shape)

    def is_realized(self) -> bool:
        """True once the buffer holds a value."""
        return self._done

    @staticmethod
    def loadop(op: LoadOps, shape: Any, dtype: DType, device: str, arg: Any = None,
               src: Sequence[LazyBuffer] = ()) -> LazyBuffer:
        """A new EMPTY (zeros in reference), CONST (arg: the value) or CUSTOM (arg: fn) buffer."""
        if op not in (LoadOps.EMPTY, LoadOps.CONST, LoadOps.CUSTOM):
            raise TypeError(not_a("loadop", op, "LoadOps.EMPTY, CONST or CUSTOM"))
        shp, device = resolve(f"{op.name} shape", shape), canonical_device(device)
        if not isinstance(dtype, DType):
            raise TypeError(not_a(op.name, dtype, "a DType"))
        if op is LoadOps.CONST:
            no_disk("CONST", (device,))
            arg = as_const(arg, dtype)
        if op is LoadOps.CUSTOM and (not callable(arg) or not all(isinstance(s, LazyBuffer) for s in src)):
            raise TypeError(f"CUSTOM: arg {arg!r} must be callable and src {src!r} LazyBuffers")
        return _node(device, shp, dtype, op, arg, tuple(src) if op is LoadOps.CUSTOM else ())

    def const(self, val: ConstType, shape: Any = None) -> LazyBuffer:
        """A constant with this buffer's dtype and device, of ``shape`` (default: own shape)."""
        return LazyBuffer.loadop(LoadOps.CONST, self.shape if shape is None else shape, self.dtype, self.device, val)

    def e(self, op: UnaryOps | BinaryOps | TernaryOps, *srcs: LazyBuffer, arg: Any = None) -> LazyBuffer:
        """Elementwise ``op`` with self as the first operand."""
        if not all(isinstance(s, LazyBuffer) for s in srcs):
            raise TypeError(f"e: operands of {op!r} must be LazyBuffers, got {srcs!r}")
        operands = (self, *srcs)
        out = check_e(op, [(s.shape, s.dtype, (s.device,)) for s in operands])
        return _node(self.device, self.shape, out, op, arg, operands)

    def r(self, op: ReduceOps, axis: tuple[int, ...]) -> LazyBuffer:
        """Reduce over ``axis``; reduced axes keep size 1."""
        axes, shape = check_r(op, self.shape, (self.device,), axis)
        return _node(self.device, shape, self.dtype, op, axes, (self,))

    def gather(self, indices: LazyBuffer, axis: int) -> LazyBuffer:
        """Self indexed along ``axis`` by the integer buffer ``indices``: shape ``shape[:axis] + indices.shape
        + shape[axis + 1:]``; negative indices count from the end, others out of range raise IndexError
        when realized (docs/semantics.md, "Gather")."""
        if not isinstance(indices, LazyBuffer):
            raise TypeError(f"gather: expected a LazyBuffer operand, got {type(indices).__name__}")
        if indices.dtype.kind not in "iu":
            raise TypeError(f"gather: indices must have an integer dtype, got {indices.dtype.name}")
        if type(axis) is not int or not 0 <= axis < len(self.shape):
            raise ValueError(f"gather: axis {axis!r} is out of range for shape {self.shape}")
        if indices.device != self.device:
            raise ValueError(f"gather: x is on {self.device} and indices on {indices.device}")
        no_disk("gather", (self.device,))
        shape = self.shape[:axis] + indices.shape + self.shape[axis + 1:]
        if self.shape[axis] == 0 and 0 not in shape:
            raise IndexError(f"gather: cannot take indices of shape {indices.shape} from axis {axis} of size 0")
        return _node(self.device, shape, self.dtype, GatherOps.GATHER, axis, (self, indices))

    def matmul(self, other: LazyBuffer) -> LazyBuffer:
        """self (..., M, K) @ other (..., K, N): the expand-multiply-sum of reference/products.py."""
        if not isinstance(other, LazyBuffer):
            raise TypeError(f"matmul: expected a LazyBuffer operand, got {type(other).__name__}")
        from reference import products  # (it builds through this class's methods)
        return products.matmul(self, other)

    def _view(self, name: str, arg: Any) -> LazyBuffer:
        narg, shape = check_movement(name, self.shape, arg)
        identity = {"permute": tuple(range(len(shape))), "stride": (1,) * len(shape)}.get(name, narg)
        if shape == self.shape and narg == identity:
            return self
        out = _node(self.device, shape, self.dtype, LoadOps.VIEW, (name, narg), (self,))
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
        """CAST (value conversion) or BITCAST (reinterpret bits) to ``dtype``; self when ``dtype`` is own
        (after validation). A BITCAST of a consecutive view of a realized buffer is a zero-copy view."""
        if not isinstance(dtype, DType):
            raise TypeError(not_a("cast", dtype, "a DType"))
        if not bitcast:
            no_disk("CAST", (self.device,))
            return self if dtype == self.dtype else _node(self.device, self.shape, dtype, UnaryOps.CAST, dtype, (self,))
        shape, pos = check_bitcast(self.shape, self.dtype, dtype, self.device), self.pos
        if dtype == self.dtype:
            return self
        if pos is not None and dtype.itemsize != self.dtype.itemsize:
            pos = disk.bitcast_positions(pos, self.dtype.itemsize, dtype.itemsize, shape)
            if pos is None:
                raise RuntimeError(f"BITCAST: {self.dtype.name} -> {dtype.name} of a non-consecutive view of shape "
                                   f"{self.shape} on {self.device} needs compute (DISK holds data only)")
        out = self._zero_copy(UnaryOps.BITCAST, dtype, shape) or _node(self.device, shape, dtype, UnaryOps.BITCAST,
                                                                       dtype, (self,))
        out.pos = pos
        return out

    def _run(self) -> tuple[LazyBuffer, int | None]:
        """(root, start): the first non-VIEW node under self's movement ops, and the first of root's elements
        self reads when it reads one ascending run of them with nothing padded (else None)."""
        moves, root = [], self
        while root.op is LoadOps.VIEW:
            moves.append(root.arg)
            root = root.srcs[0]
        pos = disk.fresh(root.shape, 1)
        for name, arg in reversed(moves):
            pos = disk.move(pos, name, arg)
        return root, disk.first(pos) if disk.consecutive(pos, 1) else None

    def _zero_copy(self, op: Op, dtype: DType, shape: Shape) -> LazyBuffer | None:
        """A zero-copy view (SPEC §4) when self is a consecutive view of a realized non-CONST buffer: a node
        sharing that buffer's storage at the run's byte offset; else None."""
        root, start = self._run()
        if start is None or not root.is_realized() or root.op is LoadOps.CONST:
            return None
        offset = root._offset + start * root.dtype.itemsize
        out = _node(self.device, shape, dtype, op, ("zero-copy", offset), (self,))
        if out._storage.data is None:  # new (not an identical live one)
            out._storage, out._offset, out._alias = root._storage, offset, out._reads[0]
        return out

    def contiguous(self) -> LazyBuffer:
        """Self when it reads its whole source in order (a buffer that is not a view, or e.g. a reshape of one;
        not an unrealized constant); a zero-copy view of a realized buffer's consecutive view; else a
        CONTIGUOUS node (same value). On DISK only a consecutive view can be made contiguous."""
        if self.pos is not None and not disk.consecutive(self.pos, self.dtype.itemsize):
            raise RuntimeError(f"CONTIGUOUS: a non-consecutive view of shape {self.shape} on {self.device} needs "
                               "compute (DISK holds data only)")
        root, start = self._run()
        if start == 0 and self.size == root.size and (root.op is not LoadOps.CONST or root.is_realized()):
            return self
        out = self._zero_copy(LoadOps.CONTIGUOUS, self.dtype, self.shape) or \
            _node(self.device, self.shape, self.dtype, LoadOps.CONTIGUOUS, None, (self,))
        out.pos = self.pos
        return out

    def copy_to_device(self, device: str, force: bool = False) -> LazyBuffer:
        """A COPY on ``device``; self when it is already there (unless ``force``)."""
        device = canonical_device(device)
        if device == self.device and not force:
            return self
        return _node(device, self.shape, self.dtype, LoadOps.COPY, self.device, (self,))

    def assign(self, x: LazyBuffer) -> LazyBuffer:
        """An ASSIGN of ``x`` into this realized buffer (not a view, no other assign pending into its
        storage); it shares the target's storage, so assigning into it later writes the target too."""
        if not isinstance(x, LazyBuffer):
            raise TypeError(f"ASSIGN: {x!r} is not a LazyBuffer")
        if (self.op is LoadOps.VIEW or not self.is_realized()) and 0 not in self.shape:  # empty: nothing to write
            raise RuntimeError(f"ASSIGN: target {self!r} must be a realized buffer, not a view or an unrealized graph")
        if x.shape != self.shape:
            raise ValueError(f"ASSIGN: shape {x.shape} does not match target shape {self.shape}")
        if x.dtype != self.dtype:
            raise TypeError(f"ASSIGN: dtype {x.dtype.name} does not match target dtype {self.dtype.name}")
        if x.device != self.device:
            raise ValueError(f"ASSIGN: device {x.device} does not match target device {self.device}")
        if 0 in self.shape:
            return self
        for key in [key for key, node in _CACHE.items() if node is self]:
            del _CACHE[key]  # its storage will stop holding "op of srcs": rebuilding the op gives a new node
        storage = self._storage
        pending = None if storage.pending is None else storage.pending()
        if pending is not None and not pending.is_realized():
            raise RuntimeError(f"ASSIGN: target {self!r} already has an unrealized assign; realize it first")
        out = _node(self.device, self.shape, self.dtype, LoadOps.ASSIGN, None, (x, self))
        out._storage, out._offset, out.pos, storage.pending = storage, self._offset, self.pos, weakref.ref(out)
        return out


def mapped(data: Array, device: str) -> LazyBuffer:
    """A realized 1-D uint8 buffer whose storage is ``data`` itself, not a copy (read-only bytes, e.g. a
    file's mapping: nothing is read until a view of it is)."""
    if data.dtype != np.uint8 or data.ndim != 1 or data.flags.writeable:
        raise ValueError(f"mapped: {data.dtype}{list(data.shape)} must be read-only 1-D uint8 bytes")
    out = LazyBuffer(canonical_device(device), (int(data.size),), dtypes.uint8, LoadOps.EMPTY)
    out._storage.data, out._done = data, True
    return out


def from_numpy(array: Any, device: str) -> LazyBuffer:
    """A realized buffer holding a copy of ``array`` (TypeError for unsupported numpy dtypes)."""
    arr = np.asarray(array)
    dtype, device = dtypes.from_numpy(arr.dtype), canonical_device(device)
    value = arr.astype(dtype.storage, copy=True)  # native byte order
    return LazyBuffer(device, tuple(int(s) for s in arr.shape), dtype, LoadOps.EMPTY, None, (), value)

