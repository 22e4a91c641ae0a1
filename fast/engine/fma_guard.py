"""Whether a kernel with fused multiply-adds may run on its buffers (codegen/fma.py).

A program lowered with FMA lists the input buffers its fused products read (`bounded_inputs`). It
agrees with the unfused program (up to the reduction tolerance; with the same infinities and NaNs)
when no product overflows, which holds when every element of those buffers is below
`FMA_BOUNDS[dtype]` in magnitude. `within_bounds` checks that with numpy's max and min over the
buffer's host memory (a NaN fails the check; memory that is not host memory fails too), and
remembers the answer per Buffer and version: a realized buffer's contents change only through a
realized assign, which bumps its version, so weights read by many launches are scanned once. Only
CPU devices lower with FMA.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

from fast.codegen.fma import FMA_BOUNDS
from fast.codegen.ir import LinearProgram
from fast.device import Buffer
from fast.dtype import DType

_CHECKED: weakref.WeakKeyDictionary[Buffer, tuple[int, int, bool]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()  # lanes of engine/parallel.py launch kernels concurrently


def within_bounds(program: LinearProgram, buffers: Sequence[Buffer]) -> bool:
    """Whether every element of `buffers[i]`, read as the program's dtype for buffer i, is below
    that dtype's bound, for each i in `program.bounded_inputs`."""
    return all(_bounded(buffers[index], program.buffers[index].dtype) for index in program.bounded_inputs)


def _bounded(buffer: Buffer, dtype: DType) -> bool:
    version, handle = buffer.version, id(buffer.handle)
    with _LOCK:
        known = _CHECKED.get(buffer)
    if known is not None and known[:2] == (version, handle):
        return known[2]
    window = getattr(buffer.handle, "window", None)  # host memory (runtime/host.py HostMemory)
    if window is None:
        return False  # memory this process cannot read: the unfused kernel runs
    raw = window()
    values = raw[:raw.size - raw.size % dtype.itemsize].view(dtype.np)
    bound = FMA_BOUNDS[dtype]
    result = values.size == 0 or bool(values.max() < bound) and bool(values.min() > -bound)
    with _LOCK:
        _CHECKED[buffer] = (version, handle, result)
    return result
