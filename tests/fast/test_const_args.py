"""Scalar constants as kernel parameters: graphs that differ only in constant values share compiled
code (at most two kernels per structure: one with the constants inline, one parametrized), with
results bit-identical to `reference`, on CLANG and LLVM; and the program cache is a bounded LRU."""
from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import fast
import reference
from fast import BinaryOps, ReduceOps, TernaryOps, config, dtypes
from fast.codegen import lower, verify
from fast.codegen.const_args import const_bits, kernel_keys
from fast.dtype import DType
from fast.engine.programs import ProgramCache
from fast.engine.realize import PROGRAMS
from fast.ops import KernelOps
from fast.renderer.base import cpu_options
from fast.runtime.base import COMPILE_COUNTER

DEVICES = ("CLANG", "LLVM")
RNG = np.random.default_rng(11)
Graph = Callable[[Any, Any], Any]  # (lib, x) -> lazy result; lib is `fast` or `reference`


@pytest.fixture(autouse=True)
def fresh_programs() -> Iterator[None]:
    """An empty program cache and no disk cache, so COMPILE_COUNTER counts every kernel built here."""
    saved = dict(PROGRAMS)
    PROGRAMS.clear()
    with config.override(disable_compile_cache=True):
        yield
    PROGRAMS.clear()
    PROGRAMS.update(saved)


def compiles() -> int:
    return COMPILE_COUNTER.snapshot()[0]


def lib_dtype(lib: Any, dtype: DType) -> Any:
    return getattr(lib.dtypes, dtype.name)


def make_input(lib: Any, array: np.ndarray, dtype: DType, device: str) -> Any:
    """A realized buffer of `dtype` holding `array` (bfloat16 by a cast of float32)."""
    x = lib.from_numpy(array, device if lib is fast else "CLANG")
    if dtype == dtypes.bfloat16:
        x = x.cast(lib_dtype(lib, dtype))
    lib.realize(x)
    return x


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit, except that any NaN matches any NaN (a NaN an op produces has unspecified bits)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype.kind == "f":
        assert np.array_equal(np.isnan(got), np.isnan(want))
        keep = ~np.isnan(got)
        got, want = got[keep], want[keep]
        width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        got, want = got.view(width), want.view(width)
    np.testing.assert_array_equal(got, want)


def run_values(device: str, array: np.ndarray, dtype: DType, graph: Callable[[Any, Any, Any], Any],
               values: Sequence[Any], exact: bool = True) -> int:
    """Realize `graph(lib, x, value)` for every value on `device` and in reference; return the kernels compiled."""
    x, rx = make_input(fast, array, dtype, device), make_input(reference, array, dtype, device)
    before = compiles()
    for value in values:
        got, want = fast.to_numpy(graph(fast, x, value)), reference.to_numpy(graph(reference, rx, value))
        if exact:
            same_bits(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6)
    if len({repr(value) for value in values}) > 1:
        assert parametrized_kernels(), "a second value set should use the parametrized kernel"
    return compiles() - before


def add(lib: Any, x: Any, value: Any) -> Any:
    return x.e(lib.BinaryOps.ADD, x.const(value))


def parametrized_kernels() -> list[Any]:
    return [kernel for key, kernel in PROGRAMS.items() if key[0] == "params" and kernel is not None]


@pytest.mark.parametrize("device", DEVICES)
def test_float32_add_compiles_at_most_two_kernels(device: str) -> None:
    array = RNG.uniform(-4, 4, (16, 16)).astype(np.float32)
    values = [float(v) for v in RNG.uniform(-100, 100, 200)]
    assert run_values(device, array, dtypes.float32, add, values) <= 2
    kernels = parametrized_kernels()
    assert len(kernels) == 1 and kernels[0].program.const_slots == 1
    assert kernels[0].program.var_names[:1] == ("const0~",)


@pytest.mark.parametrize("device", DEVICES)
def test_threaded_kernel_keeps_thread_parameters_last(device: str) -> None:
    array = RNG.uniform(-1, 1, (256, 256)).astype(np.float32)
    values = [0.5 + k / 7 for k in range(20)]
    with config.override(parallel_min_work=1):
        assert run_values(device, array, dtypes.float32, add, values) <= 2
    (kernel,) = parametrized_kernels()
    assert kernel.program.threaded and kernel.program.var_names == ("const0~", "core~", "cores~")


INT_CASES = {
    "int32": (dtypes.int32, np.int32, list(range(-100, 100, 1))),
    "uint8": (dtypes.uint8, np.uint8, list(range(2, 202))),
    "int64": (dtypes.int64, np.int64, [-(2**63), 2**63 - 1, -1, 3, 2**40 + 5]),
    "uint64": (dtypes.uint64, np.uint64, [2**64 - 1, 2**63, 7]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(INT_CASES))
def test_integer_constants(device: str, case: str) -> None:
    dtype, np_type, values = INT_CASES[case]
    info = np.iinfo(np_type)
    array = RNG.integers(max(info.min, -1000), min(info.max, 1000), (8, 8)).astype(np_type)
    values = [v for v in values if v != 0]  # x + 0 folds to x: no constant left in the kernel
    assert run_values(device, array, dtype, add, values) <= 2


@pytest.mark.parametrize("device", DEVICES)
def test_int32_min_max(device: str) -> None:
    array = RNG.integers(-1000, 1000, (8, 8)).astype(np.int32)
    values = [-(2**31), 2**31 - 1, -(2**31), 17]
    assert run_values(device, array, dtypes.int32, add, values) <= 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float64], ids=lambda d: d.name)
def test_float_constants(device: str, dtype: DType) -> None:
    np_type = np.float16 if dtype == dtypes.float16 else np.float64 if dtype == dtypes.float64 else np.float32
    array = RNG.uniform(-4, 4, (8, 8)).astype(np_type)
    values = [float(v) for v in RNG.uniform(-50, 50, 60)]
    assert run_values(device, array, dtype, add, values) <= 2


@pytest.mark.parametrize("device", DEVICES)
def test_bool_constants(device: str) -> None:
    array = RNG.integers(0, 2, (8, 8)).astype(np.bool_)
    values = [True, False] * 10
    assert run_values(device, array, dtypes.bool, lambda lib, x, v: x.e(lib.BinaryOps.XOR, x.const(v)), values) <= 2


def pick_const(x: Any, value: Any) -> Any:
    """Where x >= 0 the output is the constant itself: its exact bits reach the output. (The mask is a
    buffer: a constant 0 in the kernel would make a value 0.0 another structure, see const_args.py.)"""
    mask = fast.from_numpy(fast.to_numpy(x) < 0, x.device)
    return mask.e(TernaryOps.WHERE, x, x.const(value))


def payload_nan(bits: int) -> float:
    return float(np.array([bits], np.uint32).view(np.float32)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16], ids=lambda d: d.name)
def test_special_values_keep_their_bits(device: str, dtype: DType) -> None:
    np_type = {dtypes.float32: np.float32, dtypes.float64: np.float64, dtypes.float16: np.float16}[dtype]
    array = RNG.uniform(-1, 1, (8, 8)).astype(np_type)
    values = [1.5, -0.0, 0.0, math.inf, -math.inf, math.nan, -math.nan, 5e-324, 1e-40, 2.5]
    x = make_input(fast, array, dtype, device)
    before = compiles()
    for value in values:
        got = fast.to_numpy(pick_const(x, value))
        expected = np.where(array < 0, array, np.array(value).astype(np_type))
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), expected.view(f"u{got.itemsize}"))
    assert compiles() - before <= 2


@pytest.mark.parametrize("device", DEVICES)
def test_nan_payload_reaches_the_parametrized_kernel(device: str) -> None:
    array = RNG.uniform(-1, 1, (8, 8)).astype(np.float32)
    x = make_input(fast, array, dtypes.float32, device)
    fast.to_numpy(pick_const(x, 1.0))  # the inline kernel
    for bits in (0x7FC00123, 0xFFC00001, 0x7F800001):
        got = fast.to_numpy(pick_const(x, payload_nan(bits))).view(np.uint32)
        quiet = bits | 0x00400000  # float32 -> float64 -> float32 quiets a signalling NaN
        assert {int(b) for b in got[array >= 0]} in ({bits}, {quiet})
    assert len(parametrized_kernels()) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_masked_constant_keeps_its_mask(device: str) -> None:
    def graph(lib: Any, x: Any, value: Any) -> Any:
        padded = x.const(value).shrink(((1, 7), (2, 6))).pad(((1, 1), (2, 2)))
        return x.e(lib.BinaryOps.ADD, padded)
    array = RNG.uniform(-4, 4, (8, 8)).astype(np.float32)
    values = [float(v) for v in RNG.uniform(1, 9, 30)]
    assert run_values(device, array, dtypes.float32, graph, values) <= 2
    got = fast.to_numpy(graph(fast, make_input(fast, array, dtypes.float32, device), 100.0))
    assert np.array_equal(got[0], array[0]) and np.array_equal(got[:, :2], array[:, :2])


@pytest.mark.parametrize("device", DEVICES)
def test_two_constants(device: str) -> None:
    def graph(lib: Any, x: Any, pair: tuple[float, float]) -> Any:
        return x.e(lib.BinaryOps.MUL, x.const(pair[0])).e(lib.BinaryOps.ADD, x.const(pair[1]))
    array = RNG.uniform(-4, 4, (8, 8)).astype(np.float32)
    pairs = [(2.0 + k, -3.0 - 2 * k) for k in range(40)]
    assert run_values(device, array, dtypes.float32, graph, pairs) <= 2
    equal = [(5.0 + k, 5.0 + k) for k in range(40)]  # equal values: another structure (one slot)
    assert run_values(device, array, dtypes.float32, graph, equal) <= 2
    assert sorted(kernel.program.const_slots for kernel in parametrized_kernels()) == [1, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_constants_in_reductions(device: str) -> None:
    def graph(lib: Any, x: Any, value: Any) -> Any:
        return x.e(lib.BinaryOps.MUL, x.const(value)).r(lib.ReduceOps.SUM, (1,))
    array = RNG.integers(-8, 9, (16, 64)).astype(np.float32)  # exact sums in any order
    values = [k / 4 for k in range(1, 60) if k != 4]  # x * 1.0 folds to x: no constant left
    assert run_values(device, array, dtypes.float32, graph, values) <= 2
    got = fast.to_numpy(graph(fast, make_input(fast, array, dtypes.float32, device), 0.75))
    np.testing.assert_array_equal(got, (array * 0.75).sum(1, keepdims=True))


@pytest.mark.parametrize("device", DEVICES)
def test_program_cache_is_a_bounded_lru(device: str) -> None:
    small = RNG.uniform(-4, 4, (4, 4)).astype(np.float32)
    other = RNG.uniform(-4, 4, (5, 3)).astype(np.float32)
    with config.override(program_cache_size=2):
        assert run_values(device, small, dtypes.float32, add, [1.5 + k for k in range(10)]) <= 2
        assert len(PROGRAMS) <= 2
        assert run_values(device, other, dtypes.float32, add, [2.5]) == 1  # evicts the first structure
        assert len(PROGRAMS) <= 2 and not parametrized_kernels()
        assert run_values(device, small, dtypes.float32, add, [1.5]) == 1  # compiled again, still right
        assert run_values(device, small, dtypes.float32, add, [7.25, 8.25, 9.25]) == 1
        assert len(PROGRAMS) <= 2


def test_cache_size_from_the_environment() -> None:
    assert config.Config.from_env({"PROGRAM_CACHE_SIZE": "7"}).program_cache_size == 7
    assert config.Config.from_env({}).program_cache_size == 1024


def test_keys_and_bits() -> None:
    x = fast.from_numpy(np.zeros((4, 4), np.float32), "CLANG")
    ast = lambda value: next(item.ast for item in fast.schedule(x.e(BinaryOps.MUL, x.const(value)))  # noqa: E731
                             if item.ast.op is KernelOps.SINK)
    (s1, b1), (s2, b2), (s3, b3) = kernel_keys(ast(1.5)), kernel_keys(ast(2.5)), kernel_keys(ast(1.5))
    assert s1 == s2 and b1 != b2 and (s1, b1) == (s3, b3) and hash(s1) == hash(s3)
    assert kernel_keys(ast(-0.0))[1] == (0x80000000,) and b1 == (struct.unpack("<I", struct.pack("<f", 1.5))[0],)
    assert const_bits(-(2**63), dtypes.int64) == -(2**63) and const_bits(2**64 - 1, dtypes.uint64) == -1
    assert const_bits(-0.0, dtypes.float64) == -(2**63) and const_bits(True, dtypes.bool) == 1
    assert const_bits(1.0, dtypes.bfloat16) == 0x3F80 and const_bits(-2.0, dtypes.float16) == 0xC000


def test_parametrized_program_verifies() -> None:
    x = fast.from_numpy(np.zeros((4, 8), np.float16), "CLANG")
    lazy = x.e(BinaryOps.ADD, x.const(3.0)).e(BinaryOps.MUL, x.const(0.5).shrink(((0, 2), (0, 8))).pad(
        ((1, 1), (0, 0)))).e(BinaryOps.CMPLT, x.const(1.0)).e(TernaryOps.WHERE, x, x.const(-1.0))
    sink = next(item.ast for item in fast.schedule(lazy.r(ReduceOps.SUM, (0,))) if item.ast.op is KernelOps.SINK)
    program = lower(sink, cpu_options(32), const_params=True)
    verify(program)
    assert program.const_slots == 4 and program.var_names == tuple(f"const{k}~" for k in range(4))


def test_program_cache_order_and_copies() -> None:
    cache: ProgramCache[str, int] = ProgramCache()
    with config.override(program_cache_size=3):
        for key, value in (("a", 1), ("b", 2), ("c", 3)):
            cache[key] = value
        assert cache.get("a") == 1 and cache.get("zz") is None  # "a" is now the most recently used
        cache["d"] = 4
        assert list(cache) == ["c", "a", "d"]
        saved = dict(cache)  # what conformance/mutants_fast.py does around a patch
        cache.clear()
        cache.update(saved)
        assert dict(cache) == {"c": 3, "a": 1, "d": 4}
    with config.override(program_cache_size=0):  # below 1 counts as 1
        cache["e"] = 5
        assert list(cache) == ["e"]
