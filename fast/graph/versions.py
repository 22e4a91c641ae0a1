"""Ordering of assigns (SPEC §4) for the lazy layer: expected versions and stale reads.

`Buffer.version` counts the realized assigns into a memory. Every lazy buffer has an *expected
version*: the version at which its Buffer holds the value it stands for.
- A base that owns its memory always expects the current version: it IS the memory, so an assign
  target read after the assign gives the new value (and so does `t.contiguous()`, which is `t`).
- An unrealized ASSIGN expects the version its own write will produce.
- A view (movement ops) and a VIEW base (a zero-copy alias) record, when built, the expected version
  of what they alias (`alias_version`): once an assign into that memory has been realized they are
  *stale*, and reading them raises RuntimeError instead of silently giving the new value. After an
  assign into a VIEW base, the engine calls `assign_realized` so that it expects its new contents.
- Every base records, when built, the expected version of each source it reads (`src_versions`; an
  ASSIGN reads its value, not its target). `stale_reads` lists the memories assigned past those.
The scheduler raises RuntimeError for an unrealized base with stale reads and for an output that is a
stale alias; copies and DISK bitcasts, which rebuild a view on its base, check at build time.

These functions read a lazy buffer's internal fields, named by the `Versioned` protocol: the
module never imports fast/graph/node.py, which calls it while it builds a node.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from fast.ops import LOAD_ASSIGN, LOAD_VIEW, Op

if TYPE_CHECKING:
    from fast.device import Buffer


class Versioned(Protocol):
    """What ordering reads of a lazy buffer: fast/graph/node.py's LazyBuffer has every field (`op`,
    `srcs`, `src_versions` and `_assign_version` on bases only; `alias_version` is written by
    `assign_realized`)."""

    alias_version: int
    _buffer: Buffer | None
    _assign_version: int

    @property
    def _base(self) -> Versioned | None: ...

    @property
    def base(self) -> Versioned: ...

    @property
    def buffer(self) -> Buffer: ...

    @property
    def op(self) -> Op: ...

    @property
    def srcs(self) -> tuple[Versioned, ...]: ...

    @property
    def src_versions(self) -> tuple[int, ...]: ...


def current_version(lb: Versioned) -> int:
    """The version lb's base Buffer is at now (0 for a base whose Buffer was never made)."""
    base = lb.base
    buffer = base._buffer
    return 0 if buffer is None else buffer.version


def expected_version(lb: Versioned) -> int:
    """The version of lb's base Buffer at which lb holds the value it stands for (module docstring)."""
    if lb._base is not None:
        return lb.alias_version
    op = lb.op
    if op is LOAD_VIEW:
        return lb.alias_version
    buffer = lb._buffer
    current = 0 if buffer is None else buffer.version
    return max(current, lb._assign_version + 1) if op is LOAD_ASSIGN else current


def assign_realized(target: Versioned) -> None:
    """Called by the engine once an assign into `target` (a base) has run: a VIEW base that was the
    target now stands for the memory's new contents (views built from it before stay stale)."""
    if target._base is None and target.op is LOAD_VIEW:
        target.alias_version = target.buffer.version


def _reads(op: Op, srcs: tuple[Versioned, ...]) -> tuple[Versioned, ...]:
    """The sources whose memory a base reads (an ASSIGN reads its value, not its target)."""
    return srcs[:1] if op is LOAD_ASSIGN else srcs


def read_versions(op: Op, srcs: tuple[Versioned, ...]) -> tuple[int, ...]:
    """The expected version of every source read, in `_reads` order."""
    if op is LOAD_ASSIGN:
        srcs = srcs[:1]
    # (inlined: a base without a Buffer yet is at version 0; ASSIGN and VIEW bases always have one)
    return tuple([src.alias_version if src._base is not None else 0 if src._buffer is None else expected_version(src)
                  for src in srcs])


def stale_reads(base: Versioned) -> list[tuple[Buffer, int]]:
    """(Buffer, expected version) per memory `base` reads that an assign has overwritten since (the
    lowest expected version when it is read several ways)."""
    found: dict[int, tuple[Buffer, int]] = {}
    for src, version in zip(_reads(base.op, base.srcs), base.src_versions, strict=False):
        if current_version(src) > version:
            buffer = src.base.buffer
            known = found.get(id(buffer.base))
            if known is None or version < known[1]:
                found[id(buffer.base)] = (buffer, version)
    return list(found.values())


def stale_alias(lb: Versioned) -> tuple[Buffer, int] | None:
    """(Buffer, expected version) when `lb` aliases memory overwritten since it was built, else None
    (a base owning its memory is never a stale alias)."""
    expected = expected_version(lb)
    if current_version(lb) <= expected:
        return None
    return lb.base.buffer, expected


def check_fresh(opname: str, lb: Versioned) -> None:
    """RuntimeError when `lb` aliases memory (a view, a VIEW base) that a realized assign has overwritten
    since it was built. Ops that rebuild a view on its base (copies, DISK bitcasts) check this first,
    since the rebuilt node would read the memory's current value, not the one lb stood for; so does the
    scheduler for what it is asked to realize."""
    stale = stale_alias(lb)
    if stale is not None:
        buffer, version = stale
        raise RuntimeError(f"{opname}: {lb!r} was built from {buffer!r} at version {version}, but an assign has "
                           f"since overwritten it (version {buffer.version}): the value it read no longer exists")
