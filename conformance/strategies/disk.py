"""DISK as a copy and view target (only when `--devices` names DISK): copy a computed value to a DISK
file, take views of it (shrink, reshape, permute, stride), sometimes bitcast it (on DISK the element
count may change), and copy it back to a compute device. Compute on DISK is left to invalid.py.
"""
from __future__ import annotations

from conformance.program import Cast, Contiguous, Copy, Movement, Realize
from conformance.strategies.actions import movement_arg
from conformance.strategies.builder import Builder
from conformance.vocab import DTYPES, ITEMSIZE


def act_disk(b: Builder) -> bool:
    if b.cfg.disk_dir is None:
        return False
    x = b.pick(lambda i: not i.multi and not i.disk and len(i.shape) > 0)
    if x is None:
        return False
    home = b.info(x).device
    on_disk = b.add(Copy(x, b.disk_device()))
    if b.chance(0.5):
        b.add(Realize((on_disk,)))
    view = on_disk
    for _ in range(b.integer(0, 2)):
        kind = b.choose(("shrink", "reshape", "permute", "stride"))
        arg = movement_arg(b, b.info(view), kind)
        moved = None if arg is None else b.try_add(Movement(view, kind, arg))
        view = view if moved is None else moved
    info = b.info(view)
    if info.consecutive and b.chance(0.3):
        view = b.add(Contiguous(view))
    clean = not info.aux and info.payload and not info.zero_sign and info.dtype != "bool"
    if clean and b.chance(0.4):
        targets = [d for d in DTYPES if d != "bool" and d != info.dtype and info.shape and
                   (ITEMSIZE[d] == ITEMSIZE[info.dtype] or info.consecutive) and
                   (info.shape[-1] * ITEMSIZE[info.dtype]) % ITEMSIZE[d] == 0]
        if targets:
            view = b.add(Cast(view, b.choose(targets), bitcast=True))
    b.add(Copy(view, home))
    return True
