"""Which outputs a kernel writes with non-temporal ("streaming") stores.

A normal store first reads the cache line it writes (read-for-ownership), so writing an output
that does not fit in the caches costs a read and a write of every byte. A non-temporal store writes
whole lines straight to memory: a third less traffic for `out = f(a)`, but the line is no longer
cached, which hurts when the same kernel (or the next, while the data would still be cached) reads
it. The rule, a pure function of the lowered instructions:

- the renderer streams at all (`RendererOptions.stream_min_bytes > 0`, set by the CPU runtimes on
  x86, where every vector store can be made non-temporal);
- the output holds at least `stream_min_bytes` bytes (much more than the per-core caches);
- the kernel never loads that buffer (a row kernel that stores exp(x - max) and reads it back to
  divide by the sum keeps normal stores) and writes it with at least one vector STORE.

Renderers stream only vector STOREs to these buffers, and only at addresses aligned to the vector
size (checked at run time: a view's memory may start anywhere); a kernel that streams ends with a
store fence, so the values are visible to every thread once the kernel returns.
"""
from __future__ import annotations

from fast.codegen.ir import BufferInfo, Instr, IROps


def streamed_buffers(instrs: tuple[Instr, ...], buffers: tuple[BufferInfo, ...],
                     stream_min_bytes: int) -> frozenset[int]:
    """The indices of the outputs whose vector STOREs may be non-temporal (see the module docstring)."""
    if stream_min_bytes <= 0:
        return frozenset()
    loaded = {instr.arg for instr in instrs if instr.op is IROps.LOAD}
    vector_stored = {instr.arg for instr in instrs
                     if instr.op is IROps.STORE and _count(instrs[instr.srcs[1]]) > 1}
    return frozenset(buffer.idx for buffer in buffers
                     if buffer.is_output and buffer.idx not in loaded and buffer.idx in vector_stored
                     and buffer.size * buffer.dtype.itemsize >= stream_min_bytes)


def _count(instr: Instr) -> int:
    return instr.dtype.count if instr.dtype is not None else 1
