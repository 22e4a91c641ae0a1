"""Memory habits of compare: base pages for numpy, and equality tests that allocate nothing large.

Why: numpy asks the kernel for transparent huge pages (`madvise(MADV_HUGEPAGE)`) on every array of
4 MiB or more. Where the host's THP defrag setting is `madvise` (the common default), each such page
fault may compact memory before it zeroes 2 MiB. compare makes thousands of large short-lived arrays
(reference's value of every node, the product of every matmul, copies read back from fast), and on a
virtual machine those faults cost several times the work itself: all-MiniLM-L6-v2 took 15-20 s with
huge pages and 7-9 s without (bench/debug_minilm.py, same machine, same run order).

Invariants: `base_pages()` restores numpy's setting on exit, also on error; where numpy has no such
switch it changes nothing. `equal_bits` never allocates more than one `CHUNK`-element block.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

try:  # numpy >= 2: numpy._core; numpy 1.x: numpy.core (both keep the switch private but documented)
    from numpy._core import multiarray as _multiarray
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core import multiarray as _multiarray  # type: ignore[no-redef]

CHUNK = 1 << 18  # elements compared per step by equal_bits (a 256 KiB boolean block, reused)


@contextlib.contextmanager
def base_pages() -> Iterator[None]:
    """numpy allocates without asking for huge pages inside the block (module docstring)."""
    getter = getattr(_multiarray, "_get_madvise_hugepage", None)
    setter = getattr(_multiarray, "_set_madvise_hugepage", None)
    if getter is None or setter is None:
        yield
        return
    before = bool(getter())
    setter(False)
    try:
        yield
    finally:
        setter(before)


def equal_bits(mine: np.ndarray, theirs: np.ndarray) -> bool:
    """Whether two 1-D arrays of one unsigned dtype and length hold the same elements, compared a
    block at a time into one reused boolean block (np.array_equal makes a boolean array as large as
    its inputs)."""
    if mine.shape != theirs.shape or mine.dtype != theirs.dtype or mine.ndim != 1:
        return False
    block = np.empty(min(CHUNK, mine.size), dtype=np.bool_)
    for start in range(0, mine.size, CHUNK):
        stop = min(start + CHUNK, mine.size)
        out = block[:stop - start]
        np.equal(mine[start:stop], theirs[start:stop], out=out)
        if not out.all():
            return False
    return True
