"""The longer LazyBuffer operations (SPEC §4): constant folding and identities applied to the graph,
reduce (folding and splitting), cast and bitcast, contiguous, copy_to_device, assign; and `from_numpy`.

Every operation takes arguments its LazyBuffer method has validated (fast/graph/checks.py) and builds
nodes only through fast/graph/node.py's `create`/`view_of`/`reapply`/`const_node`, so the weak cache,
the zero-size rule and the contiguous-child redirect apply uniformly. node.py cannot import this
module (it imports node.py), so each operation is entered in `node.OPERATIONS` right below its
definition, when the package is imported; the methods call it from there.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from fast import config
from fast.device import Device
from fast.dtype import DType, dtypes
from fast.graph import checks, node, rules
from fast.graph.keys import tracker
from fast.graph.node import OPERATIONS, LazyBuffer
from fast.ops import (
    LOAD_ASSIGN,
    LOAD_CONST,
    LOAD_CONTIGUOUS,
    LOAD_COPY,
    LOAD_EMPTY,
    LOAD_VIEW,
    UNARY_BITCAST,
    UNARY_CAST,
    UNARY_NEG,
    BinaryOps,
    Op,
    ReduceOps,
)
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import sint
from fast.shape.view import View

_PENDING_ASSIGNS: weakref.WeakValueDictionary[int, LazyBuffer] = weakref.WeakValueDictionary()


def _ints(values: tuple[sint, ...]) -> tuple[int, ...] | None:
    """The values as ints, or None when any is symbolic."""
    return tuple(values) if all(isinstance(v, int) for v in values) else None  # type: ignore[arg-type]


# ---------------------------------------------------------------- elementwise

def fold_constants(op: Op, operands: tuple[LazyBuffer, ...], out_dtype: DType) -> LazyBuffer | None:
    """`e(op, *operands)` rewritten by the folding rule for its constant operands (unrealized, unmasked
    CONSTs), or None when no rule applies (the caller then builds the op itself)."""
    consts = tuple([(s._base or s).arg if (s._base or s).op is LOAD_CONST and s.is_unrealized_unmasked_const()
                    else None for s in operands])
    if consts.count(None) == len(consts):
        return None
    fold = rules.fold_elementwise(op, operands[-1].dtype, consts)
    return None if fold is None else apply_fold(fold, operands, out_dtype)


OPERATIONS.fold_constants = fold_constants


def apply_fold(fold: rules.Fold, operands: tuple[LazyBuffer, ...], out_dtype: DType) -> LazyBuffer:
    """Build the graph a `rules.Fold` decision describes."""
    first = operands[0]
    if fold.kind == "const":
        return node.const_node(first.device, out_dtype, fold.value, first.shape)
    target = operands[fold.index]
    if fold.kind == "operand":
        return target
    if fold.kind == "neg":
        return target.e(UNARY_NEG)
    return target.e(BinaryOps.MUL, target.const(fold.value))


def double_negation(lb: LazyBuffer) -> LazyBuffer | None:
    """For NEG of `lb`: when lb is (a view of) an unrealized NEG x, the result is x (through the view)."""
    base = lb.base
    if base.op is not UNARY_NEG or base.realized is not None:
        return None
    inner = base.srcs[0]
    return inner if lb is base else node.reapply(inner, lb.st)


OPERATIONS.double_negation = double_negation


# ---------------------------------------------------------------- reduce

def reduce(lb: LazyBuffer, op: ReduceOps, axes: tuple[int, ...]) -> LazyBuffer:
    """`lb.r(op, axes)` for validated axes: identity, empty, constant, split or plain reduce."""
    if all(lb.shape[a] == 1 for a in axes):
        return lb
    new_shape = tuple(1 if i in axes else size for i, size in enumerate(lb.shape))
    if any(lb.shape[a] == 0 for a in axes):
        return node.const_node(lb.device, lb.dtype, rules.empty_reduce_value(op, lb.dtype), new_shape)
    source = node.redirect(lb)
    shape = _ints(lb.shape)
    if source.is_unrealized_unmasked_const() and shape is not None:
        count = 1
        for a in axes:
            count *= shape[a]
        value = rules.fold_reduce(op, lb.dtype, source.base.arg, count)
        return node.const_node(lb.device, lb.dtype, value, new_shape)
    split = split_plan(source, axes)
    if split is None or shape is None:
        return reduce_node(source, op, axes)
    axis, factor = split
    split_shape = (*shape[:axis], factor, shape[axis] // factor, *shape[axis + 1:])
    first = reduce_node(source.reshape(split_shape), op, (axis + 1,))
    return reduce_node(first, op, (axis,)).reshape(new_shape)


OPERATIONS.reduce = reduce


def reduce_node(source: LazyBuffer, op: ReduceOps, axes: tuple[int, ...]) -> LazyBuffer:
    """The REDUCE node of `source` over `axes` (no folding, no split)."""
    new_shape = tuple(1 if i in axes else size for i, size in enumerate(source.shape))
    return node.create(source.device, tracker(new_shape), source.dtype, op, axes, (source,))


def split_plan(source: LazyBuffer, axes: tuple[int, ...]) -> tuple[int, int] | None:
    """(axis, factor) for a two-stage reduce, or None.

    Our choice (documented in SPEC terms): only a reduce over a single axis of size > 1 (other reduced
    axes have size 1) with an all-integer shape is split, and never an expanded (stride 0) axis, where
    the first stage would only re-read one element.
    """
    cfg = config.get()
    shape = _ints(source.shape)
    reduced = [a for a in axes if source.shape[a] != 1]
    if not cfg.split_reduceop or shape is None or len(reduced) != 1:
        return None
    axis = reduced[0]
    outputs = 1
    for i, size in enumerate(shape):
        outputs *= 1 if i in axes else size
    factor = rules.split_factor(shape[axis], outputs, cfg.reduceop_split_threshold, cfg.reduceop_split_size)
    if factor is None or source.st.real_strides(ignore_valid=True)[axis] == 0:
        return None
    return axis, factor


# ---------------------------------------------------------------- casts and views

def cast(lb: LazyBuffer, dtype: DType) -> LazyBuffer:
    """CAST to a different dtype: constant fold, cast-before-view, or a CAST node."""
    checks.check_compute_device("CAST", lb.device)
    source = node.redirect(lb)
    if source.is_unrealized_unmasked_const():
        value = rules.fold_cast(source.base.arg, lb.dtype, dtype, False)
        if value is not None:
            return node.const_node(lb.device, dtype, value, lb.shape)
    base = source.base
    if source is not base and base.realized is None and dtype.itemsize <= lb.dtype.itemsize:
        return node.reapply(base.cast(dtype), source.st)
    return node.create(lb.device, tracker(lb.shape), dtype, UNARY_CAST, dtype, (source,))


OPERATIONS.cast = cast


def can_view(lb: LazyBuffer) -> bool:
    """A single consecutive, integer-sized, unmasked view, not a constant: a Buffer.view can hold it."""
    st = lb.st
    return (st.consecutive and isinstance(st.views[0].offset, int) and _ints(lb.shape) is not None
            and lb.base.op is not LOAD_CONST)


def buffer_view(source: LazyBuffer, dtype: DType, shape: tuple[sint, ...]) -> LazyBuffer:
    """A VIEW base: a zero-copy `Buffer.view` of source's base Buffer at source's byte offset."""
    offset = source.st.views[0].offset
    byte_offset = (offset if isinstance(offset, int) else 0) * source.dtype.itemsize
    return node.create(source.device, tracker(shape), dtype, LOAD_VIEW, byte_offset, (source,))


def bitcast(lb: LazyBuffer, dtype: DType) -> LazyBuffer:
    """BITCAST: a VIEW of a consecutive realized (or DISK) buffer, a folded constant,
    bitcast-before-view, or a BITCAST node."""
    new_shape = checks.check_bitcast(lb.dtype, dtype, lb.device, lb.shape)
    if 0 in new_shape:  # nothing to reinterpret (an empty view is consecutive, also on DISK): `create`
        return node.create(lb.device, tracker(new_shape), dtype, UNARY_BITCAST, dtype, (lb,))  # -> CONST
    source = node.redirect(lb)
    base = source.base
    if can_view(source) and (base.realized is not None or checks.is_disk(lb.device)):
        return buffer_view(source, dtype, new_shape)
    if checks.is_disk(lb.device) and (strided := disk_strided_bitcast(source, dtype)) is not None:
        return strided
    checks.check_compute_device("BITCAST of a non-consecutive view", lb.device)
    if source.is_unrealized_unmasked_const():
        value = rules.fold_cast(source.base.arg, lb.dtype, dtype, True)
        if value is not None:
            return node.const_node(lb.device, dtype, value, lb.shape)
    if source is not base and base.realized is None:
        return node.reapply(base.cast(dtype, bitcast=True), source.st)
    return node.create(lb.device, tracker(lb.shape), dtype, UNARY_BITCAST, dtype, (source,))


OPERATIONS.bitcast = bitcast


def disk_strided_bitcast(source: LazyBuffer, dtype: DType) -> LazyBuffer | None:
    """BITCAST of a non-consecutive view of a DISK base, without compute (SPEC §7): the base
    bitcast whole then viewed the same way when itemsizes match; otherwise a VIEW of `dtype` over
    the bytes the view covers, read with byte strides rescaled to the new itemsize. The latter needs
    one unmasked integer View whose last axis has unit stride (or size 1) and whose other byte
    strides and start (from the first covered byte) divide by the new itemsize; else None."""
    base, old_size, new_size = source.base, source.dtype.itemsize, dtype.itemsize
    if old_size == new_size and source is not base and can_view(base):
        return node.reapply(base.cast(dtype, bitcast=True), source.st)
    view = source.st.views[0]
    shape, strides = _ints(view.shape), _ints(view.strides)
    span = covering_range(source.st, base.size) if isinstance(base.size, int) else None
    if (len(source.st.views) != 1 or view.mask is not None or shape is None or strides is None or not shape
            or span is None or not isinstance(view.offset, int) or (shape[-1] != 1 and strides[-1] != 1)):
        return None
    low, high = span
    outer = [0 if size == 1 else stride * old_size for size, stride in zip(shape[:-1], strides[:-1], strict=True)]
    start = (view.offset - low) * old_size
    if any(count % new_size for count in (*outer, start, (high - low) * old_size)):
        return None
    window = node.create(source.device, tracker(((high - low) * old_size // new_size,)), dtype,
                          LOAD_VIEW, low * old_size, (base,))
    new_shape = (*shape[:-1], shape[-1] * old_size // new_size)
    rebased = View.create(new_shape, (*(count // new_size for count in outer), 1), start // new_size, None)
    return node.view_of(window, ShapeTracker((rebased,)))


def contiguous(lb: LazyBuffer) -> LazyBuffer:
    """Self when already contiguous (forcing its realization), a VIEW of a consecutive realized (or
    DISK) buffer, else a CONTIGUOUS node that records itself as the base's contiguous child."""
    base = lb.base
    if lb.st.contiguous and lb.size == base.size and not lb.is_unrealized_const():
        if base.realized is None:
            base.forced_realize = True
        return lb
    if can_view(lb) and (base.realized is not None or checks.is_disk(lb.device)):
        return buffer_view(lb, lb.dtype, lb.shape)
    if 0 in lb.shape:  # an empty view is consecutive, also on DISK: `create` makes it an empty CONST
        return node.create(lb.device, tracker(lb.shape), lb.dtype, LOAD_CONTIGUOUS, None, (lb,))
    checks.check_compute_device("CONTIGUOUS of a non-consecutive view", lb.device)
    ret = node.create(lb.device, tracker(lb.shape), lb.dtype, LOAD_CONTIGUOUS, None, (lb,))
    if ret.base is ret and ret.op is LOAD_CONTIGUOUS:
        inverted = lb.st.invert(base.shape)
        if inverted is not None:
            base.contiguous_child = (weakref.ref(ret), inverted)
    return ret


OPERATIONS.contiguous = contiguous


# ---------------------------------------------------------------- copies

def copy_to_device(lb: LazyBuffer, device: str, force: bool) -> LazyBuffer:
    """Same device -> lb (unless `force`); a copy of an unrealized, not-since-assigned COPY -> one copy
    of the original source; an unrealized constant -> the same constant on the target (except on
    DISK, which holds no CONST); a view reading fewer elements than its base -> made contiguous first
    (on DISK, the covering bytes are copied instead); a view copied onto DISK -> made contiguous first;
    otherwise copy the base and re-apply the view."""
    if device == lb.device and not force:
        return lb
    base = lb.base
    whole = lb.st.contiguous and lb.size == base.size
    if not force and whole and base.op is LOAD_COPY and base.realized is None and not base.stale_reads():
        return base.srcs[0].copy_to_device(device).reshape(lb.shape)
    if checks.is_disk(device) and not checks.is_disk(lb.device) and not whole:
        return _copy(lb.contiguous(), device)  # a file holds its values in order: never a view re-applied
    if lb.is_unrealized_const() and not checks.is_disk(device):
        const = node.create(device, tracker(base.shape), base.dtype, LOAD_CONST, base.arg)
        return node.reapply(const, lb.st)
    if isinstance(lb.size, int) and isinstance(base.size, int) and lb.size < base.size:
        if checks.is_disk(lb.device) and not lb.st.consecutive:
            return _copy_covering(lb, device)
        return _copy(lb.contiguous(), device)
    return node.reapply(_copy(base, device), lb.st)


OPERATIONS.copy_to_device = copy_to_device


def disk_assign_value(value: LazyBuffer) -> LazyBuffer:
    """The value an ASSIGN into DISK copies from (the engine runs it as a byte copy into the target).
    An unrealized COPY onto DISK is skipped: its source (on another device, read through the same
    view) is copied straight into the target, so the value never occupies the file's first bytes
    (every new DISK Buffer maps the file from byte 0) before the target is written."""
    base = value.base
    if base.op is not LOAD_COPY or base.realized is not None or base.stale_reads():
        return value
    return node.reapply(base.srcs[0], value.st) if value is not base else base.srcs[0]


def _copy(source: LazyBuffer, device: str) -> LazyBuffer:
    return node.create(device, tracker(source.shape), source.dtype, LOAD_COPY, None, (source,))


def covering_range(st: ShapeTracker, base_size: int) -> tuple[int, int] | None:
    """[low, high) of the base elements `st.views[0]` can read at valid positions, clamped to the
    base; None when symbolic or when no position is valid."""
    first = st.views[0]
    low, high = first.offset, first.offset
    if first.all_invalid or not isinstance(low, int) or not isinstance(high, int):
        return None
    for stride, (start, end) in zip(first.strides, first.ranges(), strict=True):
        if not (isinstance(stride, int) and isinstance(start, int) and isinstance(end, int)) or end <= start:
            return None
        low += stride * (start if stride >= 0 else end - 1)
        high += stride * (end - 1 if stride >= 0 else start)
    return max(low, 0), min(high + 1, base_size)


def _copy_covering(lb: LazyBuffer, device: str) -> LazyBuffer:
    """Copy the consecutive span of a DISK base that `lb` reads, then re-apply lb's view to it."""
    base = lb.base
    base_size = base.size if isinstance(base.size, int) else None
    span = None if base_size is None else covering_range(lb.st, base_size)
    if span is None or base_size is None or span == (0, base_size):
        return node.reapply(_copy(base, device), lb.st)
    low, high = span
    window = base.reshape((base_size,)).shrink(((low, high),)).contiguous()
    copied = _copy(window, device)
    first = lb.st.views[0]
    rebased = View.create(first.shape, first.strides, first.offset - low, first.mask)
    return node.view_of(copied, ShapeTracker((rebased, *lb.st.views[1:])))


# ---------------------------------------------------------------- assign and from_numpy

def assign(target: LazyBuffer, value: LazyBuffer) -> LazyBuffer:
    """The ASSIGN node writing `value` into `target`'s memory when realized (both validated by
    `checks.check_assign`); a zero-size target, having nothing to write, is returned itself. At most
    one unrealized assign per memory: a second one is a RuntimeError."""
    node.forget_cached(target)  # its memory will stop holding "op of srcs": rebuilding that op must not find it
    if checks.is_disk(target.device):
        value = disk_assign_value(value)
    if 0 in target.shape:  # no element to write: the realized target already is the result
        return target
    root = target.base.buffer.base
    pending = _PENDING_ASSIGNS.get(id(root))
    if pending is not None and pending.realized is None:
        raise RuntimeError(f"ASSIGN: {target!r} already has an unrealized assign pending; realize it first")
    ret = node.create(target.device, tracker(target.shape), target.dtype, LOAD_ASSIGN, None, (value, target))
    _PENDING_ASSIGNS[id(root)] = ret
    return ret


OPERATIONS.assign = assign


def from_numpy(array: Any, device: str) -> LazyBuffer:
    """A realized buffer holding a snapshot of `array` (later writes to the array do not show)."""
    device = Device.canonicalize(device)
    data = np.asarray(array)
    dtype = dtypes.from_numpy(data.dtype)
    shape = tuple(int(size) for size in data.shape)
    if not data.size:  # not through `create`, which turns zero-size graphs into CONST: the result is
        ret = LazyBuffer(device, tracker(shape), dtype, LOAD_EMPTY)  # a realized (0-byte) buffer,
        ret.buffer.allocate()  # so it can be assigned into like any other
        return ret
    ret = LazyBuffer.loadop(LOAD_EMPTY, shape, dtype, device)
    flat = np.ascontiguousarray(data, dtype=dtype.storage_np).reshape(-1).view(np.uint8)
    ret.buffer.copyin(flat.data)
    return ret
