"""Which optimization paths a lowered kernel took: a small record on the `LinearProgram` (`paths`,
`split_counts`), read by the conformance suite's coverage (conformance/optpaths.py) and by DEBUG
tools. It is data about decisions already made by opt.py, gemm.py and lower.py, never an input to
them: nothing in lowering or at run time reads it, so it cannot change a value.

Names (each present when the kernel has the property):
- `vector-output`: an output axis is split into vector lanes covering the whole axis;
  `vector-tail`: the vectorized axis covers a prefix and a scalar remainder nest runs after it;
- `vector-reduce`: the innermost reduce axis is vectorized (separate accumulators, combined at the end);
- `unrolled-outputs`: an output axis has several body copies (register blocking or read streams);
- `register-tile`: a vectorized-output reduction with a second output axis unrolled into rows;
  `dot-tile`: a vectorized reduce with two output axes unrolled (`a @ b.T`); `streams`: one;
- `column-chunks`: the outermost reduce axis is walked chunk by chunk outside the output loops;
- `reduce-unrolled`: the innermost reduce axis is fully unrolled (no loop);
- `multi-reduce`: several reduces in one kernel; `row-kernel`: the STOREs walk the reduced axes again;
- `gemm` (codegen/gemm.py), with `gemm-row-edge` / `gemm-column-edge` when M / N is not a multiple
  of the register tile and `gemm-no-edge` when both are, `gemm-pack-a`, `gemm-b-in-place` (B read
  where it is: codegen/gemm_pack.py `reads_b_in_place`), `gemm-batched`, `gemm-fma`,
  `gemm-tiles` (on AMX tiles, codegen/gemm_tiles.py: no edges, A packed as pieces, never `gemm-fma`)
  (tiles may add with fused multiply-adds, decided per tile at run time);
- `fma`: accumulations fused (codegen/fma.py; the engine's guard may still run the unfused kernel);
- `const-params`: the kernel's constants are parameters (codegen/const_args.py);
- `threaded`: the kernel takes `core~, cores~`; `split_counts` holds the iteration count of each
  loop that threads share (integer sizes only), so a reader can tell how a launch's chunk count
  divides it.
"""
from __future__ import annotations

from fast.codegen import gemm_checked, gemm_tiles
from fast.codegen.analyze import KernelInfo
from fast.codegen.gemm import choose_tiles, match, packs_a
from fast.codegen.gemm_pack import reads_b_in_place
from fast.codegen.ir import TILE_ROWS
from fast.codegen.opt import KernelPlan
from fast.renderer.base import RendererOptions


def plan_paths(plan: KernelPlan, info: KernelInfo) -> set[str]:
    """The names of the module docstring that a general (non-GEMM) plan decides."""
    outputs, reduces = plan.output_axes, plan.reduce_axes
    names: set[str] = set()
    if plan.tail is not None:
        names.add("vector-tail")
    elif any(axis.vector > 1 for axis in (*outputs, *plan.inner_axes)):
        names.add("vector-output")
    unrolled = [axis for axis in outputs if axis.unroll > 1]
    if unrolled:
        names.add("unrolled-outputs")
    if plan.reduce_vector:
        names.add("vector-reduce")
        names.add("dot-tile" if len(unrolled) >= 2 else "streams" if unrolled else "vector-reduce-only")
    elif reduces and any(a.vector > 1 for a in outputs) and any(a.unroll > 1 and a.vector == 1 for a in outputs):
        names.add("register-tile")
    if plan.chunk is not None:
        names.add("column-chunks")
    if reduces and not reduces[-1].has_loop and reduces[-1].unroll > 1:
        names.add("reduce-unrolled")
    if len(info.reduces) > 1:
        names.add("multi-reduce")
    if info.row:
        names.add("row-kernel")
    return names


def gemm_paths(info: KernelInfo, options: RendererOptions, fused: bool) -> tuple[set[str], int]:
    """The names of a GEMM-lowered kernel and its thread units (batches x blocks of rows: what
    threads share, gemm.py), from the same `match` and `choose_tiles` answers the lowering used."""
    shape = match(info, options)
    if shape is not None and gemm_tiles.applies(shape, options):
        batched = {"gemm-batched"} if shape.batch else set()
        return {"gemm", "gemm-tiles", "gemm-no-edge", "gemm-pack-a", *batched}, \
            shape.size(shape.batch) * (shape.size(shape.rows) // TILE_ROWS)
    tiles = choose_tiles(shape, options) if shape is not None else None
    if shape is None or tiles is None:
        return set(), 0
    m, n = shape.size(shape.rows), shape.sizes[shape.column]
    names = {"gemm", "gemm-row-edge" if m % tiles.rows else "", "gemm-column-edge" if n % tiles.columns else ""}
    if m % tiles.rows == 0 and n % tiles.columns == 0:
        names.add("gemm-no-edge")
    panels = -(-n // tiles.columns)
    packed_a = packs_a(shape, tiles)
    if packed_a:
        names.add("gemm-pack-a")
    if gemm_checked.applies(fused, packed_a, panels, bool(shape.batch)):
        names.add("gemm-checked-tiles")
    if reads_b_in_place(shape, tiles):
        names.add("gemm-b-in-place")
    if shape.batch:
        names.add("gemm-batched")
    if fused:
        names.add("gemm-fma")
    names.discard("")
    return names, shape.size(shape.batch) * -(-m // tiles.rows)
