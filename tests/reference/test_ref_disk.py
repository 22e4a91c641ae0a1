"""DISK holds data only (docs/api.md "DISK"): which views can be made contiguous or bitcast in place.

The oracle: the byte of the file each element reads, computed with numpy from ``arange``; a view is
consecutive when those bytes form one ascending run of whole elements with nothing padded.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ref_util import disk

MOVES = {
    "reshape": lambda a, arg: a.reshape(arg), "permute": lambda a, arg: a.transpose(arg),
    "expand": lambda a, arg: np.broadcast_to(a, arg), "pad": lambda a, arg: np.pad(a, arg, constant_values=-1),
    "shrink": lambda a, arg: a[tuple(slice(s, e) for s, e in arg)],
    "stride": lambda a, arg: a[tuple(slice(None, None, k) for k in arg)],
}


def consecutive(pos: np.ndarray, itemsize: int) -> bool:
    flat = pos.ravel()
    return flat.size == 0 or (flat.min() >= 0 and np.array_equal(flat, flat[0] + itemsize * np.arange(flat.size)))


def strided_in_place(pos: np.ndarray, old: int, new: int) -> bool:
    """One unpadded strided view, unit stride (or size 1) on the last axis, other byte strides dividing by new."""
    if pos.size == 0 or pos.min() < 0:
        return False
    strides = [int(np.take(pos, [1], axis=a).flat[0] - pos.flat[0]) if n > 1 else 0 for a, n in enumerate(pos.shape)]
    affine = pos.flat[0] + sum(s * np.indices(pos.shape)[a] for a, s in enumerate(strides))
    return bool(np.array_equal(pos, affine)) and (pos.shape[-1] == 1 or strides[-1] == old) and \
        all(s % new == 0 for s in strides[:-1])


@st.composite
def chains(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    ops, cur = [], shape
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(sorted(MOVES)))
        if kind == "reshape":
            arg = tuple(draw(st.permutations(cur))) if len(cur) > 1 else (1, *cur)
        elif kind == "permute":
            arg = tuple(draw(st.permutations(range(len(cur)))))
        elif kind == "expand":
            arg = tuple(draw(st.integers(1, 2)) if s == 1 else s for s in cur)
        elif kind == "pad":
            arg = tuple((draw(st.integers(0, 1)), draw(st.integers(0, 1))) for _ in cur)
        elif kind == "shrink":
            arg = tuple((lo, draw(st.integers(lo + 1, s))) for s in cur for lo in [draw(st.integers(0, s - 1))])
        else:
            arg = tuple(draw(st.sampled_from([-2, -1, 1, 2])) for _ in cur)
        ops.append((kind, arg))
        cur = MOVES[kind](np.empty(cur), arg).shape
    return shape, ops


@settings(max_examples=80, deadline=None)
@given(chain=chains(), target=st.sampled_from(["uint8", "int16", "int32", "float64"]))
def test_disk_views_contiguous_and_bitcast(impl, tmp_path_factory, chain, target):
    shape, ops = chain
    x = (np.arange(math.prod(shape)) * 37 % 251).astype(np.uint16).reshape(shape)
    d = impl.from_numpy(x, disk(tmp_path_factory.mktemp("disk")))
    pos, val, v = np.arange(x.size, dtype=np.int64).reshape(shape) * 2, x, d
    for kind, arg in ops:
        v, pos, val = getattr(v, kind)(arg), MOVES[kind](pos, arg), MOVES[kind](val, arg)
    want = np.where(pos >= 0, val, 0)
    if consecutive(pos, 2):
        assert np.array_equal(impl.to_numpy(v.contiguous()), want)
    else:
        with pytest.raises(RuntimeError, match="CONTIGUOUS"):
            v.contiguous()
    new = np.dtype(target).itemsize
    if (pos.shape[-1] * 2) % new:
        return
    if new == 2 or consecutive(pos, 2) or strided_in_place(pos, 2, new):  # same itemsize: always in place
        got = impl.to_numpy(v.cast(getattr(impl.dtypes, target), bitcast=True))
        assert got.tobytes() == np.ascontiguousarray(want).view(target).tobytes()
    else:
        with pytest.raises(RuntimeError, match="BITCAST"):
            v.cast(getattr(impl.dtypes, target), bitcast=True)
    assert np.array_equal(impl.to_numpy(v.copy_to_device("CLANG")), want)


def test_disk_in_place_cases(impl, tmp_path):
    x = np.arange(32, dtype=np.uint8).reshape(4, 8)
    d = impl.from_numpy(x, disk(tmp_path))
    rows = d.shrink(((1, 3), (0, 8))).contiguous()  # consecutive: a zero-copy view, same values
    assert np.array_equal(impl.to_numpy(rows), x[1:3])
    cols = d.shrink(((0, 4), (2, 6))).stride((-1, 1))  # flipped rows of 4 bytes: each row reinterprets
    assert impl.to_numpy(cols.cast(impl.dtypes.uint32, bitcast=True)).tolist() == \
        np.ascontiguousarray(x[::-1, 2:6]).view(np.uint32).tolist()
    u32 = d.cast(impl.dtypes.uint32, bitcast=True).shrink(((0, 4), (1, 2)))  # one uint32 per row
    assert impl.to_numpy(u32.cast(impl.dtypes.uint8, bitcast=True)).tolist() == x[:, 4:8].tolist()
    rows_6_bytes_apart = d.reshape((32,)).shrink(((0, 30),)).reshape((5, 6)).shrink(((0, 5), (0, 4)))
    with pytest.raises(RuntimeError, match="BITCAST"):
        rows_6_bytes_apart.cast(impl.dtypes.uint32, bitcast=True)
    with pytest.raises(RuntimeError, match="CONTIGUOUS"):
        d.permute((1, 0)).contiguous()
