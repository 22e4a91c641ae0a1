"""The scheduler's contract: item structure, buffer numbering, ordering, assigns, purity."""
from __future__ import annotations

import numpy as np
import pytest

import fast
from fast import BinaryOps, LazyBuffer, LoadOps, ReduceOps, UnaryOps, dtypes, from_numpy, to_numpy
from fast.engine.realize import ast_key
from fast.engine.schedule import ScheduleItem
from fast.ops import BufferOps, KernelOps, LazyOp


def loads(ast: LazyOp) -> list[LazyOp]:
    return [node for node in ast.walk() if node.op is BufferOps.LOAD]


def arange(n: int, dtype: type = np.float32, device: str = "CLANG") -> LazyBuffer:
    return from_numpy(np.arange(n, dtype=dtype), device)


def check_order(items: list[ScheduleItem]) -> None:
    """Every input of every item is realized already or written by an earlier item."""
    written: set[int] = set()
    for item in items:
        for buffer in item.inputs:
            assert buffer.is_allocated() or id(buffer) in written, f"{buffer!r} read before it is written"
        written.update(id(buffer) for buffer in item.outputs)


def test_schedule_changes_nothing() -> None:
    a = arange(6)
    hidden = a.e(BinaryOps.ADD, a).r(ReduceOps.SUM, (0,))
    out = hidden.e(BinaryOps.MUL, hidden).contiguous()
    before = (out.base.srcs, out.base.forced_realize, hidden.base.srcs, hidden.base.forced_realize)
    items = fast.schedule(out)
    assert len(items) == 1
    assert not any(buffer.is_allocated() for buffer in items[0].outputs)
    assert not out.is_realized() and not hidden.is_realized()
    assert (out.base.srcs, out.base.forced_realize, hidden.base.srcs, hidden.base.forced_realize) == before
    assert fast.schedule(out)[0].ast == items[0].ast
    np.testing.assert_allclose(to_numpy(out), [30.0**2])


def test_buffers_are_numbered_outputs_first_then_each_input_once() -> None:
    a, b = arange(6), from_numpy(np.ones(6, np.float32), "CLANG")
    out = a.e(BinaryOps.MUL, b).e(BinaryOps.ADD, a.stride((-1,))).e(BinaryOps.SUB, b)
    (item,) = fast.schedule(out)
    assert item.ast.op is KernelOps.SINK and len(item.ast.src) == 1 and item.output_count == 1
    assert item.bufs == (out.base.buffer, a.base.buffer, b.base.buffer)
    found = loads(item.ast)
    assert sorted({node.arg.idx for node in found}) == [1, 2]
    assert len({node.arg.st for node in found if node.arg.idx == 1}) == 2  # a read through two views
    np.testing.assert_allclose(to_numpy(out), np.arange(6) + np.arange(6)[::-1] - 1)


def test_identical_graphs_on_other_buffers_have_equal_asts() -> None:
    def graph(x: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.MUL, x.const(3.0)).reshape((2, 3)).r(ReduceOps.MAX, (1,))
    first, second = graph(arange(6)), graph(from_numpy(np.ones(6, np.float32), "CLANG"))
    (one,), (two,) = fast.schedule(first), fast.schedule(second)
    assert one.bufs[1] is not two.bufs[1]
    assert one.ast == two.ast and ast_key(one.ast) == ast_key(two.ast)
    store, load = one.ast.src[0].arg, loads(one.ast)[0].arg
    assert store.st.shape == (2, 1) and load.st.shape == (2, 3)


def test_items_come_dependencies_first() -> None:
    a = arange(4)
    stage = a.e(UnaryOps.SIN).reshape((4, 1))
    wide = stage.expand((4, 3)).e(BinaryOps.ADD, a.reshape((4, 1)).expand((4, 3)))
    column = wide.r(ReduceOps.SUM, (1,))
    out = column.expand((4, 2)).e(BinaryOps.MUL, column.expand((4, 2))).copy_to_device("CLANG:1")
    items = fast.schedule(out)
    assert [item.ast.op for item in items].count(LoadOps.COPY) == 1 and len(items) == 4
    check_order(items)
    expect = (3 * (np.sin(np.arange(4, dtype=np.float32)) + np.arange(4)))[:, None] ** 2
    np.testing.assert_allclose(to_numpy(out), np.broadcast_to(expect, (4, 2)), rtol=1e-5)


def test_a_base_reached_twice_is_scheduled_once() -> None:
    a = arange(6)
    shared = a.e(BinaryOps.ADD, a).contiguous()
    assert len(fast.schedule(shared, shared.reshape((2, 3)), shared.e(BinaryOps.MUL, shared))) == 2


def test_assign_reads_old_value_in_the_same_realize_and_orders_the_write_last() -> None:
    target = from_numpy(np.arange(4, dtype=np.int32), "CLANG")
    before = target.e(BinaryOps.ADD, target.const(10))
    assign = target.assign(target.e(BinaryOps.MUL, target.const(2)))
    items = fast.schedule(assign, before)
    assert [item.assign for item in items] == [False, True]
    assert items[1].outputs[0] is target.base.buffer
    fast.realize(assign, before)
    np.testing.assert_array_equal(to_numpy(before), [10, 11, 12, 13])
    np.testing.assert_array_equal(to_numpy(target), [0, 2, 4, 6])
    np.testing.assert_array_equal(to_numpy(assign), [0, 2, 4, 6])


def test_reading_a_value_overwritten_by_a_realized_assign_raises() -> None:
    target = from_numpy(np.arange(4, dtype=np.int32), "CLANG")
    stale = target.e(BinaryOps.ADD, target.const(1))
    fast.realize(target.assign(target.const(5, (4,)).contiguous()))
    with pytest.raises(RuntimeError, match="no longer exists"):
        fast.schedule(stale)
    with pytest.raises(RuntimeError, match="no longer exists"):
        to_numpy(stale)


def test_assign_reading_its_target_elsewhere_goes_through_a_temporary() -> None:
    target = from_numpy(np.arange(5, dtype=np.float32), "CLANG")
    assign = target.assign(target.stride((-1,)).e(BinaryOps.ADD, target))
    items = fast.schedule(assign)
    assert len(items) == 2 and not items[0].assign and items[1].assign
    assert items[1].inputs == items[0].outputs
    fast.realize(assign)
    np.testing.assert_array_equal(to_numpy(target), np.full(5, 4.0))


def test_assign_in_place_when_each_element_reads_only_itself() -> None:
    target = from_numpy(np.arange(5, dtype=np.float32), "CLANG")
    assign = target.assign(target.e(BinaryOps.MUL, target))
    (item,) = fast.schedule(assign)
    assert item.assign and item.bufs == (target.base.buffer,)
    assert {node.arg.idx for node in loads(item.ast)} == {0}
    fast.realize(assign)
    np.testing.assert_array_equal(to_numpy(target), np.arange(5) ** 2)


def test_reader_of_old_and_new_values_gets_a_snapshot() -> None:
    target = from_numpy(np.arange(4, dtype=np.int32), "CLANG")
    assign = target.assign(target.e(BinaryOps.MUL, target.const(2)))
    both = target.e(BinaryOps.ADD, assign)
    items = fast.schedule(both, assign)
    assert len(items) == 3
    check_order(items)
    fast.realize(both, assign)
    np.testing.assert_array_equal(to_numpy(both), 3 * np.arange(4))
    np.testing.assert_array_equal(to_numpy(target), 2 * np.arange(4))


def test_non_kernel_items() -> None:
    base = from_numpy(np.arange(8, dtype=np.int32), "CLANG")
    empty = LazyBuffer.loadop(LoadOps.EMPTY, (3,), dtypes.int16, "CLANG")
    view = base.shrink(((2, 6),)).contiguous()
    copied = base.copy_to_device("CLANG:1")
    ops = [item.ast.op for item in fast.schedule(empty, view, copied)]
    assert sorted(op.name for op in ops) == ["COPY", "EMPTY", "VIEW"]
    fast.realize(empty, view, copied)
    np.testing.assert_array_equal(to_numpy(empty), np.zeros(3, np.int16))
    np.testing.assert_array_equal(to_numpy(view), [2, 3, 4, 5])
    assert view.base.buffer.base is base.base.buffer  # zero-copy
    np.testing.assert_array_equal(to_numpy(copied), np.arange(8))


def test_custom_gets_host_arrays_of_its_sources_and_a_view_is_materialized() -> None:
    seen: list[tuple[tuple[int, ...], ...]] = []

    def fill(out: np.ndarray, first: np.ndarray, second: np.ndarray) -> None:
        seen.append((out.shape, first.shape, second.shape))
        out[...] = first @ second

    a = from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), "CLANG")
    transposed = a.permute((1, 0))
    custom = LazyBuffer.loadop(LoadOps.CUSTOM, (2, 2), dtypes.float32, "CLANG", arg=fill, src=(a, transposed))
    items = fast.schedule(custom)
    assert [item.ast.op for item in items] == [KernelOps.SINK, LoadOps.CUSTOM]
    result = to_numpy(custom)
    assert seen == [((2, 2), (2, 3), (3, 2))]
    matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(result, matrix @ matrix.T)


def test_swapping_two_buffers_with_assigns() -> None:
    first = from_numpy(np.arange(4, dtype=np.int32), "CLANG")
    second = from_numpy(10 * np.arange(4, dtype=np.int32), "CLANG")
    into_first, into_second = first.assign(second), second.assign(first)
    items = fast.schedule(into_first, into_second)
    check_order([item for item in items if not item.assign])
    fast.realize(into_first, into_second)
    np.testing.assert_array_equal(to_numpy(first), 10 * np.arange(4))
    np.testing.assert_array_equal(to_numpy(second), np.arange(4))


def test_symbolic_sizes_are_unbound_into_var_vals() -> None:
    rows = fast.Variable("rows", 1, 10)
    data = np.arange(30, dtype=np.float32).reshape(10, 3)
    window = from_numpy(data, "CLANG").shrink(((0, rows.bind(3)), (0, 3)))
    out = window.e(BinaryOps.ADD, window).r(ReduceOps.SUM, (1,))
    (item,) = fast.schedule(out)
    assert item.var_vals == {rows: 3}
    assert all(var._val is None for node in item.ast.walk() if node.arg is not None and hasattr(node.arg, "st")
               for var in node.arg.st.vars())
    np.testing.assert_array_equal(to_numpy(out), 2 * data[:3].sum(1, keepdims=True))


def test_run_schedule_alone_realizes_the_outputs() -> None:
    a = arange(6)
    out = a.e(BinaryOps.MUL, a).e(BinaryOps.ADD, a)
    fast.engine.run_schedule(fast.schedule(out))
    assert out.is_realized()
    np.testing.assert_array_equal(out.base.buffer.as_numpy(), np.arange(6) ** 2 + np.arange(6))


def test_deep_graphs_schedule_and_lower_without_recursion_limits():
    """A 5,000-op chain (far deeper than Python's recursion limit) is one kernel with the right value."""
    import sys

    import numpy as np

    import fast
    from fast import BinaryOps

    leaf = fast.from_numpy(np.ones(8, np.float32), "CLANG")
    x = leaf
    for step in range(5000):
        x = x.e(BinaryOps.ADD if step % 2 else BinaryOps.MUL, leaf)
    assert sys.getrecursionlimit() < 5000 * 3
    assert len(fast.schedule(x)) == 1
    np.testing.assert_array_equal(fast.to_numpy(x), np.full(8, 2501, np.float32))
