"""Each output of a threaded kernel is written by exactly one share (`core~` of `cores~`).

A share is run alone, on outputs filled with NaN: the positions it wrote are the ones no longer NaN.
The shares' sets must be disjoint and cover every output, and running all of them must give the
values of the one-thread kernel. The kernels are those where a nest has no output loop to share (its
outputs are one vector) beside a nest that has one (the vector's remainder, one row at a time),
with and without the reduce walked in chunks (each chunk reading back and updating what the previous
one stored): there, a nest run by every share once raced on its outputs (lost updates, found by
tests/fast/test_streams.py under load)."""
from __future__ import annotations

import numpy as np
import pytest
from kernel_values import apply_moves, private_cache, reduce_sink

from fast import config
from fast.codegen.lower import lower
from fast.dtype import dtypes
from fast.ops import ReduceOps
from fast.runtime import clang, llvm
from fast.shape.shapetracker import ShapeTracker

CASES = {  # name: (rows, columns, movement ops): 8 + 3 rows, a vector of 8 and a remainder of 3
    "padded rows, reduce in chunks": (8, 4096, [("pad", ((1, 2), (16, 16)))]),
    "eleven rows": (11, 300, []),
    "eleven long rows": (11, 4096, []),
}


@pytest.fixture(scope="module", params=["CLANG", "LLVM"])
def device(request, tmp_path_factory):
    with private_cache(tmp_path_factory):
        yield (clang if request.param == "CLANG" else llvm).create(request.param)


def _shares(device, op: ReduceOps, st: ShapeTracker, data: np.ndarray, cores: int) -> tuple[list[np.ndarray], bool]:
    """Each share's output run alone on NaNs, then every share in turn; and whether the kernel is threaded."""
    rows = st.shape[0]
    ast = reduce_sink(op, dtypes.float32, st, ShapeTracker.from_shape((rows, 1)), (1,))
    with config.override(parallel_min_work=0):
        program = lower(ast, device.renderer.options)
    kernel = device.runtime(program.name, device.compiler.compile_cached(device.renderer.render(program)))
    source = device.allocator.alloc(data.nbytes)
    device.allocator.copyin(source, np.ascontiguousarray(data).data.cast("B"))
    results = []
    for shares in [[core] for core in range(cores)] + [list(range(cores))]:
        out = np.full(rows, np.nan, np.float32)
        handle = device.allocator.alloc(out.nbytes)
        device.allocator.copyin(handle, out.data.cast("B"))
        for core in shares:
            kernel(handle, source, vals=(core, cores) if program.threaded else ())
        device.allocator.copyout(out.data.cast("B"), handle)
        results.append(out)
    return results, program.threaded


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("op", [ReduceOps.SUM, ReduceOps.MAX])
def test_each_output_is_written_by_exactly_one_share(device, case: str, op: ReduceOps) -> None:
    rows, columns, moves = CASES[case]
    raw = np.random.default_rng(rows + columns).standard_normal((rows, columns)).astype(np.float32)
    st, want = apply_moves(ShapeTracker.from_shape((rows, columns)), raw, moves)
    expected = want.max(axis=1) if op is ReduceOps.MAX else want.astype(np.float64).sum(axis=1)
    for cores in (2, 3, 5):
        results, threaded = _shares(device, op, st, raw, cores)
        assert threaded, "the case must lower threaded (PARALLEL_MIN_WORK=0)"
        written = [~np.isnan(out) for out in results[:-1]]
        assert not np.any(np.sum(written, axis=0) > 1), f"{case}: an output written by two of {cores} shares"
        assert np.all(np.any(written, axis=0)), f"{case}: an output written by none of {cores} shares"
        np.testing.assert_allclose(results[-1], expected, rtol=1e-5, atol=1e-4)
