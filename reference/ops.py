"""Op enums and the numpy implementation of every op on stored arrays, per docs/semantics.md.

Integers compute modulo 2**64 in uint64 and are then truncated to their dtype (two's complement
wrap). Floats compute in float32 (half dtypes) or their own precision and are rounded once per op.
"""
from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import numpy as np

from reference.dtype import Array, DType, dtypes, from_float, to_compute

UnaryOps = Enum("UnaryOps", "EXP2 LOG2 CAST BITCAST SIN SQRT NEG")
BinaryOps = Enum("BinaryOps", "ADD SUB MUL DIV MAX MOD CMPLT CMPEQ XOR")
TernaryOps = Enum("TernaryOps", "WHERE MULACC")  # WHERE(cond, a, b); MULACC(a, b, c) = a*b + c
ReduceOps = Enum("ReduceOps", "SUM MAX")
LoadOps = Enum("LoadOps", "EMPTY CONST COPY CONTIGUOUS CUSTOM ASSIGN VIEW")  # VIEW: a movement op
GatherOps = Enum("GatherOps", "GATHER")  # LazyBuffer.gather(indices, axis): arg is the axis

Op = UnaryOps | BinaryOps | TernaryOps | ReduceOps | LoadOps | GatherOps
ARITY = {UnaryOps: 1, BinaryOps: 2, TernaryOps: 3}
TRANSCENDENTAL = {UnaryOps.EXP2: np.exp2, UnaryOps.LOG2: np.log2, UnaryOps.SIN: np.sin, UnaryOps.SQRT: np.sqrt}


def not_a(where: str, value: object, expected: str) -> str:
    """The TypeError message for ``value`` given to ``where`` in place of ``expected``; an op or DType of
    another package (``fast``'s given to ``reference``) is named with its package (each has its own)."""
    owner = type(value).__module__.split(".")[0]
    is_dtype = type(value).__name__ == "DType"
    if owner == "reference" or not (isinstance(value, Enum) or is_dtype):
        return f"{where}: {value!r} is not {expected}"
    name = getattr(value, "name", "?")
    name = f"dtypes.{name}" if is_dtype else f"{type(value).__name__}.{name}"
    return (f"{where}: {name} belongs to package {owner!r}, not 'reference' (each package has its own op enums "
            f"and dtypes): use reference.{name}")


def check_op_dtype(op: Op, dt: DType) -> None:
    """TypeError when ``op`` is not defined for operand dtype ``dt`` (docs/semantics.md)."""
    bad = (dt.kind == "b" and op in (UnaryOps.NEG, BinaryOps.SUB, BinaryOps.DIV)) or \
          (dt.kind == "f" and op in (BinaryOps.MOD, BinaryOps.XOR)) or \
          (dt.kind != "f" and op in TRANSCENDENTAL)
    if bad:
        raise TypeError(f"{op.name} is not defined for dtype {dt.name}")


def _u64(a: Array) -> Array:
    """Integers as uint64, two's complement (numpy's int->uint64 cast keeps the low bits)."""
    return a.astype(np.uint64)


def _divmod_int(a: Array, b: Array, dt: DType) -> tuple[Array, Array]:
    """Integer DIV and MOD: truncation toward zero, x/0 = 0, x%0 = x, MIN/-1 = MIN, MIN%-1 = 0."""
    ua, ub = _u64(a), _u64(b)
    neg_a = a < 0 if dt.kind == "i" else np.zeros(a.shape, bool)
    neg_b = b < 0 if dt.kind == "i" else np.zeros(b.shape, bool)
    mag_a = np.where(neg_a, np.uint64(0) - ua, ua)  # |MIN| is exactly 2**(bits-1) in uint64
    mag_b = np.where(neg_b, np.uint64(0) - ub, ub)
    zero = ub == 0
    safe_b = np.where(zero, np.uint64(1), mag_b)
    q, r = mag_a // safe_b, mag_a % safe_b
    q = np.where(neg_a ^ neg_b, np.uint64(0) - q, q)
    r = np.where(neg_a, np.uint64(0) - r, r)
    return np.where(zero, np.uint64(0), q).astype(dt.storage), np.where(zero, ua, r).astype(dt.storage)


def _bool_op(op: Op, s: list[Array]) -> Array:
    """Bool semantics: ADD/MAX or, MUL and, MOD ``a and not b``, MULACC ``(a and b) or c``."""
    table: dict[Op, Callable[[], Array]] = {
        BinaryOps.ADD: lambda: s[0] | s[1], BinaryOps.MAX: lambda: s[0] | s[1],
        BinaryOps.MUL: lambda: s[0] & s[1], BinaryOps.MOD: lambda: s[0] & ~s[1],
        BinaryOps.XOR: lambda: s[0] ^ s[1], TernaryOps.MULACC: lambda: (s[0] & s[1]) | s[2]}
    return table[op]()


def _int_op(op: Op, dt: DType, s: list[Array]) -> Array:
    """Integer semantics: ADD SUB MUL NEG MULACC wrap (computed modulo 2**64), DIV/MOD explicit."""
    if op in (BinaryOps.DIV, BinaryOps.MOD):
        return _divmod_int(s[0], s[1], dt)[op is BinaryOps.MOD]
    if op is BinaryOps.MAX:
        return np.maximum(s[0], s[1])
    if op is BinaryOps.XOR:
        return np.bitwise_xor(s[0], s[1])
    u = [_u64(x) for x in s]
    table: dict[Op, Callable[[], Array]] = {
        UnaryOps.NEG: lambda: np.uint64(0) - u[0], BinaryOps.ADD: lambda: u[0] + u[1],
        BinaryOps.SUB: lambda: u[0] - u[1], BinaryOps.MUL: lambda: u[0] * u[1],
        TernaryOps.MULACC: lambda: u[0] * u[1] + u[2]}
    return table[op]().astype(dt.storage)


def _float_op(op: Op, dt: DType, s: list[Array]) -> Array:
    """Float semantics: compute in float32 (halves) or own precision, round the result to ``dt``."""
    c = [to_compute(x, dt) for x in s]
    if op in TRANSCENDENTAL:  # evaluated in float64, then rounded (through float32 for halves)
        return from_float(TRANSCENDENTAL[op](c[0].astype(np.float64)), dt)
    if op is TernaryOps.MULACC:  # two roundings, never fused
        prod = from_float(c[0] * c[1], dt)
        return from_float(to_compute(prod, dt) + c[2], dt)
    table: dict[Op, Callable[[], Array]] = {
        UnaryOps.NEG: lambda: -c[0], BinaryOps.ADD: lambda: c[0] + c[1],
        BinaryOps.SUB: lambda: c[0] - c[1], BinaryOps.MUL: lambda: c[0] * c[1],
        BinaryOps.DIV: lambda: c[0] / c[1], BinaryOps.MAX: lambda: np.maximum(c[0], c[1])}
    return from_float(table[op](), dt)


def elementwise(op: Op, dt: DType, srcs: list[Array]) -> Array:
    """Apply elementwise ``op`` to stored arrays whose value dtype is ``dt`` (WHERE: of srcs[1])."""
    with np.errstate(all="ignore"):
        if op is TernaryOps.WHERE:
            return np.where(srcs[0], srcs[1], srcs[2])
        if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ):
            a, b = (to_compute(x, dt) for x in srcs)
            return np.less(a, b) if op is BinaryOps.CMPLT else np.equal(a, b)
        if dt.kind == "b":
            return _bool_op(op, srcs)
        return _float_op(op, dt, srcs) if dt.kind == "f" else _int_op(op, dt, srcs)


def reduce(op: ReduceOps, dt: DType, arr: Array, axis: tuple[int, ...]) -> Array:
    """SUM/MAX over ``axis`` keeping reduced axes as size 1; empty: 0 / the dtype's minimum."""
    with np.errstate(all="ignore"):
        if dt.kind == "b":
            return np.any(arr, axis=axis, keepdims=True)
        if op is ReduceOps.MAX:
            c = to_compute(arr, dt)
            out = np.max(c, axis=axis, keepdims=True, initial=dtypes.min(dt))
            return from_float(out, dt) if dt.kind == "f" else out.astype(dt.storage)
        if dt.kind == "f":
            c = to_compute(arr, dt)
            return from_float(np.sum(c, axis=axis, keepdims=True, dtype=c.dtype, initial=0.0), dt)
        return np.sum(_u64(arr), axis=axis, keepdims=True, dtype=np.uint64).astype(dt.storage)


def _float_to_int(x: Array, dst: DType) -> Array:
    """Truncate toward zero; NaN, inf and values whose truncation is out of range give 0."""
    t = np.trunc(x.astype(np.float64))
    lo, hi = float(dtypes.min(dst)), float(int(dtypes.max(dst)) + 1)  # powers of two: exact
    ok = np.isfinite(t) & (t >= lo) & (t < hi)
    return np.where(ok, t, 0.0).astype(dst.storage)


def cast(arr: Array, src: DType, dst: DType) -> Array:
    """Value-converting CAST of a stored array from ``src`` to ``dst``."""
    with np.errstate(all="ignore"):
        if dst.kind == "b":
            return to_compute(arr, src) != 0
        if src.kind != "f":  # bool or int source
            if dst.kind != "f":
                return arr.astype(dst.storage)  # int->int keeps the low bits
            return from_float(arr.astype(np.float64 if dst == dtypes.float64 else np.float32), dst)
        c = to_compute(arr, src)
        return _float_to_int(c, dst) if dst.kind != "f" else from_float(c, dst)


def bitcast(arr: Array, dst: DType) -> Array:
    """Reinterpret the bytes of a stored array (the last axis rescales if itemsizes differ); a view of
    ``arr`` when it is C-contiguous (e.g. a tensor of a mapped file: its bytes are read when used)."""
    return (arr if arr.flags.c_contiguous else np.array(arr, order="C")).view(dst.storage)


def gather(x: Array, indices: Array, axis: int) -> Array:
    """``x`` indexed along ``axis`` by integer ``indices`` (docs/semantics.md, "Gather"): an index in
    [-n, -1] counts from the end; any other index outside [0, n) is an IndexError, when the result has
    elements (an empty result reads nothing)."""
    n = x.shape[axis]
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1:]
    if 0 in shape:
        return np.zeros(shape, dtype=x.dtype)
    exact = [int(v) for v in indices.reshape(-1)]  # Python ints: no dtype can wrap here
    bad = [v for v in exact if not -n <= v < n]
    if bad:
        raise IndexError(f"take (gather): index {bad[0]} is out of bounds for axis {axis} with size {n} "
                         f"(indices must lie in [-{n}, {n}))")
    positions = np.array([v + n if v < 0 else v for v in exact], dtype=np.int64).reshape(indices.shape)
    return np.take(x, positions, axis=axis)
