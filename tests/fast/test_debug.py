"""fast.debug.compare names the op that is wrong: a bug planted in one op of `fast` at a time (through
monkeypatching: a C rendering rule, a constant-folding rule, a movement op's view, a reduce's lowering,
a cast's rendering, a step of the sharded all-reduce, a fusion rule) must make `report.first` exactly
that node of a 27-node graph with a sharded reduction; without a bug, `first` is None."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import fast
import reference
from conformance.mutants_fast import short_pad
from fast import BinaryOps, ReduceOps, UnaryOps, dtypes
from fast.graph.rules import FOLD_RULES, Fold
from fast.ops import LazyOp

X = (np.arange(24, dtype=np.float32) / 4 - 3).reshape(4, 6)
Y = (np.arange(24, dtype=np.float32)[::-1] / 8 - 1).reshape(4, 6)
SHARDS = ("CLANG:1", "CLANG:2")


def program(pkg: Any) -> Any:
    """27 nodes; the comments give each node's number in program order."""
    x, y = pkg.from_numpy(X, "CLANG"), pkg.from_numpy(Y, "CLANG")  # 0, 1
    a = x.e(pkg.BinaryOps.ADD, y)  # 2
    b = a.e(pkg.BinaryOps.MUL, a.const(2.0))  # 3 const, 4 MUL
    c = b.e(pkg.BinaryOps.MAX, y)  # 5
    e = c.permute((1, 0)).stride((1, -1))  # 6 permute, 7 stride
    h = e.e(pkg.BinaryOps.DIV, e.const(3.0))  # 8 const, 9 DIV (0 / 0 is NaN: a pad must not be fused through it)
    f = h.pad(((1, 0), (0, 2)))  # 10 pad: (7, 6)
    i = f.r(pkg.ReduceOps.SUM, (1,)).cast(pkg.dtypes.int32)  # 11 SUM, 12 CAST
    k = i.e(pkg.BinaryOps.ADD, i.const(3)).reshape((7,))  # 13 const, 14 ADD, 15 reshape
    m = pkg.MultiLazyBuffer.from_sharded(c.pad(((3, 0), (0, 0))), SHARDS, 0)  # 16 pad, 17: shards of 4 and 3 rows
    r = m.e(pkg.BinaryOps.ADD, m).r(pkg.ReduceOps.SUM, (0,))  # 18 ADD, 19 SUM over the sharded axis
    q = r.copy_to_device("CLANG").reshape((6,)).shrink(((1, 5),)).e(pkg.UnaryOps.NEG)  # 20-23
    return k.shrink(((0, 4),)).cast(pkg.dtypes.float32).e(pkg.BinaryOps.SUB, q)  # 24 shrink, 25 CAST, 26 SUB


@contextmanager
def planted(*patches: tuple[Any, Any, Any]) -> Iterator[None]:
    """Set `owner.name = value` (or `owner[name] = value` for a dict) for each patch, with fast's
    kernel caches emptied and its disk store of lowered kernels suspended (no kernel compiled before
    hides the bug, none compiled with it survives); everything restored afterwards."""
    caches = [importlib.import_module("fast.engine.realize").PROGRAMS,
              importlib.import_module("fast.engine.realize").AST_KERNELS,
              importlib.import_module("fast.engine.replay").TEMPLATES]
    saved_caches = [dict(cache) for cache in caches]
    saved = []
    for owner, name, value in patches:
        if isinstance(owner, dict):
            saved.append((owner, name, owner[name]))
            owner[name] = value
        else:
            saved.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
            setattr(owner, name, value)
    for cache in caches:
        cache.clear()
    resume = importlib.import_module("fast.engine.program_store").suspend()  # keys follow files, not patches
    try:
        yield
    finally:
        resume()
        for owner, name, value in reversed(saved):
            if isinstance(owner, dict):
                owner[name] = value
            else:
                setattr(owner, name, value)
        for cache, before in zip(caches, saved_caches, strict=True):
            cache.clear()
            cache.update(before)


def traced_report() -> fast.debug.Report:
    with fast.debug.trace():
        out = program(fast)
    return fast.debug.compare(out)


# ---------------------------------------------------------------- the planted bugs

def render_mul() -> list[tuple[Any, Any, Any]]:
    """C rendering rule: a float MUL renders as a*b + 1 (scalar and vector code)."""
    c, vectors = importlib.import_module("fast.renderer.c"), importlib.import_module("fast.renderer.c_vectors")
    scalar, vector = c._Kernel.float_alu, vectors.VectorC.float_alu

    def float_alu(self: Any, op: Any, dtype: Any, a: list[str]) -> str:
        out = scalar(self, op, dtype, a)
        return f"({out} + 1)" if op is BinaryOps.MUL else out

    def vector_alu(self: Any, op: Any, dtype: Any, a: list[str]) -> str:
        out = vector(self, op, dtype, a)
        return f"({out} + 1)" if op is BinaryOps.MUL else out
    return [(c._Kernel, "float_alu", float_alu), (vectors.VectorC, "float_alu", vector_alu)]


def fold_mul() -> list[tuple[Any, Any, Any]]:
    """Constant-folding rule (fast/graph/rules.py): x * 2 folds to x."""
    original = FOLD_RULES[BinaryOps.MUL]

    def rule(dtype: Any, consts: Any) -> Fold | None:
        return Fold("operand", 0) if consts[1] == 2 else original(dtype, consts)
    return [(FOLD_RULES, BinaryOps.MUL, rule)]


def pad_view() -> list[tuple[Any, Any, Any]]:
    """Movement op: View.pad's mask ends one element early on padded axes."""
    view = importlib.import_module("fast.shape.view").View
    return [(view, "pad", short_pad(view))]


def reduce_sum_as_max() -> list[tuple[Any, Any, Any]]:
    """Reduce lowering (fast/codegen/lower.py): SUM accumulates with MAX."""
    lowering = importlib.import_module("fast.codegen.lower")._Lowering
    original = lowering._lower_reduce

    def lower_reduce(self: Any, reduce: LazyOp, *args: Any, **kwargs: Any) -> Any:
        if reduce.op is ReduceOps.SUM:
            reduce = LazyOp(ReduceOps.MAX, reduce.src, reduce.arg)
        return original(self, reduce, *args, **kwargs)
    return [(lowering, "_lower_reduce", lower_reduce)]


def cast_one_high() -> list[tuple[Any, Any, Any]]:
    """C rendering rule of CAST: float -> int gives one more (scalar and vector code)."""
    c, vectors = importlib.import_module("fast.renderer.c"), importlib.import_module("fast.renderer.c_vectors")
    scalar, vector = c._Kernel.cast, vectors.VectorC.cast

    def wrong(source: Any, target: Any, out: str) -> str:
        return f"({out} + 1)" if dtypes.is_float(source.scalar()) and dtypes.is_int(target.scalar()) else out

    def cast(self: Any, source: Any, target: Any, arg: str) -> str:
        return wrong(source, target, scalar(self, source, target, arg))

    def vector_cast(self: Any, source: Any, target: Any, value: str) -> str:
        return wrong(source, target, vector(self, source, target, value))
    return [(c._Kernel, "cast", cast), (vectors.VectorC, "cast", vector_cast)]


def allreduce_drops_last() -> list[tuple[Any, Any, Any]]:
    """Sharded all-reduce (fast/graph/allreduce.py, naive): every device sums all parts but the last."""
    allreduce = importlib.import_module("fast.graph.allreduce")

    def naive(op: Any, parts: Any) -> list[Any]:
        return [allreduce.fold(op, [part.copy_to_device(target.device) for part in parts[:-1]]) for target in parts]
    return [(allreduce, "_naive_all_reduce", naive)]


def unsafe_pad_fused() -> list[tuple[Any, Any, Any]]:
    """Fusion rule (fast/engine/fusion.py): every pad counts as safe, so x / 3 is fused through the
    pad and the padded elements read 0 / 0 = NaN instead of 0 (wrong only in the fused schedule)."""
    return [(importlib.import_module("fast.engine.fusion"), "pad_is_safe", lambda base, realizes: True)]


# (bug, node number, op, unfused, fused)
CASES: list[tuple[Callable[[], list[tuple[Any, Any, Any]]], int, str, bool, bool | None]] = [
    (render_mul, 4, "MUL", True, None),
    (fold_mul, 4, "MUL", True, None),
    (pad_view, 10, "pad", True, None),
    (reduce_sum_as_max, 11, "SUM", True, None),
    (cast_one_high, 12, "CAST", True, None),
    (allreduce_drops_last, 19, "SUM", True, None),
    (unsafe_pad_fused, 11, "SUM", False, True),
]


def test_a_correct_graph_agrees_node_by_node() -> None:
    report = traced_report()
    assert len(report.nodes) == 27 and report.traced == 27
    assert report.first is None, str(report)
    assert "every node agrees" in str(report)
    assert any(item.kind == "copy" for item in report.schedule) and any(k.kind == "kernel" for k in report.schedule)


@pytest.mark.parametrize("bug, number, op, unfused, fused", CASES, ids=[case[0].__name__ for case in CASES])
def test_a_planted_bug_is_named_exactly(bug: Callable[[], list[tuple[Any, Any, Any]]], number: int, op: str,
                                        unfused: bool, fused: bool | None) -> None:
    with planted(*bug()):
        report = traced_report()
    first = report.first
    assert first is not None, f"{bug.__name__} not found:\n{report}"
    assert (first.index, first.op) == (number, op), f"{bug.__name__}:\n{report}"
    assert first.unfused is unfused, str(report)
    if fused is not None:
        assert first.fused is fused, str(report)
    assert first.bad is not None and first.bad.any() and first.expected is not None and first.actual is not None
    assert not np.array_equal(first.expected[first.bad], first.actual[first.bad])
    text = str(report)
    assert f"first difference: node {number} of 27" in text and first.code in text


def test_the_sharded_reduction_is_named_with_its_devices() -> None:
    with planted(*allreduce_drops_last()):
        first = traced_report().first
    assert first is not None and first.device == SHARDS and first.arg == "(0,)"
    assert first.inputs and first.inputs[0][1] is not None and first.inputs[0][1].shape == (7, 6)
    assert first.unfused_kernels and all(k.device in SHARDS for k in first.unfused_kernels)


def test_a_fused_only_bug_names_the_kernel_and_its_source() -> None:
    with planted(*unsafe_pad_fused()):
        first = traced_report().first
    assert first is not None and first.kernel is not None and first.kernel.kind == "kernel"
    assert first.kernel.source is not None and first.kernel.name in first.kernel.source
    assert "differs only in the fused schedule" in str(first_report_text(first))


def first_report_text(first: fast.debug.Difference) -> str:
    return str(fast.debug.Report(["n"] * 27, first))


def test_a_graph_built_without_trace_is_rebuilt_from_the_lazy_graph() -> None:
    out = program(fast)
    assert fast.debug.compare(out).first is None
    with planted(*render_mul()):
        out = program(fast)
        report = fast.debug.compare(out)
    first = report.first
    assert first is not None and first.op == "MUL" and not first.traced and first.unfused, str(report)
    assert report.traced == 0 and any("rebuilt from the lazy graph" in note for note in report.notes)


def test_compare_leaves_the_users_graph_alone() -> None:
    with fast.debug.trace():
        out = program(fast)
    assert fast.debug.compare(out).first is None
    assert not out.is_realized()
    assert np.array_equal(fast.to_numpy(out), reference.to_numpy(program(reference)))


def test_half_and_disk_inputs_compare_without_touching_the_file(tmp_path: Any) -> None:
    path = tmp_path / "data.bin"
    with fast.debug.trace():
        disk = fast.from_numpy(np.arange(8, dtype=np.float32), f"DISK:{path}")
        half = disk.copy_to_device("CLANG").cast(dtypes.bfloat16).e(BinaryOps.ADD, disk.copy_to_device("CLANG")
                                                                      .cast(dtypes.bfloat16).e(UnaryOps.NEG))
        fast.realize(disk)
    before = path.read_bytes()
    report = fast.debug.compare(half)
    assert report.first is None, str(report)
    assert path.read_bytes() == before


def test_tolerance_arguments_are_checked() -> None:
    lb = fast.from_numpy(X, "CLANG")
    with pytest.raises(ValueError, match="rtol"):
        fast.debug.compare(lb, rtol=-1.0)
    with pytest.raises(TypeError, match="at least one"):
        fast.debug.compare()
    with pytest.raises(TypeError, match="LazyBuffer"):
        fast.debug.compare(X)  # type: ignore[arg-type]


def test_views_become_movement_ops_that_read_the_same_elements() -> None:
    """movement.strided_moves against the definition of a view (module docstring of fast/shape/view.py),
    on reference: negative, zero and overlapping strides, offsets and masks, ranks 0 to 3."""
    strided_moves = importlib.import_module("fast.debug.movement").strided_moves
    rng = np.random.default_rng(5)
    for _ in range(300):
        shape = tuple(int(s) for s in rng.integers(1, 5, rng.integers(0, 4)))
        strides = tuple(int(s) for s in rng.choice([0, 1, 2, 3, 5, 7, -1, -2], len(shape)))
        low = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
        high = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0)
        offset = -low + int(rng.integers(0, 3))
        size = offset + high + 1 + int(rng.integers(0, 3))
        mask = tuple((a, int(rng.integers(a, n + 1))) for n in shape for a in [int(rng.integers(0, n + 1))]) \
            if rng.random() < 0.4 else None
        data = np.arange(1, size + 1, dtype=np.int32)
        want = np.zeros(shape, np.int32)
        for index in np.ndindex(*shape):
            if mask is None or all(a <= i < b for i, (a, b) in zip(index, mask, strict=True)):
                want[index] = data[offset + sum(i * s for i, s in zip(index, strides, strict=True))]
        got = reference.from_numpy(data, "CLANG")
        for method, argument in strided_moves(size, shape, strides, offset, mask):
            got = getattr(got, method)(argument)
        assert np.array_equal(reference.to_numpy(got), want), (shape, strides, offset, mask)


def test_rebuild_gives_an_unrealized_copy_of_a_realized_graph() -> None:
    with fast.debug.trace():
        out = program(fast)
        fast.realize(out)
    copy = fast.debug.rebuild(out)[0]
    assert copy is not out and not copy.is_realized() and len(fast.schedule(copy)) > 1
    assert np.array_equal(fast.to_numpy(copy), fast.to_numpy(out))


def test_an_op_fast_cannot_run_is_named_with_its_error() -> None:
    c, vectors = importlib.import_module("fast.renderer.c"), importlib.import_module("fast.renderer.c_vectors")
    scalar, vector = c._Kernel.float_alu, vectors.VectorC.float_alu

    def broken(original: Any) -> Any:
        def float_alu(self: Any, op: Any, dtype: Any, a: list[str]) -> str:
            if op is UnaryOps.NEG:
                raise ValueError("C renderer: NEG is broken (planted)")
            return original(self, op, dtype, a)  # type: ignore[no-any-return]
        return float_alu
    with planted((c._Kernel, "float_alu", broken(scalar)), (vectors.VectorC, "float_alu", broken(vector))):
        report = traced_report()
    first = report.first
    assert first is not None and (first.index, first.op) == (23, "NEG"), str(report)
    assert first.expected_error is None and first.actual_error is not None and "NEG is broken" in first.actual_error
    assert "reference: no error; fast: ValueError" in first.reason
