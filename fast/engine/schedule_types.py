"""The values scheduling hands on: `ScheduleItem` (one kernel or non-kernel item, frozen), the arg of
a CUSTOM item, and `Step`, an item plus the facts ordering needs (fast/engine/schedule.py builds
them, fast/engine/schedule_order.py orders them, fast/engine/kernel_merge.py merges kernels).

Invariants:
- A `ScheduleItem`'s `bufs` are its outputs (one per STORE of a kernel, else one), then its inputs in
  `MemBuffer.idx` order.
- A `Step`'s `writes` and `reads` are keys: lazy bases, or temporary Buffers; `read_bases` are the
  lazy bases it loads directly, `owners` the realized bases whose values it computes.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fast.device import Buffer
from fast.engine import gathers
from fast.graph.node import LazyBuffer
from fast.ops import KERNEL_SINK, LOAD_COPY, LOAD_CUSTOM, LOAD_EMPTY, LOAD_VIEW, LazyOp
from fast.shape.symbolic import Variable

NOT_KERNELS = frozenset({LOAD_COPY, LOAD_CUSTOM, LOAD_EMPTY, LOAD_VIEW})


@dataclass(frozen=True)
class CustomCall:
    """The arg of a CUSTOM item: `fn(out, *inputs)` on host arrays of these shapes."""

    fn: Callable[..., Any]
    out_shape: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ScheduleItem:
    """One step: `ast` (SINK of STOREs, or a LoadOps op), `bufs` (outputs, then inputs in
    MemBuffer.idx order), `var_vals` (symbolic variable values), `assign`: the outputs are
    assign targets, whose Buffer versions realize bumps once the item has run, and `index_checks`:
    the indices of the gathers the kernel computes, checked before it runs (engine/gathers.py)."""

    ast: LazyOp
    bufs: tuple[Buffer, ...]
    var_vals: Mapping[Variable, int] = field(default_factory=dict, hash=False)
    assign: bool = False
    index_checks: tuple[gathers.IndexCheck, ...] = ()  # run before the kernel (engine/gathers.py)

    @property
    def output_count(self) -> int:
        return len(self.ast.src) if self.ast.op is KERNEL_SINK else 1

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return self.bufs[:self.output_count]

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return self.bufs[self.output_count:]


@dataclass(eq=False)
class Step:
    """An item plus what ordering needs: the keys it writes and reads (lazy bases, or temporary
    Buffers), the lazy bases it loads, and `owner`, the realized base whose steps it belongs to."""

    item: ScheduleItem
    writes: tuple[object, ...]
    reads: tuple[object, ...]
    read_bases: tuple[LazyBuffer, ...]
    owner: LazyBuffer
    also_owners: tuple[LazyBuffer, ...] = ()  # bases whose kernels were merged into this one

    @property
    def owners(self) -> tuple[LazyBuffer, ...]:
        return (self.owner, *self.also_owners)
