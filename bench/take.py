"""The `take` workload: the token-embedding gather of a BERT-sized model (issue 26, item 2).

`take` of 4,096 rows of 384 float32 from a 30522 x 384 table (bert-base's vocabulary, MiniLM's
width) with int32 indices, as `xp.take(table, ids, axis=0)` builds it: one `LazyBuffer.gather`, a
kernel whose gathered loads read each selected row (fast/codegen/lower.py), against numpy's
`np.take` (and the optional peers' own gathers). The table's other rows are never read, so the
bytes moved are the selected rows, the indices and the output (`moved_bytes`), not the table.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fast import LazyBuffer

VOCAB, WIDTH, ROWS = 30522, 384, 4096
QUICK_DIV = 8  # --quick: an eighth of the rows and of the vocabulary


def inputs(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
    """The table (standard normal float32) and the row indices (int32, uniform over the vocabulary,
    repeats allowed, as real token ids have)."""
    vocab, rows = (VOCAB // QUICK_DIV, ROWS // QUICK_DIV) if quick else (VOCAB, ROWS)
    table = rng.standard_normal((vocab, WIDTH), dtype=np.float32)
    return [table, rng.integers(0, vocab, rows).astype(np.int32)]


def graph(table: LazyBuffer, ids: LazyBuffer) -> LazyBuffer:
    """The rows of `table` at `ids`: one GATHER node."""
    return table.gather(ids, 0)


def peer(ops: Any, table: Any, ids: Any) -> Any:
    """The peer's gather of the rows (`ArrayOps.take`)."""
    return ops.take(table, ids)


def moved_bytes(arrays: list[np.ndarray], out_shape: tuple[int, ...]) -> int:
    """Bytes a gather must move: the rows it reads, the indices, and the output it writes."""
    table, ids = arrays
    row_bytes = table.shape[1] * table.itemsize
    return ids.size * row_bytes + ids.nbytes + int(np.prod(out_shape)) * table.itemsize
