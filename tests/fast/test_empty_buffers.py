"""Zero-size buffers: from_numpy always returns a realized buffer (so a zero-size one can be assigned
into), and an empty view of a DISK buffer is consecutive, so `contiguous()` and a shape-changing
bitcast of it are allowed (docs/api.md, DISK) and give empty results of the right shape and dtype.
Regressions found by the conformance suite (tests/conformance/test_conf_regressions.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fast import LazyBuffer, dtypes, from_numpy, realize, to_numpy


@pytest.mark.parametrize("shape", [(2, 0), (0,), (0, 3, 1)])
def test_from_numpy_of_zero_elements_is_realized(shape: tuple[int, ...]) -> None:
    empty = from_numpy(np.zeros(shape, np.float32), "CLANG")
    assert empty.realized is not None and empty.realized.nbytes == 0
    assert empty.shape == shape and empty.dtype == dtypes.float32
    result = to_numpy(empty)
    assert result.shape == shape and result.dtype == np.float32


def test_assign_into_a_zero_size_buffer_realizes() -> None:
    target = from_numpy(np.zeros((2, 0), np.int32), "CLANG")
    realize(target)
    assigned = target.assign(from_numpy(np.zeros((2, 0), np.int32), "CLANG"))
    realize(assigned)
    assert assigned.realized is not None
    assert to_numpy(assigned).shape == (2, 0)
    again = target.assign(from_numpy(np.zeros((2, 0), np.int32), "CLANG"))  # nothing left pending
    assert to_numpy(again).shape == (2, 0)


def test_assign_into_a_zero_size_buffer_still_validates() -> None:
    target = from_numpy(np.zeros((2, 0), np.int32), "CLANG")
    with pytest.raises(ValueError, match="shape"):
        target.assign(from_numpy(np.zeros((0, 2), np.int32), "CLANG"))
    with pytest.raises(TypeError, match="dtype"):
        target.assign(from_numpy(np.zeros((2, 0), np.float32), "CLANG"))


def _disk_buffer(tmp_path: Path, array: np.ndarray) -> LazyBuffer:
    return from_numpy(array, "CLANG").copy_to_device(f"DISK:{tmp_path}/buffer")


def test_contiguous_of_an_empty_disk_view(tmp_path: Path) -> None:
    disk = _disk_buffer(tmp_path, np.zeros((2, 2), np.bool_))
    view = disk.shrink(((0, 0), (0, 0)))
    result = to_numpy(view.contiguous().copy_to_device("CLANG"))
    assert result.shape == (0, 0) and result.dtype == np.bool_


@pytest.mark.parametrize(("shape", "shrink", "expected"), [
    ((1, 1), ((0, 0), (0, 0)), (0, 0)),
    ((2, 3), ((1, 1), (0, 3)), (0, 6)),
    ((2, 3), ((0, 2), (1, 1)), (2, 0)),
])
def test_shape_changing_bitcast_of_an_empty_disk_view(tmp_path: Path, shape: tuple[int, ...],
                                                       shrink: tuple[tuple[int, int], ...],
                                                       expected: tuple[int, ...]) -> None:
    disk = _disk_buffer(tmp_path, np.ones(shape, np.float16))
    view = disk.shrink(shrink)
    result = to_numpy(view.cast(dtypes.int8, bitcast=True).copy_to_device("CLANG"))
    assert result.shape == expected and result.dtype == np.int8


def test_empty_disk_view_bitcast_still_checks_divisibility(tmp_path: Path) -> None:
    disk = _disk_buffer(tmp_path, np.ones((2, 3), np.int8))
    with pytest.raises(ValueError):
        disk.shrink(((0, 0), (0, 3))).cast(dtypes.float16, bitcast=True)


def test_zero_size_empty_loadop_is_realized_by_realize_and_can_be_assigned():
    """Conformance found: EMPTY of shape (0,) became a CONST, so after realize it was no assign target."""
    import fast

    target = fast.LazyBuffer.loadop(fast.LoadOps.EMPTY, (0,), fast.dtypes.bool, "CLANG")
    source = fast.from_numpy(np.zeros((0,), np.bool_), "CLANG")
    assert not target.is_realized() and target.base.op is fast.LoadOps.EMPTY
    fast.realize(target)
    assert target.is_realized()
    assert fast.to_numpy(target.assign(source)).shape == (0,)
