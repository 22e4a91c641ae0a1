"""Kernel optimizations as a plan: which loops exist, in what order, and what is unrolled.

`plan_kernel` returns a `KernelPlan`; lowering follows it mechanically, so every optimization is a
decision here, never a special case in lowering. Nothing here changes a result bit-for-bit:
- output loops are reordered (reordering independent iterations is free);
- reduce loops keep their order and an unrolled reduce axis is the innermost one, emitted in
  increasing order, so every accumulator sees its inputs in exactly the same sequence.

With `config.get().noopt` the plan is the natural one: one loop per axis in axis order (axes of size
1 never get a loop, with or without optimizations).

Optimizations:
- loop order: output axes sorted by decreasing |stride| of the first STORE's view, so the innermost
  loop walks the fastest-varying output elements (axes whose stride is unknown keep their place);
- upcast: the innermost output axis of constant size divisible by `options.max_upcast` is emitted as
  `max_upcast` copies of the body per iteration (fully, without a loop, when its size equals it);
- unroll: the innermost reduce axis of constant size <= `options.max_unroll` loses its loop and is
  emitted as one body per position.
The copies are plain scalar code that the C compiler may vectorise; with a vector-capable renderer
(`options.supports_vectors`) an upcast axis is where vector dtypes would be introduced. Splitting the
outermost GLOBAL loop across threads would be another field of the plan (a split factor on
`output_axes[0]`), honoured by the runtime's launch.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from fast import config
from fast.renderer.base import RendererOptions
from fast.shape.symbolic import sint


@dataclass(frozen=True)
class AxisPlan:
    """Axis `axis` of the iteration shape, of `size`. `unroll` positions are emitted per loop
    iteration (1: a plain loop); when `unroll == size` there is no loop at all."""

    axis: int
    size: sint
    unroll: int = 1

    @property
    def has_loop(self) -> bool:
        return not (isinstance(self.size, int) and self.size == self.unroll)


@dataclass(frozen=True)
class KernelPlan:
    """Loops outermost first: every output axis, then every reduced axis."""

    output_axes: tuple[AxisPlan, ...]
    reduce_axes: tuple[AxisPlan, ...]

    @property
    def bodies(self) -> int:
        """How many copies of the innermost body are emitted per innermost iteration."""
        count = 1
        for axis in (*self.output_axes, *self.reduce_axes):
            count *= axis.unroll
        return count


def natural_plan(full_shape: Sequence[sint], reduce_axes: Sequence[int]) -> KernelPlan:
    """One loop per axis in axis order; size-1 axes are 'unrolled' (no loop)."""
    def axis_plan(axis: int) -> AxisPlan:
        size = full_shape[axis]
        return AxisPlan(axis, size, 1)

    outputs = tuple(axis_plan(a) for a in range(len(full_shape)) if a not in reduce_axes)
    return KernelPlan(outputs, tuple(axis_plan(a) for a in sorted(reduce_axes)))


def _reorder_outputs(plan: KernelPlan, strides: Sequence[sint | None]) -> KernelPlan:
    known = [axis for axis in plan.output_axes if isinstance(strides[axis.axis], int)]
    ordered = iter(sorted(known, key=lambda axis: -abs(strides[axis.axis])))  # type: ignore[arg-type]
    outputs = tuple(next(ordered) if axis in known else axis for axis in plan.output_axes)
    return replace(plan, output_axes=outputs)


def _upcast_innermost_output(plan: KernelPlan, amount: int) -> KernelPlan:
    candidates = [i for i, axis in enumerate(plan.output_axes) if axis.size != 1]
    if amount <= 1 or not candidates:
        return plan
    position = candidates[-1]
    axis = plan.output_axes[position]
    if not isinstance(axis.size, int) or axis.size % amount != 0:
        return plan
    outputs = list(plan.output_axes)
    outputs[position] = replace(axis, unroll=amount)
    return replace(plan, output_axes=tuple(outputs))


def _unroll_innermost_reduce(plan: KernelPlan, limit: int, max_bodies: int) -> KernelPlan:
    if not plan.reduce_axes:
        return plan
    axis = plan.reduce_axes[-1]
    if not isinstance(axis.size, int) or not 1 < axis.size <= limit or plan.bodies * axis.size > max_bodies:
        return plan
    return replace(plan, reduce_axes=(*plan.reduce_axes[:-1], replace(axis, unroll=axis.size)))


def plan_kernel(full_shape: Sequence[sint], reduce_axes: Sequence[int], output_strides: Sequence[sint | None],
                options: RendererOptions) -> KernelPlan:
    """The plan lowering follows; `output_strides` are the first STORE's real strides per axis."""
    plan = natural_plan(full_shape, reduce_axes)
    if config.get().noopt:
        return plan
    plan = _reorder_outputs(plan, output_strides)
    plan = _upcast_innermost_output(plan, options.max_upcast)
    return _unroll_innermost_reduce(plan, options.max_unroll, options.max_unrolled_bodies)
