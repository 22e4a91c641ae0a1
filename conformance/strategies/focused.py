"""Targeted strategies: small programs aimed at one behaviour, for the mutation tests.

Each draws the general data strategies (edge values included) but only the steps that exercise
its target, so a planted bug there shows up within a few examples.
"""
from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from conformance.profiles import GenConfig
from conformance.program import ConstLike, Elementwise, Fetch, LoadConst, Movement, Program, Reduce, Shard
from conformance.strategies import sharding, symbolic
from conformance.strategies.builder import Builder
from conformance.vocab import FLOATS, SIGNED


def _finish(b: Builder, *items: int) -> Program:
    for item in items:
        b.add(Fetch(item))
    return b.finish()


def nan_max(b: Builder) -> Program:
    """Binary and reduce MAX on floats whose data include NaN."""
    dtype = b.choose(sorted(FLOATS))
    shape = b.shape(min_rank=1, allow_zero=False)
    x, y = b.leaf(dtype, shape, b.device()), None
    y = b.leaf(dtype, shape, b.info(x).device)
    both = b.add(Elementwise("MAX", (x, y) if b.chance(0.5) else (y, x)))
    reduced = b.add(Reduce(x, "MAX", (b.integer(0, len(shape) - 1),)))
    return _finish(b, both, reduced)


def sub_order(b: Builder) -> Program:
    dtype = b.choose([d for d in ("int32", "int8", "uint16", "float32", "float16", "int64") if d])
    shape = b.shape(allow_zero=False)
    x = b.leaf(dtype, shape, b.device())
    y = b.leaf(dtype, shape, b.info(x).device)
    return _finish(b, b.add(Elementwise("SUB", (x, y))))


def pad_mask(b: Builder) -> Program:
    """Pads (sometimes of a view) fetched directly and through an op that keeps or breaks f(0)=0."""
    dtype = b.choose(("int32", "float32", "uint8", "float16"))
    x = b.leaf(dtype, b.shape(min_rank=1, allow_zero=False), b.device())
    if b.chance(0.5):
        x = b.add(Movement(x, "permute", tuple(reversed(range(len(b.info(x).shape))))))
    pads = tuple((b.integer(0, 2), b.integer(0, 2)) for _ in b.info(x).shape)
    padded = b.add(Movement(x, "pad", pads))
    other = b.add(ConstLike(padded, 1))
    return _finish(b, padded, b.add(Elementwise(b.choose(("ADD", "CMPEQ", "MUL")), (padded, other))))


def int_mod(b: Builder) -> Program:
    dtype = b.choose(sorted(SIGNED))
    shape = b.shape(min_rank=1, allow_zero=False)
    x = b.leaf(dtype, shape, b.device())
    y = b.leaf(dtype, shape, b.info(x).device)
    return _finish(b, b.add(Elementwise("MOD", (x, y))))


def ring(b: Builder) -> Program:
    """Reduce over the sharded axis with RING=2 on 3 or 4 devices (uneven chunk counts included)."""
    count = b.choose((3, 4))
    dtype = b.choose(("int32", "int16", "float32"))
    shape = (count * b.integer(1, 2), b.integer(1, 9))
    x = b.leaf(dtype, shape, b.cfg.shard_devices(count)[0])
    sharded = b.add(Shard(x, b.cfg.shard_devices(count), 0))
    b.ring = 2
    return _finish(b, b.add(Reduce(sharded, b.choose(("SUM", "MAX")), (0,))))


def uneven_shard(b: Builder) -> Program:
    """Uneven from_sharded, then shrink to one shard and pad back, or an op with another layout."""
    count = b.choose((2, 3, 4))
    rows = count * 2 - 1
    x = b.leaf(b.choose(("int32", "float32")), (rows, b.integer(1, 4)), b.cfg.shard_devices(count)[0])
    sharded = b.add(Shard(x, b.cfg.shard_devices(count), 0))
    if b.chance(0.5):
        sharding.act_shrink_one(b)
    else:
        sharding.act_mixed_axes(b)
    return _finish(b, sharded, b.pool[-1])


def masked_const(b: Builder) -> Program:
    """pad(CONST) (maybe behind reshape/expand) into ops whose f(0) != 0."""
    dtype = b.choose(("float32", "int32", "float16", "bool", "uint8"))
    shape = b.shape(min_rank=1, allow_zero=False, max_rank=3)
    c = b.add(LoadConst(shape, dtype, b.device(), b.scalar(dtype)))  # type: ignore[arg-type]
    padded = b.add(Movement(c, "pad", tuple((b.integer(0, 2), b.integer(1, 2)) for _ in shape)))
    if b.chance(0.4):
        padded = b.add(Movement(padded, "reshape", (*b.info(padded).shape, 1)))
    op = b.choose([o for o in ("ADD", "CMPEQ", "MAX", "EXP2") if o != "EXP2" or dtype in FLOATS])
    if op == "EXP2":
        return _finish(b, b.add(Elementwise("EXP2", (padded,))))
    other = b.add(ConstLike(padded, True if dtype == "bool" else 1))
    return _finish(b, b.add(Elementwise(op, (padded, other))))


def symbolic_small(b: Builder) -> Program:
    """A symbolic program of at most three actions, replayed under its bindings."""
    return symbolic.build(b, ops=b.integer(1, 3))


FOCUS: dict[str, Callable[[Builder], Program]] = {
    "nan-max": nan_max, "sub-order": sub_order, "pad-mask": pad_mask, "int-mod": int_mod, "ring": ring,
    "uneven-shard": uneven_shard, "masked-const": masked_const, "symbolic": symbolic_small,
}


@st.composite
def focused(draw: st.DrawFn, name: str, cfg: GenConfig = GenConfig()) -> Program:  # noqa: B008
    return FOCUS[name](Builder(draw, cfg))
