"""fast/debug/pages.py: numpy's huge-page switch restored, bit equality by blocks on awkward sizes."""
from __future__ import annotations

import numpy as np
import pytest

from fast.debug import pages


@pytest.mark.parametrize("size", [0, 1, 7, pages.CHUNK - 1, pages.CHUNK, pages.CHUNK + 1, 3 * pages.CHUNK + 5])
def test_equal_bits_matches_array_equal(size: int) -> None:
    rng = np.random.default_rng(size)
    mine = rng.integers(0, 1 << 32, size, dtype=np.uint32)
    assert pages.equal_bits(mine, mine.copy())
    for position in {0, size // 2, size - 1} if size else set():
        theirs = mine.copy()
        theirs[position] ^= 1
        assert not pages.equal_bits(mine, theirs), position


def test_equal_bits_rejects_other_shapes_and_dtypes() -> None:
    a = np.arange(10, dtype=np.uint32)
    assert not pages.equal_bits(a, a[:9])
    assert not pages.equal_bits(a, a.astype(np.uint64))
    assert not pages.equal_bits(a.reshape(2, 5), a.reshape(2, 5))


def test_equal_bits_strided_views() -> None:
    a = np.arange(2 * pages.CHUNK + 3, dtype=np.uint16)
    assert pages.equal_bits(a[::-2], a[::-2].copy())
    b = a[::-2].copy()
    b[-1] += 1
    assert not pages.equal_bits(a[::-2], b)


def test_base_pages_restores_the_setting() -> None:
    getter = getattr(pages._multiarray, "_get_madvise_hugepage", None)
    if getter is None:
        pytest.skip("this numpy has no huge-page switch")
    setter = pages._multiarray._set_madvise_hugepage
    original = getter()
    for before in (True, False):
        setter(before)
        try:
            with pages.base_pages():
                assert getter() is False
            assert getter() is before
            with pytest.raises(KeyError), pages.base_pages():
                raise KeyError("inside")
            assert getter() is before
        finally:
            setter(original)
