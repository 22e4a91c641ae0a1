"""Call replay of uncaptured code (fast/xp/_tape.py): a repeated sequence of namespace calls defers
its calls and runs as one captured plan at the read-back; values and errors equal the eager path's."""
from __future__ import annotations

import contextlib
import gc
import io
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import fast
import fast.debug
from fast import config, xp
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
    with config.override(xp_tape=False):
        return np.asarray(fn(*args))


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


# ---------------------------------------------------------------- the invariant's edges

def outcomes(program: Callable[[], list[Any]], speculate: bool = True) -> list[Any]:
    """What `program` sees on its third run with tapes (its first records, its second on speculate),
    as values' bytes or (error type, message); `speculate` asserts a Deferred was made."""
    made = []
    original = _tape.Deferred.__init__

    def counting(self: Any, *args: Any) -> None:
        made.append(1)
        original(self, *args)

    _tape.Deferred.__init__ = counting  # type: ignore[method-assign]
    try:
        seen = [observe(program) for _ in range(3)]
    finally:
        _tape.Deferred.__init__ = original  # type: ignore[method-assign]
    assert bool(made) == speculate
    return seen[-1]


def observe(program: Callable[[], list[Any]]) -> list[Any]:
    seen: list[Any] = []
    try:
        for value in program():
            seen.append(value() if callable(value) else value)
    except Exception as error:  # noqa: BLE001
        seen.append((type(error).__name__, str(error).split(": ")[0]))
    return [np.asarray(item).tobytes() if isinstance(item, (np.ndarray, xp.Array)) else item for item in seen]


def same_as_eager(program: Callable[[], list[Any]], speculate: bool = True) -> None:
    with config.override(xp_tape=False):
        want = observe(program)
    assert outcomes(program, speculate) == want


def upload(values: np.ndarray) -> Any:
    return fast.from_numpy(values, "CLANG")


def test_an_assign_into_an_external_before_the_read_back_is_seen() -> None:
    def program() -> list[Any]:
        x = xp.asarray(np.ones((4, 3), np.float32))
        y = xp.sum(x * 2.0, axis=0)
        fast.realize(x.lazy.assign(upload(np.full((4, 3), 5, np.float32))))
        return [lambda: np.asarray(y), lambda: np.asarray(x * 2.0)]

    same_as_eager(program)  # (the read raises RuntimeError: what y was built from no longer exists)
    assert outcomes(program)[0][0] == "RuntimeError"


def test_an_assign_after_a_read_back_keeps_eager_semantics() -> None:
    def program() -> list[Any]:
        x = xp.asarray(np.ones((4, 3), np.float32))
        h = x * 2.0
        y = xp.sum(h, axis=0)
        first = np.asarray(y)  # another Deferred (h) lives: read back as usual
        fast.realize(x.lazy.assign(upload(np.full((4, 3), 5, np.float32))))
        return [first, lambda: np.asarray(h), lambda: np.asarray(y + 1.0)]

    same_as_eager(program)


def test_a_view_of_an_external_is_read_back_as_usual() -> None:
    def program() -> list[Any]:
        x = xp.asarray(np.arange(12, dtype=np.float32))
        y = xp.reshape(x, (3, 4))
        first = np.asarray(y)
        fast.realize(x.lazy.assign(upload(np.zeros(12, np.float32))))
        return [first, lambda: np.asarray(y)]  # a stale view: RuntimeError, as without tapes

    same_as_eager(program, speculate=False)  # (no episode: its plan would return a copy)


def test_a_stale_view_external_is_not_taped() -> None:
    def program(assign: bool) -> list[Any]:
        base = xp.asarray(np.arange(12, dtype=np.float32))
        view = xp.reshape(base, (3, 4))
        first = np.asarray(view)  # (ends the tape: `view` is an external of the next one)
        if assign:
            fast.realize(base.lazy.assign(upload(np.zeros(12, np.float32))))
        return [first, lambda: np.asarray(view * 2.0)]

    with config.override(xp_tape=False):
        want = observe(lambda: program(True))
    assert want[-1][0] == "RuntimeError"
    for _ in range(2):  # an episode whose external is a realized view
        observe(lambda: program(False))
    assert observe(lambda: program(True)) == want


def test_a_call_returning_its_argument_is_not_deferred() -> None:
    def program() -> list[Any]:
        x = xp.asarray(np.ones(3, np.float32))
        y = xp.clip(x)  # the standard's clip without bounds: x itself
        y += 1.0
        return [lambda: np.asarray(x), lambda: np.asarray(y * 2.0)]

    same_as_eager(program, speculate=True)


def test_scalars_key_by_bits() -> None:
    nans = [np.frombuffer(np.array([bits], np.uint64).tobytes(), np.float64)[0].item()
            for bits in (0x7FF8000000000001, 0x7FF8000000000002)]
    x = xp.asarray(np.ones(3, np.float64))
    for scalar in (0.0, 0.0, -0.0, nans[0], nans[0], nans[1], 1.0):
        got = np.asarray(xp.maximum(x * scalar, x * scalar))
        assert same_bits(got, eager(lambda a, s=scalar: xp.maximum(a * s, a * s), x)), scalar


def test_a_configuration_change_builds_the_deferred_calls_first() -> None:
    host = f32(4, 40000)
    for split in (True, False):  # an episode under each configuration
        with config.override(split_reduceop=split):
            for _ in range(2):
                np.asarray(xp.sum(xp.asarray(host), axis=1))

    def program() -> list[Any]:
        x = xp.asarray(host)
        y = xp.sum(x, axis=1)  # deferred, then built when the configuration changes
        with config.override(split_reduceop=False):
            z = xp.sum(x, axis=1)
            return [np.asarray(z), np.asarray(y), np.asarray(xp.sum(x, axis=1))]

    same_as_eager(program)


def test_switches_turn_taping_off() -> None:
    assert not config.Config.from_env({"FAST_XP_TAPE": "0"}).xp_tape and config.Config.from_env({}).xp_tape
    x = xp.asarray(np.ones(3, np.float32))
    for settings in ({"xp_tape": False}, {"debug": 2}, {"dump_ir": "schedule"}):
        with config.override(**settings), contextlib.redirect_stdout(io.StringIO()):
            kinds = {type(np.asarray(x * 2.0) is not None and x * 2.0).__name__ for _ in range(3)}
        assert kinds == {"Array"}, settings
    with fast.debug.trace():
        assert {type(x * 3.0).__name__ for _ in range(3) if np.asarray(x * 3.0) is not None} == {"Array"}


def test_debug_prints_a_line_per_plan_run() -> None:
    x = xp.asarray(np.ones(3, np.float32))
    with config.override(debug=1):
        for _ in range(2):
            np.asarray(xp.sin(x) * 2.0)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            np.asarray(xp.sin(x) * 2.0)
            np.asarray(xp.sin(x) * 2.0)
    assert printed.getvalue().count("xp tape: 2 calls read back through one plan") == 2


def test_threads_tape_apart() -> None:
    w = xp.asarray(f32(4, 7))
    hosts = [f32(3, 5, 7) for _ in range(6)]
    want = [eager(block, xp.asarray(host), w, 0.25) for host in hosts]

    def work(number: int) -> list[bool]:
        return [same_bits(np.asarray(block(xp.asarray(hosts[number]), w, 0.25)), want[number]) for _ in range(4)]

    with ThreadPoolExecutor(3) as pool:
        assert all(all(ok) for ok in pool.map(work, range(6)))


def test_unread_deferreds_hold_no_memory() -> None:
    w = xp.asarray(f32(4, 7))
    for _ in range(2):
        np.asarray(block(xp.asarray(f32(3, 5, 7)), w, 0.25))
    x = xp.asarray(f32(3, 5, 7))
    held = weakref.ref(x.lazy)
    out = block(x, w, 0.25)
    assert type(out) is _tape.Deferred
    del x, out
    xp.asarray(np.ones(2, np.float32)) + 1.0  # the thread's next tape
    gc.collect()
    assert held() is None and not _tape._SPECULATING


def test_stored_episodes_and_points_are_bounded() -> None:
    x = xp.asarray(np.ones(3, np.float32))
    for scale in range(2 * _tape.MAX_EPISODES):
        np.asarray(x * float(scale))
    assert len(_tape._EPISODES) == _tape.MAX_EPISODES
    for _ in range(2):
        for count in range(2 * _tape.MAX_POINTS):
            values = [x + 1.0]
            for _ in range(count):
                values.append(values[-1] * 2.0)
            np.asarray(values[-1])
            del values
    assert all(len(episode.points) <= _tape.MAX_POINTS for episode in _tape._EPISODES.values())


def test_an_error_mid_tape_is_raised_as_without_tapes() -> None:
    def program() -> list[Any]:
        x = xp.asarray(np.ones((2, 3), np.float32))
        y = x * 2.0
        try:
            xp.matmul(y, y)
        except ValueError as error:
            caught = str(error).split(":")[0]
        return [caught, lambda: np.asarray(xp.sum(y))]

    same_as_eager(program)


def test_inside_a_captured_function() -> None:
    w = xp.asarray(f32(4, 7))
    fn = xp.jit(lambda a: block(a, w, 0.25) * 1.0)
    for _ in range(3):
        host = f32(3, 5, 7)
        np.asarray(block(xp.asarray(host), w, 0.25))  # the uncaptured episode
        assert same_bits(np.asarray(fn(xp.asarray(host))), eager(lambda a: block(a, w, 0.25) * 1.0, xp.asarray(host)))


def test_sharded_arrays_are_not_taped() -> None:
    host = f32(4, 6)

    def program() -> list[Any]:
        x = xp.shard(xp.asarray(host), ("CLANG:0", "CLANG:1"), 0)
        first = np.asarray(xp.sum(x * 2.0, axis=1))
        plain = xp.asarray(host) * 2.0  # (a one-device array: taped)
        return [first, np.asarray(xp.sum(plain, axis=1))]

    same_as_eager(program)


def test_the_reference_namespace_is_not_taped() -> None:
    ref = xp.reference_namespace()
    x = ref.asarray(np.ones(3, np.float32))
    assert {type(x * 2.0).__name__ for _ in range(3) if np.asarray(x * 2.0) is not None} == {"Array"}


def test_a_first_result_never_read_does_not_stop_later_replays() -> None:
    """A first call whose result is never read records one long tape (two calls' worth) read back
    at its end; later calls, read back after one, speculate against it: the first such read-back
    is eager and stores its point, the later ones run through a plan (and equal the eager bits)."""
    w = xp.asarray(f32(4, 7))
    host = f32(3, 5, 7)
    want = eager(block, xp.asarray(host), w, 0.25)
    with config.override(debug=1):  # (the tapes of one configuration)
        block(xp.asarray(host), w, 0.25)  # never read back
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            for _ in range(5):
                assert same_bits(np.asarray(block(xp.asarray(host), w, 0.25)), want)
    assert printed.getvalue().count("read back through one plan") >= 3
