"""Validation of every LazyBuffer operation, run before anything is built (so nothing is half-built).

Error types follow SPEC §1 and docs/semantics.md: a wrong op kind or operand count, a dtype
mismatch or an op undefined for a dtype is a TypeError; a wrong shape, axis, permutation or range is
a ValueError; compute on DISK (or assigning into an unrealized buffer) is a RuntimeError. Every
message names the op and the offending values. Checks are pure: they read their arguments only.

This module never imports fast/graph/node.py (node.py validates through it before it builds): a
lazy buffer is read through the `Operand` protocol, and the checks that must tell a lazy buffer from
anything else take its class as `node_type`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, ReduceOps, TernaryOps, UnaryOps, not_a, result_dtype, supports
from fast.shape.symbolic import Node, all_int, is_sint, sint

if TYPE_CHECKING:
    from fast.device import Buffer


class Operand(Protocol):
    """What validation reads of a lazy buffer (fast/graph/node.py's LazyBuffer)."""

    @property
    def device(self) -> str: ...

    @property
    def shape(self) -> tuple[sint, ...]: ...

    @property
    def dtype(self) -> DType: ...

    @property
    def base(self) -> Operand: ...

    @property
    def realized(self) -> Buffer | None: ...


Lazy = TypeVar("Lazy", bound=Operand)

ARITY: dict[type, int] = {UnaryOps: 1, BinaryOps: 2, TernaryOps: 3}


def is_disk(device: str) -> bool:
    return device.startswith("DISK:")


def check_compute_device(opname: str, device: str) -> None:
    """DISK buffers only load, store and view: any computation on them is a RuntimeError."""
    if is_disk(device):
        raise RuntimeError(f"{opname}: device {device} cannot compute (DISK supports loads, copies and views only)")


def check_dtype(opname: str, dtype: object) -> DType:
    if not isinstance(dtype, DType) or dtype.count != 1:
        raise TypeError(not_a(opname, dtype, "a scalar DType"))
    return dtype


def check_lazy(opname: str, value: object, node_type: type[Lazy]) -> Lazy:
    """`value` when it is a `node_type` (the LazyBuffer class), else TypeError."""
    if not isinstance(value, node_type):
        raise TypeError(f"{opname}: expected a LazyBuffer operand, got {type(value).__name__}")
    return value


def check_shape(opname: str, shape: object) -> tuple[sint, ...]:
    """A shape: a tuple/list of non-negative ints (or symbolic Nodes). Fast path: a tuple of plain
    non-negative ints is returned as it is (C-level tests only)."""
    if type(shape) is tuple and all_int(shape) and (not shape or min(shape) >= 0):
        return shape
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"{opname}: shape must be a tuple of sizes, got {shape!r}")
    for size in shape:
        if not is_sint(size):
            raise TypeError(f"{opname}: sizes must be ints, got {size!r} in {shape!r}")
        if isinstance(size, int) and size < 0:
            raise ValueError(f"{opname}: sizes must be non-negative, got {tuple(shape)}")
    return tuple(shape)


def check_elementwise(op: object, srcs: tuple[object, ...], node_type: type[Operand]) -> DType:
    """Validate `e(op, *srcs)` (srcs includes self; every operand must be a `node_type`, the LazyBuffer
    class); returns the result dtype. (A hot path: loops, not generators, names looked up only for
    messages, one memoised lookup per (op, dtype).)"""
    if type(op) is BinaryOps and len(srcs) == 2:  # the common case, checked in one go
        first, other = srcs
        if type(first) is node_type and type(other) is node_type and other.dtype is first.dtype \
                and other.device == first.device and other.shape == first.shape \
                and not first.device.startswith("DISK:"):
            known = _SUPPORTED.get((id(op), first.dtype))
            if known is not None and known is not False:
                return known  # type: ignore[return-value]
    arity = ARITY.get(type(op))
    if arity is None or op is UnaryOps.CAST or op is UnaryOps.BITCAST:
        _reject_op(op)
    if len(srcs) != arity:
        raise TypeError(f"{_name(op)}: takes {arity} operands (self included), got {len(srcs)}")
    for src in srcs:
        if type(src) is not node_type:
            check_lazy(_name(op), src, node_type)
    operands: tuple[Operand, ...] = srcs  # type: ignore[assignment]
    first = operands[0]
    device, shape = first.device, first.shape
    if device.startswith("DISK:"):
        check_compute_device(_name(op), device)
    for other in operands[1:]:
        if other.device != device:
            raise ValueError(f"{_name(op)}: operands on different devices {device} and {other.device}")
        if other.shape != shape:
            raise ValueError(f"{_name(op)}: shape mismatch {shape} vs {other.shape}")
    dtype = _value_dtype(op, operands)
    result = _SUPPORTED.get((id(op), dtype))
    if result is None:
        result = _SUPPORTED[(id(op), dtype)] = result_dtype(op, dtype) if supports(op, dtype) else False  # type: ignore[arg-type]
    if result is False:  # (otherwise a DType)
        raise TypeError(f"{_name(op)} is not defined for dtype {dtype.name}")
    return result  # type: ignore[return-value]


def _value_dtype(op: object, operands: tuple[Operand, ...]) -> DType:
    """The dtype every value operand shares (WHERE: the last two, after a bool condition), else TypeError."""
    first = operands[0]
    is_where = op is TernaryOps.WHERE
    if is_where and first.dtype is not dtypes.bool and first.dtype != dtypes.bool:
        raise TypeError(f"WHERE: condition must be bool, got {first.dtype.name}")
    dtype = operands[1].dtype if is_where else first.dtype
    for value in operands[2:] if is_where else operands[1:]:
        if value.dtype is not dtype and value.dtype != dtype:
            values = operands[1:] if is_where else operands
            raise TypeError(f"{_name(op)}: dtype mismatch {', '.join(v.dtype.name for v in values)}")
    return dtype


def _name(op: object) -> str:
    return op.name  # type: ignore[attr-defined,no-any-return]


# (id(op), operand dtype) -> result dtype, or False when the op is not defined for the dtype. By id(op):
# enum members live as long as the process.
_SUPPORTED: dict[tuple[int, DType], DType | bool] = {}


def _reject_op(op: object) -> NoReturn:
    """The TypeError for an op that e() does not build."""
    opname = getattr(op, "name", repr(op))
    if isinstance(op, ReduceOps):
        raise TypeError(f"e: {opname} is a reduce op; use r({opname}, axis)")
    if op is UnaryOps.CAST or op is UnaryOps.BITCAST:
        raise TypeError(f"e: {opname} must be built with cast(dtype, bitcast=...)")
    raise TypeError(not_a("e", op, "an elementwise op"))


def check_reduce(op: object, axis: object, shape: tuple[sint, ...], device: str) -> tuple[int, ...]:
    """Validate `r(op, axis)`; returns the axes as a tuple."""
    if not isinstance(op, ReduceOps):
        raise TypeError(not_a("r", op, "a ReduceOps member"))
    check_compute_device(op.name, device)
    if not isinstance(axis, (tuple, list)) or not all(isinstance(a, int) and not isinstance(a, bool) for a in axis):
        raise ValueError(f"{op.name}: axis must be a tuple of ints, got {axis!r}")
    if any(not 0 <= a < len(shape) for a in axis):
        raise ValueError(f"{op.name}: axis {tuple(axis)} out of range for shape {shape}")
    if len(set(axis)) != len(axis):
        raise ValueError(f"{op.name}: axis {tuple(axis)} repeats an axis")
    return tuple(axis)


def _symbolic(shape: Sequence[Any]) -> bool:
    return any(isinstance(size, Node) for size in shape)


def _bound_count(shape: Sequence[sint]) -> int | None:
    """The element count at the bound Variables' values; None when a size is not bound."""
    count = 1
    for size in shape:
        value = bound_value(size)
        if value is None:
            return None
        count *= value
    return count


def check_reshape(shape: tuple[sint, ...], new_shape: object) -> tuple[sint, ...]:
    checked = check_shape("reshape", new_shape)
    old: int | None
    new: int | None
    if all_int(checked) and all_int(shape):  # the non-symbolic case: plain element counts
        old, new = math.prod(shape), math.prod(checked)  # type: ignore[arg-type,assignment]
    else:
        old, new = _bound_count(shape), _bound_count(checked)  # bound Variables: their values are used
    if old is not None and new is not None and old != new:
        raise ValueError(f"reshape: cannot reshape {shape} ({old} elements) to {checked} ({new} elements)")
    return checked


def _check_length(opname: str, shape: tuple[sint, ...], argument: object) -> Sequence[Any]:
    if not isinstance(argument, (tuple, list)) or len(argument) != len(shape):
        raise ValueError(f"{opname}: expected {len(shape)} entries for shape {shape}, got {argument!r}")
    return argument


def _check_pairs(opname: str, shape: tuple[sint, ...], argument: object) -> tuple[tuple[sint, sint], ...]:
    pairs = _check_length(opname, shape, argument)
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(is_sint(x) for x in pair):
            raise ValueError(f"{opname}: entries must be pairs of ints, got {pair!r} in {argument!r}")
    return tuple((pair[0], pair[1]) for pair in pairs)


def check_pad(shape: tuple[sint, ...], arg: object) -> tuple[tuple[sint, sint], ...]:
    pairs = _check_pairs("pad", shape, arg)
    if any((value := bound_value(x)) is not None and value < 0 for pair in pairs for x in pair):
        raise ValueError(f"pad: amounts must be non-negative, got {arg!r}")
    return pairs


def check_shrink(shape: tuple[sint, ...], arg: object) -> tuple[tuple[sint, sint], ...]:
    pairs = _check_pairs("shrink", shape, arg)
    for (start, end), size in zip(pairs, shape, strict=True):
        values = [bound_value(x) for x in (start, end, size)]  # bound Variables: their values are used
        if None not in values and not 0 <= values[0] <= values[1] <= values[2]:  # type: ignore[operator]
            raise ValueError(f"shrink: range ({start}, {end}) invalid for an axis of size {size} "
                             f"(need 0 <= start <= end <= size); shape {shape}, arg {arg!r}")
    return pairs


def bound_value(size: sint) -> int | None:
    """The value of a size: an int, or a symbolic size whose Variables are all bound; else None."""
    if not isinstance(size, Node):
        return size
    try:
        return size.evaluate({})
    except ValueError:
        return None


def check_expand(shape: tuple[sint, ...], new_shape: object) -> tuple[sint, ...]:
    """Validate an expand; returns the result shape. A symbolic size asked to become the int its
    bound Variables give it keeps its symbolic size (shapes stay symbolic; see `to_numpy`)."""
    checked = check_shape("expand", new_shape)
    _check_length("expand", shape, checked)
    if all_int(shape) and all_int(checked):  # the non-symbolic case: no size is resolved
        for old, new in zip(shape, checked, strict=True):
            if old != new and old != 1:
                raise ValueError(f"expand: cannot expand {shape} to {checked} (only size-1 axes may change)")
        return checked
    resolved: list[sint] = []
    for old, new in zip(shape, checked, strict=True):
        if old != new and isinstance(old, Node) and isinstance(new, int) and bound_value(old) == new:
            new = old
        elif old != new and old != 1:
            raise ValueError(f"expand: cannot expand {shape} to {checked} (only size-1 axes may change)")
        resolved.append(new)
    return tuple(resolved)


def check_permute(shape: tuple[sint, ...], order: object) -> tuple[int, ...]:
    if type(order) is tuple and all_int(order) and sorted(order) == list(range(len(shape))):
        return order  # the common case: a tuple of plain ints (C-level tests only)
    if not isinstance(order, (tuple, list)) or not all(isinstance(a, int) and not isinstance(a, bool)
                                                         for a in order) \
            or sorted(order) != list(range(len(shape))):
        raise ValueError(f"permute: {order!r} is not a permutation of the {len(shape)} axes of {shape}")
    return tuple(order)


def check_stride(shape: tuple[sint, ...], steps: object) -> tuple[int, ...]:
    checked = _check_length("stride", shape, steps)
    if not all(isinstance(k, int) and not isinstance(k, bool) and k != 0 for k in checked):
        raise ValueError(f"stride: steps must be nonzero ints, got {steps!r}")
    return tuple(checked)


def check_bitcast(source: DType, target: DType, device: str, shape: tuple[sint, ...]) -> tuple[sint, ...]:
    """Validate a bitcast; returns the result shape (only DISK may change the last axis)."""
    if dtypes.bool in (source, target):
        raise TypeError(f"BITCAST: bool cannot be bitcast ({source.name} -> {target.name})")
    if source.itemsize == target.itemsize:
        return shape
    if not is_disk(device):
        raise TypeError(f"BITCAST: itemsizes differ ({source.name} {source.itemsize} bytes -> {target.name} "
                        f"{target.itemsize} bytes); shape-changing bitcast is only supported on DISK, not {device}")
    last = shape[-1] if shape else None
    if not isinstance(last, int) or _symbolic(shape) or (last * source.itemsize) % target.itemsize:
        raise ValueError(f"BITCAST: shape {shape} of {source.name} cannot be reinterpreted as {target.name} "
                         "(the last axis' bytes must divide evenly)")
    return (*shape[:-1], last * source.itemsize // target.itemsize)


def check_assign(target: Operand, value: object, node_type: type[Lazy]) -> Lazy:
    """Validate `target.assign(value)`: the target is a realized base (a view of one is a RuntimeError,
    like an unrealized target), and the value has its shape, dtype and device. A zero-size target
    holds no values, so only shape, dtype and device are checked (docs/api.md)."""
    x = check_lazy("ASSIGN", value, node_type)
    if (target.base is not target or target.realized is None) and 0 not in target.shape:
        raise RuntimeError(f"ASSIGN: the target must be a realized buffer (not a view, not an unrealized graph), "
                           f"got {target!r}")
    if x.shape != target.shape:
        raise ValueError(f"ASSIGN: shape mismatch, target {target.shape} vs value {x.shape}")
    if x.dtype != target.dtype:
        raise TypeError(f"ASSIGN: dtype mismatch, target {target.dtype.name} vs value {x.dtype.name}")
    if x.device != target.device:
        raise ValueError(f"ASSIGN: device mismatch, target {target.device} vs value {x.device}")
    return x


def check_gather(x: Operand, indices: object, axis: object, node_type: type[Lazy]) -> tuple[Lazy, int]:
    """Validate `x.gather(indices, axis)`; returns (indices, axis). `indices` must be a `node_type` of an
    integer dtype on x's device (a compute device); `axis` an int in [0, x.ndim). A non-empty gather
    from an axis of size 0 is an IndexError here (every index is out of range; docs/semantics.md)."""
    idx = check_lazy("gather", indices, node_type)
    if not dtypes.is_int(idx.dtype):
        raise TypeError(f"gather: indices must have an integer dtype, got {idx.dtype.name}")
    if type(axis) is not int or not 0 <= axis < len(x.shape):
        raise ValueError(f"gather: axis {axis!r} is out of range for shape {x.shape}")
    if idx.device != x.device:
        raise ValueError(f"gather: x is on {x.device} and indices on {idx.device}")
    check_compute_device("gather", x.device)
    rest = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])
    if bound_value(x.shape[axis]) == 0 and _bound_count(rest) != 0:
        raise IndexError(f"gather: cannot take indices of shape {idx.shape} from axis {axis} of size 0 "
                         f"(shape {x.shape})")
    return idx, axis


def check_matmul(a: Operand, other: object, node_type: type[Lazy]) -> tuple[Lazy, tuple[sint, ...]]:
    """Validate `a.matmul(other)`; returns (other, the result's batch axes). Both operands at least 2-d,
    on one compute device, of one dtype, a's last size equal to other's second last (K), and the
    axes before the last two broadcasting as numpy's do (aligned on the right; each pair equal or
    one of them 1). Sizes given by bound Variables compare by their values."""
    b = check_lazy("matmul", other, node_type)
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ValueError(f"matmul: operands must be at least 2-d, got shapes {a.shape} and {b.shape}")
    if b.device != a.device:
        raise ValueError(f"matmul: operands live on different devices {a.device} and {b.device}")
    check_compute_device("matmul", a.device)
    if b.dtype != a.dtype:
        raise TypeError(f"matmul: operand dtypes differ: {a.dtype.name} and {b.dtype.name}")
    if bound_value(a.shape[-1]) != bound_value(b.shape[-2]):
        raise ValueError(f"matmul: the inner sizes differ: shapes {a.shape} and {b.shape}")
    left, right = a.shape[:-2], b.shape[:-2]
    if left == right and all_int(left):  # the common case: the same batch axes
        return b, left
    rank = max(len(left), len(right))
    left, right = (1,) * (rank - len(left)) + left, (1,) * (rank - len(right)) + right
    batch: list[sint] = []
    for x, y in zip(left, right, strict=True):
        vx, vy = bound_value(x), bound_value(y)
        if vx != vy and vx != 1 and vy != 1:
            raise ValueError(f"matmul: the batch axes of shapes {a.shape} and {b.shape} do not broadcast")
        batch.append(y if vx == 1 and vy != 1 else x)
    return b, tuple(batch)
