"""Call replay of uncaptured code (fast/xp/_tape.py): a repeated sequence of namespace calls defers
its calls and runs as one captured plan at the read-back; values and errors equal the eager path's."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from fast import xp
from fast.xp import _tape
from tests import example_modules

RNG = np.random.default_rng(27)


@pytest.fixture(autouse=True)
def fresh_tapes() -> Iterator[None]:
    _tape._EPISODES.clear()
    _tape._LOCAL.tape = None
    yield
    _tape._EPISODES.clear()
    _tape._LOCAL.tape = None


def eager(fn: Callable[..., Any], *args: Any) -> np.ndarray:
    """`fn(*args)` read back with taping off (the reference the replays must equal bit for bit)."""
    saved = dict(_tape._JITS)
    _tape._JITS.clear()
    try:
        return np.asarray(fn(*args))
    finally:
        _tape._JITS.update(saved)
        _tape._LOCAL.tape = None


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def block(x: Any, w: Any, scale: float) -> Any:
    """Broadcasts, scalars, a reduction, a matmul, views, on awkward shapes."""
    centered = x - xp.mean(x, axis=-1, keepdims=True)
    y = xp.exp(centered * scale) @ w.mT + 1.5
    return xp.sum(xp.permute_dims(xp.reshape(y, (3, 5, 2, 2)), (0, 2, 1, 3)), axis=1) / 7.0


def test_replays_equal_fresh_results_on_new_inputs() -> None:
    w = xp.asarray(f32(4, 7))
    for call in range(5):
        host = f32(3, 5, 7)
        got = np.asarray(block(xp.asarray(host), w, 0.25))
        assert same_bits(got, eager(block, xp.asarray(host), w, 0.25)), call
        if call >= 1:  # the second call on speculates: its results are Deferred until read back
            assert type(block(xp.asarray(host), w, 0.25)) is _tape.Deferred
            _tape._LOCAL.tape = None


def test_other_scalar_diverges_and_stays_correct() -> None:
    w, host = xp.asarray(f32(4, 7)), f32(3, 5, 7)
    for scale in (0.25, 0.25, -0.0, 0.0, 0.25, 2.0):
        got = np.asarray(block(xp.asarray(host), w, scale))
        assert same_bits(got, eager(block, xp.asarray(host), w, scale)), scale


def test_intermediates_used_after_read_back() -> None:
    w = xp.asarray(f32(4, 7))
    for _ in range(3):
        host = f32(3, 5, 7)
        x = xp.asarray(host)
        centered = x - xp.mean(x, axis=-1, keepdims=True)
        out = centered @ w.mT
        first = np.asarray(out)
        again = np.asarray(centered * 2.0)  # a Deferred of a stopped tape: materialized
        assert same_bits(again, eager(lambda a: (a - xp.mean(a, axis=-1, keepdims=True)) * 2.0, xp.asarray(host)))
        assert same_bits(first, eager(lambda a: (a - xp.mean(a, axis=-1, keepdims=True)) @ w.mT, xp.asarray(host)))


def test_deferred_shape_lazy_and_inplace() -> None:
    def fn(x: Any) -> Any:
        return xp.sum(x * 3.0, axis=0)

    for step in range(3):
        host = f32(6, 2)
        x = xp.asarray(host)
        y = x * 3.0
        assert y.shape == (6, 2) and y.dtype == xp.float32 and y.ndim == 2
        if step == 2:
            assert y.lazy is not None  # reading the LazyBuffer materializes
            y += 1.0
            assert same_bits(np.asarray(y), eager(lambda a: a * 3.0 + 1.0, xp.asarray(host)))
        else:
            out = xp.sum(y, axis=0)
            assert same_bits(np.asarray(out), eager(fn, xp.asarray(host)))


def test_take_out_of_range_raises_as_eager() -> None:
    table = xp.asarray(f32(10, 4))

    def embed(ids: Any) -> Any:
        return xp.take(table, xp.reshape(ids, (-1,)), axis=0) * 2.0

    for _ in range(3):
        ids = RNG.integers(0, 10, (2, 3)).astype(np.int32)
        assert same_bits(np.asarray(embed(xp.asarray(ids))), eager(embed, xp.asarray(ids)))
    with pytest.raises(IndexError, match="take"):
        np.asarray(embed(xp.asarray(np.array([[1, 2, 10]], np.int32))))
    ids = np.array([[0, -10, 9]], np.int32)
    assert same_bits(np.asarray(embed(xp.asarray(ids))), eager(embed, xp.asarray(ids)))


def test_unrealized_external_is_not_taped() -> None:
    w = xp.asarray(f32(4, 7))
    for _ in range(3):
        lazy = xp.asarray(f32(3, 5, 7)) + 0.0  # an unrealized argument: calls on it run eagerly
        host = np.asarray(lazy)
        got = np.asarray(block(lazy * 1.0, w, 0.5))
        assert same_bits(got, eager(block, xp.asarray(host) * 1.0, w, 0.5))


def test_encode_same_bits_as_uncaptured() -> None:
    transformer = example_modules.transformer()
    config = transformer.Config(hidden=32, heads=4, layers=2)
    weights = {name: xp.asarray(value) for name, value in transformer.random_weights(config, 40, 16, seed=3).items()}
    for tokens in (6, 6, 6, 9, 9, 9):
        ids = RNG.integers(0, 40, (2, tokens)).astype(np.int32)
        mask = np.ones((2, tokens), np.int32)
        mask[1, tokens - 2:] = 0
        got = np.asarray(transformer.encode(weights, xp.asarray(ids), xp.asarray(mask), config))
        want = eager(lambda i, m: transformer.encode(weights, i, m, config), xp.asarray(ids), xp.asarray(mask))
        assert same_bits(got, want), tokens
