"""Directed shapes of graph: assign blocks, constant-folding patterns, large (split) reductions and
ring all-reduces.

Assign block invariant: the target is a fresh realized buffer that nothing outside the block reads;
after the assign is realized the target and every unrealized reader of its old value leave the
pool (a reader realized later would raise RuntimeError, which one ending of the block checks on
purpose). Readers are built with a non-constant operand so no implementation can fold them away.
"""
from __future__ import annotations

from conformance.analysis import Info
from conformance.program import (
    Assign,
    Cast,
    ConstLike,
    Contiguous,
    Elementwise,
    Fetch,
    LoadConst,
    LoadEmpty,
    Movement,
    Realize,
    Reduce,
    Shard,
)
from conformance.strategies.builder import Builder
from conformance.strategies.data import random_data
from conformance.vocab import DTYPES, FLOATS, supports

STOP = "stop"


def _reader(b: Builder, target: int) -> int:
    """`target OP fresh` with an op every dtype supports and nothing can fold."""
    info = b.info(target)
    other = b.fresh_like(info)
    assert other is not None
    return b.add(Elementwise(b.choose(("ADD", "MAX")), (target, other)))


def _stale_reader(b: Builder, target: int) -> int:
    """A reader of `target` built before its assign: `target OP fresh`, or (sometimes) the contiguous()
    of a flipped view of it, with the view fetched before the assign: reading the view must not
    realize that contiguous() (SPEC §4: it stays built before the assign)."""
    info = b.info(target)
    flippable = [axis for axis, size in enumerate(info.shape) if size > 1]
    if info.layout is not None or info.disk or not flippable or not b.chance(0.3):
        return _reader(b, target)
    axis = b.choose(flippable)
    view = b.add(Movement(target, "stride", tuple(-1 if i == axis else 1 for i in range(len(info.shape)))))
    stale = b.add(Contiguous(view))
    b.add(Fetch(view))
    b.retire(view)  # built before the assign too: nothing may read it after
    return stale


def _target(b: Builder, info: Info) -> int | None:
    """A fresh buffer shaped like `info` that nothing else reads: sharded, EMPTY or a leaf."""
    if info.layout is not None:  # shard 0 of from_sharded is a view of the leaf: assign needs a base
        base = b.leaf(info.dtype, info.shape, info.layout.devices[0])
        sharded = b.try_add(Shard(base, info.layout.devices, info.layout.axis), pooled=False)
        return None if sharded is None else b.add(Contiguous(sharded), pooled=False)
    if b.chance(0.3):
        return b.add(LoadEmpty(info.shape, info.dtype, info.device), pooled=False)
    target = b.leaf(info.dtype, info.shape, info.device)
    b.retire(target)
    return target


def act_assign(b: Builder) -> str | bool:
    """Assign into a fresh realized buffer; reads before (same realize or earlier); maybe a stale read."""
    source = b.pick(lambda i: not i.disk and (i.layout is None or i.layout.all_real))
    if source is not None and b.chance(0.7):
        info = b.info(source)
    else:
        info = Info(b.shape(allow_zero=False), b.choose(DTYPES), b.device())
        source = None
    target = _target(b, info)
    if target is None:
        return False
    if b.info(target).layout != info.layout:  # the source's layout is not a from_sharded one
        source = None
    b.add(Realize((target,)))
    readable = b.info(target).defined
    early = _reader(b, target) if readable and b.chance(0.5) else None
    if early is not None and b.chance(0.5):
        b.add(Realize((early,)))
        early_done = True
    else:
        early_done = False
    if source is not None and not (readable and b.chance(0.3)):
        value: int | None = source
    elif readable and b.chance(0.6):
        value = _reader(b, target)
    else:
        value = b.fresh_like(b.info(target))
    assert value is not None
    # a zero-size target holds no values: assigning into it writes nothing, so nothing goes stale
    stale = _stale_reader(b, target) if readable and 0 not in b.info(target).shape and b.chance(0.25) else None
    assigned = b.add(Assign(target, value))
    b.add(Realize((assigned,) if early is None or early_done else (assigned, early)))
    for index in (target, value, stale):
        if index is not None and index != source:
            b.retire(index)
    if stale is not None:
        b.fetch_some()
        b.add(Realize((stale,)))
        return STOP
    return True


def act_fold(b: Builder) -> bool:
    """A constant-folding pattern: identities, const-op-const, reduce/cast of a const, masked consts."""
    x = b.pick(lambda i: not i.disk)
    if x is None:
        return False
    info = b.info(x)
    pattern = b.choose(("identity", "const-op", "neg-neg", "div-pow2", "reduce-const", "cast-const",
                        "masked-const", "self-cancel"))
    if pattern == "identity":
        op, value = b.choose((("ADD", 0), ("SUB", 0), ("MUL", 1), ("MUL", -1), ("MUL", 0), ("MAX", 0)))
        if not supports(op, info.dtype) or (op == "MUL" and value == 0 and info.dtype in FLOATS and info.approx):
            return False
        c = b.add(ConstLike(x, value))
        b.add(Elementwise(op, (c, x) if b.chance(0.4) and op != "SUB" else (x, c)))
    elif pattern == "const-op":
        _const_op(b, x, info)
    elif pattern == "neg-neg" and supports("NEG", info.dtype):
        once = b.add(Elementwise("NEG", (x,)))
        moved = b.add(Movement(once, "reshape", (*info.shape, 1)))
        b.add(Elementwise("NEG", (moved,)))
    elif pattern == "div-pow2" and info.dtype in FLOATS and not info.zero_sign:
        c = b.add(ConstLike(x, b.choose((2.0, 0.5, 4.0, 3.0, 0.1, -0.25, 0.0))))
        b.add(Elementwise("DIV", (x, c)))
    elif pattern == "reduce-const" and info.shape:
        c = b.add(ConstLike(x, b.scalar(info.dtype)))  # type: ignore[arg-type]
        b.add(Reduce(c, b.choose(("SUM", "MAX")), (b.integer(0, len(info.shape) - 1),)))
    elif pattern == "cast-const":
        c = b.add(ConstLike(x, b.scalar(info.dtype)))  # type: ignore[arg-type]
        b.add(Cast(c, b.choose(DTYPES)))
    elif pattern == "masked-const":
        _masked_const(b, x, info)
    elif pattern == "self-cancel" and supports("SUB", info.dtype) and not info.approx:
        b.add(Elementwise(b.choose(("SUB", "DIV", "MUL")), (x, x)))
    else:
        return False
    return True


def _const_op(b: Builder, x: int, info: Info) -> None:
    ops = [op for op in ("ADD", "SUB", "MUL", "DIV", "MAX", "MOD", "CMPLT", "CMPEQ", "XOR", "EXP2", "LOG2",
                         "SIN", "SQRT", "NEG") if supports(op, info.dtype)]
    op = b.choose(ops)
    first = b.add(ConstLike(x, b.scalar(info.dtype)))  # type: ignore[arg-type]
    if op in ("EXP2", "LOG2", "SIN", "SQRT", "NEG"):
        b.add(Elementwise(op, (first,)))
        return
    second = b.add(ConstLike(x, b.scalar(info.dtype)))  # type: ignore[arg-type]
    b.add(Elementwise(op, (first, second)))


def _masked_const(b: Builder, x: int, info: Info) -> None:
    """pad(const) (maybe behind a reshape or expand) fed to an op with f(0) != 0."""
    if info.multi or not info.shape:
        c = b.add(ConstLike(x, b.scalar(info.dtype)))  # type: ignore[arg-type]
        b.add(Elementwise("CMPEQ", (c, c)))
        return
    small = tuple(max(1, s - 1) for s in info.shape)
    shape = tuple(s if s > 0 else 0 for s in small)
    c = b.add(LoadConst(shape, info.dtype, info.device, b.scalar(info.dtype)))  # type: ignore[arg-type]
    padded = b.add(Movement(c, "pad", tuple((0, 1) for _ in shape)))
    if b.chance(0.5):
        padded = b.add(Movement(padded, "reshape", (*b.info(padded).shape, 1)))
        padded = b.add(Movement(padded, "expand", (*b.info(padded).shape[:-1], 2)))
    ops = [op for op in ("EXP2", "LOG2", "CMPEQ", "DIV", "ADD", "SQRT") if supports(op, info.dtype)]
    op = b.choose(ops)
    if op in ("EXP2", "LOG2", "SQRT"):
        b.add(Elementwise(op, (padded,)))
    else:
        other = b.add(ConstLike(padded, b.choose((1, 0)) if op != "DIV" else 0))
        b.add(Elementwise(op, (padded, other) if op != "DIV" else (other, padded)))


BIG_SHAPES = ((65536,), (1, 65536), (2, 32768), (32768, 2), (4, 40000), (1, 32771), (3, 65536))


def act_big_reduce(b: Builder) -> bool:
    """A reduction with at least 32768 inputs per output (fast splits it in two stages)."""
    dtype = b.choose(("int32", "float32", "float16", "bool", "uint8", "int64", "bfloat16", "float64", "int8"))
    shape = b.choose(BIG_SHAPES)
    x = b.leaf(dtype, shape, b.device(), data=b.draw(random_data(dtype, shape)))
    if b.chance(0.5):
        op = b.choose([o for o in ("ADD", "MUL", "MAX") if supports(o, dtype)])
        x = b.add(Elementwise(op, (x, x)))
    axis = max(range(len(shape)), key=lambda a: shape[a])
    b.add(Reduce(x, b.choose(("SUM", "MAX")), (axis,)))
    return True


def act_ring_reduce(b: Builder) -> bool:
    """Reduce over the sharded axis with > 2 devices and > 256,000 outputs: the ring all-reduce."""
    count = b.choose(tuple(n for n in (3, 4) if n <= b.cfg.max_devices)) if b.cfg.max_devices >= 3 else 0
    if not count:
        return False
    dtype = b.choose(("int32", "float32", "int64"))
    shape = (count, 256_064 + b.choose((0, 3)))
    x = b.leaf(dtype, shape, b.device(), data=b.draw(random_data(dtype, shape)))
    sharded = b.add(Shard(x, b.cfg.shard_devices(count), 0))
    b.add(Reduce(sharded, b.choose(("SUM", "MAX")), (0,)))
    return True

