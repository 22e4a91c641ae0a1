"""Fused multiply-add in float sums of products (fast/codegen/fma.py and both CPU renderers): which
instructions fuse, and fused kernels round each accumulation step once, on scalar and vector
accumulators, awkward sizes and views, and identically for CLANG, LLVM and every thread count."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from kernel_values import matmul_graph, run_ast

import fast
from fast import BinaryOps, ReduceOps, config, dtypes
from fast.codegen import lower
from fast.codegen.fma import FMA_MIN_REUSE, fuse_accumulations
from fast.codegen.ir import BufferInfo, FusedOps, Instr, IRError, IROps, LinearProgram, LoopKind
from fast.codegen.ir_verify import verify
from fast.device import Device
from fast.dtype import DType
from fast.engine.schedule import lazy_buffers, plan_schedule
from fast.ops import KernelOps, TernaryOps, UnaryOps
from fast.runtime import cpu

DEVICES = ["CLANG", "LLVM"]
needs_fma = pytest.mark.skipif(not cpu.fused_multiply_add(), reason="this host has no FMA instructions (or NOOPT)")
F32 = dtypes.float32

# x0*y0 + x1*y1 with x0*y0 = -1 exactly and x1*y1 = 1 + 2**-11 + 2**-24: fused, the sum keeps the
# 2**-24 that rounding the product first (a tie, to even) loses.
FUSED = np.float32(2.0**-11 + 2.0**-24)
MANY = 10**9  # flops: far above FMA_MIN_REUSE per input element
UNFUSED = np.float32(2.0**-11)


def _accumulation(dtype: DType, swap: bool = False, extra_use: bool = False,
                  other_acc: bool = False) -> tuple[Instr, ...]:
    """acc = 0; for i in 0..4: acc = acc + x[i]*x[i]; out[0] = acc (knobs break the pattern)."""
    instrs = [Instr(IROps.CONST, dtypes.int64, (), 0), Instr(IROps.CONST, dtypes.int64, (), 4),
              Instr(IROps.DEFINE_ACC, dtype, (), _zero(dtype)), Instr(IROps.DEFINE_ACC, dtype, (), _zero(dtype)),
              Instr(IROps.LOOP, dtypes.int64, (0, 1), LoopKind.REDUCE),
              Instr(IROps.LOAD, dtype, (4,), 1), Instr(IROps.ALU, dtype, (5, 5), BinaryOps.MUL),
              Instr(IROps.ALU, dtype, (6, 2) if swap else (2, 6), BinaryOps.ADD),
              Instr(IROps.ASSIGN, None, (3 if other_acc else 2, 7))]
    if extra_use:
        instrs.append(Instr(IROps.STORE, None, (4, 7), 0))
    instrs += [Instr(IROps.ENDLOOP, None, (4,)), Instr(IROps.STORE, None, (0, 2), 0)]
    return tuple(instrs)


def _zero(dtype: DType) -> float | int:
    return 0.0 if dtypes.is_float(dtype.scalar()) else 0


def _buffers(dtype: DType) -> tuple[BufferInfo, ...]:
    return BufferInfo(0, dtype.scalar(), True, 4), BufferInfo(1, dtype.scalar(), False, 4)


def _program(instrs: tuple[Instr, ...], dtype: DType) -> LinearProgram:
    return LinearProgram("fma_test", instrs, _buffers(dtype))


@pytest.mark.parametrize("dtype", [F32, dtypes.float64, F32.vec(16), dtypes.float64.vec(4)])
@pytest.mark.parametrize("swap", [False, True])
def test_accumulations_of_products_fuse(dtype: DType, swap: bool) -> None:
    instrs = _accumulation(dtype, swap=swap)
    fused, bounded = fuse_accumulations(instrs, _buffers(dtype), MANY)
    assert fused[7] == Instr(IROps.ALU, dtype, (5, 5, 2), FusedOps.FMA) and bounded == {1}
    assert fused[:7] == instrs[:7] and fused[8:] == instrs[8:]  # positions and everything else unchanged
    if dtype.count == 1:
        verify(_program(fused, dtype))


def test_kernels_with_little_reuse_stay_unfused() -> None:
    """Under FMA_MIN_REUSE flops per element of the guarded inputs (4 here), the guard's scan would
    cost more than FMA saves."""
    instrs = _accumulation(F32)
    assert fuse_accumulations(instrs, _buffers(F32), FMA_MIN_REUSE * 4 - 1) == (instrs, frozenset())
    assert fuse_accumulations(instrs, _buffers(F32), FMA_MIN_REUSE * 4)[1] == {1}


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.uint8])
def test_half_floats_and_integers_never_fuse(dtype: DType) -> None:
    instrs = _accumulation(dtype)
    assert fuse_accumulations(instrs, _buffers(dtype), MANY) == (instrs, frozenset())


@pytest.mark.parametrize("knob", ["extra_use", "other_acc"])
def test_a_sum_read_elsewhere_or_assigned_elsewhere_stays(knob: str) -> None:
    instrs = _accumulation(F32, **{knob: True})
    assert fuse_accumulations(instrs, _buffers(F32), MANY) == (instrs, frozenset())


def test_an_add_of_something_else_stays() -> None:
    instrs = list(_accumulation(F32))
    instrs[6] = Instr(IROps.ALU, F32, (5, 5), BinaryOps.SUB)
    assert fuse_accumulations(tuple(instrs), _buffers(F32), MANY) == (tuple(instrs), frozenset())


def test_only_products_of_loaded_inputs_fuse() -> None:
    """An operand computed from a load (unbounded by the buffer's contents: x*x can overflow where x
    does not) or a load of an output keeps the product rounded."""
    instrs = list(_accumulation(F32))
    instrs[6] = Instr(IROps.ALU, F32, (5, 5), UnaryOps.SQRT)
    computed = tuple(instrs[:7]) + (Instr(IROps.ALU, F32, (5, 6), BinaryOps.MUL),)
    program = computed + (Instr(IROps.ALU, F32, (2, 7), BinaryOps.ADD), Instr(IROps.ASSIGN, None, (2, 8)))
    assert fuse_accumulations(program, _buffers(F32), MANY) == (program, frozenset())
    output_load = list(_accumulation(F32))
    output_load[5] = Instr(IROps.LOAD, F32, (4,), 0)
    assert fuse_accumulations(tuple(output_load), _buffers(F32), MANY)[1] == frozenset()


def test_the_verifier_refuses_ill_typed_fma() -> None:
    verify(_program(fuse_accumulations(_accumulation(F32), _buffers(F32), MANY)[0], F32))
    instrs = list(_accumulation(dtypes.int32))
    instrs[7] = Instr(IROps.ALU, dtypes.int32, (5, 5, 2), FusedOps.FMA)
    with pytest.raises(IRError, match="alu FMA: operands"):
        verify(_program(tuple(instrs), dtypes.int32))


def _tie_operands(m: int, n: int, dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) with every output of x @ y the sum -1 + (1 + 2**-12)**2 (see FUSED)."""
    x = np.empty((m, 2), dtype)
    y = np.empty((2, n), dtype)
    x[:, 0], y[0, :] = -1.0, 1.0
    x[:, 1], y[1, :] = 1 + 2.0**-12, 1 + 2.0**-12
    return x, y


@needs_fma
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,n", [(128, 512), (256, 257), (300, 211), (160, 1024)])
def test_fused_products_round_once_in_every_lane(device: str, m: int, n: int) -> None:
    """Vector accumulators and the scalar tail of a prime width all fuse: each output is FUSED, not
    UNFUSED (the shapes have at least FMA_MIN_REUSE flops per input element)."""
    a, b = _tie_operands(m, n)
    got = fast.to_numpy(matmul_graph(fast.from_numpy(a, device), fast.from_numpy(b, device)))
    np.testing.assert_array_equal(got, np.full((m, n), FUSED))


@needs_fma
@pytest.mark.parametrize("device", DEVICES)
def test_float64_products_fuse(device: str) -> None:
    a, b = _tie_operands(256, 260, np.float64)
    a[:, 1], b[1, :] = 1 + 2.0**-27, 1 + 2.0**-27  # (1 + 2**-27)**2 = 1 + 2**-26 + 2**-54: a tie in float64
    got = fast.to_numpy(matmul_graph(fast.from_numpy(a, device), fast.from_numpy(b, device)))
    np.testing.assert_array_equal(got, np.full((256, 260), 2.0**-26 + 2.0**-54))


@needs_fma
@pytest.mark.parametrize("device", DEVICES)
def test_small_products_stay_unfused(device: str) -> None:
    a, b = _tie_operands(3, 16)
    got = fast.to_numpy(matmul_graph(fast.from_numpy(a, device), fast.from_numpy(b, device)))
    np.testing.assert_array_equal(got, np.full((3, 16), UNFUSED))


@pytest.mark.parametrize("device", DEVICES)
def test_noopt_and_hosts_without_fma_round_the_product(device: str) -> None:
    """NOOPT=1 lowers without the rewrite (separate multiply and add): UNFUSED."""
    a, b = _tie_operands(3, 16)
    out = matmul_graph(fast.from_numpy(a, device), fast.from_numpy(b, device))
    (item,) = [step.item for step in plan_schedule(lazy_buffers((out,))) if step.item.ast.op is KernelOps.SINK]
    compiled = Device[device]
    (result,), source = run_ast(compiled, item.ast, [a.ravel(), b.ravel()], noopt=True)
    np.testing.assert_array_equal(result, np.full(3 * 16, UNFUSED))
    assert "fma" not in source
    options = dataclasses.replace(compiled.renderer.options, fused_multiply_add=False)
    assert not any(instr.arg is FusedOps.FMA for instr in lower(item.ast, options).instrs)


@needs_fma
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spoiler", [2.0**64, -(2.0**70), np.inf, np.nan])
def test_an_operand_beyond_the_bound_runs_the_unfused_kernel(device: str, spoiler: float) -> None:
    """One element of x at or beyond 2**64 in magnitude (or not finite; in a row of its own, whose
    products overflow nothing here) makes every output of that launch unfused; once an assign
    replaces x with bounded values, the next launch is fused again."""
    a, b = _tie_operands(257, 256)
    a[256] = [spoiler, 0.0]
    x, y = fast.from_numpy(a, device), fast.from_numpy(b, device)
    got = fast.to_numpy(matmul_graph(x, y))
    np.testing.assert_array_equal(got[:256], np.full((256, 256), UNFUSED))
    a[256] = [1.0, 1.0]
    fast.realize(x.assign(fast.from_numpy(a, device)))
    np.testing.assert_array_equal(fast.to_numpy(matmul_graph(x, y))[:256], np.full((256, 256), FUSED))


@needs_fma
def test_the_guard_scans_a_buffer_once_per_version() -> None:
    from fast.engine import fma_guard
    a, b = _tie_operands(3, 16)
    x, y = fast.from_numpy(a, "CLANG"), fast.from_numpy(b, "CLANG")
    fast.realize(x, y)
    buffer = x.realized
    assert buffer is not None
    program = LinearProgram("guard", (), (BufferInfo(0, F32, False, a.size),), bounded_inputs=(0,))
    assert fma_guard.within_bounds(program, [buffer])
    assert fma_guard._CHECKED[buffer][0] == buffer.version
    a[0, 0] = 2.0**65
    fast.realize(x.assign(fast.from_numpy(a, "CLANG")))
    assert not fma_guard.within_bounds(program, [buffer])


def test_elementwise_products_and_mulacc_never_fuse() -> None:
    """Only accumulations fuse: x*y + z elementwise and the MULACC op keep two roundings."""
    x = fast.from_numpy(np.array([1 + 2.0**-12], np.float32), "CLANG")
    z = fast.from_numpy(np.array([-(1 + 2.0**-11)], np.float32), "CLANG")
    assert fast.to_numpy(x.e(BinaryOps.MUL, x).e(BinaryOps.ADD, z))[0] == 0.0
    assert fast.to_numpy(x.e(TernaryOps.MULACC, x, z))[0] == 0.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 13, 31), (160, 33, 300), (131, 7, 256)])
def test_matmul_bits_agree_across_devices_and_threads(device: str, shape: tuple[int, int, int]) -> None:
    """The same bits on CLANG and LLVM for 1, 2 and 3 threads (flipped and strided inputs too), and
    within the reduction tolerance of a float64 product."""
    m, k, n = shape
    rng = np.random.default_rng(m * k * n)
    a, b = rng.standard_normal((m, 2 * k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    results = []
    for target in DEVICES:
        for threads in (1, 2, 3):
            with config.override(threads=threads, parallel_min_work=0):
                x = fast.from_numpy(a, target).stride((1, 2)).stride((-1, 1))  # every other column, rows flipped
                results.append(fast.to_numpy(matmul_graph(x, fast.from_numpy(b, target))))
    for got in results[1:]:
        np.testing.assert_array_equal(got, results[0])
    want = a[::-1, ::2].astype(np.float64) @ b
    tolerance = 2.0**-23 * (k + 2) * np.maximum(1, np.abs(a[::-1, ::2]).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(results[0] - want) <= tolerance)


def test_sum_of_a_unary_stays_a_plain_sum() -> None:
    """A SUM whose summand is not a product has nothing to fuse."""
    x = fast.from_numpy(np.arange(64, dtype=np.float32), "CLANG")
    out = x.e(UnaryOps.SQRT).r(ReduceOps.SUM, (0,))
    (item,) = [step.item for step in plan_schedule(lazy_buffers((out,))) if step.item.ast.op is KernelOps.SINK]
    program = lower(item.ast, dataclasses.replace(Device["CLANG"].renderer.options, fused_multiply_add=True))
    assert not any(instr.arg is FusedOps.FMA for instr in program.instrs)
