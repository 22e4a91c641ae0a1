"""Deliberately invalid last steps, each with the error type docs/semantics.md and SPEC §1 give it.

Shapes, axes, permutations, ranges, device names and sharding rules: ValueError. Dtype mismatches,
ops a dtype does not support, bad bitcasts: TypeError. Compute on DISK and assigning into an
unrealized buffer: RuntimeError. Helper steps the misuse needs are valid and come first; the
invalid step is always the program's last.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from conformance import layout as lay
from conformance.analysis import Info
from conformance.program import Assign, Cast, Copy, Elementwise, LoadConst, Movement, Realize, Reduce, Shard, Step
from conformance.strategies.actions import random_reshape
from conformance.strategies.builder import Builder
from conformance.vocab import DTYPES, ITEMSIZE, OP_CLASS, bitcast_partners, supports


def _emit(b: Builder, step: Step, kind: str) -> str:
    b.steps.append(step)
    b.infos.append(None)
    return kind


def bad_shapes(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.disk and not i.multi and i.dtype != "bfloat16")
    if x is None:
        return None
    info = b.info(x)
    other_shape = (*info.shape, 2) if b.chance(0.5) else tuple(s + 1 for s in info.shape) or (2,)
    y = b.leaf(info.dtype, other_shape, info.device)
    op = next(o for o in ("ADD", "MAX", "CMPEQ") if supports(o, info.dtype))
    return _emit(b, Elementwise(op, (x, y)), "ValueError")


def bad_dtypes(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.disk)
    if x is None:
        return None
    info = b.info(x)
    other = b.add(Cast(x, b.choose([d for d in DTYPES if d != info.dtype])))
    if b.chance(0.2):
        cond = b.add(Cast(x, "bool")) if info.dtype != "bool" else x
        return _emit(b, Elementwise("WHERE", (cond, x, other)), "TypeError")
    op = b.choose(("ADD", "MAX", "CMPLT", "CMPEQ"))
    return _emit(b, Elementwise(op, (x, other)), "TypeError")


def bad_op_for_dtype(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.disk and any(not supports(o, i.dtype) for o in OP_CLASS))
    if x is None:
        return None
    info = b.info(x)
    op = b.choose([o for o in OP_CLASS if not supports(o, info.dtype)])
    arity = {"UnaryOps": 1, "BinaryOps": 2, "TernaryOps": 3}[OP_CLASS[op]]
    return _emit(b, Elementwise(op, (x,) * arity), "TypeError")


def bad_where_condition(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.disk and i.dtype != "bool")
    if x is None:
        return None
    return _emit(b, Elementwise("WHERE", (x, x, x)), "TypeError")


def bad_movement(b: Builder) -> str | None:
    x = b.pick(lambda i: len(i.shape) > 0)
    if x is None:
        return None
    shape = b.info(x).shape
    rank = len(shape)
    options: list[tuple[str, tuple]] = [  # type: ignore[type-arg]
        ("reshape", (math.prod(shape) + 1,)),
        ("permute", tuple(range(rank - 1)) + (0,) if rank > 1 else (1,)),
        ("permute", tuple(range(rank + 1))),
        ("pad", tuple((-1, 0) if i == 0 else (0, 0) for i in range(rank))),
        ("shrink", tuple((0, s + 1) if i == rank - 1 else (0, s) for i, s in enumerate(shape))),
        ("shrink", tuple((1, 0) if i == 0 else (0, s) for i, s in enumerate(shape))),
        ("stride", tuple(0 if i == 0 else 1 for i in range(rank))),
        ("expand", (*shape[:-1], shape[-1] + 2) if shape[-1] != 1 else (*shape, 2)),
    ]
    kind, arg = b.choose(options)
    return _emit(b, Movement(x, kind, arg), "ValueError")


def bad_reduce_axes(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.disk)
    if x is None:
        return None
    rank = len(b.info(x).shape)
    axes = b.choose(((rank,), (0, 0) if rank else (1,), (-1,) if rank == 0 else (0, rank + 2)))
    return _emit(b, Reduce(x, b.choose(("SUM", "MAX")), axes), "ValueError")


def bad_bitcast(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.disk)
    if x is None:
        return None
    dtype = b.info(x).dtype
    wrong = [d for d in DTYPES if d == "bool" or dtype == "bool" or ITEMSIZE[d] != ITEMSIZE[dtype]]
    wrong = [d for d in wrong if d not in bitcast_partners(dtype)]
    return _emit(b, Cast(x, b.choose(wrong), bitcast=True), "TypeError")


def bad_device(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.multi)
    if x is None:
        return None
    name = b.choose(("FOO", f"{b.cfg.kinds[0]}:x", f"{b.cfg.kinds[0]}:-1", "clang", "DISK"))
    return _emit(b, Copy(x, name), "ValueError")


def different_devices(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.multi and not i.disk)
    if x is None:
        return None
    info = b.info(x)
    here = info.device[:-2] if info.device.endswith(":0") else info.device
    elsewhere = [d for d in b.cfg.single_devices() if d != here]
    y = b.add(Copy(x, b.choose(elsewhere)))
    op = next(o for o in ("ADD", "MAX") if supports(o, info.dtype))
    return _emit(b, Elementwise(op, (x, y)), "ValueError")


def compute_on_disk(b: Builder) -> str | None:
    if b.cfg.disk_dir is None:
        return None
    x = b.pick(lambda i: not i.multi and not i.disk)
    if x is None:
        return None
    info = b.info(x)
    on_disk = b.add(Copy(x, b.disk_device()))
    choice = b.choose(("e", "r", "cast", "const"))
    if choice == "const":
        return _emit(b, LoadConst(info.shape, info.dtype, b.info(on_disk).device, 1), "RuntimeError")
    if choice == "e" and supports("MAX", info.dtype):
        return _emit(b, Elementwise("MAX", (on_disk, on_disk)), "RuntimeError")
    if choice == "r" and info.shape:
        return _emit(b, Reduce(on_disk, "SUM", (0,)), "RuntimeError")
    return _emit(b, Cast(on_disk, b.choose([d for d in DTYPES if d != info.dtype])), "RuntimeError")


def bad_assign(b: Builder) -> str | None:
    x = b.pick(lambda i: not i.disk and not i.multi)
    if x is None:
        return None
    info = b.info(x)
    choice = b.choose(("unrealized", "shape", "dtype"))
    if choice == "unrealized" and supports("MAX", info.dtype) and 0 not in info.shape:  # empty: no error
        y = b.fresh_like(info)
        assert y is not None
        target = b.add(Elementwise("MAX", (x, y)))
        return _emit(b, Assign(target, x), "RuntimeError")
    made = b.fresh_like(info)
    assert made is not None
    b.add(Realize((made,)))
    target = made
    if choice == "shape":
        wrong = b.leaf(info.dtype, (*info.shape, 2), info.device)
        return _emit(b, Assign(target, wrong), "ValueError")
    wrong = b.add(Cast(x, b.choose([d for d in DTYPES if d != info.dtype])))
    return _emit(b, Assign(target, wrong), "TypeError")


def bad_sharding(b: Builder) -> str | None:
    """A misuse of SPEC §5 rules (all ValueError): an empty shard, or a movement the layout forbids."""
    x = b.pick(lambda i: i.layout is not None and i.layout.axis is not None and i.layout.all_real)
    if x is None:
        y = b.pick(lambda i: not i.multi and not i.disk and len(i.shape) > 0 and 0 < i.shape[0] <= 2)
        if y is None:
            return None
        return _emit(b, Shard(y, b.cfg.shard_devices(b.info(y).shape[0] + 2), 0), "ValueError")
    info = b.info(x)
    assert info.layout is not None and info.layout.axis is not None
    axis, shape = info.layout.axis, info.shape
    candidates: list[tuple[str, tuple]] = [  # type: ignore[type-arg]
        ("stride", tuple(2 if i == axis else 1 for i in range(len(shape)))),
        ("pad", tuple((1, 0) if i == axis else (0, 0) for i in range(len(shape)))),
        ("shrink", tuple((0, s - 1) if i == axis else (0, s) for i, s in enumerate(shape))),
        ("shrink", tuple((1, s) if i == axis else (0, s) for i, s in enumerate(shape))),
        ("reshape", random_reshape(b, shape)),
        ("reshape", random_reshape(b, shape)),
    ]
    rejected = [(kind, arg) for kind, arg in candidates if _layout_rejects(info, kind, arg)]
    if not rejected:
        return None
    kind, arg = b.choose(rejected)
    return _emit(b, Movement(x, kind, arg), "ValueError")


def _layout_rejects(info: Info, kind: str, arg: tuple) -> bool:  # type: ignore[type-arg]
    """True when the movement is fine for a single buffer but the sharding rules forbid it."""
    assert info.layout is not None
    try:
        shape = lay.movement_shape(info.shape, kind, arg)
    except ValueError:
        return False
    try:
        lay.movement(info.layout, info.shape, kind, arg, shape)
    except ValueError:
        return True
    return False


INVALID: tuple[Callable[[Builder], str | None], ...] = (
    bad_shapes, bad_dtypes, bad_op_for_dtype, bad_where_condition, bad_movement, bad_reduce_axes, bad_bitcast,
    bad_device, different_devices, compute_on_disk, bad_assign, bad_sharding)


def add_invalid(b: Builder) -> str | None:
    """Append one invalid step; returns the expected error type name (None when none applied)."""
    for _ in range(3):
        kind = b.choose(INVALID)(b)
        if kind is not None:
            return kind
    return None
