"""Kernel optimizations as a plan: which loops exist, in what order, what is unrolled and vectorized.

`plan_kernel` returns a `KernelPlan`; lowering follows it mechanically, so every optimization is a
decision here, never a special case in lowering. What each decision may change:
- output loops are reordered (reordering independent iterations is free);
- an output axis may be split into vectors of `vector` lanes (each lane is its own output element:
  nothing is reassociated) and `unroll` copies of them per iteration (register blocking);
- reduce loops keep their order; the innermost reduce axis may be fully unrolled (positions emitted
  in increasing order into one accumulator: the same sequence as the loop);
- a reduce axis that every input walks contiguously may be vectorized: `vector` lanes times `unroll`
  copies, each copy with its own vector accumulator, combined at the end in a fixed tree order. This
  reassociates float sums (docs/semantics.md allows any order) but the order depends only on the
  plan, never on the thread count or the backend, so results stay bit-identical across both.

With `config.get().noopt` the plan is the natural one: one loop per axis in axis order (axes of size
1 never get a loop, with or without optimizations).

Heuristics (lanes = the renderer's vector width for the kernel's widest element, 1 without vectors):
- loop order: output axes sorted by decreasing |stride| of the first STORE's view;
- reduce kernels whose innermost reduce axis is contiguous in every input that moves along it:
  vectorize that reduce axis (`lanes` x up to 4 accumulators);
- otherwise: vectorize the innermost output axis when the STORE walks it contiguously and its size is
  a multiple of the lanes (halving the lanes down to 4 to find a divisor), with up to 4 copies
  (elementwise) or 2 copies plus 4 copies of the next output axis (reductions: a register tile);
- without vectors: upcast the innermost output axis by `options.max_upcast` scalar copies;
- a small innermost reduce axis (<= `options.max_unroll`) is fully unrolled.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from fast import config
from fast.renderer.base import RendererOptions
from fast.shape.symbolic import sint


@dataclass(frozen=True)
class AxisPlan:
    """Axis `axis` of the iteration shape, of `size`. Each loop iteration covers `unroll * vector`
    consecutive positions: `unroll` copies of the body, each a vector of `vector` lanes (position
    `counter * unroll * vector + copy * vector + lane`). When that covers `size` there is no loop."""

    axis: int
    size: sint
    unroll: int = 1
    vector: int = 1

    @property
    def step(self) -> int:
        return self.unroll * self.vector

    @property
    def has_loop(self) -> bool:
        return not (isinstance(self.size, int) and self.size == self.step)


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

    @property
    def reduce_vector(self) -> bool:
        """Whether the innermost reduce axis is vectorized (separate accumulators, combined at the end)."""
        return bool(self.reduce_axes) and self.reduce_axes[-1].vector > 1


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


def _divides(size: sint, amount: int) -> bool:
    return isinstance(size, int) and size % amount == 0


def _vector_reduce(plan: KernelPlan, load_strides: Sequence[Sequence[sint | None]], lanes: int) -> KernelPlan | None:
    """Vectorize the innermost reduce axis when every input that moves along it is contiguous there."""
    if not plan.reduce_axes:
        return None
    axis = plan.reduce_axes[-1]
    moving = [strides[axis.axis] for strides in load_strides if strides[axis.axis] != 0]
    if not moving or any(stride != 1 for stride in moving) or not _divides(axis.size, lanes):
        return None
    copies = next(c for c in (4, 2, 1) if _divides(axis.size, lanes * c))
    return replace(plan, reduce_axes=(*plan.reduce_axes[:-1], replace(axis, unroll=copies, vector=lanes)))


def _vector_output(plan: KernelPlan, store_strides: Sequence[sint | None], lanes: int) -> KernelPlan | None:
    """Vectorize the innermost output axis when the STORE walks it contiguously; block a second axis."""
    candidates = [i for i, axis in enumerate(plan.output_axes) if axis.size != 1]
    if not candidates or store_strides[plan.output_axes[candidates[-1]].axis] != 1:
        return None
    position = candidates[-1]
    axis = plan.output_axes[position]
    width = next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and _divides(axis.size, w)), 0)
    if not width:
        return None
    copies = next(c for c in ((2, 1) if plan.reduce_axes else (4, 2, 1)) if _divides(axis.size, width * c))
    outputs = list(plan.output_axes)
    outputs[position] = replace(axis, unroll=copies, vector=width)
    if plan.reduce_axes and len(candidates) > 1:
        other = outputs[candidates[-2]]
        rows = next((r for r in (4, 2) if _divides(other.size, r)), 1)
        outputs[candidates[-2]] = replace(other, unroll=rows)
    return replace(plan, output_axes=tuple(outputs))


def plan_kernel(full_shape: Sequence[sint], reduce_axes: Sequence[int], output_strides: Sequence[sint | None],
                options: RendererOptions, load_strides: Sequence[Sequence[sint | None]] = (),
                lanes: int = 1) -> KernelPlan:
    """The plan lowering follows. `output_strides` are the first STORE's real strides per axis,
    `load_strides` every LOAD's, `lanes` the vector lanes the kernel's dtypes allow (1: scalar)."""
    plan = natural_plan(full_shape, reduce_axes)
    if config.get().noopt:
        return plan
    plan = _reorder_outputs(plan, output_strides)
    vectorized = None
    if lanes > 1:
        vectorized = _vector_reduce(plan, load_strides, lanes) or _vector_output(plan, output_strides, lanes)
    if vectorized is None:
        plan = _upcast_innermost_output(plan, options.max_upcast)
        return _unroll_innermost_reduce(plan, options.max_unroll, options.max_unrolled_bodies)
    if vectorized.reduce_vector:
        return vectorized
    return _unroll_innermost_reduce(vectorized, options.max_unroll, options.max_unrolled_bodies)
