"""Row kernels prefetch their next row (fast/codegen/prefetch.py): where, how much, never out of bounds.

The IR is walked by a small evaluator of its index arithmetic (loops, INDEX, CONST, variables), which
records every element a LOAD reads and every element a valid PREFETCH points at. A prefetch must
point only at elements the kernel itself loads (so never out of bounds), and together the prefetches
must cover the rows after the first of each thread's share.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest

import fast
from fast import config
from fast.codegen.ir import IndexOps, Instr, IROps, LinearProgram
from fast.codegen.ir_verify import verify
from fast.codegen.prefetch import PREFETCH_MAX_ROW_BYTES
from fast.renderer.base import RendererOptions, cpu_options
from fast.renderer.c import CRenderer
from fast.renderer.llvmir import LLVMIRRenderer
from tests.fast.kernel_values import lowered_kernels
from tests.fast.test_row_kernels import layernorm, softmax

_INDEX = {IndexOps.ADD: lambda a, b: a + b, IndexOps.MUL: lambda a, b: a * b,
          IndexOps.FLOORDIV: lambda a, b: a // b, IndexOps.FLOORMOD: lambda a, b: a % b,
          IndexOps.NONNEG_DIV: lambda a, b: a // b, IndexOps.NONNEG_MOD: lambda a, b: a % b,
          IndexOps.CMPLT: lambda a, b: a < b, IndexOps.AND: lambda a, b: a and b}


class _Walk:
    """Runs a program's control flow and index arithmetic; other values are not computed."""

    def __init__(self, program: LinearProgram, variables: dict[str, int]) -> None:
        self.program, self.variables = program, variables
        self.values: dict[int, Any] = {}
        self.loaded: dict[int, set[int]] = defaultdict(set)
        self.prefetched: dict[int, set[int]] = defaultdict(set)
        self.loop_end: dict[int, int] = {}
        stack: list[int] = []
        for number, instr in enumerate(program.instrs):
            if instr.op is IROps.LOOP:
                stack.append(number)
            elif instr.op is IROps.ENDLOOP:
                self.loop_end[stack.pop()] = number

    def run(self, start: int = 0, stop: int | None = None) -> None:
        number, stop = start, len(self.program.instrs) if stop is None else stop
        while number < stop:
            instr = self.program.instrs[number]
            if instr.op is IROps.LOOP:
                low, high = (self.values[src] for src in instr.srcs)
                for counter in range(low, high):
                    self.values[number] = counter
                    self.run(number + 1, self.loop_end[number])
                number = self.loop_end[number] + 1
                continue
            self.step(number, instr)
            number += 1

    def step(self, number: int, instr: Instr) -> None:
        operands = [self.values.get(src) for src in instr.srcs]
        if instr.op is IROps.CONST:
            self.values[number] = instr.arg
        elif instr.op is IROps.DEFINE_VAR:
            self.values[number] = self.variables[instr.arg]
        elif instr.op is IROps.INDEX:
            self.values[number] = _INDEX[instr.arg](*operands)
        elif instr.op is IROps.ALU and instr.arg is fast.UnaryOps.CAST and isinstance(operands[0], (bool, int)):
            self.values[number] = int(operands[0])
        elif instr.op is IROps.LOAD and (len(operands) == 1 or operands[1]):
            lanes = instr.dtype.count if instr.dtype is not None else 1
            self.loaded[instr.arg].update(range(operands[0], operands[0] + lanes))
        elif instr.op is IROps.PREFETCH and (len(operands) == 1 or operands[1]):
            self.prefetched[instr.arg].add(operands[0])


def _row_program(build: Any, shape: tuple[int, ...], options: RendererOptions, view: str = "plain") -> LinearProgram:
    data = np.zeros(shape, np.float32)
    x = fast.from_numpy(data, "CLANG")
    if view == "flipped":
        x = x.stride((1, -1))
    elif view == "padded":
        x = x.pad(((0, 0), (2, 3)))
    programs = lowered_kernels(build(x), options)
    assert len(programs) == 1
    verify(programs[0])
    return programs[0]


def _walk(program: LinearProgram, cores: int) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    loaded: dict[int, set[int]] = defaultdict(set)
    prefetched: dict[int, set[int]] = defaultdict(set)
    for core in range(cores if program.threaded else 1):
        walk = _Walk(program, {"core~": core, "cores~": cores})
        walk.run()
        for buffer in walk.loaded:
            loaded[buffer] |= walk.loaded[buffer]
        for buffer in walk.prefetched:
            prefetched[buffer] |= walk.prefetched[buffer]
    return loaded, prefetched


SHAPES = [(1, 64), (2, 16), (3, 17), (7, 48), (13, 300), (3, 1000), (3, 2048)]
CASES = [(64, shape, "plain") for shape in SHAPES] + [(32, shape, "plain") for shape in SHAPES[:5]] \
    + [(64, shape, view) for shape in SHAPES[1:5] for view in ("flipped", "padded")]


@pytest.mark.parametrize(("vector_bytes", "shape", "view"), CASES)
@pytest.mark.parametrize("build", [softmax, layernorm])
def test_prefetches_point_only_at_loaded_elements_of_the_next_rows(vector_bytes, shape, build, view):
    options = cpu_options(vector_bytes, prefetch=True)
    with config.override(parallel_min_work=0):
        program = _row_program(build, shape, options, view)
    loaded, prefetched = _walk(program, cores=2)
    input_buffer = 1
    assert set(prefetched) <= {input_buffer}
    assert prefetched[input_buffer] <= loaded[input_buffer]
    row = len(loaded[input_buffer]) // shape[0] if view != "padded" else None
    if shape[0] == 1:
        assert not prefetched[input_buffer]  # there is no next row
    elif view == "plain" and shape[1] % (vector_bytes // 4) == 0:  # the whole row is vector accesses
        lines = {index * 4 // 64 for index in loaded[input_buffer] if index >= row}  # type: ignore[operator]
        covered = {index * 4 // 64 for index in prefetched[input_buffer]}
        assert covered == lines


def test_no_prefetch_without_the_option_with_noopt_or_for_rows_too_large():
    with config.override(parallel_min_work=0, split_reduceop=False):
        plain = _row_program(softmax, (8, 64), cpu_options(64))
        assert not any(instr.op is IROps.PREFETCH for instr in plain.instrs)
        with config.override(noopt=True):
            unoptimized = _row_program(softmax, (8, 64), cpu_options(64, prefetch=True))
        assert not any(instr.op is IROps.PREFETCH for instr in unoptimized.instrs)
        wide = PREFETCH_MAX_ROW_BYTES // 4 + 16
        large = _row_program(layernorm, (2, wide), cpu_options(64, prefetch=True))
        assert not any(instr.op is IROps.PREFETCH for instr in large.instrs)
        fits = _row_program(layernorm, (2, PREFETCH_MAX_ROW_BYTES // 4), cpu_options(64, prefetch=True))
        assert any(instr.op is IROps.PREFETCH for instr in fits.instrs)


def test_elementwise_and_single_reduce_kernels_do_not_prefetch():
    x = fast.from_numpy(np.zeros((16, 256), np.float32), "CLANG")
    options = cpu_options(64, prefetch=True)
    for out in (x.e(fast.BinaryOps.ADD, x), x.r(fast.ReduceOps.SUM, (1,))):
        for program in lowered_kernels(out, options):
            assert not any(instr.op is IROps.PREFETCH for instr in program.instrs)


def test_renderers_guard_each_prefetch_and_declare_the_llvm_intrinsic():
    options = cpu_options(64, prefetch=True)
    with config.override(parallel_min_work=0):
        program = _row_program(softmax, (8, 64), options)
    count = sum(instr.op is IROps.PREFETCH for instr in program.instrs)
    assert count > 0 and all(len(instr.srcs) == 2 for instr in program.instrs if instr.op is IROps.PREFETCH)
    c_source = CRenderer(options).render(program)
    assert c_source.count("__builtin_prefetch(") == count
    assert all(line.strip().startswith("if (") for line in c_source.splitlines() if "__builtin_prefetch(" in line)
    llvm_source = LLVMIRRenderer(options).render(program)
    assert llvm_source.count("call void @llvm.prefetch.p0(") == count
    assert "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)" in llvm_source


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
@pytest.mark.parametrize("threads", [1, 2])
def test_prefetching_row_kernels_agree_with_numpy_on_flipped_and_padded_views(device, threads):
    rng = np.random.default_rng(11)
    data = rng.uniform(-3, 3, (29, 131)).astype(np.float32)
    with config.override(parallel_min_work=0, threads=threads):
        x = fast.from_numpy(data, device)
        flipped = x.stride((1, -1))
        padded = x.pad(((0, 0), (2, 3)))
        np_padded = np.pad(data, ((0, 0), (2, 3))).astype(np.float64)
        for lazy, array in ((flipped, data[:, ::-1].astype(np.float64)), (padded, np_padded)):
            np.testing.assert_allclose(fast.to_numpy(softmax(lazy)), _np_softmax(array), rtol=2e-5, atol=2e-6)


def _np_softmax(x: np.ndarray) -> np.ndarray:
    exp = np.exp(x - x.max(1, keepdims=True))
    return exp / exp.sum(1, keepdims=True)


def _biased_softmax(x: fast.LazyBuffer, bias: fast.LazyBuffer) -> fast.LazyBuffer:
    """softmax over the last axis of x (B, T, L) + bias (B, 1, L): attention's masked scores. The
    bias keeps the output axes B and T apart (they cannot merge into one loop)."""
    scores = x.e(fast.BinaryOps.ADD, bias.expand(x.shape))
    rows = scores.r(fast.ReduceOps.MAX, (2,)).expand(x.shape)
    exp = scores.e(fast.BinaryOps.SUB, rows).e(fast.UnaryOps.EXP2)
    return exp.e(fast.BinaryOps.DIV, exp.r(fast.ReduceOps.SUM, (2,)).expand(x.shape))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_kernel_with_several_output_loops_prefetches_the_row_it_runs_next(threads):
    """The next row is the next step of the innermost output loop (T), not of the outermost (B: a
    whole batch of rows ahead, long gone from the cache when reached); the bias row, the same for
    every T, is not prefetched."""
    batch, tokens, length = 3, 5, 16
    x = fast.from_numpy(np.zeros((batch, tokens, length), np.float32), "CLANG")
    bias = fast.from_numpy(np.zeros((batch, 1, length), np.float32), "CLANG")
    with config.override(parallel_min_work=0):
        programs = lowered_kernels(_biased_softmax(x, bias), cpu_options(32, prefetch=True))
    assert len(programs) == 1
    verify(programs[0])
    loaded, prefetched = _walk(programs[0], cores=threads)
    x_buffer = next(i for i, info in enumerate(programs[0].buffers) if info.size == batch * tokens * length
                    and not info.is_output)
    assert set(prefetched) == {x_buffer} and prefetched[x_buffer] <= loaded[x_buffer]
    rows = {index // length for index in prefetched[x_buffer]}
    assert rows == {b * tokens + t for b in range(batch) for t in range(1, tokens)}
