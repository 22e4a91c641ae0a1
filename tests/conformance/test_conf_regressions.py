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
import pytest

from conformance.program import (
    ArrayData,
    Assign,
    Cast,
    Contiguous,
    Copy,
    Custom,
    Elementwise,
    Fetch,
    Leaf,
    LoadConst,
    Movement,
    Program,
    Realize,
    Shard,
    Var,
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
    all 2s, so a padded constant read back through a reshape lost its zeros on CLANG. The cause was a
    32/64-byte memcpy of a constant vector, which GCC turned into one wide integer store that drops
    zero high words; vector stores now go through may_alias vector pointers (renderer/c_vectors.py)."""
    fast = _package("fast")
    constant = fast.LazyBuffer.loadop(fast.LoadOps.CONST, (1, 3), fast.dtypes.float64, "CLANG", arg=2.0)
    got = fast.to_numpy(constant.pad(((0, 1), (0, 1))).reshape((2, 4, 1))).ravel()
    np.testing.assert_array_equal(got, [2, 2, 2, 0, 0, 0, 0, 0])
    _agree(Program((LoadConst((1, 3), "float64", "CLANG", 2.0), Movement(0, "pad", ((0, 1), (0, 1))),
                    Movement(1, "reshape", (2, 4, 1)), Fetch(2))))


def test_custom_over_a_symbolic_shape_gets_arrays_of_the_bound_shape() -> None:
    """Found (symbolic programs): fast called a CUSTOM function on arrays of the variables' maximum
    shape (the size its buffers are allocated for), so `flip` of a (3, m) window flipped the whole
    (3, 4) buffer; docs/api.md: `out` has the buffer's shape and the inputs are their `to_numpy`
    forms, at the bound values. Fixed in fast (engine/schedule.py, engine/realize.py)."""
    fast = _package("fast")
    data = np.arange(15, dtype=np.int16).reshape(3, 5)
    m = fast.Variable("m", 1, 4).bind(2)
    window = fast.from_numpy(data, "CLANG").shrink(((0, 3), (0, m)))
    flipped = fast.LazyBuffer.loadop(fast.LoadOps.CUSTOM, (3, m), fast.dtypes.int16, "CLANG",
                                     arg=lambda out, x: np.copyto(out, np.flip(x)), src=(window,))
    np.testing.assert_array_equal(fast.to_numpy(flipped), np.flip(data[:, :2]))
    var = Var("m", 1, 4)
    _agree(Program((Leaf(ArrayData("int16", (3, 5), tuple(range(15))), "CLANG"),
                    Movement(0, "shrink", ((0, 3), (0, var))), Custom("flip", (1,), (3, var), "int16", "CLANG"),
                    Fetch(2)), variables=(var,), bindings=((2,), (4,), (1,))))


def test_reshape_with_a_variable_that_may_be_zero() -> None:
    """Found (symbolic programs): with Variable('n', 0, 3), fast raised ValueError 'symbolic %: divisor
    n must be positive' realizing a reshape of (n, n) to (n, 1, n) (its index divides by n, which is
    0 only where nothing is read). Fixed in fast: a size that may be 0 is a valid divisor
    (shape/symbolic.py) and kernels divide by max(n, 1) (codegen/lower.py)."""
    fast = _package("fast")
    data = np.arange(15, dtype=np.int32).reshape(5, 3)
    for value in (2, 0, 3):
        n = fast.Variable("n", 0, 3).bind(value)
        square = fast.from_numpy(data, "CLANG").shrink(((0, n), (0, n)))
        got = fast.to_numpy(square.e(fast.BinaryOps.ADD, square).reshape((n, 1, n)))
        np.testing.assert_array_equal(got, 2 * data[:value, :value].reshape(value, 1, value))
    var = Var("n", 0, 3)
    _agree(Program((Leaf(ArrayData("int16", (5, 3), tuple(range(15))), "CLANG"),
                    Movement(0, "shrink", ((0, var), (0, var))), Elementwise("MAX", (1, 1)),
                    Movement(2, "reshape", (var, 1, 1, 1, var, 1)), Elementwise("NEG", (3,)), Fetch(4)),
                   variables=(var,), bindings=((2,), (0,), (3,))))


def test_shrink_reshape_and_pad_check_the_values_of_bound_variables() -> None:
    """Found (symbolic programs): fast skipped the range and element-count checks when a size or an
    argument was symbolic, so a shrink past an axis by a bound Variable read the next rows and a
    reshape that changed the element count went through; docs/api.md: bound Variables' values are
    used, and SPEC §1 makes both a ValueError. Fixed in fast (fast/graph/checks.py)."""
    fast = _package("fast")
    n = fast.Variable("n", 1, 8).bind(8)
    data = fast.from_numpy(np.zeros((8, 6), np.float32), "CLANG")
    for misuse in (lambda: data.shrink(((1, 6), (0, n))), lambda: data.shrink(((0, n), (0, 6))).reshape((n, 5)),
                   lambda: data.pad(((0, fast.Variable("k", -2, 2).bind(-1)), (0, 0)))):
        with pytest.raises(ValueError):
            misuse()
    var = Var("n", 7, 9)
    _agree(Program((Leaf(ArrayData("float32", (6, 9), seed=2), "CLANG"), Movement(0, "shrink", ((0, var), (0, 9)))),
                   expect="ValueError", variables=(var,), bindings=((8,), (9,))))
    _agree(Program((Leaf(ArrayData("int8", (9, 2), seed=2), "CLANG"), Movement(0, "shrink", ((0, var), (0, 2))),
                    Movement(1, "reshape", (var, 2, 2))), expect="ValueError", variables=(var,), bindings=((8,), (7,))))


def test_reading_a_view_does_not_realize_the_programs_contiguous_of_it() -> None:
    """Found (issue 14, conformance under MPI): fast's to_numpy(v) of a non-consecutive view read it
    through v.contiguous(), which the weak node cache answered with the program's own contiguous()
    of v, and realized that. Realized, it no longer counted as built before a later assign (SPEC §4:
    realizing it after the assign raises RuntimeError), so fast read the old values where reference
    raised; under MPI only the rank owning v realized it, and the ranks left lockstep (one raised,
    the other waited on a transfer). Fixed in fast: the readback builds a node of its own."""
    fast = _package("fast")
    parent = fast.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3), "CLANG")
    view = parent.permute((1, 0))
    held = view.contiguous()
    assert fast.to_numpy(view).tolist() == [[0, 3], [1, 4], [2, 5]] and not held.is_realized()
    data, other = ArrayData("int32", (2, 3), tuple(range(6))), ArrayData("int32", (2, 3), tuple(range(6, 12)))
    for move in (("permute", (1, 0)), ("stride", (1, -1))):
        _agree(Program((Leaf(data, "CLANG:1"), Movement(0, *move), Contiguous(1), Fetch(1), Leaf(other, "CLANG:1"),
                        Assign(0, 4), Realize((5,)), Copy(2, "CLANG"), Fetch(7)), expect="RuntimeError"))


def test_sharded_reshape_of_an_axis_of_size_zero() -> None:
    """Found (CI, the self-test of invalid programs): reference refused to reshape a buffer whose
    sharded axis has size 0, (0,) over three shards to (1, 0); SPEC §5 has no such exception: the
    new axis is 1 and keeps its size, as fast and the suite's layout model say. Fixed in reference."""
    ref = _package("reference")
    data = ref.from_numpy(np.arange(9, dtype=np.int16).reshape(3, 3), "CLANG")
    sharded = ref.MultiLazyBuffer.from_sharded(data, ("CLANG", "CLANG:1", "CLANG:2"), 0)
    empty = sharded.shrink(((0, 3), (1, 1))).reshape((0,))
    moved = empty.reshape((1, 0))
    assert moved.shape == (1, 0) and moved.axis == 1 and [lb.shape for lb in moved.lbs] == [(1, 0)] * 3
    steps = (Leaf(ArrayData("int16", (3, 3), tuple(range(9))), "CLANG"), Shard(0, ("CLANG", "CLANG:1", "CLANG:2"), 0),
             Movement(1, "shrink", ((0, 3), (1, 1))), Movement(2, "reshape", (0,)), Movement(3, "reshape", (1, 0)),
             Fetch(4))
    _agree(Program(steps))
