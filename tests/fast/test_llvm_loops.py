"""Loops kept from LLVM's loop vectorizer (fast/renderer/llvm_loops.py).

Regression: conformance's full profile (seed 6) stopped a program at its 120 s limit: float64 SIN of a
view broadcast along an axis compiled for minutes on LLVM, in the loop vectorizer's uniformity walk
over the argument reduction's shared values. The rendered loop now carries
`llvm.loop.vectorize.enable false` and the kernel compiles in well under a second."""
import numpy as np
import pytest

pytest.importorskip("llvmlite")

import fast  # noqa: E402
from fast.engine.compile import render_kernel  # noqa: E402
from fast.engine.schedule import schedule  # noqa: E402
from fast.ops import BinaryOps, UnaryOps  # noqa: E402
from fast.renderer.llvm_loops import INVARIANT_LIMIT, unvectorized_loops  # noqa: E402

MARK = '!{!"llvm.loop.vectorize.enable", i1 false}'


def broadcast_sine(length: int, copies: int, device: str = "LLVM") -> tuple[fast.LazyBuffer, np.ndarray]:
    """SIN of float64 values broadcast `copies` times along axis 1, and what numpy says it is."""
    values = np.linspace(-3, 3, 2 * length).reshape(2, length, 1)
    view = fast.from_numpy(values, device).reshape((2, 1, length, 1)).expand((2, copies, length, 1))
    expected = np.broadcast_to(np.sin(values).reshape(2, 1, length, 1), (2, copies, length, 1))
    return view.e(UnaryOps.SIN), expected


def kernel_source(buffer: fast.LazyBuffer) -> tuple[object, str]:
    items = [item for item in schedule(buffer) if getattr(item, "ast", None) is not None]
    assert len(items) == 1
    return render_kernel(items[0].ast, "LLVM")


@pytest.mark.parametrize("length", [17, 33])
def test_broadcast_float64_sine_is_kept_from_the_vectorizer_and_right(length: int) -> None:
    result, expected = broadcast_sine(length, 16)
    program, source = kernel_source(result)
    assert MARK in source and "!llvm.loop !2" in source
    assert unvectorized_loops(program)  # type: ignore[arg-type]
    fast.realize(result)
    np.testing.assert_allclose(fast.to_numpy(result), expected, rtol=0, atol=2e-16)


def test_broadcast_sine_times_a_varying_input() -> None:
    """An invariant expression next to values that vary along the loop: still kept, still right."""
    sine, expected = broadcast_sine(17, 16)
    other = np.arange(2 * 16 * 17, dtype=np.float64).reshape(2, 16, 17, 1)
    product = fast.from_numpy(other, "LLVM").e(BinaryOps.MUL, sine)
    assert MARK in kernel_source(product)[1]
    fast.realize(product)
    np.testing.assert_allclose(fast.to_numpy(product), other * expected, rtol=1e-15)


def test_loops_without_a_deep_invariant_expression_are_left_to_llvm() -> None:
    values = fast.from_numpy(np.linspace(-3, 3, 2 * 16 * 17).reshape(2, 16, 17, 1), "LLVM")
    program, source = kernel_source(values.e(UnaryOps.SIN))  # every value varies along every loop
    assert not unvectorized_loops(program) and "llvm.loop" not in source  # type: ignore[arg-type]
    cheap = fast.from_numpy(np.ones((2, 1, 17, 1)), "LLVM").expand((2, 16, 17, 1)).e(UnaryOps.NEG)
    program, source = kernel_source(cheap)  # invariant, but far fewer than INVARIANT_LIMIT values
    assert INVARIANT_LIMIT > 1 and not unvectorized_loops(program)  # type: ignore[arg-type]
