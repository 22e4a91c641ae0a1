"""Static facts the strategies rely on: SPEC §5 layouts, comparison flags, DISK consecutiveness."""
from __future__ import annotations

import pytest

from conformance import layout as lay
from conformance.analysis import analyze, stays_consecutive
from conformance.program import ArrayData, Cast, ConstLike, Elementwise, Leaf, Movement, Program, Reduce, Shard

DEVICES = ("CLANG", "CLANG:1", "CLANG:2")


def test_from_sharded_sizes_and_empty_shards() -> None:
    assert lay.shard((7, 2), DEVICES, 0).sizes == (3, 3, 1)
    assert lay.shard((7, 2), DEVICES, 0).bounds == ((0, 3), (3, 6), (6, 7))
    with pytest.raises(ValueError):
        lay.shard((4,), DEVICES, 0)  # ceil(4/3) = 2: shards 2, 2, 0


def test_shrink_to_one_shard_then_pad_back() -> None:
    whole = lay.shard((7, 2), DEVICES, 0)
    one = lay.movement(whole, (7, 2), "shrink", ((3, 6), (0, 2)), (3, 2))
    assert one.real == (False, True, False) and one.sizes == whole.sizes
    back = lay.movement(one, (3, 2), "pad", ((3, 1), (0, 0)), (7, 2))
    assert back.real == (True, True, True)
    with pytest.raises(ValueError):
        lay.movement(whole, (7, 2), "shrink", ((0, 2), (0, 2)), (2, 2))


def test_reshape_moves_the_axis_by_prefix_product() -> None:
    even = lay.shard((6, 4), DEVICES, 0)
    assert lay.movement(even, (6, 4), "reshape", (3, 2, 4), (3, 2, 4)).sizes == (1, 1, 1)
    assert lay.movement(even, (6, 4), "reshape", (6, 2, 2), (6, 2, 2)).axis == 0
    with pytest.raises(ValueError):
        lay.movement(lay.shard((7, 2), DEVICES, 0), (7, 2), "reshape", (14,), (14,))


def _infos(*steps: object) -> list:  # type: ignore[type-arg]
    return analyze(Program(tuple(steps)))  # type: ignore[arg-type]


def test_flags_follow_the_comparison_rules() -> None:
    leaf = Leaf(ArrayData("float32", (2,), (1.0, -0.0)), "CLANG")
    infos = _infos(leaf, Elementwise("SIN", (0,)), Elementwise("MAX", (0, 0)), Reduce(0, "SUM", (0,)),
                   ConstLike(0, 0.0), Elementwise("ADD", (0, 4)), Cast(0, "int32", bitcast=True),
                   Cast(1, "int8"), Elementwise("MUL", (0, 0)))
    sin, fmax, total, _, plus_zero, bits, to_int, square = infos[1:]
    assert sin.approx and sin.aux and not fmax.approx and fmax.zero_sign
    assert total.approx and total.zero_sign and plus_zero.zero_sign
    assert infos[0].payload and not bits.aux and to_int.aux and not to_int.approx
    assert not (square.approx or square.aux or square.zero_sign or square.payload)


def test_sharded_value_infos() -> None:
    leaf = Leaf(ArrayData("int8", (7, 2), tuple(range(14))), "CLANG")
    infos = _infos(leaf, Shard(0, DEVICES, 0), Reduce(1, "SUM", (0,)), Movement(1, "permute", (1, 0)))
    assert infos[1].layout.uneven and infos[2].layout.axis is None and infos[2].shape == (1, 2)
    assert infos[3].layout.axis == 1 and infos[3].shape == (2, 7)


def test_disk_consecutive_views() -> None:
    assert stays_consecutive("shrink", ((1, 2), (0, 4)), (3, 4), (1, 4))
    assert not stays_consecutive("shrink", ((0, 3), (1, 4)), (3, 4), (3, 3))
    assert stays_consecutive("permute", (1, 0, 2), (1, 3, 4), (3, 1, 4))
    assert not stays_consecutive("permute", (1, 0), (3, 4), (4, 3))
    assert not stays_consecutive("stride", (-1, 1), (3, 4), (3, 4))
    assert stays_consecutive("reshape", (12,), (3, 4), (12,))
