"""IROps.SHUFFLE (two vectors in, one out, constant lanes): the verifier's rules, and hand-built programs
rendered and run on CLANG and LLVM whose lanes must be exactly the numpy ones, for float32, float64 and
int32 vectors of this host's width (and narrower), over the masks the GEMM's transposing pack uses
(interleaving halves) and others (reversals, one operand only, repeats)."""
from __future__ import annotations

import numpy as np
import pytest
from kernel_values import private_cache, run_program

from fast import dtypes
from fast.codegen.builder import IRBuilder
from fast.codegen.ir import BufferInfo, IndexOps, Instr, IRError, IROps, LinearProgram, LoopKind
from fast.codegen.ir_verify import verify
from fast.dtype import DType
from fast.renderer.base import CPU_VECTOR_CASTS, CPU_VECTOR_OPS
from fast.runtime import clang, cpu, llvm
from fast.runtime.base import Compiled

I64 = dtypes.int64
GROUPS = 3


@pytest.fixture(scope="module", params=["CLANG", "LLVM"])
def device(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    with private_cache(tmp_path_factory):
        yield (clang.create if request.param == "CLANG" else llvm.create)(request.param)


def masks(lanes: int) -> list[tuple[int, ...]]:
    """Interleaved low and high halves (the transposing pack's), a reversal of a, b alone, repeats."""
    half = lanes // 2
    low = tuple(lane for pair in zip(range(half), range(lanes, lanes + half), strict=True) for lane in pair)
    return [low, tuple(lane + half for lane in low), tuple(range(lanes - 1, -1, -1)),
            tuple(range(lanes, 2 * lanes)), tuple([lanes - 1] * lanes),
            tuple((3 * k) % (2 * lanes) for k in range(lanes))]


def shuffle_program(dtype: DType, lanes: int) -> tuple[LinearProgram, list[tuple[int, ...]]]:
    """Per group g: a, b = inputs at g*lanes; output m at g*lanes = SHUFFLE(a, b, masks[m])."""
    chosen = masks(lanes)
    size = lanes * GROUPS
    builder = IRBuilder(vector_ops=CPU_VECTOR_OPS, vector_casts=CPU_VECTOR_CASTS)
    group = builder.loop(builder.const(0, I64), builder.const(GROUPS, I64), LoopKind.GLOBAL)
    index = builder.index(IndexOps.MUL, group, builder.const(lanes, I64))
    first = len(chosen)
    a, b = (builder.load(first + k, dtype.vec(lanes), index) for k in range(2))
    for number, mask in enumerate(chosen):
        builder.store(number, index, builder.shuffle(a, b, mask))
    builder.end_loop()
    buffers = [BufferInfo(k, dtype, True, size) for k in range(len(chosen))]
    buffers += [BufferInfo(first + k, dtype, False, size) for k in range(2)]
    return LinearProgram(f"shuffle_{dtype.name}_{lanes}", tuple(builder.instrs), tuple(buffers)), chosen


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("narrower", [1, 2])
def test_shuffles_give_the_chosen_lanes(device: Compiled, dtype: DType, narrower: int) -> None:
    lanes = max(4, cpu.renderer_options().lanes(dtype) // narrower)
    program, chosen = shuffle_program(dtype, lanes)
    assert sum(instr.op is IROps.SHUFFLE for instr in program.instrs) == len(chosen)
    a = (np.arange(lanes * GROUPS) * 3 + 1).astype(dtype.np)
    b = -(np.arange(lanes * GROUPS) * 5 + 2).astype(dtype.np)
    outputs, source = run_program(device, program, [a, b])
    both = np.concatenate([a.reshape(GROUPS, lanes), b.reshape(GROUPS, lanes)], axis=1)
    for mask, got in zip(chosen, outputs, strict=True):
        np.testing.assert_array_equal(got.reshape(GROUPS, lanes), both[:, list(mask)], err_msg=f"mask {mask}")
    assert ("shufflevector" in source) if device.renderer.__class__.__name__.startswith("LLVM") else \
        ("VSHUFFLE" in source)


def _program(instrs: list[Instr]) -> LinearProgram:
    return LinearProgram("bad", tuple(instrs), (BufferInfo(0, dtypes.float32, True, 8),))


@pytest.mark.parametrize("lanes,operands", [
    ((0, 1, 2, 8), "two float32x4"),  # a lane past 2n
    ((0, 1, 2), "two float32x4"),  # fewer lanes than the operands have
    ((0, 1, 2, -1), "two float32x4"),
    ([0, 1, 2, 3], "two float32x4"),  # not a tuple
    ((0, 1, 2, 3), "float32x4 and float64x4"),
    ((0, 1, 2, 3), "one float32x4"),
])
def test_verifier_rejects_bad_shuffles(lanes: object, operands: str) -> None:
    f4, d4 = dtypes.float32.vec(4), dtypes.float64.vec(4)
    consts = [Instr(IROps.CONST, f4, (), 1.0), Instr(IROps.CONST, d4 if "float64" in operands else f4, (), 2.0)]
    srcs = (0,) if operands == "one float32x4" else (0, 1)
    with pytest.raises(IRError, match="shuffle"):
        verify(_program([*consts, Instr(IROps.SHUFFLE, f4, srcs, lanes)]))


def test_verifier_accepts_a_good_shuffle() -> None:
    f4 = dtypes.float32.vec(4)
    verify(_program([Instr(IROps.CONST, f4, (), 1.0), Instr(IROps.CONST, f4, (), 2.0),
                     Instr(IROps.SHUFFLE, f4, (0, 1), (0, 4, 1, 5))]))


def _compiler_is_gcc() -> bool:
    try:
        return clang.is_gcc(clang.compiler_path())
    except RuntimeError:  # no C compiler at all
        return False


@pytest.mark.skipif(not _compiler_is_gcc(), reason="the fallback is GCC's __builtin_shuffle; "
                    "this host's C compiler is not GCC")
def test_the_fallback_for_gcc_before_12_gives_the_same_lanes(tmp_path_factory: pytest.TempPathFactory) -> None:
    """GCC before 12 has no `__builtin_shufflevector`: the helper then uses `__builtin_shuffle` with a
    mask vector. Forced here by rendering the program and turning the version test off."""
    with private_cache(tmp_path_factory):
        device = clang.create("CLANG")
        program, chosen = shuffle_program(dtypes.float32, 8)
        source = device.renderer.render(program)
        forced = source.replace("__GNUC__ >= 12", "0")
        assert forced != source
        a, b = np.arange(24, dtype=np.float32), -np.arange(24, dtype=np.float32) - 1
        outputs, _ = run_program(device, program, [a, b], source=forced)
        both = np.concatenate([a.reshape(GROUPS, 8), b.reshape(GROUPS, 8)], axis=1)
        for mask, got in zip(chosen, outputs, strict=True):
            np.testing.assert_array_equal(got.reshape(GROUPS, 8), both[:, list(mask)])
