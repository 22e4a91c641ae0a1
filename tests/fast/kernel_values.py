"""Shared by the kernel-level tests (C, LLVM, LLVM vectors, CUDA renderer, codegen, vectorize): edge
values of every dtype and storage conversions (bfloat16 as its uint16 bit patterns), kernel-AST
builders, the kernels such tests run on every device, a runner that lowers, compiles and launches an
AST, and the comparisons of results with ground truth (each strictness a parameter)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import pytest

from fast import config
from fast.codegen import lower, verify
from fast.codegen.ir import LinearProgram
from fast.dtype import ALL, ConstType, DType, dtypes
from fast.engine.schedule import lazy_buffers, plan_schedule
from fast.graph import LazyBuffer
from fast.ops import (
    BinaryOps,
    BufferOps,
    ConstBuffer,
    KernelOps,
    LazyOp,
    MemBuffer,
    Op,
    ReduceOps,
    TernaryOps,
    UnaryOps,
    bfloat16_bits_to_float,
    float32_to_bfloat16_bits,
    normalize_const,
    supports,
)
from fast.renderer.base import RendererOptions
from fast.runtime.base import Compiled
from fast.runtime.launch import launch
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Variable
from fast.shape.view import View

# ---------------------------------------------------------------- values and storage

FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 1.5, -2.5, 3.0, 0.1, 1e-3, 65504.0, 70000.0, 1e30, -1e30, 1e-40, 6e-8,
               3.3e38, 1e300, math.inf, -math.inf, math.nan, 2.0**-24, 127.9, -128.9, 255.5, 4294967295.0, -0.5,
               2.0**63, -(2.0**63), 2.0**63 - 1024, 2.0**64, 2.0**64 - 2048, -2147483648.5]


def edge_values(dtype: DType, floats: Sequence[float] = FLOAT_EDGES, extra_ints: Sequence[int] = ()) -> list:
    """Edge values of `dtype`, normalised, without duplicates (`floats` for float dtypes; integer
    dtypes get small values, their limits and `extra_ints`)."""
    if dtype == dtypes.bool:
        return [False, True]
    if dtypes.is_int(dtype):
        low, high = dtypes.min(dtype), dtypes.max(dtype)
        raw: Sequence[object] = [0, 1, -1, 2, -2, 3, 7, -7, 100, -100, low, high, low + 1, high - 1, *extra_ints]
    else:
        raw = floats
    seen: dict[str, object] = {}
    for value in raw:
        normal = normalize_const(value, dtype)  # type: ignore[arg-type]
        seen.setdefault(repr(normal), normal)
    return list(seen.values())


def to_storage(values: list, dtype: DType) -> np.ndarray:
    """Python values of `dtype` as the array a kernel buffer holds (bfloat16: uint16 bit patterns)."""
    if dtype == dtypes.bfloat16:
        return np.array([float32_to_bfloat16_bits(float(v)) for v in values], dtype=np.uint16)
    return np.array(values, dtype=dtype.storage_np)


def from_storage(array: np.ndarray, dtype: DType) -> list:
    """The Python values of a kernel buffer's array of `dtype` (the inverse of `to_storage`)."""
    if dtype == dtypes.bfloat16:
        return [bfloat16_bits_to_float(int(bits)) for bits in array]
    return [x.item() for x in array]


# ---------------------------------------------------------------- ops

ELEMENTWISE = [op for op in (*UnaryOps, *BinaryOps, *TernaryOps) if op not in (UnaryOps.CAST, UnaryOps.BITCAST)]
TRANSCENDENTAL = (UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN)


def result_dtype(op: Op, dtype: DType) -> DType:
    """The dtype `op` on operands of `dtype` gives: bool for the comparisons, else `dtype`."""
    return dtypes.bool if op in (BinaryOps.CMPLT, BinaryOps.CMPEQ) else dtype


def arity(op: Op) -> int:
    """How many operands the elementwise `op` takes (1, 2 or 3)."""
    return 1 if isinstance(op, UnaryOps) else 2 if isinstance(op, BinaryOps) else 3


def operands(op: Op, cond: Any, a: Any, b: Any, c: Any) -> tuple:
    """The operands of `op` out of a condition and three values: (cond, a, b) for WHERE, else the
    first `arity(op)` of (a, b, c). Works on AST nodes, IR instruction numbers and Python values alike."""
    return (cond, a, b) if op is TernaryOps.WHERE else (a, b, c)[:arity(op)]


def cast_targets(source: DType) -> list[tuple[UnaryOps, DType]]:
    """(CAST, dtype) for every other dtype, then (BITCAST, dtype) for every other non-bool dtype of
    `source`'s size (none when `source` is bool)."""
    casts = [(UnaryOps.CAST, dt) for dt in ALL if dt != source]
    return casts + [(UnaryOps.BITCAST, dt) for dt in ALL if dt != source and dt.itemsize == source.itemsize
                    and dtypes.bool not in (dt, source)]


# ---------------------------------------------------------------- AST builders

def tracker(shape: int | ShapeTracker) -> ShapeTracker:
    """`shape` itself, or for an int the contiguous 1-D tracker of that many elements."""
    return ShapeTracker.from_shape((shape,)) if isinstance(shape, int) else shape


def load(idx: int, dtype: DType, shape: int | ShapeTracker) -> LazyOp:
    """A LOAD of buffer `idx` (of `dtype`) through `shape` (see `tracker`)."""
    return LazyOp(BufferOps.LOAD, (), MemBuffer(idx, dtype, tracker(shape)))


def const(value: ConstType, dtype: DType, shape: int | ShapeTracker) -> LazyOp:
    """A CONST leaf of `value` (of `dtype`) through `shape` (see `tracker`)."""
    return LazyOp(BufferOps.CONST, (), ConstBuffer(value, dtype, tracker(shape)))


def store(idx: int, dtype: DType, shape: int | ShapeTracker, value: LazyOp) -> LazyOp:
    """A STORE of `value` into output buffer `idx` (of `dtype`) through `shape` (see `tracker`)."""
    return LazyOp(BufferOps.STORE, (value,), MemBuffer(idx, dtype, tracker(shape)))


def sink(*stores: tuple[int, DType, int | ShapeTracker, LazyOp]) -> LazyOp:
    """A kernel: the SINK of one STORE per (buffer index, dtype, shape, value)."""
    return LazyOp(KernelOps.SINK, tuple(store(*args) for args in stores))


def reduce_sink(op: ReduceOps, dtype: DType, source: ShapeTracker, out: ShapeTracker, axes: tuple[int, ...]) -> LazyOp:
    """out0[out] = `op` of buffer 1 (of `dtype`, read through `source`) over `axes`."""
    return sink((0, dtype, out, LazyOp(op, (load(1, dtype, source),), axes)))


def sum_and_max_sinks(dtype: DType, source: ShapeTracker, out: ShapeTracker,
                      axes: tuple[int, ...]) -> tuple[LazyOp, LazyOp]:
    """(SUM kernel, MAX kernel): the `reduce_sink` of each over the same buffer, trackers and axes."""
    return (reduce_sink(ReduceOps.SUM, dtype, source, out, axes), reduce_sink(ReduceOps.MAX, dtype, source, out, axes))


def lowered_kernels(out: LazyBuffer, options: RendererOptions) -> list[LinearProgram]:
    """The programs, lowered for `options`, of the kernels that realizing `out` would run."""
    steps = plan_schedule(lazy_buffers((out,)))
    return [lower(step.item.ast, options) for step in steps if step.item.ast.op is KernelOps.SINK]


Moves = list[tuple[str, Any]]  # (ShapeTracker method, argument) pairs


def matmul_graph(x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    """x (m, k) @ y (k, n) as users build it: expand, multiply, SUM over k, reshaped to (m, n)."""
    (m, k), (_, n) = x.shape, y.shape
    left = x.reshape((m, 1, k)).expand((m, n, k))
    right = y.permute((1, 0)).reshape((1, n, k)).expand((m, n, k))
    return left.e(BinaryOps.MUL, right).r(ReduceOps.SUM, (2,)).reshape((m, n))


def apply_moves(st: ShapeTracker, array: np.ndarray, moves: Moves) -> tuple[ShapeTracker, np.ndarray]:
    """`moves` ((ShapeTracker method, argument) pairs) applied to `st` and, as numpy does them, to `array`."""
    for name, arg in moves:
        st = getattr(st, name)(arg)
        if name == "pad":
            array = np.pad(array, arg)
        elif name == "shrink":
            array = array[tuple(slice(b, e) for b, e in arg)]
        elif name == "stride":
            array = array[tuple(slice(None, None, k) for k in arg)]
        elif name == "expand":
            array = np.broadcast_to(array, arg)
        elif name == "reshape":
            array = array.reshape(arg)
        else:
            array = array.transpose(arg)
    return st, array


MOVES: dict[str, Moves] = {  # movements of a (3, 4) buffer whose loads need masks, flips, views, or no element
    "pad": [("pad", ((1, 2), (2, 1)))],
    "shrink": [("shrink", ((1, 3), (1, 4)))],
    "flip": [("stride", (-1, 1))],
    "flip_stride": [("stride", (-1, -3))],
    "stride": [("stride", (2, 3))],
    "expand": [("reshape", (3, 1, 4)), ("expand", (3, 5, 4))],
    "pad_reshape": [("pad", ((1, 1), (1, 1))), ("reshape", (6, 5))],
    "pad_reshape_pad_shrink": [("pad", ((1, 1), (0, 2))), ("reshape", (10, 3)), ("pad", ((2, 0), (1, 1))),
                               ("shrink", ((1, 11), (0, 4))), ("stride", (-1, 1))],
    "permute_pad_flip": [("permute", (1, 0)), ("pad", ((0, 1), (3, 0))), ("stride", (1, -1))],
    "reshape_permute_reshape": [("reshape", (2, 6)), ("permute", (1, 0)), ("reshape", (4, 3))],
    "empty": [("shrink", ((1, 1), (0, 4)))],
}


# ---------------------------------------------------------------- kernels the renderer tests share

class ElementwiseCase:
    """Every elementwise op `dtype` supports (and WHERE) on all pairs of edge values: operands a, b,
    c (b rotated by a third) and a condition true at every third element. The kernel stores op k into
    buffer k; a, b, c, cond are the buffers after the outputs."""

    def __init__(self, dtype: DType) -> None:
        values = edge_values(dtype)
        self.dtype = dtype
        self.a = [x for x in values for _ in values]
        self.b = [y for _ in values for y in values]
        self.c = self.b[len(self.b) // 3:] + self.b[:len(self.b) // 3]
        self.cond = [i % 3 == 0 for i in range(len(self.a))]
        self.n = len(self.a)
        self.ops = [op for op in ELEMENTWISE if op is TernaryOps.WHERE or supports(op, dtype)]

    def ast(self) -> LazyOp:
        """The kernel: out_k = ops[k] of (a, b, c) or, for WHERE, of (cond, a, b)."""
        first_input = len(self.ops)
        values = [load(first_input + k, self.dtype, self.n) for k in range(3)]
        condition = load(first_input + 3, dtypes.bool, self.n)
        return sink(*[(idx, result_dtype(op, self.dtype), self.n, LazyOp(op, operands(op, condition, *values)))
                      for idx, op in enumerate(self.ops)])

    def inputs(self) -> list[np.ndarray]:
        """The storage arrays of a, b, c and cond."""
        return [to_storage(self.a, self.dtype), to_storage(self.b, self.dtype), to_storage(self.c, self.dtype),
                np.array(self.cond, dtype=np.bool_)]

    def args(self, op: Op, i: int) -> tuple:
        """The Python operands of `op` at element `i`."""
        return operands(op, self.cond[i], self.a[i], self.b[i], self.c[i])


def cast_sink(source: DType, targets: list[tuple[UnaryOps, DType]], n: int) -> LazyOp:
    """out_k = op_k(x) to dtype_k for each (op, dtype) of `targets`; x (n of `source`) is the last buffer."""
    x = load(len(targets), source, n)
    return sink(*[(i, dt, n, LazyOp(op, (x,), dt)) for i, (op, dt) in enumerate(targets)])


def half_conversion_patterns() -> np.ndarray:
    """float32 bit patterns (uint32) for f32 -> f16/bf16 rounding: a sweep of every sign and exponent,
    plus every pattern around the f16 subnormal and overflow edges and inf/NaN."""
    edges = [(0x33000000, 0x33000000), (0x38800000, 0x38800000), (0x477FE000, 0x477FF000), (0x7F800000, 0x7F800000)]
    pieces = [np.arange(0, 2**31, 4099, dtype=np.int64)] + [np.arange(lo - 64, hi + 65) for lo, hi in edges]
    positive = np.concatenate(pieces).astype(np.uint32)
    return np.concatenate([positive, positive | np.uint32(0x80000000)])


def to_half_sink(n: int) -> LazyOp:
    """out0 = float16(x), out1 = bfloat16(x) for x, n float32s in buffer 2."""
    return sink((0, dtypes.float16, n, LazyOp(UnaryOps.CAST, (load(2, dtypes.float32, n),), dtypes.float16)),
                (1, dtypes.bfloat16, n, LazyOp(UnaryOps.CAST, (load(2, dtypes.float32, n),), dtypes.bfloat16)))


def from_half_sink() -> LazyOp:
    """out0 = float32(buffer 2, 2**16 float16s), out1 = float32(buffer 3, 2**16 bfloat16s)."""
    f32, n = dtypes.float32, 2**16
    return sink((0, f32, n, LazyOp(UnaryOps.CAST, (load(2, dtypes.float16, n),), f32)),
                (1, f32, n, LazyOp(UnaryOps.CAST, (load(3, dtypes.bfloat16, n),), f32)))


def assert_to_half(patterns: np.ndarray, f16: np.ndarray, bf16: np.ndarray) -> None:
    """`f16`/`bf16` (storage arrays) are the float32 `patterns` rounded to nearest even: as numpy
    for float16 (any NaN where NaN), bit for bit for bfloat16 (NaN: the quiet NaN of its sign)."""
    floats = patterns.view(np.float32)
    with np.errstate(all="ignore"):
        want16 = floats.astype(np.float16)
    nan = np.isnan(floats)
    np.testing.assert_array_equal(f16.view(np.uint16)[~nan], want16[~nan].view(np.uint16))
    assert np.isnan(f16.view(np.float16)[nan]).all()
    rounded = (patterns.astype(np.uint64) + 0x7FFF + ((patterns >> 16) & 1)) >> 16
    np.testing.assert_array_equal(bf16, np.where(nan, ((patterns >> 16) & 0x8000) | 0x7FC0, rounded).astype(np.uint16))


def assert_from_half(halves: np.ndarray, from16: np.ndarray, from_bf16: np.ndarray) -> None:
    """`from16`/`from_bf16` are every 16-bit pattern `halves` as float16/bfloat16, widened exactly."""
    np.testing.assert_array_equal(from16.view(np.uint32), halves.view(np.float16).astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(from_bf16.view(np.uint32), halves.astype(np.uint32) << 16)


def constant_stores() -> tuple[list[tuple[int, DType, int, LazyOp]], list[tuple[DType, object]]]:
    """One store of a CONST per edge value of every dtype (a `sink` argument each, one element), and
    the (dtype, value) each output must hold."""
    stores: list[tuple[int, DType, int, LazyOp]] = []
    expected: list[tuple[DType, object]] = []
    for dtype in ALL:
        for value in edge_values(dtype):
            stores.append((len(stores), dtype, 1, const(value, dtype, 1)))
            expected.append((dtype, value))
    return stores, expected


def bool_normalise_sink() -> LazyOp:
    """out0 = (x == True), out1 = int32(x) for x, 4 bools in buffer 2 (fed raw bytes 0, 1, 2, 255)."""
    x = load(2, dtypes.bool, 4)
    return sink((0, dtypes.bool, 4, LazyOp(BinaryOps.CMPEQ, (x, const(True, dtypes.bool, 4)))),
                (1, dtypes.int32, 4, LazyOp(UnaryOps.CAST, (x,), dtypes.int32)))


def fma_trap_case() -> tuple[LazyOp, np.ndarray, np.ndarray]:
    """(kernel, a, c): out0 = MULACC(x, y, z), out1 = x*y + z of one float32 each in buffers 2, 3, 4;
    with x = y = a and z = c both are 0 unfused, a fused multiply-add is not."""
    a = np.array([1 + 2.0**-12], np.float32)
    c = np.array([-(1 + 2.0**-11)], np.float32)
    f32 = dtypes.float32
    x, y, z = load(2, f32, 1), load(3, f32, 1), load(4, f32, 1)
    ast = sink((0, f32, 1, LazyOp(TernaryOps.MULACC, (x, y, z))),
               (1, f32, 1, LazyOp(BinaryOps.ADD, (LazyOp(BinaryOps.MUL, (x, y)), z))))
    return ast, a, c


WRAPPING_REDUCTIONS = [  # (dtype, values, SUM, MAX) of one row: sums wrap, bool SUM is any
    (dtypes.int32, [2**31 - 1, 1, 5], -(2**31) + 5, 2**31 - 1),
    (dtypes.uint8, [200, 100, 7], 51, 200),
    (dtypes.bool, [False, True, False], True, True),
    (dtypes.int64, [-(2**63), -(2**63), 3], 3, 3),
]


def nan_cube(seed: int) -> np.ndarray:
    """(4, 5, 8) integer-valued float32s from `seed` (every summation order is exact), one NaN at [1, 2, 3]."""
    data = np.random.default_rng(seed).integers(-50, 50, size=(4, 5, 8)).astype(np.float32)
    data[1, 2, 3] = np.nan
    return data


def half_sum_case(dtype: DType) -> tuple[LazyOp, list[float], float]:
    """(kernel, values, want): the float32-accumulated SUM of 5 float16/bfloat16 values that per-op
    half rounding would leave at the first one (2048 + 4 x 1 = 2052; bfloat16: 256 + 4 x 0.5 = 258)."""
    values = [2048.0, 1.0, 1.0, 1.0, 1.0] if dtype == dtypes.float16 else [256.0, 0.5, 0.5, 0.5, 0.5]
    ast = reduce_sink(ReduceOps.SUM, dtype, ShapeTracker.from_shape((1, 5)), ShapeTracker.from_shape((1, 1)), (1,))
    return ast, values, 2052.0 if dtype == dtypes.float16 else 258.0


def bias_around_reduce() -> tuple[LazyOp, np.ndarray, np.ndarray]:
    """(kernel, data, bias): total = SUM over each row of -data (4 x 8 float32s, buffer 2); out0 = total +
    bias, out1 = total * bias (bias: 4 float32s, buffer 3, the second time read through an expand)."""
    f32 = dtypes.float32
    data = np.arange(32, dtype=np.float32).reshape(4, 8)
    bias = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
    full, out = ShapeTracker.from_shape((4, 8)), ShapeTracker.from_shape((4, 1))
    total = LazyOp(ReduceOps.SUM, (LazyOp(UnaryOps.NEG, (load(2, f32, full),)),), (1,))
    first = LazyOp(BinaryOps.ADD, (total, load(3, f32, out)))
    second = LazyOp(BinaryOps.MUL, (total, load(3, f32, out.expand((4, 8)))))
    return sink((0, f32, out, first), (1, f32, out, second)), data, bias


def sum_of_squares_case() -> tuple[LazyOp, np.ndarray]:
    """(kernel, data): out0 = SUM of x*x over the last axis of x, (6, 8, 5) normal float32s in buffer 1."""
    f32 = dtypes.float32
    data = np.random.default_rng(0).standard_normal((6, 8, 5)).astype(np.float32)
    x = load(1, f32, ShapeTracker.from_shape((6, 8, 5)))
    return sink((0, f32, ShapeTracker.from_shape((6, 8, 1)), LazyOp(ReduceOps.SUM, (LazyOp(BinaryOps.MUL, (x, x)),),
                                                                    (2,)))), data


def symbolic_rows_case() -> tuple[LazyOp, Variable, ShapeTracker]:
    """(kernel, n, st): out0[r] = MAX of row r of x + x[r], x int32s in buffer 1 read through st, 4 rows of
    a Variable n (1..10) elements."""
    i32, n = dtypes.int32, Variable("n", 1, 10)
    st, out = ShapeTracker.from_shape((4, n)), ShapeTracker.from_shape((4, 1))
    x = load(1, i32, st)
    return sink((0, i32, out, LazyOp(BinaryOps.ADD, (LazyOp(ReduceOps.MAX, (x,), (1,)), load(1, i32, out))))), n, st


def wide_flipped_tracker() -> ShapeTracker:
    """A (2, 4) view whose flat index needs 64 bits, 3 + i0*(2**31 + 1) + i1, through a flipped view of
    2**31 + 8 elements masked to its last 4: a 4-element buffer [1, 2, 3, 4] reads as [0]*4 + [4, 3, 2, 1]."""
    flipped = View.create((2**31 + 8,), (-1,), 2**31 + 7, ((2**31 + 4, 2**31 + 8),))
    return ShapeTracker((flipped, View.create((2, 4), (2**31 + 1, 1), 3)))


# ---------------------------------------------------------------- running a kernel

def without_fma(device: Compiled) -> Compiled:
    """`device` with a renderer that keeps float sums of products unfused (codegen/fma.py), so an
    optimized kernel's bits can be compared with the NOOPT kernel's."""
    options = dataclasses.replace(device.renderer.options, fused_multiply_add=False)
    return dataclasses.replace(device, renderer=type(device.renderer)(options))


@contextmanager
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Inside: kernels compile into a fresh cache directory of their own."""
    with config.override(cache_dir=str(tmp_path_factory.mktemp("cache"))):
        yield


@contextmanager
def empty_kernel_caches() -> Iterator[None]:
    """Inside: the in-process kernel caches (programs, kernels by AST, replay templates) start empty;
    what they held is put back afterwards."""
    import importlib

    realize = importlib.import_module("fast.engine.realize")
    caches = [realize.PROGRAMS, realize.AST_KERNELS, importlib.import_module("fast.engine.replay").TEMPLATES]
    saved = [dict(cache) for cache in caches]
    for cache in caches:
        cache.clear()
    try:
        yield
    finally:
        for cache, before in zip(caches, saved, strict=True):
            cache.clear()
            cache.update(before)


def run_ast(device: Compiled, ast: LazyOp, inputs: list[np.ndarray], vals: tuple[int, ...] = (),
            noopt: bool | None = False, outputs: list[np.ndarray] | None = None) -> tuple[list[np.ndarray], str]:
    """Lower `ast` for `device` (NOOPT set to `noopt`; None: as configured), then `run_program`."""
    with nullcontext() if noopt is None else config.override(noopt=noopt):
        program = lower(ast, device.renderer.options)
    return run_program(device, program, inputs, vals, outputs)


def run_program(device: Compiled, program: LinearProgram, inputs: list[np.ndarray], vals: tuple[int, ...] = (),
                outputs: list[np.ndarray] | None = None, source: str | None = None) -> tuple[list[np.ndarray], str]:
    """Verify, render (or take `source`), compile and launch `program` on `outputs` then `inputs`
    (storage arrays in buffer order; `outputs` None: fresh zeros of each output buffer, else the given
    arrays, their contents copied in too). Each output's result is copied back into its array.
    Returns (outputs, source)."""
    verify(program)
    source = device.renderer.render(program) if source is None else source
    kernel = device.runtime(program.name, device.compiler.compile_cached(source))
    if outputs is None:
        outputs = [np.zeros(b.size, b.dtype.storage_np) for b in program.buffers if b.is_output]
    handles = []
    for array in [*outputs, *inputs]:
        handle = device.allocator.alloc(array.nbytes)
        device.allocator.copyin(handle, np.ascontiguousarray(array).data.cast("B"))
        handles.append(handle)
    launch(kernel, handles, vals, program.threaded, 0)
    for array, handle in zip(outputs, handles, strict=False):  # the outputs are buffers 0..k-1 (lower checks)
        device.allocator.copyout(array.data.cast("B"), handle)
    return outputs, source


# ---------------------------------------------------------------- comparing results

FLOAT_EPS = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7, dtypes.float32: 2.0**-23, dtypes.float64: 2.0**-52}


def values_agree(got: Any, want: Any, dtype: DType, rel: float = 0.0, *, near_zero: float | None = None,
                 check_type: bool = False, signed_zero: bool = False) -> bool:
    """One result of `dtype` against its ground truth. bool and int: equal (with `check_type`, `want`
    must also be a bool / an int). Floats: a NaN only equals a NaN; otherwise equal or, with `rel` > 0
    and a finite `want`, within rel * |want| + `near_zero` (None: the dtype's epsilon, `FLOAT_EPS`);
    with `signed_zero`, 0.0 and -0.0 differ."""
    if not dtypes.is_float(dtype):
        if check_type and not isinstance(want, bool if dtype == dtypes.bool else int):
            return False
        return bool(got) == want if dtype == dtypes.bool else bool(got == want)
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if got == want:
        return not signed_zero or math.copysign(1, got) == math.copysign(1, want)
    if rel <= 0 or math.isinf(want):
        return False
    return abs(got - want) <= rel * abs(want) + (FLOAT_EPS[dtype] if near_zero is None else near_zero)


def nan_mask(array: np.ndarray, dtype: DType | None = None) -> np.ndarray:
    """Where a storage array holds NaNs: by `dtype` (bfloat16 storage: NaN bit patterns), or with None
    by the array's own numpy dtype (uint16 bfloat16 storage then has none)."""
    if dtype is None:
        return np.isnan(array) if array.dtype.kind == "f" else np.zeros(array.shape, bool)
    if dtype == dtypes.bfloat16:
        return ((array & 0x7F80) == 0x7F80) & ((array & 0x7F) != 0)
    return np.isnan(array.view(dtype.np)) if dtypes.is_float(dtype) else np.zeros(array.shape, bool)


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str, *, dtype: DType | None = None,
                      exact_bytes: bool = False) -> None:
    """NaNs in the same places (any NaN equals any NaN: payloads are unspecified; found by `nan_mask`
    with `dtype`), every other element equal: as values (-0.0 == 0.0), or with `exact_bytes` byte for
    byte."""
    got_nan, want_nan = nan_mask(got, dtype), nan_mask(want, dtype)
    np.testing.assert_array_equal(got_nan, want_nan, err_msg=f"{what}: NaN positions")
    if exact_bytes:
        np.testing.assert_array_equal(got[~got_nan].view(np.uint8), want[~want_nan].view(np.uint8), err_msg=what)
    else:
        np.testing.assert_array_equal(got[~got_nan], want[~want_nan], err_msg=what)
