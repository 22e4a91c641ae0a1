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
  vectorize that reduce axis (`lanes` x up to 4 accumulators), and unroll the innermost output axis
  whose outputs read other memory into up to 4 interleaved streams (`_interleave_streams`: several
  sequential reads in flight per core; each output's additions stay the same sequence); but when
  two output axes each reuse an input (`a @ b.T`), a tile of up to 4 x 4 outputs with one vector
  accumulator each (`_dot_tile`: rows + columns loads per rows x columns products);
- otherwise: vectorize the innermost output axis when the STORE walks it contiguously and its size is
  a multiple of the lanes (halving the lanes down to 4 to find a divisor), with up to 4 copies; when
  no such divisor exists (a prime size), the axis is vectorized over its first `tail` positions (a
  multiple of lanes x copies) and lowering runs the output loops once more for the rest, that axis
  scalar (`KernelPlan.tail`, `tail_plan`): the same values, element by element,
  (elementwise; a tailed axis takes the copies that leave the shortest tail); in reductions, a
  register tile of about half the target's vector registers in accumulators: copies times rows of
  the output axis whose rows reuse the most vector loads (matmul's rows of A, a convolution's
  output channels): 4 x 2 or 8 x 1 with 16 registers, 4 x 4 or 8 x 2 with 32 (AVX-512); or up to
  8 copies when there is no such axis (a column sum: 8 vectors of columns per walk down the rows);
- a vectorized-output reduction that stores the reduce itself walks its outermost reduce axis in
  chunks outside the output loops, adding each chunk into the output (per output the order is
  chunk by chunk, each chunk in row order): a register tile takes 32 (or 16) rows (matmul's
  k-blocking), a plain column reduction 8 (or 4) rows of one vector each per step (eight
  sequential read streams per core: it reads at the machine's read ceiling);
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
    chunk: tuple[int, int] | None = None  # (reduce axis, chunks): that axis is walked chunk by chunk
    tail: tuple[int, int] | None = None  # (output axis position, full size): see `tail_plan`
    inner_axes: tuple[AxisPlan, ...] = ()  # a row kernel: the reduced axes again, for its STOREs

    @property
    def bodies(self) -> int:
        """How many copies of the innermost body are emitted per innermost iteration."""
        count = 1
        for axis in (*self.output_axes, *self.reduce_axes):
            count *= axis.unroll
        return count

    def tail_plan(self) -> tuple[tuple[AxisPlan, ...], int, int] | None:
        """For a plan whose vectorized output axis covers only a prefix (`tail`): the output axes of
        the remainder loops (that axis scalar over the remaining positions), that axis, and where the
        remainder starts. None without a tail."""
        if self.tail is None:
            return None
        position, full = self.tail
        vectorized = self.output_axes[position]
        start = vectorized.size
        assert isinstance(start, int)  # noqa: S101 - tails are only planned for integer sizes
        rest = replace(vectorized, size=full - start, unroll=1, vector=1)
        return (*self.output_axes[:position], rest, *self.output_axes[position + 1:]), vectorized.axis, start

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


def _reuse(axis: int, vector_axis: int, load_strides: Sequence[Sequence[sint | None]]) -> int:
    """How many loads that move along the vector axis stay fixed along `axis` (reused by its copies)."""
    return sum(1 for strides in load_strides if strides[axis] == 0 and strides[vector_axis] != 0)


def _block_axis(plan: KernelPlan, candidates: list[int], vector_axis: int,
                load_strides: Sequence[Sequence[sint | None]]) -> int | None:
    """The output axis to unroll into rows of a register tile: the one whose copies reuse the most
    vector loads (matmul: the rows of A; convolution: the output channels), innermost on ties."""
    axes = plan.output_axes
    options = [i for i in candidates if axes[i].axis != vector_axis and _divides(axes[i].size, 2)
               and _reuse(axes[i].axis, vector_axis, load_strides) > 0]
    if not options:
        return None
    return max(reversed(options), key=lambda i: _reuse(axes[i].axis, vector_axis, load_strides))


def _copies(size: sint, width: int, tile: Sequence[int], tailed: bool) -> int:
    """Vectors per iteration: the first of `tile` whose step divides `size`; on a tailed axis the one
    whose step leaves the shortest scalar tail (more copies on ties)."""
    if not tailed:
        return next(c for c in tile if _divides(size, width * c))
    assert isinstance(size, int)  # noqa: S101 - only integer sizes get tails
    fits = [c for c in tile if size >= width * c]
    return max(fits, key=lambda c: (size - size % (width * c), c))


def _vector_output(plan: KernelPlan, store_strides: Sequence[sint | None], lanes: int,
                   load_strides: Sequence[Sequence[sint | None]], registers: int = 16) -> KernelPlan | None:
    """Vectorize the innermost output axis when the STORE walks it contiguously. In a reduction,
    unroll it (copies) and a second output axis (rows) into a register tile of accumulators: about
    half the `registers` (the rest hold the loaded vectors and the broadcast value)."""
    candidates = [i for i, axis in enumerate(plan.output_axes) if axis.size != 1]
    if not candidates or store_strides[plan.output_axes[candidates[-1]].axis] != 1:
        return None
    position = candidates[-1]
    axis = plan.output_axes[position]
    width = next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and _divides(axis.size, w)), 0)
    tailed = not width and isinstance(axis.size, int)
    if tailed:
        width = next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and w < axis.size), 0)
    if not width:
        return None
    outputs = list(plan.output_axes)
    block = _block_axis(plan, candidates, axis.axis, load_strides) if plan.reduce_axes else None
    accumulators = max(8, registers // 2)
    tile = ((4, 2, 1) if accumulators >= 16 else (2, 1)) if block is not None \
        else (8, 4, 2, 1) if plan.reduce_axes else (4, 2, 1)
    size = axis.size
    copies = _copies(size, width, tile, tailed)
    if block is not None:  # rows x copies <= accumulators (16: 4 x 4 or 8 x 2; 8: 4 x 2 or 8 x 1)
        rows = next(r for r in (8, 4, 2) if r * copies <= accumulators and _divides(outputs[block].size, r))
        outputs[block] = replace(outputs[block], unroll=rows)
    if not tailed:
        outputs[position] = replace(axis, unroll=copies, vector=width)
        return replace(plan, output_axes=tuple(outputs))
    full: int = axis.size  # type: ignore[assignment]
    outputs[position] = replace(axis, size=full - full % (width * copies), unroll=copies, vector=width)
    return replace(plan, output_axes=tuple(outputs), tail=(position, full))


def plan_kernel(full_shape: Sequence[sint], reduce_axes: Sequence[int], output_strides: Sequence[sint | None],
                options: RendererOptions, load_strides: Sequence[Sequence[sint | None]] = (),
                lanes: int = 1, chunkable: bool = False, row: bool = False) -> KernelPlan:
    """The plan lowering follows. `output_strides` are the first STORE's real strides per axis,
    `load_strides` every LOAD's, `lanes` the vector lanes the kernel's dtypes allow (1: scalar);
    `chunkable`: partial results of the reduce may accumulate in the kernel's one output (lower.py);
    `row`: a row kernel, whose STOREs walk the reduced axes again (`inner_axes`)."""
    plan = natural_plan(full_shape, reduce_axes)
    if row:
        plan = replace(plan, inner_axes=plan.reduce_axes)
    if config.get().noopt:
        return plan
    if row:
        return _row_plan(plan, output_strides, load_strides, lanes, options)
    plan = _reorder_outputs(plan, output_strides)
    vectorized = None
    if lanes > 1:
        vectorized = _vector_reduce(plan, load_strides, lanes) \
            or _vector_output(plan, output_strides, lanes, load_strides, options.vector_registers)
    if vectorized is None:
        plan = _upcast_innermost_output(plan, options.max_upcast)
        return _unroll_innermost_reduce(plan, options.max_unroll, options.max_unrolled_bodies)
    if vectorized.reduce_vector:
        return _dot_tile(vectorized, load_strides, options.vector_registers) \
            or _interleave_streams(vectorized, load_strides, options.vector_registers)
    if chunkable:
        vectorized = _chunk_strided_reduce(vectorized)
    return _unroll_innermost_reduce(vectorized, options.max_unroll, options.max_unrolled_bodies)


def _dot_tile(plan: KernelPlan, load_strides: Sequence[Sequence[sint | None]], registers: int) -> KernelPlan | None:
    """A vectorized reduce whose inputs each stay fixed along a different output axis (`a @ b.T`:
    rows of `a` are reused along the columns, rows of `b` along the rows) gets a register tile of
    outputs, rows x columns with one vector accumulator each (half the vector registers): per step
    along the reduce it loads rows + columns vectors for rows x columns products, instead of one
    load per product. Each output then adds its elements in one vector accumulator (a different
    float order from `_interleave_streams`, still fixed by the plan alone)."""
    reduce_axis = plan.reduce_axes[-1].axis
    axes = plan.output_axes
    reusing = [i for i, axis in enumerate(axes) if axis.size != 1 and _reuse(axis.axis, reduce_axis, load_strides) > 0]
    if len(reusing) < 2:
        return None
    rows, columns = reusing[-2], reusing[-1]
    budget = max(4, registers // 2)
    tile = next(((r, c) for r, c in ((4, 4), (4, 2), (2, 4), (2, 2))
                 if r * c <= budget and _divides(axes[rows].size, r) and _divides(axes[columns].size, c)), None)
    if tile is None:
        return None
    outputs = list(axes)
    outputs[rows], outputs[columns] = replace(axes[rows], unroll=tile[0]), replace(axes[columns], unroll=tile[1])
    single = replace(plan.reduce_axes[-1], unroll=1)
    return replace(plan, output_axes=tuple(outputs), reduce_axes=(*plan.reduce_axes[:-1], single))


def _interleave_streams(plan: KernelPlan, load_strides: Sequence[Sequence[sint | None]],
                        registers: int) -> KernelPlan:
    """A vectorized reduce reads one contiguous stream per output. Unroll the innermost output axis
    whose outputs read far-apart memory (an input's stride along it is not 0 or 1) into `streams`
    copies, each with its own accumulators: `streams` sequential streams are in flight at once,
    which keeps more of the hardware prefetchers busy (a read-only walk of one stream per core
    leaves memory bandwidth unused). Every output's reduction is the same sequence as before, so
    values do not change; at most half the vector registers hold accumulators."""
    copies = plan.reduce_axes[-1].unroll
    streams = min(4, (registers // 2) // copies)
    candidates = [i for i, axis in enumerate(plan.output_axes) if axis.size != 1 and axis.unroll == 1]
    if streams < 2 or not candidates:
        return plan
    position = candidates[-1]
    axis = plan.output_axes[position]
    strides = [loads[axis.axis] for loads in load_strides]
    if not any(isinstance(stride, int) and abs(stride) > 1 for stride in strides):
        return plan
    amount = next((g for g in (4, 2) if g <= streams and _divides(axis.size, g)), 1)
    if amount < 2:
        return plan
    outputs = list(plan.output_axes)
    outputs[position] = replace(axis, unroll=amount)
    return replace(plan, output_axes=tuple(outputs))


def _row_plan(plan: KernelPlan, store_strides: Sequence[sint | None], load_strides: Sequence[Sequence[sint | None]],
              lanes: int, options: RendererOptions) -> KernelPlan:
    """A row kernel: rows in STORE order (threads split them), each reduce vectorized along a
    contiguous reduced axis, the STOREs vectorized along the last reduced axis when it is contiguous."""
    plan = _reorder_outputs(plan, store_strides)
    if lanes > 1:
        plan = _vector_reduce(plan, load_strides, lanes) or plan
    if not plan.reduce_vector:
        plan = _unroll_innermost_reduce(plan, options.max_unroll, options.max_unrolled_bodies)
    inner = plan.inner_axes[-1] if plan.inner_axes else None
    if lanes > 1 and inner is not None and store_strides[inner.axis] == 1:
        width = next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and _divides(inner.size, w)), 0)
        if width:
            copies = next(c for c in (4, 2, 1) if _divides(inner.size, width * c))
            plan = replace(plan, inner_axes=(*plan.inner_axes[:-1], replace(inner, unroll=copies, vector=width)))
    return plan


CHUNK_ROWS = (32, 16)  # measured: 16-32 rows keep a matmul's B panel cached (k-blocking)
STREAM_CHUNK_ROWS = (8, 4)  # measured: a column sum reads 8 rows at once, one vector of each per step


def _chunk_rows(size: int, choices: Sequence[int]) -> int:
    """Rows per chunk (0: do not chunk): at least four chunks of a size that divides the axis."""
    return next((rows for rows in choices if size % rows == 0 and size >= 4 * rows), 0)


def _chunk_strided_reduce(plan: KernelPlan) -> KernelPlan:
    """Walk the outermost reduce axis in chunks (outside the output loops), adding each chunk's sums
    into the output: one pass reads the few rows of one chunk for every output (they stay in cache
    and in the TLB) instead of walking the whole strided axis once per output tile.

    A register tile (matmul, convolution: an output axis unrolled into rows that reuse loads) takes
    chunks of `CHUNK_ROWS`, long enough to reuse each loaded panel. A plain strided reduce (a column
    sum: nothing reused, every load a new stream position) takes short chunks of `STREAM_CHUNK_ROWS`
    and one vector per row and step: each row of the chunk is one sequential read stream, and a
    core's prefetchers keep about eight streams going (32 rows of 8 vectors each read 1.5x slower
    than the machine's read ceiling on a Zen 4; 8 rows of one vector read at it)."""
    if not plan.reduce_axes or not any(axis.vector > 1 for axis in plan.output_axes):
        return plan
    axis = plan.reduce_axes[0]
    size = axis.size
    tiled = any(output.unroll > 1 and output.vector == 1 for output in plan.output_axes)
    rows = _chunk_rows(size, CHUNK_ROWS if tiled else STREAM_CHUNK_ROWS) if isinstance(size, int) else 0
    if not isinstance(size, int) or not rows:
        return plan
    chunked = replace(axis, size=rows, unroll=1, vector=1)
    outputs = plan.output_axes
    if not tiled and plan.tail is None:
        outputs = tuple(replace(output, unroll=1) if output.vector > 1 else output for output in outputs)
    return replace(plan, output_axes=outputs, reduce_axes=(chunked, *plan.reduce_axes[1:]),
                   chunk=(axis.axis, size // rows))
