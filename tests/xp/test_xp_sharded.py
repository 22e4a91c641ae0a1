"""Sharded arrays in the Array API front end (`xp.shard`, a tuple `device`, `to_device` gathering) against
numpy, over fast on CLANG (2 and 3 devices) and LLVM, and over reference; and the contract that every
namespace function given a sharded array returns what it returns for the same array on one device,
or raises an error naming itself (the functions that raise are listed, so a regression either way fails)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fast.xp
from fast.xp._namespace import FUNCTIONS, LINALG
from tests.xp.conftest import namespace

RNG = np.random.default_rng(11)
SHAPE = (5, 6)  # axis 0 splits unevenly (3+2, 2+2+1), axis 1 evenly (3+3, 2+2+2)


@dataclass(frozen=True)
class Layout:
    """A namespace and the devices its arrays are sharded over."""

    xp: Any
    devices: tuple[str, ...]

    def put(self, data: np.ndarray, axis: int | None) -> Any:
        return self.xp.shard(self.xp.asarray(data), self.devices, axis)


LAYOUTS = {"fast-CLANG-2": ("fast", ("CLANG", "CLANG:1")), "fast-CLANG-3": ("fast", ("CLANG", "CLANG:1", "CLANG:2")),
           "fast-LLVM-2": ("fast", ("LLVM", "LLVM:1")), "reference-2": ("reference", ("CLANG", "CLANG:1")),
           "reference-3": ("reference", ("CLANG", "CLANG:1", "CLANG:2"))}


def make_layout(name: str) -> Layout:
    backend, devices = LAYOUTS[name]
    return Layout(namespace(backend), devices)


@pytest.fixture(params=sorted(LAYOUTS), scope="module")
def lay(request: pytest.FixtureRequest) -> Layout:
    return make_layout(request.param)


def close(got: Any, expected: np.ndarray, rtol: float = 1e-6) -> None:
    host = np.asarray(got)
    assert host.shape == np.shape(expected) and host.dtype == np.asarray(expected).dtype, (host, expected)
    if host.dtype.kind == "f":
        np.testing.assert_allclose(host, expected, rtol=rtol, atol=1e-6)
    else:
        np.testing.assert_array_equal(host, expected)


# ------------------------------------------------------------ placement

def test_shard_places_gathers_and_reshards(lay):
    xp, devs = lay.xp, lay.devices
    a = RNG.standard_normal(SHAPE).astype(np.float32)
    for axis in (0, 1, -1, None):
        x = lay.put(a, axis)
        assert x.device == devs and x.sharding == (devs, None if axis is None else axis % 2)
        assert x.shape == SHAPE and x.dtype == xp.float32 and x.lazy.device == devs
        close(x, a)
        gathered = x.to_device("CLANG:1")
        assert gathered.device == "CLANG:1" and gathered.sharding is None
        close(gathered, a)
    x = lay.put(a, 0)
    assert x.to_device(devs).lazy is x.lazy and xp.asarray(x, device=devs).lazy is x.lazy and xp.asarray(x) is x
    other = x.to_device(devs[::-1])  # another device order: resharded, same axis
    assert other.device == devs[::-1] and other.sharding.axis == 0
    close(other, a)
    by_columns = xp.shard(x, devs, axis=1)
    assert by_columns.sharding.axis == 1
    close(by_columns, a)
    replicated = xp.asarray(a, device=list(devs))
    assert replicated.sharding == (devs, None)
    close(replicated, a)
    full = xp.full((2, 3), 7, device=devs)
    assert full.device == devs and full.dtype == xp.int32
    close(full, np.full((2, 3), 7, np.int32))
    assert xp.shard(xp.asarray(a), ("CLANG:0", "CLANG:1"), 1).device == ("CLANG", "CLANG:1")


def test_like_functions_keep_the_layout(lay):
    xp = lay.xp
    x = lay.put(RNG.standard_normal(SHAPE).astype(np.float32), 1)
    for got, value in ((xp.zeros_like(x), 0.0), (xp.ones_like(x), 1.0), (xp.full_like(x, 2.5), 2.5)):
        assert got.sharding == x.sharding
        close(got, np.full(SHAPE, value, np.float32))
    ints = xp.full_like(x, 3, dtype=xp.int8)
    assert ints.dtype == xp.int8 and ints.sharding == x.sharding
    close(ints, np.full(SHAPE, 3, np.int8))


# ------------------------------------------------------------ element-wise

@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(data=st.data())
def test_elementwise_against_numpy(lay, data):
    xp = lay.xp
    floats = hnp.arrays(np.float32, SHAPE, elements=st.floats(-8, 8, width=32))
    a, b = data.draw(floats), data.draw(floats)
    row = data.draw(hnp.arrays(np.float32, SHAPE[1:], elements=st.floats(-8, 8, width=32)))
    axis = data.draw(st.sampled_from([0, 1]))
    x, y = lay.put(a, axis), lay.put(b, axis)
    r = xp.asarray(row, device=lay.devices)  # replicated, broadcast against x
    s = data.draw(st.floats(-4, 4, width=32))
    cases = [
        (x + y, a + b), (x - s, a - np.float32(s)), (s * x, np.float32(s) * a), (x * r, a * row),
        (x / (xp.abs(y) + 1.0), a / (np.abs(b) + np.float32(1))), (xp.maximum(x, y), np.maximum(a, b)),
        (x < y, a < b), (x == y, a == b), (xp.where(x > 0, x, y), np.where(a > 0, a, b)),
        (-x, -a), (x ** 2, a * a), (xp.floor(x), np.floor(a)), (xp.sqrt(xp.abs(x)), np.sqrt(np.abs(a))),
        (2.0 - x, np.float32(2) - a), (xp.astype(x, xp.int32) // 3, a.astype(np.int32) // 3),
    ]
    for got, expected in cases:
        assert got.device == lay.devices
        close(got, expected)
    close(xp.exp(x * 0.25), np.exp(a * np.float32(0.25)), rtol=1e-5)
    close(xp.tanh(x), np.tanh(a), rtol=1e-5)
    z = x.to_device(lay.devices)
    z += 1.0  # in place: rebinds z to a sharded node, x keeps its value
    assert z.sharding == x.sharding
    close(z, a + np.float32(1))
    close(x, a)
    across = x + xp.shard(y, lay.devices, 1 - axis)  # sharded on different axes: gathered and resliced
    close(across, a + b)


def test_integer_and_bool_elementwise(lay):
    xp = lay.xp
    a = RNG.integers(-50, 50, SHAPE, dtype=np.int32)
    x = lay.put(a, 0)
    close(x % 7, a % 7)
    close(x ^ 5, a ^ 5)
    close(x & 12, a & 12)
    close(x << 2, a << 2)
    close(xp.logical_and(x > 0, x < 20), (a > 0) & (a < 20))
    close(xp.astype(x, xp.float64) / 4, a / 4)


# ------------------------------------------------------------ reductions

@pytest.mark.parametrize("shard_axis", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, None, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_against_numpy(lay, shard_axis, axis, keepdims):
    xp = lay.xp
    a = RNG.standard_normal(SHAPE).astype(np.float32)
    x = lay.put(a, shard_axis)
    kw = {"axis": axis, "keepdims": keepdims}
    for name in ("sum", "max", "min", "mean", "var", "std"):
        close(getattr(xp, name)(x, **kw), getattr(np, name)(a, **kw), rtol=1e-5)
    close(xp.any(x > 1, **kw), np.any(a > 1, **kw))
    close(xp.all(x > -1, **kw), np.all(a > -1, **kw))
    close(xp.count_nonzero(x > 0, **kw), np.count_nonzero(a > 0, **kw).astype(np.int32))
    ints = RNG.integers(-1000, 1000, SHAPE, dtype=np.int32)
    close(xp.sum(lay.put(ints, shard_axis), **kw), np.sum(ints, **kw).astype(np.int32))
    reduced = xp.sum(x, **kw)
    summed = range(2) if axis is None else (axis,) if isinstance(axis, int) else axis
    left = shard_axis if keepdims else shard_axis - sum(1 for s in summed if s < shard_axis)
    assert reduced.device == lay.devices
    assert reduced.sharding.axis == (None if shard_axis in summed else left)
    if isinstance(axis, int):
        close(xp.argmax(x, axis=axis, keepdims=keepdims), np.argmax(a, axis=axis, keepdims=keepdims).astype(np.int32))
        close(xp.argmin(x, axis=axis), np.argmin(a, axis=axis).astype(np.int32))
        close(xp.cumulative_sum(x, axis=axis), np.cumulative_sum(a, axis=axis), rtol=1e-5)
        if axis != shard_axis:
            close(xp.prod(x, **kw), np.prod(a, **kw), rtol=1e-5)


def test_prod_over_the_sharded_axis_raises(lay):
    x = lay.put(np.ones(SHAPE, np.float32), 0)
    with pytest.raises(ValueError, match=r"^prod: the product over sharded axis 0"):
        lay.xp.prod(x, axis=0)


# ------------------------------------------------------------ linear algebra and views

def test_matmul_with_rows_batch_or_inner_axis_sharded(lay):
    xp, devs = lay.xp, lay.devices
    a = RNG.standard_normal((6, 5)).astype(np.float32)
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    batch = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    wr = xp.asarray(w, device=devs)
    rows = lay.put(a, 0) @ wr
    assert rows.sharding.axis == 0
    close(rows, a @ w, rtol=1e-5)
    close(xp.shard(xp.asarray(batch), devs, 0) @ wr, batch @ w, rtol=1e-5)
    inner = lay.put(a, 1) @ lay.put(w, 0)  # the contracted axis sharded on both sides: an all-reduce
    assert inner.sharding.axis is None
    close(inner, a @ w, rtol=1e-5)
    close(lay.put(a, 1) @ wr, a @ w, rtol=1e-5)
    close(xp.vecdot(lay.put(a, 0), lay.put(a, 0)), np.vecdot(a, a), rtol=1e-5)
    close(xp.tensordot(lay.put(a, 0), wr, axes=1), np.tensordot(a, w, axes=1), rtol=1e-5)


def test_views_that_keep_the_sharded_axis(lay):
    xp, devs = lay.xp, lay.devices
    a = RNG.standard_normal((6, 4, 2)).astype(np.float32)
    x = lay.put(a, 0)
    cases = [
        (xp.reshape(x, (6, 8)), a.reshape(6, 8), 0), (xp.permute_dims(x, (2, 0, 1)), a.transpose(2, 0, 1), 1),
        (xp.expand_dims(x, axis=0), a[None], 1), (xp.matrix_transpose(x), np.matrix_transpose(a), 0),
        (xp.moveaxis(x, 0, -1), np.moveaxis(a, 0, -1), 2), (x[:, 1:3, ::-1], a[:, 1:3, ::-1], 0),
        (x[..., None, 0], a[..., None, 0], 0),
        (xp.broadcast_to(x[:, :1], (6, 4, 2)), np.broadcast_to(a[:, :1], a.shape), 0),
        (xp.reshape(x, (48,)), a.reshape(48), 0),
    ]
    for got, expected, axis in cases:
        assert got.sharding == (devs, axis), (got.shape, got.sharding)
        close(got, expected)
    y = lay.put(a[:, :3, 0], 1)
    close(y.T, a[:, :3, 0].T)
    y[:, 0] = 5.0  # __setitem__ builds the update as a replicated view: works on any axis
    y[2] = -1.0
    expected = a[:, :3, 0].copy()
    expected[:, 0], expected[2] = 5.0, -1.0
    assert y.sharding.axis == 1
    close(y, expected)


# ------------------------------------------------------------ errors

def test_errors_name_the_function(lay):
    xp, devs = lay.xp, lay.devices
    a = RNG.standard_normal(SHAPE).astype(np.float32)
    x = lay.put(a, 0)
    single = xp.asarray(a)
    for call in (lambda: x + single, lambda: xp.where(single > 0, x, x), lambda: x @ xp.asarray(a.T),
                 lambda: xp.concat([x, single], axis=1)):
        with pytest.raises(ValueError, match=r"operands live on different devices .*to_device\(x\.device\)"):
            call()
    with pytest.raises(ValueError, match="different devices"):
        x + lay.put(a, 0).to_device(devs[::-1])
    with pytest.raises(ValueError, match=r"^shard: axis 0 of size 2 cannot be split over 3"):
        xp.shard(xp.asarray(a[:2]), ("CLANG", "CLANG:1", "CLANG:2"), 0)
    with pytest.raises(ValueError, match=r"^shard: devices .* must be distinct"):
        xp.shard(single, ("CLANG", "CLANG:0"), 0)
    with pytest.raises(ValueError, match=r"^shard: unknown device"):
        xp.shard(single, ("CLANG", "TPU"), 0)
    with pytest.raises(ValueError, match=r"^shard: devices must be a non-empty tuple"):
        xp.shard(single, (), 0)
    with pytest.raises(IndexError, match=r"^shard: axis 2 is out of range"):
        xp.shard(single, devs, 2)
    unsupported = {"sort": lambda: xp.sort(x), "argsort": lambda: xp.argsort(x),
                   "take": lambda: xp.take(x, xp.asarray([0, 1], device=devs), axis=1),
                   "__getitem__": lambda: x[xp.asarray([0, 1], device=devs)]}
    for name, call in unsupported.items():
        with pytest.raises(ValueError, match=rf"^{name}: sharded arrays are not supported here"):
            call()
    with pytest.raises(ValueError, match=r"^concat: joining along sharded axis 0"):
        xp.concat([x, x])
    with pytest.raises(ValueError, match=r"^flip: unsupported for this sharded array .*sharded axis 0"):
        xp.flip(x, axis=0)
    with pytest.raises(ValueError, match=r"^__getitem__: unsupported for this sharded array"):
        x[1]
    close(xp.flip(x, axis=1), np.flip(a, axis=1))


# ------------------------------------------------------------ every function: right value or a clear error

def _sweep_calls(xp: Any) -> dict[str, Any]:
    """name -> call(inputs) for every namespace function; inputs are x, y (float32 (6, 4) in (0.1, 0.9)),
    i, j (int32), v (a sorted 1-d array) and dev (the inputs' device)."""
    calls: dict[str, Any] = {name: (lambda f: lambda d: f(d["x"]))(getattr(xp, name)) for name in FUNCTIONS}
    binary = ("add atan2 copysign divide equal floor_divide greater greater_equal hypot less less_equal logaddexp "
              "logical_and logical_or logical_xor maximum minimum multiply not_equal pow remainder subtract "
              "broadcast_arrays meshgrid result_type").split()
    for name in binary:
        calls[name] = (lambda f: lambda d: f(d["x"], d["y"]))(getattr(xp, name))
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"):
        calls[name] = (lambda f: lambda d: f(d["i"], d["j"]))(getattr(xp, name))
    for name in ("bitwise_invert", "iinfo", "unique_all", "unique_counts", "unique_inverse", "unique_values"):
        calls[name] = (lambda f: lambda d: f(d["i"]))(getattr(xp, name))
    for name in ("arange", "empty", "eye", "linspace", "ones", "zeros"):
        calls[name] = (lambda f: lambda d: f(*((4,) if f.__name__ != "linspace" else (0.0, 1.0, 4)), device=d["dev"]))(
            getattr(xp, name))
    for name in ("argmax", "argmin", "cumulative_sum", "unstack"):
        calls[name] = (lambda f: lambda d: f(d["x"], axis=0))(getattr(xp, name))
    calls.update({
        "acosh": lambda d: xp.acosh(d["x"] + 1.0), "asarray": lambda d: xp.asarray(d["x"]),
        "astype": lambda d: xp.astype(d["x"], xp.float64), "can_cast": lambda d: xp.can_cast(d["x"], xp.float64),
        "full": lambda d: xp.full((2, 3), 1.5, device=d["dev"]), "full_like": lambda d: xp.full_like(d["x"], 2.0),
        "isdtype": lambda d: xp.isdtype(d["x"].dtype, "real floating"), "finfo": lambda d: xp.finfo(d["x"]).eps,
        "clip": lambda d: xp.clip(d["x"], 0.3, 0.6),
        "take": lambda d: xp.take(d["x"], xp.asarray([0, 2], device=d["dev"]), axis=1),
        "matmul": lambda d: xp.matmul(d["x"], d["y"].T), "tensordot": lambda d: xp.tensordot(d["x"], d["y"], axes=2),
        "vecdot": lambda d: xp.vecdot(d["x"], d["y"], axis=0), "broadcast_to": lambda d: xp.broadcast_to(
            d["x"][:, :1], (6, 4)), "concat": lambda d: xp.concat([d["x"], d["y"]], axis=1),
        "stack": lambda d: xp.stack([d["x"], d["y"]]), "expand_dims": lambda d: xp.expand_dims(d["x"], axis=1),
        "moveaxis": lambda d: xp.moveaxis(d["x"], 0, 1), "permute_dims": lambda d: xp.permute_dims(d["x"], (1, 0)),
        "repeat": lambda d: xp.repeat(d["x"], 2, axis=1), "reshape": lambda d: xp.reshape(d["x"], (6, 2, 2)),
        "roll": lambda d: xp.roll(d["x"], 1, axis=1), "squeeze": lambda d: xp.squeeze(d["x"][:, :1], axis=1),
        "tile": lambda d: xp.tile(d["x"], (1, 2)), "nonzero": lambda d: xp.nonzero(d["x"] > 0.5),
        "searchsorted": lambda d: xp.searchsorted(d["v"], d["x"]), "where": lambda d: xp.where(
            d["x"] > 0.5, d["x"], d["y"]), "count_nonzero": lambda d: xp.count_nonzero(d["x"] > 0.5, axis=1),
        "from_dlpack": lambda d: xp.from_dlpack(d["x"]),
        "vector_norm": lambda d: xp.linalg.vector_norm(d["x"], axis=0), "outer": lambda d: xp.linalg.outer(
            d["x"][:, 0], d["y"][:, 1]), "__getitem__": lambda d: d["x"][1:, ::2], "flip/axis1": lambda d: xp.flip(
            d["x"], axis=1), "prod/axis1": lambda d: xp.prod(d["x"], axis=1),
    })
    return calls


# what each sharded layout cannot express (everything else must equal the single-device result)
UNSUPPORTED = {0: {"__getitem__", "argsort", "concat/axis0", "flip", "prod", "sort", "take", "unstack"},
               1: {"__getitem__", "argsort", "broadcast_to", "concat", "flip", "flip/axis1", "meshgrid", "outer",
                   "prod", "prod/axis1", "roll", "sort", "squeeze", "take", "tensordot", "tile", "unstack/axis1"}}


def _values(result: Any) -> list[Any]:
    if isinstance(result, (tuple, list)):
        return [v for item in result for v in _values(item)]
    return [np.asarray(result)] if isinstance(result, fast.xp.Array) or hasattr(result, "__array_namespace__") \
        else [result]


@pytest.mark.parametrize("layout", ["fast-CLANG-2", "reference-2"])
@pytest.mark.parametrize("shard_axis", [0, 1])
def test_every_function_is_right_or_names_itself(layout, shard_axis):
    lay = make_layout(layout)
    xp = lay.xp
    data = {"x": RNG.uniform(0.1, 0.9, (6, 4)).astype(np.float32),
            "y": RNG.uniform(0.1, 0.9, (6, 4)).astype(np.float32),
            "i": RNG.integers(0, 60, (6, 4), dtype=np.int32), "j": RNG.integers(0, 5, (6, 4), dtype=np.int32)}
    ramp = np.arange(6, dtype=np.float32) / 6
    single = {k: xp.asarray(v) for k, v in data.items()} | {"v": xp.asarray(ramp), "dev": "CLANG"}
    sharded = {k: lay.put(v, shard_axis) for k, v in data.items()} | {"v": lay.put(ramp, 0), "dev": lay.devices}
    calls = _sweep_calls(xp)
    calls.update({"flip": lambda d: xp.flip(d["x"]), "concat/axis0": lambda d: xp.concat([d["x"], d["y"]]),
                  "unstack/axis1": lambda d: xp.unstack(d["x"], axis=1)})
    assert set(FUNCTIONS) | set(LINALG) <= set(calls)
    raised = set()
    for name, call in sorted(calls.items()):
        expected = _values(call(single))
        try:
            got = call(sharded)
        except (ValueError, TypeError, IndexError) as err:
            named = str(err).startswith((name.split("/")[0] + ":", "__getitem__:"))  # some calls index first
            assert named and "shard" in str(err), (name, err)
            raised.add(name)
            continue
        for g in (got if isinstance(got, (tuple, list)) else [got]):
            if isinstance(g, fast.xp.Array) or hasattr(g, "__array_namespace__"):
                assert isinstance(g.device, tuple) or name in ("from_dlpack",), (name, g.device)
        for g, e in zip(_values(got), expected, strict=True):
            if isinstance(e, np.ndarray):
                np.testing.assert_allclose(g, e, rtol=2e-6, atol=1e-7, err_msg=name)
                assert g.dtype == e.dtype, name
            else:
                assert g == e, name
    assert raised == UNSUPPORTED[shard_axis], sorted(raised)
