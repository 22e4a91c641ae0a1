"""fast.jit and fast.xp.jit (fast/captured.py, fast/engine/capture.py): a captured function gives the
bits of the uncaptured one on new inputs, retraces when its signature changes, and refuses misuse."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fast
from fast import BinaryOps, ReduceOps, UnaryOps, from_numpy, to_numpy, xp
from fast.engine.capture import TraceError
from fast.runtime import cpu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import transformer  # noqa: E402
from kernel_values import matmul_graph  # noqa: E402

RNG = np.random.default_rng(7)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def softmax_rows(x: fast.LazyBuffer, w: fast.LazyBuffer) -> tuple[fast.LazyBuffer, fast.LazyBuffer]:
    """A row softmax of x * w (a reduce, a row broadcast, a view of a realized weight) and a row sum."""
    y = x.e(BinaryOps.MUL, w.permute((1, 0)))
    top = y.r(ReduceOps.MAX, (1,)).expand(y.shape)
    e = y.e(BinaryOps.SUB, top).e(UnaryOps.EXP2)
    return e.e(BinaryOps.DIV, e.r(ReduceOps.SUM, (1,)).expand(y.shape)), y.r(ReduceOps.SUM, (1,))


def test_small_graph_same_bits_on_new_inputs() -> None:
    w = from_numpy(f32(6, 6), "CLANG")
    captured = fast.jit(lambda x: softmax_rows(x, w))
    kept = []
    for _ in range(4):
        data = f32(6, 6)
        got = captured(from_numpy(data, "CLANG"))
        want = softmax_rows(from_numpy(data, "CLANG"), w)
        assert isinstance(got, tuple) and len(got) == 2
        for a, b in zip(got, want, strict=True):
            assert same_bits(to_numpy(a), to_numpy(b))
        kept.append((to_numpy(got[0]), got[0]))
    assert captured.traces == 1
    for values, lb in kept:  # each call returned fresh buffers: later calls overwrote none of them
        assert same_bits(to_numpy(lb), values)


def test_outputs_can_be_used_in_later_graphs_and_inputs_unrealized() -> None:
    captured = fast.jit(lambda x, y: x.e(BinaryOps.ADD, y).e(BinaryOps.MUL, x))
    for _ in range(3):
        a, b = f32(3, 5), f32(3, 5)
        lazy_a = from_numpy(a, "CLANG").e(UnaryOps.NEG)  # an argument that is not realized yet
        out = captured(lazy_a, from_numpy(b, "CLANG").permute((1, 0)).permute((1, 0)))
        more = to_numpy(out.e(BinaryOps.ADD, out))
        expected = (-a + b) * -a
        assert same_bits(to_numpy(out), expected.astype(np.float32))
        assert same_bits(more, expected + expected)
    assert captured.traces == 1


def test_retrace_on_shape_dtype_view_and_python_argument() -> None:
    def scaled(x: fast.LazyBuffer, factor: float) -> fast.LazyBuffer:
        return x.e(BinaryOps.MUL, x.const(factor)).r(ReduceOps.SUM, (0,))

    captured = fast.jit(scaled)
    a = f32(4, 3)
    for factor, data in ((2.0, a), (2.0, f32(4, 3)), (3.0, a), (2.0, f32(5, 3)), (2.0, a.astype(np.float64))):
        got = to_numpy(captured(from_numpy(data, "CLANG"), factor))
        assert same_bits(got, to_numpy(scaled(from_numpy(data, "CLANG"), factor)))
    assert captured.traces == 4  # the second call replayed
    transposed = from_numpy(f32(3, 4), "CLANG").permute((1, 0))  # same shape, another view: a new trace
    assert same_bits(to_numpy(captured(transposed, 2.0)), to_numpy(scaled(transposed, 2.0)))
    assert captured.traces == 5
    with fast.config.override(noopt=True):  # another configuration: its own trace, lowered under it
        assert same_bits(to_numpy(captured(from_numpy(a, "CLANG"), 2.0)), to_numpy(scaled(from_numpy(a, "CLANG"), 2.0)))
        assert captured.traces == 6
    assert same_bits(to_numpy(captured(from_numpy(a, "CLANG"), 2.0)), to_numpy(scaled(from_numpy(a, "CLANG"), 2.0)))
    assert captured.traces == 6  # back under the first configuration: its trace replays


def test_same_argument_twice_and_returning_inputs_and_weights() -> None:
    w = from_numpy(f32(2, 2), "CLANG")
    captured = fast.jit(lambda x, y: (x.e(BinaryOps.MUL, y), x, w))
    for _ in range(2):
        data = f32(2, 2)
        x = from_numpy(data, "CLANG")
        product, same, weight = captured(x, x)
        assert same_bits(to_numpy(product), data * data)
        assert same_bits(to_numpy(same), data) and same_bits(to_numpy(weight), to_numpy(w))
    other = f32(2, 2)
    product, *_ = captured(from_numpy(data, "CLANG"), from_numpy(other, "CLANG"))  # two buffers: a new trace
    assert same_bits(to_numpy(product), data * other)
    assert captured.traces == 2


def test_assign_into_a_captured_weight_retraces() -> None:
    w = from_numpy(np.ones((3,), np.float32), "CLANG")
    captured = fast.jit(lambda x: x.e(BinaryOps.ADD, w.e(BinaryOps.MUL, w.const(2.0))))  # w*2 is hoisted
    x = np.arange(3, dtype=np.float32)
    assert same_bits(to_numpy(captured(from_numpy(x, "CLANG"))), x + 2)
    fast.realize(w.assign(from_numpy(np.full((3,), 5, np.float32), "CLANG")))
    assert same_bits(to_numpy(captured(from_numpy(x, "CLANG"))), x + 10)
    assert captured.traces == 2


@pytest.mark.skipif(not cpu.fused_multiply_add(), reason="this host has no FMA instructions (or NOOPT)")
def test_fma_guard_on_replay() -> None:
    """A matmul kernel with fused multiply-adds checks each call's inputs: an operand beyond the
    bound runs the unfused kernel for that call, as without the capture (tests/fast/test_fma.py's
    operands: fused, each output keeps a 2**-24 that rounding the product first loses)."""
    x = np.empty((257, 2), np.float32)
    y = np.empty((2, 256), np.float32)
    x[:, 0], y[0, :] = -1.0, 1.0
    x[:, 1], y[1, :] = 1 + 2.0**-12, 1 + 2.0**-12
    right = from_numpy(y, "CLANG")
    captured = fast.jit(lambda left: matmul_graph(left, right))
    for spoiler, expected in ((1.0, 2.0**-11 + 2.0**-24), (2.0**70, 2.0**-11), (1.0, 2.0**-11 + 2.0**-24)):
        x[256] = [spoiler, 0.0]
        got = to_numpy(captured(from_numpy(x, "CLANG")))
        assert same_bits(got, to_numpy(matmul_graph(from_numpy(x, "CLANG"), right)))
        np.testing.assert_array_equal(got[:256], np.full((256, 256), np.float32(expected)))
    assert captured.traces == 1


def test_custom_take_replays_on_new_indices() -> None:
    table = xp.asarray(f32(10, 4))
    captured = xp.jit(lambda ids: xp.take(table, ids, axis=0) * 2.0)
    for _ in range(3):
        ids = RNG.integers(0, 10, (5,)).astype(np.int32)
        got = np.asarray(captured(xp.asarray(ids)))
        assert same_bits(got, np.asarray(xp.take(table, xp.asarray(ids), axis=0) * 2.0))
    assert captured.captured.traces == 1  # type: ignore[attr-defined]


def test_transformer_encode_same_bits() -> None:
    config = transformer.Config(hidden=32, heads=4, layers=2)
    weights = {name: xp.asarray(value) for name, value in transformer.random_weights(config, 40, 16, seed=2).items()}
    encoder = transformer.make_encoder(weights, config)
    for tokens in (6, 6, 6, 9):
        ids = RNG.integers(0, 40, (2, tokens)).astype(np.int32)
        mask = np.ones((2, tokens), np.int32)
        mask[1, tokens - 2:] = 0  # padding
        got = np.asarray(encoder(xp.asarray(ids), xp.asarray(mask)))
        want = np.asarray(transformer.encode(weights, xp.asarray(ids), xp.asarray(mask), config))
        assert same_bits(got, want)
    assert encoder.captured.traces == 2  # type: ignore[attr-defined]  # one per length


# ---------------------------------------------------------------- misuse

def test_reading_traced_values_raises() -> None:
    def branchy(x: Any) -> Any:
        return x * 2.0 if bool(xp.sum(x) > 0) else x

    with pytest.raises(TraceError, match=r"jit\(.*branchy.*reading the value"):
        xp.jit(branchy)(xp.asarray(f32(3)))
    with pytest.raises(TraceError, match="computed from the inputs"):
        fast.jit(lambda x: from_numpy(to_numpy(x), "CLANG"))(from_numpy(f32(3), "CLANG"))
    w = xp.asarray(np.arange(3, dtype=np.float32))  # reading a constant while tracing is allowed
    captured = xp.jit(lambda x: x * float(xp.max(w)))
    assert same_bits(np.asarray(captured(xp.asarray(np.ones(3, np.float32)))), np.full(3, 2, np.float32))


def test_assign_into_an_input_raises_and_leaves_it() -> None:
    data = f32(4)
    x = from_numpy(data, "CLANG")
    with pytest.raises(TraceError, match="argument 0 .*must not mutate its inputs"):
        fast.jit(lambda y: y.assign(y.e(BinaryOps.ADD, y)))(x)
    assert same_bits(to_numpy(x), data)
    w = from_numpy(f32(4), "CLANG")
    with pytest.raises(TraceError, match="assigns inside a captured function are not supported"):
        fast.jit(lambda y: w.assign(y))(x)


def test_argument_errors() -> None:
    captured = fast.jit(lambda x, *rest: x.e(BinaryOps.ADD, x))
    x = from_numpy(f32(2), "CLANG")
    captured(x)
    with pytest.raises(TypeError, match=r"traced with 1 positional arguments .* called with 2"):
        captured(x, 1)
    with pytest.raises(TypeError, match="argument 1 .*unhashable"):
        fast.jit(lambda x, opts: x)(x, {"a": 1})
    with pytest.raises(TypeError, match="argument 0 .*holds an array"):
        fast.jit(lambda xs: xs[0])([x])
    with pytest.raises(TypeError, match="must return a LazyBuffer"):
        fast.jit(lambda x: 3)(x)
    with pytest.raises(TypeError, match="must return an Array"):
        xp.jit(lambda x: None)(xp.asarray(f32(2)))
    with pytest.raises(TypeError, match="expected a callable"):
        fast.jit(3)  # type: ignore[arg-type]


def test_constant_view_and_weight_results_and_no_arguments() -> None:
    w = from_numpy(f32(4, 4), "CLANG")

    def several(x: fast.LazyBuffer) -> tuple[fast.LazyBuffer, ...]:
        y = x.e(BinaryOps.ADD, w)
        return (x.const(3.0), y.shrink(((1, 3), (0, 4))), x.shrink(((0, 2), (0, 4))).contiguous(),
                w.e(BinaryOps.MUL, w), x.shrink(((1, 3), (0, 4))))

    captured = fast.jit(several)
    for _ in range(3):
        data = f32(4, 4)
        for got, want in zip(captured(from_numpy(data, "CLANG")), several(from_numpy(data, "CLANG")), strict=True):
            assert same_bits(to_numpy(got), to_numpy(want))
    assert captured.traces == 1
    constant = fast.jit(lambda: w.e(BinaryOps.ADD, w).r(ReduceOps.SUM, (0,)))
    first, second = constant(), constant()
    assert first.realized is not second.realized and same_bits(to_numpy(first), to_numpy(second))


def test_transformer_with_weights_on_disk(tmp_path: Path) -> None:
    """Weights read from a safetensors file: the DISK copies run once, in the trace (hoisted)."""
    config = transformer.Config(hidden=32, heads=4, layers=2)
    path = str(tmp_path / "weights.safetensors")
    host = transformer.random_weights(config, 30, 12, seed=5)
    fast.safe_save(path, {name: from_numpy(value, "CLANG") for name, value in host.items()})
    weights = transformer.load(path, xp, "CLANG")
    encoder = transformer.make_encoder(weights, config)
    for _ in range(3):
        ids = RNG.integers(0, 30, (1, 7)).astype(np.int32)
        mask = np.ones((1, 7), np.int32)
        mask[0, 5:] = 0
        got = np.asarray(encoder(xp.asarray(ids), xp.asarray(mask)))
        assert same_bits(got, np.asarray(transformer.encode(weights, xp.asarray(ids), xp.asarray(mask), config)))
        np.testing.assert_allclose(got, transformer.encode(host, ids, mask, config), atol=1e-4)  # numpy's order
    (plan, _), = encoder.captured.plans.values()  # type: ignore[attr-defined]
    assert not any(step.op is fast.LoadOps.COPY for step in plan.steps)


def test_bound_variables_replay_one_trace_for_every_length() -> None:
    """A sequence length bound in the arguments' views is a kernel parameter: one trace serves
    every value, and each call's results carry that call's value."""
    w = from_numpy(f32(4, 6), "CLANG")
    length = fast.Variable("length", 1, 9)

    def project(xs: fast.LazyBuffer) -> tuple[fast.LazyBuffer, fast.LazyBuffer]:
        h = matmul_graph(xs, w)
        h = h.e(BinaryOps.ADD, h.const(1.0))
        return h, h.e(BinaryOps.MUL, h).r(ReduceOps.SUM, (0,))

    captured = fast.jit(project)
    for n in (5, 2, 9, 5):
        data = f32(9, 4)
        got = captured(from_numpy(data, "CLANG").shrink(((0, length.bind(n)), (0, 4))))
        want = project(from_numpy(data, "CLANG").shrink(((0, length.bind(n)), (0, 4))))
        for a, b in zip(got, want, strict=True):
            assert same_bits(to_numpy(a), to_numpy(b))
        assert to_numpy(got[0]).shape == (n, 6)
    assert captured.traces == 1


def test_zero_size_outputs_replay() -> None:
    """A function returning a zero-size value (a shrink to nothing) beside a real one: every call
    gives a new zero-size result of the right shape and dtype, and the other output's bits."""
    def fn(x: fast.LazyBuffer) -> tuple[fast.LazyBuffer, fast.LazyBuffer]:
        return x.shrink(((0, 0), (0, x.shape[1]))), x.e(BinaryOps.ADD, x)
    captured = fast.jit(fn)
    for _ in range(3):
        data = f32(4, 3)
        empty, doubled = captured(from_numpy(data, "CLANG"))
        assert to_numpy(empty).shape == (0, 3) and to_numpy(empty).dtype == np.float32
        assert same_bits(to_numpy(doubled), data + data)
    assert captured.traces == 1
