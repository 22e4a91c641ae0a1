"""Actions on single and multi values: leaves, constants, elementwise, movement, reduce, casts, copies.

Each action draws what it needs from the builder and appends valid steps; it returns False when the
pool has nothing it can work on (the caller then tries another action). Approx values (results of
transcendentals or float sums) only meet continuous ops; values whose zero sign is unspecified are
never a DIV denominator.
"""
from __future__ import annotations

import math

from hypothesis import strategies as st

from conformance.analysis import Info
from conformance.program import (
    CUSTOM_FUNCS,
    Cast,
    ConstLike,
    Contiguous,
    Copy,
    Custom,
    Elementwise,
    LoadConst,
    Movement,
    Realize,
    Reduce,
    Shape,
)
from conformance.strategies.builder import Builder
from conformance.strategies.data import const_values
from conformance.vocab import BINARY, COMPARE, DTYPES, FLOATS, UNARY, bitcast_partners, supports


def compute(info: Info) -> bool:
    """A value compute ops may read (not on DISK)."""
    return not info.disk


def act_leaf(b: Builder) -> bool:
    b.leaf(b.choose(DTYPES), b.shape(), b.device())
    return True


def act_const(b: Builder) -> bool:
    source = b.pick(compute)
    if source is None or b.chance(0.3):
        dtype = b.choose(DTYPES)
        b.add(LoadConst(b.shape(), dtype, b.device(), b.draw(const_values(dtype))))
        return True
    info = b.info(source)
    shape = None if info.multi or b.chance(0.6) else b.shape()
    b.add(ConstLike(source, b.draw(const_values(info.dtype)), shape))
    return True


def unary_ops(info: Info) -> list[str]:
    return [op for op in UNARY if supports(op, info.dtype) and (op == "NEG" or not info.approx)]


def act_unary(b: Builder) -> bool:
    """A unary op; half the time on a float value (made if the pool has none) for the float-only ops."""
    if b.chance(0.5):
        x = b.pick(lambda i: compute(i) and i.is_float and not i.approx)
        if x is None:
            x = b.leaf(b.choose(sorted(FLOATS)), b.shape(), b.device())
    else:
        x = b.pick(lambda i: compute(i) and bool(unary_ops(i)))
    if x is None:
        return False
    b.add(Elementwise(b.choose(unary_ops(b.info(x))), (x,)))
    return True


def binary_ops(info: Info) -> list[str]:
    return [op for op in BINARY if supports(op, info.dtype) and not (info.approx and op in COMPARE)]


def act_binary(b: Builder) -> bool:
    x = b.pick(lambda i: compute(i) and bool(binary_ops(i)))
    if x is None:
        return False
    info = b.info(x)
    op = b.choose(binary_ops(info))
    other = b.partner(x, exact=op in COMPARE or op == "DIV", sign_safe=op == "DIV")
    swap = b.chance(0.5) and not (op == "DIV" and (info.approx or info.zero_sign))
    b.add(Elementwise(op, (other, x) if swap else (x, other)))
    return True


def act_ternary(b: Builder) -> bool:
    x = b.pick(compute)
    if x is None:
        return False
    info = b.info(x)
    if supports("MULACC", info.dtype) and b.chance(0.4):
        y, z = b.partner(x), b.partner(x)
        order = b.choose(((x, y, z), (y, x, z), (y, z, x)))
        b.add(Elementwise("MULACC", order))
        return True
    cond, other = b.bool_like(x), b.partner(x)
    b.add(Elementwise("WHERE", (cond, x, other) if b.chance(0.5) else (cond, other, x)))
    return True


def random_reshape(b: Builder, shape: Shape) -> Shape:
    """A random shape with the same element count (prime factors regrouped, 1s inserted)."""
    size = math.prod(shape)
    if size == 0:
        return b.choose(((0,), (*shape, 1), tuple(reversed(shape)), (1, 0)))
    factors, n, p = [], size, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    groups = b.integer(1, 4)
    dims = [1] * groups
    for f in factors:
        dims[b.integer(0, groups - 1)] *= f
    if b.chance(0.3):
        dims.insert(b.integer(0, len(dims)), 1)
    return tuple(dims)


def movement_arg(b: Builder, info: Info, kind: str) -> tuple | None:  # type: ignore[type-arg]
    """A valid argument for movement `kind` on `info` (sharded axis left alone), or None."""
    shape, axis = info.shape, info.layout.axis if info.layout is not None else None
    if kind == "reshape":
        return random_reshape(b, shape)
    if kind == "permute":
        return tuple(b.draw(st.permutations(range(len(shape)))))
    if kind == "expand":
        if 1 not in shape:
            return None
        return tuple(s if s != 1 or i == axis else b.choose((1, 2, 3, 4)) for i, s in enumerate(shape))
    if kind == "pad":
        return tuple((0, 0) if i == axis else (b.integer(0, 2), b.integer(0, 2)) for i in range(len(shape)))
    if kind == "shrink":
        out = []
        for i, s in enumerate(shape):
            start = 0 if i == axis else b.integer(0, s)
            out.append((start, s if i == axis else b.integer(start, s)))
        return tuple(out)
    return tuple(1 if i == axis else b.choose((1, -1, 2, -2, 3)) for i in range(len(shape)))


def act_movement(b: Builder, kind: str | None = None) -> bool:
    x = b.pick(lambda i: True)
    if x is None:
        return False
    kind = kind or b.choose(("reshape", "permute", "pad", "shrink", "stride", "expand"))
    info = b.info(x)
    if kind == "expand" and 1 not in info.shape:
        position = b.integer(0, len(info.shape))
        inserted = b.try_add(Movement(x, "reshape", info.shape[:position] + (1,) + info.shape[position:]))
        if inserted is None:
            return False
        x, info = inserted, b.info(inserted)
    for _ in range(3):
        arg = movement_arg(b, info, kind)
        moved = None if arg is None else b.try_add(Movement(x, kind, arg))
        if moved is not None:
            if kind != "reshape" and b.chance(0.3):  # a reshape that cannot merge into the view before
                b.try_add(Movement(moved, "reshape", random_reshape(b, b.info(moved).shape)))
            return True
    return False


def act_reduce(b: Builder) -> bool:
    x = b.pick(lambda i: compute(i) and len(i.shape) > 0)
    if x is None:
        return False
    rank = len(b.info(x).shape)
    axes = tuple(sorted(b.draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank))))
    b.add(Reduce(x, b.choose(("SUM", "MAX")), axes))
    return True


ROW_OPS = ("ADD", "SUB", "MUL", "MAX", "DIV")


def act_row_chain(b: Builder) -> bool:
    """Reductions over the same rows with elementwise work between them, each reduced row read back
    along the row (softmax- and layernorm-shaped: `fast` runs them as one row kernel), sometimes
    ending in two reductions of the same rows combined (one kernel too)."""
    x = b.pick(lambda i: compute(i) and not i.multi and len(i.shape) > 0 and 0 not in i.shape
               and any(op in binary_ops(i) for op in ROW_OPS))
    if x is None:
        return False
    info = b.info(x)
    axes = tuple(sorted(b.draw(st.sets(st.integers(0, len(info.shape) - 1), min_size=1, max_size=2))))
    ops = [op for op in ROW_OPS if op in binary_ops(info) and (op != "DIV" or not info.approx)]
    value = x
    for _ in range(b.integer(1, 2)):
        reduced = b.add(Reduce(value, b.choose(("SUM", "MAX")), axes))
        back = b.try_add(Movement(reduced, "expand", info.shape))
        if back is None:
            return True
        value = b.add(Elementwise(b.choose(ops), (value, back) if b.chance(0.7) else (back, value)))
    if b.chance(0.3):
        b.add(Elementwise(b.choose(ops), (b.add(Reduce(value, "SUM", axes)), b.add(Reduce(value, "MAX", axes)))))
    return True


def act_cast(b: Builder) -> bool:
    x = b.pick(compute)
    if x is None:
        return False
    info = b.info(x)
    targets = [d for d in DTYPES if not info.approx or d in FLOATS]
    b.add(Cast(x, b.choose(targets)))
    return True


def act_bitcast(b: Builder) -> bool:
    x = b.pick(lambda i: compute(i) and not i.approx and bool(bitcast_partners(i.dtype)))
    if x is None:
        return False
    b.add(Cast(x, b.choose(bitcast_partners(b.info(x).dtype)), bitcast=True))
    return True


def act_contiguous(b: Builder) -> bool:
    x = b.pick(compute)
    if x is None:
        return False
    b.add(Contiguous(x))
    return True


def act_copy(b: Builder) -> bool:
    """Copy a single-device value to another device (sometimes DISK, sometimes forced in place)."""
    x = b.pick(lambda i: not i.multi)
    if x is None:
        return False
    info = b.info(x)
    if b.cfg.disk_dir is not None and not info.disk and b.chance(0.3):
        b.add(Copy(x, b.disk_device()))
        return True
    if not info.disk and b.chance(0.2):
        b.add(Copy(x, info.device, force=True))
        return True
    b.add(Copy(x, b.choose(b.cfg.single_devices())))
    return True


def act_realize(b: Builder) -> bool:
    x = b.pick(lambda i: True)
    if x is None:
        return False
    items = [x]
    other = b.pick(lambda i: True)
    if other is not None and other != x and b.chance(0.4):
        items.append(other)
    b.add(Realize(tuple(items)))
    return True


def act_custom(b: Builder) -> bool:
    name = b.choose(tuple(CUSTOM_FUNCS))
    if name in ("copy", "flip"):  # the output is compared exactly: only exact, sign-safe sources
        x = b.pick(lambda i: compute(i) and not i.multi and not i.aux and not i.zero_sign)
        if x is None:
            return False
        info = b.info(x)
        b.add(Custom(name, (x,), info.shape, info.dtype, info.device))
        return True
    dtype = b.choose([d for d in DTYPES if d != "bool"])
    b.add(Custom(name, (), b.shape(), dtype, b.device()))
    return True

