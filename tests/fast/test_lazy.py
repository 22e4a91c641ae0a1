"""LazyBuffer graph structure (SPEC §1, §4): creation, weak cache, views, validation, split reduce,
copies, contiguous/VIEW, cast-before-view, assign ordering, reference counting, DISK rules.

Realized buffers come from `from_numpy` on fake devices whose allocator is numpy memory.
"""
from __future__ import annotations

import gc
import types
import weakref
from collections.abc import Callable

import numpy as np
import pytest

from fast import config
from fast.device import Device
from fast.dtype import DType, dtypes
from fast.graph import LazyBuffer, from_numpy
from fast.graph import node as lazy_module
from fast.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Variable

F32, I32 = dtypes.float32, dtypes.int32


class NumpyAllocator:
    """A fake device allocator: handles are numpy uint8 arrays, offsets are numpy views of them."""

    def __init__(self) -> None:
        self.freed: list[int] = []

    def alloc(self, nbytes: int, zeroed: bool = True) -> np.ndarray: return np.zeros(nbytes, np.uint8)  # noqa: E704
    def free(self, handle: np.ndarray, nbytes: int) -> None: self.freed.append(nbytes)  # noqa: E704
    def copyin(self, handle: np.ndarray, src: memoryview) -> None: handle[:] = np.frombuffer(src, np.uint8)  # noqa: E704
    def copyout(self, dest: memoryview, handle: np.ndarray) -> None: dest[:] = handle.tobytes()  # noqa: E704
    def offset(self, handle: np.ndarray, byte_offset: int, nbytes: int) -> np.ndarray:  # noqa: E704
        return handle[byte_offset:byte_offset + nbytes]


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> NumpyAllocator:
    fake = NumpyAllocator()
    opened = {name: types.SimpleNamespace(allocator=fake) for name in ("CLANG", "CLANG:1", "LLVM", DISK)}
    monkeypatch.setattr(Device, "opened", opened)
    return fake


DISK = "DISK:/fake/disk.bin"


def empty(shape: tuple[int, ...] = (4,), dtype: DType = F32, device: str = "CLANG") -> LazyBuffer:
    return LazyBuffer.loadop(LoadOps.EMPTY, shape, dtype, device)


def values(lb: LazyBuffer) -> list[object]:
    assert lb.realized is not None
    return lb.realized.as_numpy().tolist()  # type: ignore[no-any-return]


# ---------------------------------------------------------------- creation and the public API


def test_from_numpy_is_a_realized_snapshot(allocator: NumpyAllocator) -> None:
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    lb = from_numpy(array, "CLANG:0")
    array[0, 0] = 99
    assert (lb.device, lb.shape, lb.dtype, lb.size) == ("CLANG", (2, 3), dtypes.int16, 6)
    assert lb.base is lb and lb.op is LoadOps.EMPTY and lb.srcs == () and lb.is_realized()
    assert lb.st == ShapeTracker.from_shape((2, 3)) and values(lb) == [0, 1, 2, 3, 4, 5]
    transposed = from_numpy(np.arange(6, dtype=">i4").reshape(2, 3).T, "CLANG")
    assert transposed.dtype == I32 and values(transposed) == [0, 3, 1, 4, 2, 5]
    assert values(from_numpy(np.float64(2.5), "CLANG")) == [2.5]
    with pytest.raises(TypeError, match="complex"):
        from_numpy(np.zeros(2, np.complex64), "CLANG")
    with pytest.raises(ValueError, match="CPU"):
        from_numpy(np.zeros(2), "CPU")


def test_loadop_const_and_custom() -> None:
    const = LazyBuffer.loadop(LoadOps.CONST, (2, 2), dtypes.uint8, "CLANG", arg=-1)
    assert const.base is const and const.arg == 255 and const.shape == (2, 2)
    def fn(out: np.ndarray) -> None: out[:] = 1  # noqa: E704
    first, second = (LazyBuffer.loadop(LoadOps.CUSTOM, (2,), F32, "CLANG", arg=fn) for _ in range(2))
    assert first is not second and first.op is LoadOps.CUSTOM and first.arg is fn
    assert empty() is not empty()


# ---------------------------------------------------------------- weak cache


def test_weak_cache_returns_the_same_object_and_forgets_dead_ones() -> None:
    x = empty((3, 4))
    assert x.e(UnaryOps.SQRT) is x.e(UnaryOps.SQRT)
    assert x.permute((1, 0)) is x.permute((1, 0)) and x.const(1.5) is x.const(1.5)
    assert x.r(ReduceOps.SUM, (1,)) is x.r(ReduceOps.SUM, (1,))
    assert x.const(0.0) is not x.const(-0.0)
    node = x.e(UnaryOps.EXP2)
    keys = [key for key in list(lazy_module._CACHE) if lazy_module.cached_node(key) is node]
    dead = weakref.ref(node)
    del node
    gc.collect()
    assert dead() is None and keys and all(key not in lazy_module._CACHE for key in keys)


def test_cache_never_mistakes_a_new_source_for_a_dead_one(allocator: NumpyAllocator) -> None:
    kept: list[LazyBuffer] = []
    for step in range(20):
        source = from_numpy(np.full(4, step, np.float32), "CLANG")
        node = source.copy_to_device("CLANG:1")
        assert node.srcs == (source,) and all(node is not old for old in kept)
        node.srcs = ()  # what the engine does once a node is realized; the source may then die
        kept.append(node)
        del source, node
        gc.collect()


def test_cache_can_be_disabled() -> None:
    x = empty()
    with config.override(lazycache=False):
        assert x.e(UnaryOps.SQRT) is not x.e(UnaryOps.SQRT)
        assert x.reshape((2, 2)) is not x.reshape((2, 2))


def test_cache_key_includes_the_version_of_realized_sources(allocator: NumpyAllocator) -> None:
    a = from_numpy(np.ones(4, np.float32), "CLANG")
    before = a.e(UnaryOps.NEG)
    a.buffer.bump_version()
    assert a.e(UnaryOps.NEG) is not before


def test_bound_variables_are_part_of_the_cache_key() -> None:
    n = Variable("n", 1, 10)
    three = LazyBuffer.loadop(LoadOps.CONST, (n.bind(3), 4), F32, "CLANG", arg=1.0)
    four = LazyBuffer.loadop(LoadOps.CONST, (n.bind(4), 4), F32, "CLANG", arg=1.0)
    assert three is not four
    assert three.var_vals == {n: 3} and four.var_vals == {n: 4}
    assert three.buffer.size == 40  # symbolic sizes allocate for the variable's maximum


# ---------------------------------------------------------------- views


def test_movement_ops_build_views_of_one_base() -> None:
    x = empty((2, 6))
    view = x.reshape((3, 4)).permute((1, 0)).shrink(((0, 4), (1, 3))).pad(((1, 0), (0, 0))).stride((1, -1))
    assert view.base is x and view.shape == (5, 2) and not hasattr(view, "op")
    expected = x.st.reshape((3, 4)).permute((1, 0)).shrink(((0, 4), (1, 3))).pad(((1, 0), (0, 0)))
    assert view.st == expected.stride((1, -1))
    assert x.permute((1, 0)).permute((1, 0)) is x and x.reshape((12,)).reshape((2, 6)) is x
    assert x.expand((2, 6)) is x and x.shrink(((0, 2), (0, 6))) is x and x.pad(((0, 0), (0, 0))) is x
    assert empty((1, 3)).expand((5, 3)).st.views[-1].strides == (0, 1)


def validation_cases() -> list[tuple[str, Callable[[], object], type[Exception], str]]:
    x, b, i = empty((2, 3)), empty((2, 3), dtypes.bool), empty((2, 3), I32)
    return [
        ("count", lambda: x.e(BinaryOps.ADD), TypeError, "ADD"),
        ("count-unary", lambda: x.e(UnaryOps.NEG, x), TypeError, "NEG"),
        ("shape", lambda: x.e(BinaryOps.ADD, empty((3, 2))), ValueError, "(3, 2)"),
        ("dtype", lambda: x.e(BinaryOps.ADD, i), TypeError, "int32"),
        ("where-cond", lambda: x.e(TernaryOps.WHERE, x, x), TypeError, "WHERE"),
        ("where-values", lambda: b.e(TernaryOps.WHERE, x, i), TypeError, "WHERE"),
        ("unsupported", lambda: i.e(UnaryOps.SQRT), TypeError, "SQRT"),
        ("bool-neg", lambda: b.e(UnaryOps.NEG), TypeError, "NEG"),
        ("float-xor", lambda: x.e(BinaryOps.XOR, x), TypeError, "XOR"),
        ("cast-via-e", lambda: x.e(UnaryOps.CAST), TypeError, "CAST"),
        ("reduce-via-e", lambda: x.e(ReduceOps.SUM), TypeError, "SUM"),  # type: ignore[arg-type]
        ("load-via-e", lambda: x.e(LoadOps.COPY), TypeError, "COPY"),
        ("operand-type", lambda: x.e(BinaryOps.ADD, 1.0), TypeError, "ADD"),  # type: ignore[arg-type]
        ("devices", lambda: x.e(BinaryOps.ADD, empty((2, 3), device="LLVM")), ValueError, "LLVM"),
        ("r-op", lambda: x.r(BinaryOps.ADD, (0,)), TypeError, "ADD"),  # type: ignore[arg-type]
        ("r-range", lambda: x.r(ReduceOps.SUM, (2,)), ValueError, "(2,)"),
        ("r-negative", lambda: x.r(ReduceOps.MAX, (-1,)), ValueError, "MAX"),
        ("r-repeat", lambda: x.r(ReduceOps.SUM, (1, 1)), ValueError, "(1, 1)"),
        ("reshape", lambda: x.reshape((4,)), ValueError, "(4,)"),
        ("reshape-negative", lambda: x.reshape((-1, 6)), ValueError, "reshape"),
        ("pad", lambda: x.pad(((0, -1), (0, 0))), ValueError, "pad"),
        ("pad-arity", lambda: x.pad(((0, 1),)), ValueError, "pad"),
        ("expand", lambda: x.expand((4, 3)), ValueError, "(4, 3)"),
        ("permute", lambda: x.permute((0, 0)), ValueError, "(0, 0)"),
        ("shrink", lambda: x.shrink(((0, 3), (0, 3))), ValueError, "shrink"),
        ("shrink-order", lambda: x.shrink(((2, 1), (0, 3))), ValueError, "(2, 1)"),
        ("stride", lambda: x.stride((0, 1)), ValueError, "stride"),
        ("cast-dtype", lambda: x.cast("float16"), TypeError, "CAST"),  # type: ignore[arg-type]
        ("bitcast-size", lambda: x.cast(dtypes.float16, bitcast=True), TypeError, "BITCAST"),
        ("bitcast-bool", lambda: empty((2,), dtypes.uint8).cast(dtypes.bool, bitcast=True), TypeError, "bool"),
        ("const-type", lambda: x.const("one"), TypeError, "CONST"),  # type: ignore[arg-type]
        ("loadop-op", lambda: LazyBuffer.loadop(LoadOps.COPY, (2,), F32, "CLANG"), TypeError, "COPY"),
        ("custom-arg", lambda: LazyBuffer.loadop(LoadOps.CUSTOM, (2,), F32, "CLANG", arg=3), TypeError, "CUSTOM"),
        ("assign-unrealized", lambda: x.assign(x), RuntimeError, "realized"),
    ]


@pytest.mark.parametrize("case", range(len(validation_cases())))
def test_validation_errors_name_the_op_and_build_nothing(case: int) -> None:
    name, build, error, fragment = validation_cases()[case]
    before = set(lazy_module._CACHE.keys())
    with pytest.raises(error) as info:
        build()
    assert fragment in str(info.value), (name, str(info.value))
    assert set(lazy_module._CACHE.keys()) <= before


def test_reducing_only_size_one_axes_returns_self() -> None:
    x = empty((1, 4, 1))
    assert x.r(ReduceOps.SUM, (0, 2)) is x and x.r(ReduceOps.MAX, ()) is x


# ---------------------------------------------------------------- split reduce


def stages(out: LazyBuffer) -> list[LazyBuffer]:
    """The chain of reduce bases feeding `out`, last first."""
    chain, node = [], out.base
    while node.op in ReduceOps:
        chain.append(node)
        node = node.srcs[0].base
    return chain


def test_large_reduce_is_split_in_two_stages() -> None:
    x = empty((2 ** 20,))
    out = x.r(ReduceOps.SUM, (0,))
    second, first = stages(out)
    assert out.shape == (1,) and second.op is first.op is ReduceOps.SUM
    assert first.shape == (256, 1) and first.srcs[0].shape == (256, 4096) and first.srcs[0].base is x
    assert second.arg == (0,) and first.arg == (1,)
    wide = empty((4, 2 ** 18)).r(ReduceOps.MAX, (1,))
    assert [s.shape for s in stages(wide)] == [(4, 1, 1), (4, 256, 1)] and wide.shape == (4, 1)


def test_split_reduce_configuration() -> None:
    x = empty((2 ** 20,))
    with config.override(split_reduceop=False):
        assert len(stages(x.r(ReduceOps.SUM, (0,)))) == 1
    with config.override(reduceop_split_threshold=2 ** 21):
        assert len(stages(x.r(ReduceOps.MAX, (0,)))) == 1
    with config.override(reduceop_split_size=3):
        assert stages(x.r(ReduceOps.SUM, (0,)))[1].shape == (8, 1)
    with config.override(reduceop_split_threshold=16):
        assert stages(empty((64,)).r(ReduceOps.SUM, (0,)))[1].shape == (64, 1)
    assert len(stages(empty((1000,)).r(ReduceOps.SUM, (0,)))) == 1
    assert len(stages(empty((1024, 1024)).r(ReduceOps.SUM, (0, 1)))) == 1  # only single-axis reduces split
    assert len(stages(empty((1,)).expand((2 ** 20,)).r(ReduceOps.SUM, (0,)))) == 1  # an expanded axis


# ---------------------------------------------------------------- copies


def test_copy_rules(allocator: NumpyAllocator) -> None:
    x = from_numpy(np.arange(8, dtype=np.float32), "CLANG")
    assert x.copy_to_device("CLANG:0") is x
    forced = x.copy_to_device("CLANG", force=True)
    assert forced.op is LoadOps.COPY and forced.srcs == (x,)
    copy = x.copy_to_device("CLANG:1")
    assert copy.op is LoadOps.COPY and copy.srcs == (x,) and copy.device == "CLANG:1" and copy.forced_realize
    twice = copy.copy_to_device("LLVM")
    assert twice.op is LoadOps.COPY and twice.srcs == (x,) and twice.device == "LLVM"
    assert copy.copy_to_device("CLANG") is x
    assert copy.reshape((2, 4)).copy_to_device("LLVM").base.srcs == (x,)
    flipped = x.reshape((2, 4)).permute((1, 0))
    moved = flipped.copy_to_device("LLVM")
    assert moved.base.op is LoadOps.COPY and moved.base.srcs == (x,) and moved.st == flipped.st
    x.buffer.bump_version()  # an assign realized since the first copy was built: do not collapse
    assert copy.copy_to_device("LLVM").srcs == (copy,)


def test_copy_of_constants_and_shrunken_views(allocator: NumpyAllocator) -> None:
    const = empty().const(3.0, (4,))
    on_llvm = const.copy_to_device("LLVM")
    assert on_llvm.device == "LLVM" and on_llvm.is_unrealized_unmasked_const() and on_llvm.base.arg == 3.0
    padded = const.pad(((1, 1),)).copy_to_device("LLVM")
    assert padded.is_unrealized_const() and padded.st == const.pad(((1, 1),)).st and padded.device == "LLVM"
    x = from_numpy(np.arange(16, dtype=np.float32).reshape(4, 4), "CLANG")
    rows = x.shrink(((1, 3), (0, 4))).copy_to_device("LLVM")
    assert rows.op is LoadOps.COPY and rows.srcs[0].op is LoadOps.VIEW and rows.srcs[0].arg == 16
    block = x.shrink(((1, 3), (1, 3))).copy_to_device("LLVM")
    assert block.op is LoadOps.COPY and block.srcs[0].op is LoadOps.CONTIGUOUS


def read_positions(lb: LazyBuffer) -> list[int]:
    """The base element index each position of `lb` reads (row-major)."""
    index, _ = lb.st.expr_idxs()
    shape = lb.shape
    positions = np.ndindex(*shape)  # type: ignore[arg-type]
    return [index.evaluate({f"idx{a}": p for a, p in enumerate(pos)}) for pos in positions]


def test_trap_disk_non_consecutive_view_copies_the_covering_bytes(allocator: NumpyAllocator) -> None:
    disk = from_numpy(np.arange(16, dtype=np.int32), DISK)
    view = disk.reshape((4, 4)).shrink(((1, 3), (1, 3)))
    out = view.copy_to_device("CLANG")
    copy = out.base
    assert copy.op is LoadOps.COPY and copy.shape == (6,) and copy.device == "CLANG"
    window = copy.srcs[0]
    assert window.op is LoadOps.VIEW and window.buffer.base is disk.buffer and window.buffer.offset == 5 * 4
    assert out.shape == (2, 2) and [5 + i for i in read_positions(out)] == read_positions(view) == [5, 6, 9, 10]


# ---------------------------------------------------------------- contiguous, VIEW, casts


def test_contiguous_of_contiguous_is_self_and_forces_realization(allocator: NumpyAllocator) -> None:
    x = from_numpy(np.zeros((2, 4), np.float32), "CLANG")
    assert x.contiguous() is x and x.reshape((8,)).contiguous() is x.reshape((8,))
    y = x.e(UnaryOps.NEG)
    assert y.contiguous() is y and y.forced_realize
    const = x.const(2.0)
    assert const.contiguous().base.op is LoadOps.CONTIGUOUS


def test_consecutive_views_of_realized_buffers_become_buffer_views(allocator: NumpyAllocator) -> None:
    x = from_numpy(np.arange(8, dtype=np.float32), "CLANG")
    view = x.shrink(((2, 6),)).contiguous()
    assert view.op is LoadOps.VIEW and view.arg == 8 and view.srcs[0].base is x and view.shape == (4,)
    assert view.buffer.base is x.buffer and view.buffer.offset == 8 and view.realized is None
    assert view.buffer.allocate().as_numpy().tolist() == [2.0, 3.0, 4.0, 5.0]
    bits = x.cast(I32, bitcast=True)
    assert bits.op is LoadOps.VIEW and bits.dtype == I32 and bits.buffer.base is x.buffer
    unrealized = x.e(UnaryOps.NEG).cast(I32, bitcast=True)
    assert unrealized.op is UnaryOps.BITCAST


def test_contiguous_child_is_read_by_later_views(allocator: NumpyAllocator) -> None:
    y = from_numpy(np.zeros((2, 4), np.float32), "CLANG").e(UnaryOps.NEG)
    transposed = y.permute((1, 0))
    child = transposed.contiguous()
    assert child.op is LoadOps.CONTIGUOUS and child.forced_realize and child.srcs == (transposed,)
    assert y.contiguous_child is not None and y.contiguous_child[0]() is child
    flat = y.reshape((8,))
    assert flat.base is child and flat.shape == (8,)
    assert read_positions(flat) == [0, 2, 4, 6, 1, 3, 5, 7]  # child holds y transposed
    total = y.e(BinaryOps.ADD, y)
    assert all(src.base is child for src in total.srcs)
    del child, flat, total
    gc.collect()
    assert y.reshape((8,)).base is y


def test_cast_of_a_view_casts_the_base_first_when_narrowing(allocator: NumpyAllocator) -> None:
    y = empty((4, 4)).e(UnaryOps.NEG)
    view = y.shrink(((0, 2), (0, 4)))
    narrow = view.cast(dtypes.float16)
    assert narrow.base.op is UnaryOps.CAST and narrow.base.srcs == (y,) and narrow.shape == (2, 4)
    assert narrow.st == view.st
    wide = view.cast(dtypes.float64)
    assert wide.op is UnaryOps.CAST and wide.srcs == (view,)
    realized = from_numpy(np.zeros((4, 4), np.float32), "CLANG").shrink(((0, 2), (0, 4)))
    assert realized.cast(dtypes.float16).srcs == (realized,)
    assert y.cast(F32) is y


# ---------------------------------------------------------------- assign and ordering


def test_assign_structure_and_errors(allocator: NumpyAllocator) -> None:
    a = from_numpy(np.zeros(4, np.float32), "CLANG")
    x = empty()
    with pytest.raises(ValueError, match="ASSIGN: shape"):
        a.assign(empty((2, 2)))
    with pytest.raises(TypeError, match="ASSIGN: dtype"):
        a.assign(empty((4,), I32))
    with pytest.raises(RuntimeError, match="ASSIGN: the target must be a realized buffer"):
        from_numpy(np.zeros(8, np.float32), "CLANG").shrink(((0, 4),)).assign(x)
    with pytest.raises(RuntimeError, match="ASSIGN: the target must be a realized buffer"):
        a.reshape((2, 2)).assign(empty((2, 2)))  # a view, even a whole contiguous one, is not the buffer
    with pytest.raises(RuntimeError, match="ASSIGN: the target must be a realized buffer"):
        a.e(UnaryOps.NEG).assign(x)
    done = a.assign(x)
    assert done.op is LoadOps.ASSIGN and done.srcs == (x, a) and done.buffer is a.buffer and done.forced_realize
    assert done.realized is None  # its Buffer is allocated, but the assign has not run
    with pytest.raises(RuntimeError, match="pending"):
        a.assign(empty())
    a.buffer.bump_version()  # what the engine does once the assign has run
    assert done.realized is a.buffer
    assert a.assign(empty()).realized is None


def test_reads_built_before_a_realized_assign_are_stale(allocator: NumpyAllocator) -> None:
    a = from_numpy(np.zeros(4, np.float32), "CLANG")
    before = a.e(UnaryOps.NEG)
    pending = a.assign(empty())
    reader_of_assign = pending.e(UnaryOps.SQRT)
    assert before.stale_reads() == [] and reader_of_assign.stale_reads() == []
    a.buffer.bump_version()
    assert before.stale_reads() == [(a.buffer, 0)] and before.reshape((2, 2)).stale_reads() == [(a.buffer, 0)]
    assert reader_of_assign.stale_reads() == [] and a.e(UnaryOps.NEG).stale_reads() == []


# ---------------------------------------------------------------- reference counting


def test_buffers_are_freed_when_no_lazy_buffer_needs_them(allocator: NumpyAllocator) -> None:
    x = from_numpy(np.zeros(4, np.float32), "CLANG")
    y = x.e(UnaryOps.NEG)
    assert x.buffer.refcount == 1
    del x
    gc.collect()
    assert allocator.freed == []
    del y
    gc.collect()
    assert allocator.freed == [16]


def test_a_buffer_view_keeps_its_parent_memory(allocator: NumpyAllocator) -> None:
    view = from_numpy(np.arange(8, dtype=np.float32), "CLANG").shrink(((4, 8),)).contiguous()
    view.buffer.allocate()
    gc.collect()
    assert allocator.freed == [] and view.buffer.as_numpy().tolist() == [4.0, 5.0, 6.0, 7.0]
    del view
    gc.collect()
    assert allocator.freed == [32]


# ---------------------------------------------------------------- DISK


def test_disk_cannot_compute(allocator: NumpyAllocator) -> None:
    disk = from_numpy(np.zeros((4, 4), np.uint8), DISK)
    for build, op in ((lambda: disk.e(UnaryOps.NEG), "NEG"), (lambda: disk.r(ReduceOps.SUM, (0,)), "SUM"),
                      (lambda: disk.cast(I32), "CAST"), (lambda: disk.const(1), "CONST"),
                      (lambda: disk.permute((1, 0)).contiguous(), "CONTIGUOUS"),
                      (lambda: LazyBuffer.loadop(LoadOps.CONST, (2,), F32, DISK, arg=1.0), "CONST")):
        with pytest.raises(RuntimeError, match=op) as info:
            build()
        assert DISK in str(info.value)


def test_disk_views_and_shape_changing_bitcast(allocator: NumpyAllocator) -> None:
    disk = from_numpy(np.arange(16, dtype=np.uint8).reshape(4, 4), DISK)
    rows = disk.shrink(((1, 3), (0, 4))).contiguous()
    assert rows.op is LoadOps.VIEW and rows.buffer.offset == 4
    words = disk.shrink(((1, 3), (0, 4))).cast(I32, bitcast=True)
    assert words.op is LoadOps.VIEW and words.shape == (2, 1) and words.dtype == I32 and words.buffer.offset == 4
    assert disk.cast(dtypes.int16, bitcast=True).shape == (4, 2)
    with pytest.raises(ValueError, match="BITCAST"):
        disk.shrink(((0, 4), (0, 3))).cast(dtypes.int16, bitcast=True)
    with pytest.raises(TypeError, match="only supported on DISK"):
        from_numpy(np.zeros(4, np.uint8), "CLANG").cast(I32, bitcast=True)


def test_same_dtype_casts_are_validated_before_returning_self(tmp_path) -> None:
    flags = from_numpy(np.array([True, False]), "CLANG")
    with pytest.raises(TypeError, match="BITCAST"):
        flags.cast(dtypes.bool, bitcast=True)
    on_disk = from_numpy(np.arange(4, dtype=np.int32), f"DISK:{tmp_path / 'cast.bin'}")
    with pytest.raises(RuntimeError, match="CAST"):
        on_disk.cast(I32)
    assert on_disk.cast(I32, bitcast=True) is on_disk and flags.cast(dtypes.bool) is flags
