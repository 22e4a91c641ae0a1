"""LazyBuffer: a node of the lazy graph (SPEC §1, §4). Building a graph runs nothing.

Shape of the graph:
- A *base* (`lb.base is lb`) has `op`, `arg`, `srcs`, a `buffer` (a `device.Buffer`, created with the
  base and allocated only when realized; ASSIGN shares its target's Buffer, VIEW is a zero-copy view
  of its source's Buffer) and `st` = `ShapeTracker.from_shape(shape)`.
- A *view* (`lb.base is not lb`) has no op: it is its base read through `st` (relative to the base).
  Views are built by the six movement ops; views of views are flattened onto the one base.
- `realized` is the base's Buffer once it holds values, else None. For ASSIGN, "holds values" means
  the engine has bumped the target Buffer's `version` past the version it had when the ASSIGN was
  built (the engine calls `Buffer.bump_version()` once it has run the assign).

Rules applied while building (each mirrors a line of SPEC §4): a weak cache (identical nodes are one
object while alive; `config.lazycache`), zero-size graphs become CONST 0, constant folding and
identities (`fast/lazy_rules.py`), reduce folding and splitting, views instead of copies for
consecutive realized buffers, cast-before-view, copy simplifications, contiguous-child reuse.
Validation (`fast/lazy_checks.py`) runs before any node is built.

Ordering of assigns (SPEC §4): every base records, when built, `(Buffer, version)` for the Buffer of
each source it reads directly (not the target of its own ASSIGN, not an unrealized ASSIGN, whose value
is defined by that assign). `stale_reads()` lists the records whose Buffer has since been assigned;
the scheduler raises RuntimeError for an unrealized base with stale reads, so a node built before a
realized assign can never silently read the new value. At most one unrealized ASSIGN into a Buffer
exists at a time (a second is a RuntimeError).

Reference counting: each base holds one `ref` on its Buffer and drops it when it is collected; the
Buffer frees its memory when the count returns to zero and no view of it is alive.
"""
from __future__ import annotations

import functools
import math
import struct
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from fast import config, lazy_ops
from fast import lazy_checks as checks
from fast import lazy_rules as rules
from fast.device import Buffer, Device
from fast.dtype import ConstType, DType, dtypes
from fast.ops import LoadOps, Op, ReduceOps, UnaryOps, normalize_const, result_dtype
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Node, Variable, sint

_CACHE: weakref.WeakValueDictionary[tuple[Any, ...], LazyBuffer] = weakref.WeakValueDictionary()
_PENDING_ASSIGNS: weakref.WeakValueDictionary[int, LazyBuffer] = weakref.WeakValueDictionary()
_INT_ONLY = {int}
_UNCACHED = frozenset({LoadOps.EMPTY, LoadOps.CUSTOM, LoadOps.ASSIGN})
_FORCED = frozenset({LoadOps.CONTIGUOUS, LoadOps.ASSIGN, LoadOps.COPY})
LOAD_OPS_FOR_USERS = (LoadOps.EMPTY, LoadOps.CONST, LoadOps.CUSTOM)


class LazyBuffer:
    """A lazy tensor: a base node of the graph or a view of one (see the module docstring).

    Build nodes with `loadop`, `from_numpy` and the methods, never with the constructor. The scheduler
    reads, on bases: `op arg srcs buffer realized forced_realize contiguous_child` and calls
    `stale_reads()`: a non-empty result for an unrealized base means it was built from a Buffer that a
    realized assign has overwritten since, and realizing it must raise RuntimeError.
    """

    __slots__ = ("device", "st", "dtype", "shape", "size", "_base", "op", "arg", "srcs", "buffer",
                 "forced_realize", "contiguous_child", "read_versions", "_assign_version", "__weakref__")
    op: Op
    arg: Any
    srcs: tuple[LazyBuffer, ...]
    buffer: Buffer
    forced_realize: bool
    contiguous_child: tuple[weakref.ref[LazyBuffer], ShapeTracker] | None
    read_versions: tuple[tuple[Buffer, int], ...]

    def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Op | None = None, arg: Any = None,
                 srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None) -> None:
        self.device, self.st, self.dtype, self._base = device, st, dtype, base
        self.shape: tuple[sint, ...] = st.shape
        self.size: sint = math.prod(self.shape) if _integer_shape(self.shape) else st.size  # type: ignore[arg-type]
        if base is not None:
            return
        if op is None:
            raise RuntimeError("LazyBuffer: internal error, a base needs an op")
        self.op, self.arg, self.srcs = op, arg, srcs
        self.buffer = _buffer_for(device, self.shape, dtype, op, arg, srcs)
        self.buffer.ref(1)
        self.forced_realize = op in _FORCED
        self.contiguous_child = None
        self.read_versions = _read_versions(op, srcs)
        self._assign_version = self.buffer.version

    def __del__(self) -> None:
        buffer = getattr(self, "buffer", None)
        if buffer is not None:
            buffer.ref(-1)

    def __repr__(self) -> str:
        if self._base is not None:
            return f"<LB {self.device} {self.shape} {self.dtype.name} view of {self._base!r}>"
        return f"<LB {self.device} {self.shape} {self.dtype.name} {self.op.name} arg={self.arg!r}>"

    # ------------------------------------------------------------ inspection

    @property
    def base(self) -> LazyBuffer:
        return self if self._base is None else self._base

    @property
    def realized(self) -> Buffer | None:
        """The base's Buffer once it holds values, else None."""
        base = self.base
        buffer = base.buffer
        if not buffer.is_allocated():
            return None
        if base.op is LoadOps.ASSIGN and buffer.version <= base._assign_version:
            return None
        return buffer

    def is_realized(self) -> bool:
        return self.realized is not None

    def is_unrealized_const(self) -> bool:
        base = self.base
        return base.op is LoadOps.CONST and not base.buffer.is_allocated()

    def is_unrealized_unmasked_const(self) -> bool:
        return self.is_unrealized_const() and all(view.mask is None for view in self.st.views)

    def stale_reads(self) -> list[tuple[Buffer, int]]:
        """(Buffer, version when read) for each direct read whose Buffer has been assigned since."""
        return [(buffer, version) for buffer, version in self.base.read_versions if buffer.version != version]

    @property
    def var_vals(self) -> dict[Variable, int]:
        """Values of the bound symbolic Variables in this buffer's view."""
        return self.st.var_vals

    # ------------------------------------------------------------ creation

    @staticmethod
    def loadop(op: LoadOps, shape: tuple[sint, ...], dtype: DType, device: str, arg: Any = None,
               src: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:
        """A new EMPTY, CONST (a base of `shape` holding `arg`) or CUSTOM (`arg(out, *inputs)`) buffer."""
        if op not in LOAD_OPS_FOR_USERS:
            raise TypeError(f"loadop: {op!r} is not one of EMPTY, CONST, CUSTOM")
        checked = checks.check_shape(op.name, shape)
        dtype = checks.check_dtype(op.name, dtype)
        device = Device.canonicalize(device)
        if op is LoadOps.CONST:
            checks.check_compute_device("CONST", device)
            arg = _const_value("CONST", arg, dtype)
        elif op is LoadOps.CUSTOM and not callable(arg):
            raise TypeError(f"CUSTOM: arg must be a callable fn(out, *inputs), got {arg!r}")
        if not isinstance(src, (tuple, list)):
            raise TypeError(f"{op.name}: src must be a tuple of LazyBuffers, got {src!r}")
        srcs = tuple(checks.check_lazy(op.name, s) for s in src)
        return create(device, tracker(checked), dtype, op, arg, srcs)

    def const(self, val: ConstType, shape: tuple[sint, ...] | None = None) -> LazyBuffer:
        """`val` (in this buffer's dtype) broadcast to `shape` (default: this shape), same device."""
        checks.check_compute_device("CONST", self.device)
        checked = self.shape if shape is None else checks.check_shape("CONST", shape)
        return const_node(self.device, self.dtype, _const_value("CONST", val, self.dtype), checked)

    # ------------------------------------------------------------ compute

    def e(self, op: Op, *srcs: LazyBuffer, arg: Any = None) -> LazyBuffer:
        """Elementwise `op` with self as the first operand."""
        operands = checks.check_elementwise(op, (self, *srcs))
        value_dtype = operands[-1].dtype
        out_dtype = result_dtype(op, value_dtype)
        consts = tuple(s.base.arg if s.is_unrealized_unmasked_const() else None for s in operands)
        fold = rules.fold_elementwise(op, value_dtype, consts)
        if fold is not None:
            return lazy_ops.apply_fold(fold, operands, out_dtype)
        if op is UnaryOps.NEG and (inner := lazy_ops.double_negation(self)) is not None:
            return inner
        resolved = tuple(redirect(s) for s in operands)
        return create(self.device, tracker(self.shape), out_dtype, op, arg, resolved)

    def r(self, op: ReduceOps, axis: tuple[int, ...]) -> LazyBuffer:
        """Reduce `op` over `axis`; reduced axes keep size 1."""
        return lazy_ops.reduce(self, op, checks.check_reduce(op, axis, self.shape, self.device))

    def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        """CAST (value conversion) or BITCAST (reinterpretation) to `dtype`."""
        dtype = checks.check_dtype("BITCAST" if bitcast else "CAST", dtype)
        if dtype == self.dtype:
            return self
        return lazy_ops.bitcast(self, dtype) if bitcast else lazy_ops.cast(self, dtype)

    def contiguous(self) -> LazyBuffer:
        """A buffer laid out contiguously: self, a zero-copy VIEW, or a CONTIGUOUS op."""
        return lazy_ops.contiguous(self)

    def copy_to_device(self, device: str, force: bool = False) -> LazyBuffer:
        """This buffer on `device` (see SPEC §4 for the simplifications)."""
        return lazy_ops.copy_to_device(self, Device.canonicalize(device), force)

    def assign(self, x: LazyBuffer) -> LazyBuffer:
        """Write `x` into this (realized) buffer's memory when realized; returns the ASSIGN node."""
        value = checks.check_assign(self, x)
        if checks.is_disk(self.device):
            value = lazy_ops.disk_assign_value(value)
        root = self.base.buffer.base
        pending = _PENDING_ASSIGNS.get(id(root))
        if pending is not None and pending.realized is None:
            raise RuntimeError(f"ASSIGN: {self!r} already has an unrealized assign pending; realize it first")
        ret = create(self.device, tracker(self.shape), self.dtype, LoadOps.ASSIGN, None,
                      (value, self))
        _PENDING_ASSIGNS[id(root)] = ret
        return ret

    # ------------------------------------------------------------ movement (views, never copies)

    def reshape(self, shape: tuple[sint, ...]) -> LazyBuffer:
        new_shape = checks.check_reshape(self.shape, shape)
        return self if new_shape == self.shape else move(self, lambda st: st.reshape(new_shape))

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        pairs = checks.check_pad(self.shape, arg)
        return self if all(p == (0, 0) for p in pairs) else move(self, lambda st: st.pad(pairs))

    def expand(self, shape: tuple[sint, ...]) -> LazyBuffer:
        new_shape = checks.check_expand(self.shape, shape)
        return self if new_shape == self.shape else move(self, lambda st: st.expand(new_shape))

    def permute(self, order: tuple[int, ...]) -> LazyBuffer:
        checked = checks.check_permute(self.shape, order)
        return self if checked == tuple(range(len(checked))) else move(self, lambda st: st.permute(checked))

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        pairs = checks.check_shrink(self.shape, arg)
        whole = all(p == (0, size) for p, size in zip(pairs, self.shape, strict=True))
        return self if whole else move(self, lambda st: st.shrink(pairs))

    def stride(self, steps: tuple[int, ...]) -> LazyBuffer:
        checked = checks.check_stride(self.shape, steps)
        return self if all(k == 1 for k in checked) else move(self, lambda st: st.stride(checked))


# ---------------------------------------------------------------- node construction

@functools.lru_cache(maxsize=4096)
def _memo_tracker(shape: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker.from_shape(shape)


def _integer_shape(shape: tuple[sint, ...]) -> bool:
    return all(type(size) is int for size in shape)


def tracker(shape: tuple[sint, ...]) -> ShapeTracker:
    """`ShapeTracker.from_shape`, memoised for integer shapes (trackers are immutable). Symbolic
    shapes are never memoised: bound Variables compare equal whatever their value."""
    return _memo_tracker(tuple(shape)) if _integer_shape(shape) else ShapeTracker.from_shape(shape)


@functools.lru_cache(maxsize=4096)
def _memo_broadcast(shape: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker.from_shape((1,) * len(shape)).expand(shape)


def _broadcast_tracker(shape: tuple[sint, ...]) -> ShapeTracker:
    """The view broadcasting a scalar to `shape`."""
    if _integer_shape(shape):
        return _memo_broadcast(tuple(shape))
    return ShapeTracker.from_shape((1,) * len(shape)).expand(shape)


def _arg_key(arg: Any) -> Any:
    """Cache key of an arg: floats by their bits (so -0.0 and 0.0, or NaNs, never merge wrongly)."""
    return ("float", struct.pack("<d", arg)) if isinstance(arg, float) else arg


def _bound_values(st: ShapeTracker) -> tuple[tuple[str, int | None], ...]:
    """Values of bound variables in `st` (bound variables compare equal whatever their value)."""
    for view in st.views:
        kinds = set(map(type, view.shape))
        kinds.update(map(type, view.strides))
        kinds.add(type(view.offset))
        for pair in view.mask or ():
            kinds.update(map(type, pair))
        if kinds != _INT_ONLY and kinds:
            return tuple(sorted((var.expr, var.val) for var in st.vars()))
    return ()


def create(device: str, st: ShapeTracker, dtype: DType, op: Op | None = None, arg: Any = None,
            srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None) -> LazyBuffer:
    """The node for (device, st, dtype, op, arg, srcs) or the view of `base` through `st`, cached."""
    if any(size == 0 for size in st.shape):
        op, arg, srcs, base = LoadOps.CONST, normalized(0, dtype), (), None
        st = tracker(st.shape)
    if not config.get().lazycache or op in _UNCACHED:
        return LazyBuffer(device, st, dtype, op, arg, srcs, base)
    if base is not None:
        key: tuple[Any, ...] = ("view", st, weakref.ref(base), _bound_values(st))
    else:
        # sources by weak reference, never by id(): the engine drops a realized node's srcs, so a
        # source may die while the cached node lives on, and its id may be reused by a new buffer
        versions = tuple([s.base.buffer.version for s in srcs])
        key = ("base", device, st, dtype, op, _arg_key(arg), tuple([weakref.ref(s) for s in srcs]), versions,
               _bound_values(st))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    ret = LazyBuffer(device, st, dtype, op, arg, srcs, base)
    _CACHE[key] = ret
    return ret


def _buffer_for(device: str, shape: tuple[sint, ...], dtype: DType, op: Op, arg: Any,
                srcs: tuple[LazyBuffer, ...]) -> Buffer:
    """A base's Buffer: the target's for ASSIGN, a view of the source's for VIEW, else a new one."""
    if op is LoadOps.ASSIGN:
        return srcs[1].base.buffer
    size = 1
    for dim in shape:
        size *= dim.max if isinstance(dim, Node) else dim
    if op is LoadOps.VIEW:
        return Buffer(device, size, dtype, base=srcs[0].base.buffer, offset=arg)
    return Buffer(device, size, dtype)


def _read_versions(op: Op, srcs: tuple[LazyBuffer, ...]) -> tuple[tuple[Buffer, int], ...]:
    reads = srcs[:1] if op is LoadOps.ASSIGN else srcs
    records: dict[int, tuple[Buffer, int]] = {}
    for src in reads:
        base = src.base
        if base.op is LoadOps.CONST or (base.op is LoadOps.ASSIGN and base.realized is None):
            continue
        records[id(base.buffer)] = (base.buffer, base.buffer.version)
    return tuple(records.values())


def _const_value(opname: str, value: object, dtype: DType) -> ConstType:
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"{opname}: value must be a bool, int or float, got {value!r}")
    return normalized(value, dtype)


@functools.lru_cache(maxsize=4096)
def _memo_normalize(kind: str, value: ConstType, sign: float, dtype: DType) -> ConstType:
    return normalize_const(value, dtype)


def normalized(value: ConstType, dtype: DType) -> ConstType:
    """`ops.normalize_const`, memoised by (type, value, sign of zero, dtype); NaNs are not memoised."""
    if value != value:
        return normalize_const(value, dtype)
    sign = math.copysign(1.0, value) if isinstance(value, float) else 0.0
    return _memo_normalize(type(value).__name__, value, sign, dtype)


def const_node(device: str, dtype: DType, value: ConstType, shape: tuple[sint, ...]) -> LazyBuffer:
    """A scalar CONST base broadcast to `shape` (no device check: internal)."""
    scalar = create(device, tracker(()), dtype, LoadOps.CONST, normalized(value, dtype))
    if not shape:
        return scalar
    return view_of(scalar, _broadcast_tracker(shape))


def view_of(base: LazyBuffer, st: ShapeTracker) -> LazyBuffer:
    """`base` read through `st` (relative to base): the base itself, a constant 0, or a view node."""
    if any(size == 0 for size in st.shape):
        return create(base.device, st, base.dtype, LoadOps.CONST, 0)
    if st.views[-1].all_invalid and not checks.is_disk(base.device):
        return const_node(base.device, base.dtype, 0, st.shape)
    if st.contiguous and st.shape == base.shape:
        return base
    return create(base.device, st, base.dtype, base=base)


def reapply(lb: LazyBuffer, st: ShapeTracker) -> LazyBuffer:
    """`lb` read through the further view `st` (whose input shape is lb.shape)."""
    return view_of(lb, st) if lb.base is lb else view_of(lb.base, lb.st + st)


def redirect(lb: LazyBuffer) -> LazyBuffer:
    """Read an unrealized base through its live contiguous child instead (SPEC §4, contiguous())."""
    base = lb.base
    if base.contiguous_child is None or base.buffer.is_allocated():
        return lb
    child_ref, inverted = base.contiguous_child
    child = child_ref()
    return lb if child is None else view_of(child, inverted + lb.st)


def move(lb: LazyBuffer, apply: Callable[[ShapeTracker], ShapeTracker]) -> LazyBuffer:
    source = redirect(lb)
    return view_of(source.base, apply(source.st))


def reduce_node(source: LazyBuffer, op: ReduceOps, axes: tuple[int, ...]) -> LazyBuffer:
    new_shape = tuple(1 if i in axes else size for i, size in enumerate(source.shape))
    return create(source.device, tracker(new_shape), source.dtype, op, axes, (source,))


def from_numpy(array: Any, device: str) -> LazyBuffer:
    """A realized buffer holding a snapshot of `array` (later writes to the array do not show)."""
    device = Device.canonicalize(device)
    data = np.asarray(array)
    dtype = dtypes.from_numpy(data.dtype)
    shape = tuple(int(size) for size in data.shape)
    ret = LazyBuffer.loadop(LoadOps.EMPTY, shape, dtype, device)
    if data.size:
        flat = np.ascontiguousarray(data, dtype=dtype.storage_np).reshape(-1).view(np.uint8)
        ret.buffer.copyin(flat.data)
    return ret
