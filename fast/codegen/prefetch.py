"""Which loads a row kernel prefetches for its next row.

A row kernel (softmax, layernorm: several reductions over each row, then a STORE phase that walks
the row again) reads each row from memory once, in its first reduction; its later passes and the
STORE phase work on the row while it is in the core's caches. Memory is then busy only during the
first pass of every row and idle for the rest, and one core cannot keep enough reads in flight to
make up for it. So, on renderers with `RendererOptions.prefetch`, the STORE phase of the row at
position r of the innermost output loop also issues a PREFETCH of what the first reduction will
load at r + 1, at the same place along the row: the next row streams in while this one is finished.
(Innermost: with several output loops, attention's (batch, head, query) rows, the outermost loop's
next step is a whole batch of rows ahead, evicted again before it is reached; the last row of each
innermost run is not prefetched for.)

The rule, a pure function of the kernel:
- the renderer prefetches (`RendererOptions.prefetch`, set by the CPU runtimes) and NOOPT is off;
- the kernel is a row kernel (its STORE phase walks the row);
- the loads prefetched are the LOADs of input buffers (never outputs) below the first reduction,
  each distinct (buffer, view) once, read as one vector per body copy (gathers are skipped), that
  move along that loop (a bias row shared by every row is not prefetched again);
- the first reduction reads at most PREFETCH_MAX_ROW_BYTES of them per row, so the next row fits
  in a core's private cache beside the current one (a larger row would evict what it prefetched).

Each PREFETCH is guarded by "the next row exists" (and the load's own validity), so its address is
one the kernel reads anyway: nothing out of bounds is ever touched. A prefetch changes no value.
"""
from __future__ import annotations

from fast.codegen.analyze import KernelInfo
from fast.ops import BufferOps, LazyOp
from fast.shape.symbolic import as_node

#: The most bytes per row that the first reduction may load for its loads to be prefetched.
PREFETCH_MAX_ROW_BYTES = 256 << 10


def prefetched_loads(info: KernelInfo) -> tuple[LazyOp, ...]:
    """The LOADs whose next-row addresses a row kernel's STORE phase prefetches (module docstring);
    empty unless the kernel is a row kernel."""
    if not info.row or info.reduce is None:
        return ()
    outputs = {store.arg.idx for store in info.stores}
    loads: dict[tuple[int, object], LazyOp] = {}
    for node in info.reduces[0].walk():
        if node.op is BufferOps.LOAD and not node.src and node.arg.idx not in outputs:  # not gathered loads
            loads.setdefault((node.arg.idx, node.arg.st), node)
    row_elements = 1
    for axis in info.reduce_axes:
        row_elements *= as_node(info.full_shape[axis]).max
    row_bytes = sum(row_elements * load.arg.dtype.itemsize for load in loads.values())
    return tuple(loads.values()) if row_bytes <= PREFETCH_MAX_ROW_BYTES else ()
