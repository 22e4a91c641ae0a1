"""Reading values back (fast/engine/readback.py `to_numpy`): one copy into a fresh array that the
caller owns. Writing to it never changes the buffer, nor an earlier or later read; a buffer whose
storage holds more elements than its shape (a shrunk view) reads its shape's elements only;
bfloat16 widens to float32."""
from __future__ import annotations

import numpy as np
import pytest

import fast
from fast import dtypes, from_numpy

DEVICES = ["CLANG", "LLVM"]


@pytest.mark.parametrize("device", DEVICES)
def test_reads_are_fresh_arrays_the_caller_owns(device: str) -> None:
    values = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    x = from_numpy(values, device)
    doubled = x.e(fast.BinaryOps.ADD, x)
    first, second = fast.to_numpy(doubled), fast.to_numpy(doubled)
    assert first.shape == (2, 3, 5) and first.dtype == np.float32 and first.flags.writeable
    assert not np.shares_memory(first, second)
    first[...] = -1.0
    np.testing.assert_array_equal(second, values * 2)
    np.testing.assert_array_equal(fast.to_numpy(doubled), values * 2)
    stored = fast.to_numpy(x)
    stored[0, 0, 0] = 99.0
    np.testing.assert_array_equal(fast.to_numpy(x), values)


@pytest.mark.parametrize("device", DEVICES)
def test_views_and_bfloat16_read_their_own_elements(device: str) -> None:
    values = np.arange(7 * 11, dtype=np.float32).reshape(7, 11)
    x = from_numpy(values, device)
    window = x.shrink(((1, 4), (2, 9)))
    np.testing.assert_array_equal(fast.to_numpy(window), values[1:4, 2:9])
    flat = x.reshape((77,)).shrink(((0, 5),))
    got = fast.to_numpy(flat)
    assert got.shape == (5,)
    assert got.base is None or got.base.size == 5  # nothing past the shape kept alive
    np.testing.assert_array_equal(got, values.reshape(-1)[:5])
    halves = fast.to_numpy(x.cast(dtypes.bfloat16))
    assert halves.dtype == np.float32
    np.testing.assert_array_equal(halves, values)  # small integers are exact in bfloat16
