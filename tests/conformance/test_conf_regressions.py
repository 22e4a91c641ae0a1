"""Disagreements between fast and reference that the conformance suite found.

Each test states the behaviour docs/semantics.md and SPEC.md require, checks it on the side that
got it wrong, and checks that both sides agree through the suite's own comparison. A test marked
xfail(strict=True) documents a bug that is still open: when the wrong side is fixed the test
passes, strict xfail turns that into a failure, and the marker must be removed. Unmarked tests are
bugs already fixed, kept so they stay fixed.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import numpy as np

from conformance.program import (
    ArrayData,
    Assign,
    Cast,
    Contiguous,
    Copy,
    Elementwise,
    Fetch,
    Leaf,
    LoadConst,
    Movement,
    Program,
    Realize,
    Shard,
)
from conformance.runner import check


def _package(name: str) -> ModuleType:
    return importlib.import_module(name)


def _agree(program: Program) -> None:
    mismatches = check(program, _package("reference"), _package("fast")).mismatches
    assert not mismatches, "\n".join(m.detail for m in mismatches) + "\n" + program.render()


def test_pad_of_a_scalar_with_no_axes_is_a_no_op() -> None:
    """Found: reference raised numpy's TypeError for pad(()) of a 0-d buffer (fixed in reference)."""
    ref = _package("reference")
    scalar = ref.from_numpy(np.array(7.0, np.float32), "CLANG")
    assert ref.to_numpy(scalar.pad(())).item() == 7.0
    _agree(Program((Leaf(ArrayData("float32", (), (7.0,)), "CLANG"), Movement(0, "pad", ()), Fetch(1))))


def test_to_numpy_of_a_zero_size_result() -> None:
    """Found: fast's to_numpy of a computed zero-size buffer raised RuntimeError 'did not realize'
    (SPEC §1: to_numpy returns an array of the buffer's shape); fixed in fast."""
    fast = _package("fast")
    empty = fast.from_numpy(np.zeros((0, 3), np.float32), "CLANG")
    assert fast.to_numpy(empty.e(fast.BinaryOps.ADD, empty)).shape == (0, 3)
    _agree(Program((Leaf(ArrayData("float32", (0, 3)), "CLANG"), Elementwise("ADD", (0, 0)), Fetch(1))))


def test_assign_into_a_zero_size_buffer() -> None:
    """Found: fast turned a zero-size from_numpy buffer into an unrealized CONST, so assign raised
    'must be realized' (SPEC §4 only requires a realized target); fixed in fast."""
    data = ArrayData("float32", (2, 0))
    _agree(Program((Leaf(data, "CLANG"), Realize((0,)), Leaf(data, "CLANG"), Assign(0, 2), Realize((3,)),
                    Fetch(3))))


def test_assign_into_a_sharded_buffer() -> None:
    """Found: fast raised ValueError 'the target must be a whole buffer' for an assign into a realized
    from_sharded buffer (SPEC §5: assign is per shard); fixed (every shard is now a buffer of its own)."""
    devices = ("CLANG", "CLANG:1")
    values = tuple(range(6))
    program = Program((Leaf(ArrayData("int32", (3, 2), values), "CLANG"), Shard(0, devices, 0), Realize((1,)),
                       Leaf(ArrayData("int32", (3, 2), (1,) * 6), "CLANG"), Shard(3, devices, 0), Assign(1, 4),
                       Realize((5,)), Fetch(5)))
    _agree(program)


def test_assign_into_contiguous_of_a_view_writes_the_parent() -> None:
    """Found: fast's zero-copy VIEW made an assign into contiguous() of a consecutive view write the
    parent while reference copied. Decided (docs/api.md, "Zero-copy views"): the view aliases the
    parent in both implementations, so the assign writes the parent's rows."""
    fast = _package("fast")
    leaf = fast.from_numpy(np.arange(6, dtype=np.int32).reshape(3, 2), "CLANG")
    copy = leaf.shrink(((0, 2), (0, 2))).contiguous()
    fast.realize(copy)
    fast.realize(copy.assign(fast.from_numpy(np.full((2, 2), 100, np.int32), "CLANG")))
    assert fast.to_numpy(leaf).tolist() == [[100, 100], [100, 100], [4, 5]]
    data = ArrayData("int32", (3, 2), tuple(range(6)))
    _agree(Program((Leaf(data, "CLANG"), Movement(0, "shrink", ((0, 2), (0, 2))), Contiguous(1), Realize((2,)),
                    Leaf(ArrayData("int32", (2, 2), (100,) * 4), "CLANG"), Assign(2, 4), Realize((5,)), Fetch(5),
                    Fetch(0))))


def test_contiguous_of_an_empty_disk_view(tmp_path: Path) -> None:
    """Found: fast raised RuntimeError 'non-consecutive view' for contiguous() of an empty DISK view
    (docs/api.md DISK: an empty view is consecutive); fixed in fast."""
    disk = f"DISK:{tmp_path}/buffer"
    _agree(Program((Leaf(ArrayData("bool", (2, 2), (False,) * 4), "CLANG"), Copy(0, disk),
                    Movement(1, "shrink", ((0, 0), (0, 0))), Contiguous(2), Copy(3, "CLANG"), Fetch(4))))


def test_shape_changing_bitcast_of_an_empty_disk_view(tmp_path: Path) -> None:
    """Found: fast raised RuntimeError 'non-consecutive view' for a shape-changing bitcast of an empty
    DISK view (docs/api.md DISK: an empty view is consecutive); fixed in fast."""
    disk = f"DISK:{tmp_path}/buffer"
    _agree(Program((Leaf(ArrayData("float16", (1, 1), (0.0,)), "CLANG"), Copy(0, disk),
                    Movement(1, "shrink", ((0, 0), (0, 0))), Cast(2, "int8", bitcast=True), Copy(3, "CLANG"),
                    Fetch(4))))


def test_sharded_reshape_of_a_zero_size_buffer_gives_each_shard_its_share() -> None:
    """Found (full profile): fast's sharded reshape (4, 0, 2) -> (2, 0, 4) over 2 shards gave shards of
    size 1 on the new axis, counting elements of a buffer that has none; SPEC §5: each shard gets
    new_size / n there, so (2, 0, 2) each. Fixed in fast."""
    fast = _package("fast")
    empty = fast.from_numpy(np.zeros((0, 2), np.int64), "CLANG")
    sharded = fast.MultiLazyBuffer.from_sharded(empty, ("CLANG", "CLANG:1"), 1)
    moved = sharded.const(0).reshape((1, 0, 2)).expand((4, 0, 2)).reshape((2, 0, 4))
    assert moved.shape == (2, 0, 4) and [lb.shape for lb in moved.lbs] == [(2, 0, 2), (2, 0, 2)]


def test_padded_float64_constant_keeps_its_zeros_through_a_reshape() -> None:
    """Found (full profile): GCC 12 with AVX-512 folded the vector {2, 2, 2, 0} of float64 lanes into
    all 2s, so a padded constant read back through a reshape lost its zeros on CLANG; fixed by
    keeping GCC 12 at AVX2 (runtime/clang.py simd_cap)."""
    fast = _package("fast")
    constant = fast.LazyBuffer.loadop(fast.LoadOps.CONST, (1, 3), fast.dtypes.float64, "CLANG", arg=2.0)
    got = fast.to_numpy(constant.pad(((0, 1), (0, 1))).reshape((2, 4, 1))).ravel()
    np.testing.assert_array_equal(got, [2, 2, 2, 0, 0, 0, 0, 0])
    _agree(Program((LoadConst((1, 3), "float64", "CLANG", 2.0), Movement(0, "pad", ((0, 1), (0, 1))),
                    Movement(1, "reshape", (2, 4, 1)), Fetch(2))))
