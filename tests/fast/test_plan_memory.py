"""fast/engine/plan_memory.py: a captured plan's intermediates share allocations only when their
lifetimes within a call do not overlap, and replays keep the uncaptured function's bits."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fast
from fast import BinaryOps, UnaryOps, from_numpy, to_numpy
from fast.device import Buffer
from fast.dtype import dtypes
from fast.engine import plan_memory
from fast.engine.capture import Plan
from fast.ops import KernelOps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_values import matmul_graph  # noqa: E402

RNG = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def plan_of(captured: Any) -> Plan:
    (plan, _), = captured.plans.values()
    return plan  # type: ignore[no-any-return]


def lifetimes(plan: Plan) -> dict[int, tuple[int, int]]:
    """(first, last) step touching each fixed table position."""
    spans: dict[int, tuple[int, int]] = {}
    for number, step in enumerate(plan.steps):
        for position in step.positions:
            if plan.table[position] is not None:
                first, _ = spans.get(position, (number, number))
                spans[position] = (first, number)
    return spans


def assert_no_live_overlap(plan: Plan) -> None:
    """Two fixed Buffers whose lifetimes overlap never share memory."""
    spans = lifetimes(plan)
    positions = sorted(spans)
    for i, p in enumerate(positions):
        for q in positions[i + 1:]:
            (a0, a1), (b0, b1) = spans[p], spans[q]
            if a0 <= b1 and b0 <= a1:
                x, y = plan.table[p], plan.table[q]
                assert x is not None and y is not None
                if x.base is y.base:
                    assert x.offset + x.nbytes <= y.offset or y.offset + y.nbytes <= x.offset, (p, q)


def distinct_roots(plan: Plan) -> list[Buffer]:
    return list({id(b.base): b.base for b in plan.table if b is not None}.values())


def chain(x: fast.LazyBuffer, weights: list[fast.LazyBuffer]) -> fast.LazyBuffer:
    """Products of different widths, each its own kernel, with an elementwise step between."""
    for w in weights:
        x = matmul_graph(x, w).e(UnaryOps.SIN)
    return x


def same_bits(a: fast.LazyBuffer, b: fast.LazyBuffer) -> bool:
    return to_numpy(a).tobytes() == to_numpy(b).tobytes()


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_chain_shares_slots_and_keeps_bits(device: str) -> None:
    widths = [16, 40, 8, 24, 40, 5, 33]
    weights = [from_numpy(f32(a, b), device) for a, b in zip(widths, widths[1:], strict=False)]
    captured = fast.jit(lambda x: chain(x, weights))
    for _ in range(4):
        data = f32(37, widths[0])
        got = to_numpy(captured(from_numpy(data, device)))
        want = to_numpy(chain(from_numpy(data, device), weights))
        assert got.tobytes() == want.tobytes()
    assert captured.traces == 1
    plan = plan_of(captured)
    fixed = [b for b in plan.table if b is not None and b.base is not b]  # the shared intermediates
    assert len(fixed) >= 4
    assert len({id(b.base) for b in fixed}) < len(fixed)  # some slot holds several
    assert_no_live_overlap(plan)


def test_two_devices_get_their_own_slots() -> None:
    wa, wb = from_numpy(f32(12, 20), "CLANG"), from_numpy(f32(20, 12), "LLVM")

    def both(x: fast.LazyBuffer) -> fast.LazyBuffer:
        y = matmul_graph(matmul_graph(x, wa).e(UnaryOps.SIN), from_numpy(np.eye(20, dtype=np.float32), "CLANG"))
        z = matmul_graph(y.copy_to_device("LLVM").e(UnaryOps.SIN), wb)
        return matmul_graph(z.e(UnaryOps.SIN), from_numpy(np.eye(12, dtype=np.float32), "LLVM"))
    captured = fast.jit(both)
    for _ in range(3):
        data = f32(9, 12)
        assert same_bits(captured(from_numpy(data, "CLANG")), both(from_numpy(data, "CLANG")))
    plan = plan_of(captured)
    for buffer in plan.table:
        if buffer is not None:
            assert buffer.base.device == buffer.device
    assert_no_live_overlap(plan)


def test_hoisted_results_and_weights_are_never_reused() -> None:
    """A weight cast once at the trace (a hoisted item) stays intact while later intermediates of
    every size come and go; so do the weights themselves."""
    half = from_numpy(f32(24, 24).astype(np.float16), "CLANG")
    w = from_numpy(f32(24, 24), "CLANG")

    def fn(x: fast.LazyBuffer) -> fast.LazyBuffer:
        y = matmul_graph(x, half.cast(dtypes.float32)).e(UnaryOps.SIN)
        for _ in range(3):
            y = matmul_graph(y, w).e(UnaryOps.SIN)
        return y.e(BinaryOps.ADD, matmul_graph(x, half.cast(dtypes.float32)))
    captured = fast.jit(fn)
    for _ in range(4):
        data = f32(24, 24)
        assert same_bits(captured(from_numpy(data, "CLANG")), fn(from_numpy(data, "CLANG")))
    plan = plan_of(captured)
    shared = {id(b.base) for b in plan.table if b is not None and b.base is not b}
    hoisted_and_weights = [b for b in plan.table if b is not None and b.base is b]
    assert hoisted_and_weights and all(id(b) not in shared for b in hoisted_and_weights)
    assert_no_live_overlap(plan)


class _Step:
    """The parts of a plan step `share_intermediates` reads."""

    def __init__(self, outputs: int, positions: tuple[int, ...], op: Any = KernelOps.SINK) -> None:
        self.op, self.positions = op, positions
        self.ast = type("Ast", (), {"src": (None,) * outputs})()


def test_assignment_matches_a_lockstep_interval_twin() -> None:
    """Random programs of steps (one output, up to three earlier values read): every slot's members
    have disjoint lifetimes, the slot holds the largest, and no value read at a step shares memory
    with the value written there."""
    rng = np.random.default_rng(5)
    for _ in range(60):
        count = int(rng.integers(2, 30))
        sizes = [int(rng.choice([1, 3, 64, 100, 4096])) for _ in range(count)]
        table: list[Buffer | None] = [Buffer("CLANG", size, dtypes.float32).allocate() for size in sizes]
        steps = []
        for out in range(count):
            picked = rng.choice(out, size=min(out, int(rng.integers(0, 4))), replace=False) if out else []
            reads = tuple(int(r) for r in picked)
            steps.append(_Step(1, (out, *reads)))
        shared = plan_memory.share_intermediates(table, steps, pinned=set())
        last = {p: max(n for n, step in enumerate(steps) if p in step.positions) for p in range(count)}
        for number, step in enumerate(steps):
            written = shared[step.positions[0]]
            assert written is not None
            for read in step.positions[1:]:
                other = shared[read]
                assert other is not None and other.base is not written.base
            for p in range(number):  # every earlier value still live at this step keeps its memory
                if last[p] >= number and p != step.positions[0]:
                    assert shared[p] is not None and shared[p].base is not written.base  # type: ignore[union-attr]
        for position, buffer in enumerate(shared):
            assert buffer is not None and buffer.nbytes == sizes[position] * 4
            assert buffer.base.nbytes >= buffer.nbytes


def test_refused_positions_keep_their_buffers() -> None:
    """Read before written, touched by a copy, viewed, or pinned: the traced Buffer stays."""
    root = Buffer("CLANG", 64, dtypes.float32).allocate()
    view = Buffer("CLANG", 16, dtypes.float32, base=root, offset=64)
    table: list[Buffer | None] = [Buffer("CLANG", 64, dtypes.float32).allocate() for _ in range(5)] + [root, view]
    steps = [_Step(1, (0, 1)),  # 1 read before any write
             _Step(1, (2, 0)),
             _Step(1, (3, 2), op=KernelOps.SINK),
             _Step(1, (4, 3)),
             _Step(1, (5, 4)),  # 5 is viewed by 6
             _Step(0, (2,), op="COPY")]  # 2 touched by a copy
    shared = plan_memory.share_intermediates(table, steps, pinned={id(table[3])})
    for position in (1, 2, 3, 5, 6):
        assert shared[position] is table[position]
