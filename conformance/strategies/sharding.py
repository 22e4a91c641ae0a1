"""Sharding actions (SPEC §5): shard on every axis over 2-4 devices, even and uneven; mix axes in
elementwise ops; reduce over the sharded axis; shrink to one shard and pad back; copy out.
"""
from __future__ import annotations

from conformance.analysis import Info
from conformance.layout import shard as shard_layout
from conformance.program import Copy, Elementwise, Movement, Reduce, Shard
from conformance.strategies.builder import Builder
from conformance.vocab import supports


def shardable(info: Info) -> bool:
    return not info.multi and not info.disk and len(info.shape) > 0 and max(info.shape) >= 2


def act_shard(b: Builder) -> bool:
    """from_sharded over 2..max_devices devices on a random axis that fits (sometimes replicated)."""
    x = b.pick(shardable)
    if x is None:
        return False
    info = b.info(x)
    kind = b.choose(b.cfg.kinds)
    counts = range(2, max(2, b.cfg.max_devices) + 1)
    fitting = [(n, axis) for n in counts for axis in range(len(info.shape))
               if _fits(info.shape, b.cfg.shard_devices(n, kind), axis)]
    if fitting and not b.chance(0.15):
        count, axis = b.choose(fitting)
    else:
        count, axis = b.choose(counts), None
    b.add(Shard(x, b.cfg.shard_devices(count, kind), axis))
    if b.ring is None and b.chance(b.cfg.p_ring2):
        b.ring = 2
    return True


def _fits(shape: tuple[int, ...], devices: tuple[str, ...], axis: int | None) -> bool:
    try:
        shard_layout(shape, devices, axis)
    except ValueError:
        return False
    return True


def sharded(info: Info) -> bool:
    return info.layout is not None and info.layout.axis is not None


def act_shrink_one(b: Builder) -> bool:
    """Shrink to one shard's bound (others become non-real zeros), often padding back after."""
    x = b.pick(lambda i: sharded(i) and i.layout is not None and i.layout.all_real)
    if x is None:
        return False
    info = b.info(x)
    assert info.layout is not None and info.layout.axis is not None
    axis, bounds = info.layout.axis, info.layout.bounds
    start, end = b.choose(bounds)
    arg = tuple((start, end) if i == axis else (0, s) for i, s in enumerate(info.shape))
    one = b.add(Movement(x, "shrink", arg))
    if b.chance(0.6):
        pad = tuple((start, bounds[-1][1] - end) if i == axis else (0, 0) for i in range(len(info.shape)))
        b.add(Movement(one, "pad", pad))
    return True


def act_reduce_sharded(b: Builder) -> bool:
    """Reduce over the sharded axis (all-reduce when every shard is real), sometimes more axes."""
    x = b.pick(lambda i: sharded(i) and not i.disk)
    if x is None:
        return False
    info = b.info(x)
    assert info.layout is not None and info.layout.axis is not None
    axes = {info.layout.axis}
    if b.chance(0.3):
        axes.add(b.integer(0, len(info.shape) - 1))
    b.add(Reduce(x, b.choose(("SUM", "MAX")), tuple(sorted(axes))))
    return True


def act_mixed_axes(b: Builder) -> bool:
    """An elementwise op between buffers sharded on different axes (or one replicated)."""
    x = b.pick(lambda i: i.layout is not None and i.layout.all_real and len(i.shape) > 0)
    if x is None:
        return False
    info = b.info(x)
    assert info.layout is not None
    others = [a for a in [*range(len(info.shape)), None]
              if a != info.layout.axis and _fits(info.shape, info.layout.devices, a)]
    if not others:
        return False
    base = b.leaf(info.dtype, info.shape, info.layout.devices[0])
    other = b.add(Shard(base, info.layout.devices, b.choose(others)))
    ops = [op for op in ("ADD", "MUL", "MAX", "CMPLT", "XOR", "SUB") if supports(op, info.dtype)
           and not (info.approx and op == "CMPLT")]
    if not ops:
        return False
    op = b.choose(ops)
    b.add(Elementwise(op, (x, other) if b.chance(0.5) else (other, x)))
    return True


def act_copy_out(b: Builder) -> bool:
    """MultiLazyBuffer.copy_to_device: unsharded (first real shard) or sharded (all real)."""
    x = b.pick(lambda i: i.layout is not None and (i.layout.axis is None or i.layout.all_real))
    if x is None:
        return False
    b.add(Copy(x, b.choose(b.cfg.single_devices())))
    return True
