"""Non-temporal ("streaming") stores (fast/codegen/streaming.py and both CPU renderers): which outputs
stream, and streamed kernels write exactly the bytes plain kernels write, at aligned and unaligned
output addresses, on awkward sizes, dtypes and views, threaded or not."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import fast
from fast import BinaryOps, LazyBuffer, ReduceOps, UnaryOps, config
from fast.codegen import lower
from fast.codegen.ir import LinearProgram
from fast.codegen.streaming import streamed_buffers
from fast.device import Device
from fast.engine.schedule import lazy_buffers, plan_schedule
from fast.ops import KernelOps, LazyOp
from fast.runtime import cpu
from fast.runtime.host import HostAllocator, HostMemory
from fast.runtime.launch import launch

DEVICES = ["CLANG", "LLVM"]
RNG = np.random.default_rng(5)
needs_streams = pytest.mark.skipif(cpu.stream_min_bytes() == 0 or cpu.vector_bytes() == 0,
                                   reason="this host has no non-temporal vector stores (not x86, or NOOPT)")


def _kernel_asts(out: LazyBuffer) -> list[LazyOp]:
    steps = plan_schedule(lazy_buffers((out,)))
    return [step.item.ast for step in steps if step.item.ast.op is KernelOps.SINK]


def _compile(device: str, ast: LazyOp, stream_min_bytes: int) -> tuple[LinearProgram, str, Any]:
    compiled = Device[device]
    options = dataclasses.replace(compiled.renderer.options, stream_min_bytes=stream_min_bytes)
    program = lower(ast, options)
    source = type(compiled.renderer)(options).render(program)
    return program, source, compiled.runtime(program.name, compiled.compiler.compile_cached(source))


def _graphs(device: str, size: int, dtype: np.dtype) -> list[tuple[LazyBuffer, list[LazyBuffer]]]:
    """(output, realized inputs) for graphs whose one kernel writes rows of 64 elements (vectors of
    every width) on `size` rows: flipped rows, padded rows, a row reduce broadcast back."""
    if np.issubdtype(dtype, np.integer):
        a = RNG.integers(-100, 100, (size, 64)).astype(dtype)
    else:
        a = RNG.uniform(-3, 3, (size, 64)).astype(dtype)
    x = fast.from_numpy(a, device)
    fast.realize(x)
    outs = [x.e(BinaryOps.MUL, x.stride((-1, 1))),
            x.pad(((1, 2), (0, 0))).e(BinaryOps.ADD, x.const(1).pad(((1, 2), (0, 0))))]
    if not np.issubdtype(dtype, np.integer):
        outs.append(x.e(UnaryOps.EXP2).r(ReduceOps.SUM, (1,)).expand((size, 64)).e(BinaryOps.MUL, x))
    return [(out, [x]) for out in outs]


def _run(runner: Any, program: LinearProgram, inputs: list[HostMemory], output: HostMemory) -> bytes:
    launch(runner, [output, *inputs], (), program.threaded, program.mem_bytes + program.flops)
    return bytes(output.window())


def _output(nbytes: int, misalign: int) -> HostMemory:
    """Output memory starting `misalign` bytes after a 64-byte boundary (a view may start anywhere)."""
    allocator = HostAllocator()
    return allocator.offset(allocator.alloc(nbytes + 64, zeroed=True), misalign, nbytes)


@needs_streams
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [1, 7, 17, 97, 1000, 4099])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int32, np.float16])
def test_streamed_kernels_write_the_plain_bytes(device: str, size: int, dtype: np.dtype) -> None:
    streamed_any = False
    with config.override(parallel_min_work=0):
        for out, _ in _graphs(device, size, dtype):
            (ast,) = _kernel_asts(out)
            plain_program, _, plain = _compile(device, ast, 0)
            program, _, streamed = _compile(device, ast, 1)
            assert not plain_program.streamed
            inputs = [buffer.handle for buffer in _buffers(out)[1:]]
            nbytes = _buffers(out)[0].nbytes
            itemsize = np.dtype(dtype).itemsize
            want = _run(plain, plain_program, inputs, _output(nbytes, 0))
            streams = "_stream_si" in _compile(device, ast, 1)[1] or "!nontemporal" in _compile(device, ast, 1)[1]
            assert streams == bool(program.streamed)
            streamed_any = streamed_any or streams
            for misalign in (0, itemsize, 16 if 16 % itemsize == 0 else itemsize):
                assert _run(streamed, program, inputs, _output(nbytes, misalign)) == want, (misalign, program.name)
    # int8 and half floats are not vector memory types (fast/renderer/base.py): nothing to stream
    assert streamed_any == (dtype in (np.float32, np.float64, np.int32))


def _buffers(out: LazyBuffer) -> list[Any]:
    (item,) = [step.item for step in plan_schedule(lazy_buffers((out,))) if step.item.ast.op is KernelOps.SINK]
    return list(item.bufs)


@needs_streams
@pytest.mark.parametrize("device", DEVICES)
def test_streamed_sources_fence_at_the_end(device: str) -> None:
    x = fast.from_numpy(RNG.standard_normal((64, 64)).astype(np.float32), device)
    (ast,) = _kernel_asts(x.e(BinaryOps.MUL, x))
    program, source, _ = _compile(device, ast, 1)
    assert program.streamed == frozenset({0})
    marker = "_mm_sfence();" if device == "CLANG" else "call void @llvm.x86.sse.sfence()"
    assert marker in source and ("_stream_si" in source or "!nontemporal" in source)
    _, plain_source, _ = _compile(device, ast, 0)
    assert "sfence" not in plain_source and "nontemporal" not in plain_source


@pytest.mark.parametrize("device", DEVICES)
def test_which_outputs_stream(device: str) -> None:
    """Large outputs the kernel only writes stream; one the kernel reads back (softmax keeps exp(x -
    max) in its output, then divides it) or one under the threshold does not."""
    options = Device[device].renderer.options
    x = fast.from_numpy(RNG.standard_normal((64, 256)).astype(np.float32), device)
    (elementwise,) = _kernel_asts(x.e(BinaryOps.MUL, x))
    shifted = x.e(BinaryOps.SUB, x.r(ReduceOps.MAX, (1,)).expand(x.shape)).e(UnaryOps.EXP2)
    (softmax,) = _kernel_asts(shifted.e(BinaryOps.DIV, shifted.r(ReduceOps.SUM, (1,)).expand(x.shape)))
    vectors = options.vector_bytes > 0
    for threshold, ast, want in [(1, elementwise, {0} if vectors else set()), (64 * 256 * 4 + 1, elementwise, set()),
                                 (0, elementwise, set()), (1, softmax, set())]:
        program = lower(ast, dataclasses.replace(options, stream_min_bytes=threshold))
        assert streamed_buffers(program.instrs, program.buffers, threshold) == want
        assert program.streamed == want


@pytest.mark.parametrize("device", DEVICES)
def test_large_outputs_stream_by_default(device: str) -> None:
    """A 16 MiB output on the real device: streamed where the host can, and right."""
    a = RNG.standard_normal(1 << 22).astype(np.float32)
    x = fast.from_numpy(a, device)
    out = x.e(BinaryOps.MUL, x).e(BinaryOps.ADD, x)
    (ast,) = _kernel_asts(out)
    program = lower(ast, Device[device].renderer.options)
    assert program.streamed == (frozenset({0}) if cpu.stream_min_bytes() and cpu.vector_bytes() else frozenset())
    np.testing.assert_array_equal(fast.to_numpy(out), a * a + a)
