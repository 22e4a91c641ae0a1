"""Values of CUDA kernels, run on the CPU emulation (tests/fast/cuda_emulation.py): the kernels the
C, codegen, vector and row-kernel tests build, rendered for CUDA and checked by those tests' own
assertions, plus the engine path (realize -> lower -> render -> launch_dims -> launch) against
reference, numpy and CLANG. Every kernel runs under several launches (`LAUNCH_MODES`: the renderer's
`launch_dims`, one thread, and 3 blocks of 7 threads run in reverse order) and must give the same
bits: the grid-stride loops cover every output exactly once whatever the grid and block. Every
kernel is also compiled by NVRTC for sm_80 and sm_90 (tests/cuda_check.py, as every kernel the tests build)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import test_codegen as codegen_tests
import test_renderer_c as c_tests
import test_row_kernels as row_tests
import test_vectorize as vectorize_tests
from cuda_emulation import LAUNCHES, emulated_cuda, launching
from kernel_values import edge_values

import fast
import reference
from fast import BinaryOps, LazyBuffer, ReduceOps, UnaryOps, config, dtypes
from fast.dtype import ALL, DType
from fast.ops import supports
from fast.renderer.cuda import BLOCK, SYMBOLIC_GRID
from fast.renderer.grid import LANES
from fast.runtime.base import COMPILE_COUNTER

LAUNCH_MODES: dict[str, tuple[int, int, bool] | None] = {
    "launch_dims": None, "one_thread": (1, 1, False), "3x7_reversed": (3, 7, True)}
BINARY = [op for op in BinaryOps]
RNG = np.random.default_rng(23)


@pytest.fixture(scope="module")
def cuda():
    """The emulated CUDA device in the registry for this module (kernel caches cleared around it),
    compiling into the configured cache directory (as the engine tests' CLANG kernels do: shared by
    the test processes, atomic writes)."""
    with emulated_cuda() as devices:
        yield devices["CUDA"]


@pytest.fixture(params=list(LAUNCH_MODES))
def launch(request, cuda):
    """Each test runs once per launch mode."""
    mode = LAUNCH_MODES[request.param]
    if mode is None:
        yield request.param
        return
    with launching(*mode):
        yield request.param


@pytest.fixture
def device(cuda, launch):
    """The device of the kernel-level tests reused below (they lower, render, compile and run)."""
    return cuda


# ---------------------------------------------------------------- kernel-level tests reused as they are
# (test_renderer_c.py: every op x dtype, casts, constants against fast.ops.exec_alu; test_codegen.py:
# reductions, masks, symbolic parameters, 64-bit indices). Their `device` is the fixture above; they
# launch without launch_dims, which the emulation runs as 3 blocks of __launch_bounds__ threads.

test_every_elementwise_op_matches_exec_alu = c_tests.test_every_elementwise_op_matches_exec_alu
test_casts_and_bitcasts_match_ground_truth = c_tests.test_casts_and_bitcasts_match_ground_truth
test_float_to_half_conversion_sweep = c_tests.test_float_to_half_conversion_sweep
test_constants_of_every_dtype_render_exactly = c_tests.test_constants_of_every_dtype_render_exactly
test_bool_loads_normalise_any_nonzero_byte = c_tests.test_bool_loads_normalise_any_nonzero_byte
test_sum_and_max_over_axes = codegen_tests.test_sum_and_max_over_axes
test_integer_and_bool_reductions_wrap = codegen_tests.test_integer_and_bool_reductions_wrap
test_empty_reduce_axis_gives_identity = codegen_tests.test_empty_reduce_axis_gives_identity
test_half_sums_accumulate_in_float32_and_round_once = codegen_tests.test_half_sums_accumulate_in_float32_and_round_once
test_elementwise_around_a_reduce_and_several_stores = codegen_tests.test_elementwise_around_a_reduce_and_several_stores
test_masked_loads_through_movement_ops = codegen_tests.test_masked_loads_through_movement_ops
test_symbolic_shapes_become_int64_parameters = codegen_tests.test_symbolic_shapes_become_int64_parameters
test_index_arithmetic_beyond_2_pow_31_is_int64 = codegen_tests.test_index_arithmetic_beyond_2_pow_31_is_int64


# ---------------------------------------------------------------- graph-level tests reused on "CUDA"

@pytest.mark.parametrize("size", [1, 7, 97, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_elementwise_and_row_reduce_awkward_sizes(launch, size, dtype):
    vectorize_tests.test_elementwise_and_row_reduce_awkward_sizes("CUDA", size, dtype)


@pytest.mark.parametrize("view", list(vectorize_tests.VIEWS))
@pytest.mark.parametrize("shape", [(5, 64), (33, 48)])
def test_views(launch, view, shape):
    vectorize_tests.test_views_through_vector_kernels("CUDA", view, shape)


@pytest.mark.parametrize("n,k,m", [(1, 1, 1), (3, 5, 7), (17, 33, 48)])
def test_matmul(launch, n, k, m):
    vectorize_tests.test_matmul_register_tiles("CUDA", n, k, m)


def test_special_values_and_integer_wrap(launch):
    vectorize_tests.test_special_values_in_vector_lanes("CUDA")
    vectorize_tests.test_integer_wrap_and_division_on_vectors("CUDA")


@pytest.mark.parametrize("rows,cols", [(128, 16), (96, 32)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_column_reductions(launch, rows, cols, dtype):
    vectorize_tests.test_chunked_column_reductions("CUDA", rows, cols, dtype)


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.int64, dtypes.float32])
def test_padded_constants(launch, dtype):
    for value in (float("nan"), 2.0, float("inf")):
        vectorize_tests.test_padded_constants_keep_their_zero_lane("CUDA", dtype, value)


@pytest.mark.parametrize("rows,cols", [(130, 257), (5, 37)])
def test_views_of_odd_widths(launch, rows, cols):
    vectorize_tests.test_tails_in_reductions_and_views("CUDA", rows, cols)


@pytest.mark.parametrize("shape", [(6, 40), (17, 3)])
def test_several_reduces_write_every_output(launch, shape):
    vectorize_tests.test_several_reduces_with_an_output_tail_write_every_output("CUDA", shape)


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (3, 17), (5, 1000), (33, 48)])
@pytest.mark.parametrize("noopt", [False, True])
def test_softmax_and_layernorm(launch, shape, noopt):
    row_tests.test_softmax_and_layernorm_are_one_kernel("CUDA", shape, noopt)


def test_row_kernels_with_special_values_and_halves(launch):
    for dtype in (dtypes.float32, dtypes.int32, dtypes.float16):
        row_tests.test_sum_and_max_of_one_input_are_one_kernel("CUDA", dtype)
    row_tests.test_special_values_flow_through_row_kernels("CUDA")
    row_tests.test_half_softmax_accumulates_in_float32("CUDA")
    row_tests.test_row_broadcast_of_a_realized_row_still_fuses_correctly("CUDA")


# ---------------------------------------------------------------- the engine path against reference

def _inputs(impl, values: list, dtype: DType, count: int) -> list:
    """`count` buffers of `impl` on CUDA holding `values` rotated by 0, 1, ... places."""
    made = []
    for shift in range(count):
        rotated = values[shift:] + values[:shift]
        if dtype == dtypes.bfloat16:  # bfloat16 values are exact in float32: cast down exactly
            made.append(impl.from_numpy(np.array(rotated, np.float32), "CUDA").cast(impl.dtypes.bfloat16))
        else:
            made.append(impl.from_numpy(np.array(rotated, dtype.np), "CUDA"))
    return made


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal values, NaN equal to NaN, -0.0 equal to 0.0 (docs/semantics.md)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.kind == "f":
        nans = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nans, err_msg=f"{what}: NaN positions")
        np.testing.assert_array_equal(got[~nans], want[~nans], err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_binary_ops_of_every_dtype_match_reference(launch, dtype):
    """Every binary op on all pairs of edge values (integer DIV/MOD by 0 and -1, MIN, NaN MAX, half
    rounding), realized together (one kernel with an output per op) and compared with reference."""
    values = edge_values(dtype)
    left = [x for x in values for _ in values]
    ops = [op for op in BINARY if supports(op, dtype)]
    results = {}
    for impl in (fast, reference):
        a, b = _inputs(impl, left, dtype, 2)
        outs = [a.e(getattr(impl.BinaryOps, op.name), b) for op in ops]
        impl.realize(*outs)
        results[impl.__name__] = [impl.to_numpy(out) for out in outs]
    for op, got, want in zip(ops, results["fast"], results["reference"], strict=True):
        _same(got, want, f"{op.name} {dtype.name}")


@pytest.mark.parametrize("source", [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.int64], ids=str)
def test_casts_out_of_range_as_on_clang(launch, source):
    """Casts to every dtype: specified values as reference, unspecified ones (NaN, inf, out of range
    float -> int) as CLANG's, bit for bit (both render the same C; a trap or UB would differ)."""
    values = edge_values(source)
    targets = [dt for dt in ALL if dt != source]
    got = {}
    for device in ("CUDA", "CLANG"):
        x = fast.from_numpy(np.array(values, source.np), device)
        outs = [x.cast(dt) for dt in targets]
        fast.realize(*outs)
        got[device] = [fast.to_numpy(out) for out in outs]
    x = reference.from_numpy(np.array(values, source.np), "CUDA")
    for target, cuda, clang in zip(targets, got["CUDA"], got["CLANG"], strict=True):
        np.testing.assert_array_equal(cuda.view(np.uint8), clang.view(np.uint8), err_msg=f"{source} -> {target}")
        want = reference.to_numpy(x.cast(getattr(reference.dtypes, target.name)))
        with np.errstate(invalid="ignore"):
            specified = np.ones(len(values), bool) if not (dtypes.is_float(source) and dtypes.is_int(target)) else \
                np.array([math.isfinite(v) and dtypes.min(target) <= math.trunc(v) <= dtypes.max(target)
                          for v in values])
        _same(cuda[specified], want[specified], f"{source} -> {target}")


# ---------------------------------------------------------------- reductions, sizes, launches

def _realize_everywhere(build) -> list[bytes]:
    """`build()` realized once per launch mode (fresh graphs, cached kernels): the results' bytes."""
    results = []
    for mode in LAUNCH_MODES.values():
        with launching(*(mode or (None, None, False))):
            results.append(fast.to_numpy(build()).tobytes())
    return results


@pytest.mark.parametrize("shape,axis", [((3,), 0), ((97,), 0), ((1 << 20,), 0), ((7, 97), 0), ((7, 97), 1),
                                        ((64, 1000), 1), ((1000, 3), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reductions_over_small_prime_and_large_axes(cuda, shape, axis, dtype):
    """SUM and MAX (with a NaN) against numpy; a large axis is split by the scheduler into two
    kernels. The bits are the same under every launch mode."""
    data = RNG.uniform(-4, 4, shape).astype(dtype) if dtype == np.float32 else RNG.integers(-1000, 1000, shape, dtype)
    for op, np_op in ((ReduceOps.SUM, np.sum), (ReduceOps.MAX, np.max)):
        results = _realize_everywhere(lambda op=op: fast.from_numpy(data, "CUDA").r(op, (axis,)))
        assert all(result == results[0] for result in results[1:]), op
        got = np.frombuffer(results[0], dtype).reshape(np_op(data, axis=axis, keepdims=True).shape)
        want = np_op(data.astype(np.float64) if dtype == np.float32 else data, axis=axis, keepdims=True)
        if dtype == np.int32:
            np.testing.assert_array_equal(got, want.astype(np.int32))
        else:
            bound = 2.0**-23 * (shape[axis] + 2) * np.maximum(1, np.abs(data).sum(axis=axis, keepdims=True))
            assert (np.abs(got - want) <= bound).all(), op
    data_nan = RNG.uniform(-4, 4, (5, 31)).astype(np.float32)
    data_nan[2, 30] = np.nan
    maxes = fast.to_numpy(fast.from_numpy(data_nan, "CUDA").r(ReduceOps.MAX, (1,)))
    np.testing.assert_array_equal(np.isnan(maxes[:, 0]), [False, False, True, False, False])


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 0), (0, 5), (1, 1)])
def test_sizes_zero_and_one(launch, shape):
    data = RNG.uniform(-4, 4, shape).astype(np.float32)
    x = fast.from_numpy(data, "CUDA")
    np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.MUL, x).e(UnaryOps.NEG)), -(data * data))
    for axis in range(len(shape)):
        np.testing.assert_array_equal(fast.to_numpy(x.r(ReduceOps.SUM, (axis,))), data.sum(axis, keepdims=True))
        want = data.max(axis, keepdims=True, initial=-np.inf)
        np.testing.assert_array_equal(fast.to_numpy(x.r(ReduceOps.MAX, (axis,))), want)


def _flip_pad_sum(x: LazyBuffer) -> LazyBuffer:
    moved = x.stride((-1, 2)).pad(((1, 2), (0, 3))).permute((1, 0))
    return moved.e(BinaryOps.ADD, moved.const(1.0)).r(ReduceOps.SUM, (1,))


def test_results_do_not_depend_on_the_launch(cuda):
    """Elementwise, reduction, view and row kernels give the same bits under every launch mode and
    also with blocks of 1, 2 and 33 threads in one block or 1000 blocks."""
    data = RNG.standard_normal((37, 64)).astype(np.float32)
    builds = [lambda: fast.from_numpy(data, "CUDA").e(UnaryOps.SQRT),
              lambda: fast.from_numpy(data, "CUDA").r(ReduceOps.SUM, (0,)),
              lambda: _flip_pad_sum(fast.from_numpy(data, "CUDA")),
              lambda: row_tests.softmax(fast.from_numpy(data, "CUDA"))]
    for build in builds:
        results = _realize_everywhere(build)
        for grid, block in ((1, 2), (1, 33), (1000, 1), (4, 256)):
            with launching(grid, block, reverse=block % 2 == 1):
                results.append(fast.to_numpy(build()).tobytes())
        assert all(result == results[0] for result in results[1:])
    np.testing.assert_allclose(np.frombuffer(results[0], np.float32).reshape(37, 64),
                               row_tests.np_softmax(data.astype(np.float64)), rtol=2e-5, atol=2e-6)


def test_engine_launches_with_the_renderers_launch_dims(cuda):
    """realize launches each kernel with CUDARenderer.launch_dims of its program, whose block size is
    the kernel's __launch_bounds__; the grid covers a constant trip count once."""
    LAUNCHES.clear()
    data = RNG.standard_normal((300, 5)).astype(np.float32)
    fast.to_numpy(fast.from_numpy(data, "CUDA").e(BinaryOps.ADD, fast.from_numpy(data, "CUDA")))
    (launched,) = LAUNCHES
    assert (launched.grid, launched.block) == (6, BLOCK) and launched.dims == ((6, 1, 1), (BLOCK, 1, 1))
    LAUNCHES.clear()
    fast.to_numpy(fast.from_numpy(data, "CUDA").r(ReduceOps.SUM, (0, 1)))
    assert [(x.grid, x.block) for x in LAUNCHES] == [(1, 1)]  # a full reduction: one thread


def test_symbolic_shapes_compile_once_and_launch_a_fixed_grid(cuda):
    """A window cut by a bound Variable: the same kernels for every binding (none compiled after the
    first), launched with the fixed symbolic grid, empty windows included."""
    rows = fast.Variable("rows", 0, 40)
    data = RNG.integers(-100, 100, (40, 9)).astype(np.int32)
    x = fast.from_numpy(data, "CUDA")
    for number, bound in enumerate((7, 0, 40, 1)):
        before = COMPILE_COUNTER.snapshot()[0]
        LAUNCHES.clear()
        window = x.shrink(((0, rows.bind(bound)), (0, 9)))
        summed = window.e(BinaryOps.MUL, window).r(ReduceOps.SUM, (1,))
        np.testing.assert_array_equal(fast.to_numpy(summed), (data[:bound] ** 2).sum(1, keepdims=True))
        assert number == 0 or COMPILE_COUNTER.snapshot()[0] == before, f"compiled for rows={bound}"
        assert all(launched.grid == SYMBOLIC_GRID for launched in LAUNCHES)


def test_copies_between_clang_and_cuda(launch):
    data = np.arange(24, dtype=np.int16).reshape(4, 6)
    on_cuda = fast.from_numpy(data, "CLANG").copy_to_device("CUDA")
    doubled = on_cuda.e(BinaryOps.ADD, on_cuda).copy_to_device("CLANG")
    np.testing.assert_array_equal(fast.to_numpy(doubled.e(BinaryOps.SUB, doubled.const(1))), 2 * data - 1)


def test_int_division_and_modulo_with_negatives_and_zero(launch):
    a = np.array([7, -7, 7, -7, 0, 5, -2**31, -2**31, 3], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0, -1, 1, 0], np.int32)
    x, y = fast.from_numpy(a, "CUDA"), fast.from_numpy(b, "CUDA")
    np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.DIV, y)), [3, -3, -3, 3, 0, 0, -2**31, -2**31, 0])
    np.testing.assert_array_equal(fast.to_numpy(x.e(BinaryOps.MOD, y)), [1, -1, 1, -1, 0, 5, 0, 0, 3])
    with config.override(noopt=True):
        quotient = fast.to_numpy(x.e(BinaryOps.DIV, y).e(BinaryOps.MUL, y).e(BinaryOps.ADD, x.e(BinaryOps.MOD, y)))
    np.testing.assert_array_equal(quotient, a)  # x == (x / y) * y + x % y for every y


@pytest.mark.parametrize("shape,axis", [((5000,), 0), ((3, 4099), 1), ((2500, 3), 0)])
def test_block_reductions_of_every_kind(launch, shape, axis):
    """Reductions the renderer spreads over a block (grid.py BlockReduce): float sums within the
    tolerance, NaN in MAX, integer sums that wrap, half floats accumulated in float32, bool any."""
    LAUNCHES.clear()
    data = RNG.uniform(-4, 4, shape).astype(np.float32)
    data.reshape(-1)[17] = np.nan
    x = fast.from_numpy(data, "CUDA")
    n = shape[axis]
    finite = np.where(np.isnan(data), 0, data)
    got = fast.to_numpy(fast.from_numpy(finite, "CUDA").r(ReduceOps.SUM, (axis,)))
    bound = 2.0**-23 * (n + 2) * np.maximum(1, np.abs(finite).sum(axis, keepdims=True))
    assert (np.abs(got - finite.astype(np.float64).sum(axis, keepdims=True)) <= bound).all()
    np.testing.assert_array_equal(fast.to_numpy(x.r(ReduceOps.MAX, (axis,))), data.max(axis, keepdims=True))
    big = np.full(shape, 2**30 + 7, np.int32)
    np.testing.assert_array_equal(fast.to_numpy(fast.from_numpy(big, "CUDA").r(ReduceOps.SUM, (axis,))),
                                  big.sum(axis, keepdims=True, dtype=np.int32))
    halves = finite.astype(np.float16)
    got_half = fast.to_numpy(fast.from_numpy(halves, "CUDA").r(ReduceOps.SUM, (axis,))).astype(np.float64)
    half_bound = 2.0**-10 * (n + 2) * np.maximum(1, np.abs(halves.astype(np.float64)).sum(axis, keepdims=True))
    assert (np.abs(got_half - halves.astype(np.float64).sum(axis, keepdims=True)) <= half_bound).all()
    flags = np.zeros(shape, np.bool_)
    flags.reshape(-1)[-5] = True
    any_set = fast.to_numpy(fast.from_numpy(flags, "CUDA").r(ReduceOps.SUM, (axis,)))
    np.testing.assert_array_equal(any_set, flags.any(axis, keepdims=True))
    np.testing.assert_array_equal(fast.to_numpy(fast.from_numpy(flags, "CUDA").r(ReduceOps.MAX, (axis,))), any_set)
    assert len(LAUNCHES) == 6 and all(launched.dims[1] == (LANES, 1, 1) for launched in LAUNCHES)  # block reductions


def test_block_reductions_on_two_devices_at_once():
    """Split reductions (block reductions behind `__syncthreads()`) on two emulated devices whose lanes
    run concurrently: the same kernel library serves both, so its `__shared__` arrays and the fiber
    scheduler must be per OS thread (they were process-wide, and this crashed)."""
    data = RNG.uniform(-1, 1, (2, 300_007)).astype(np.float32)
    with emulated_cuda(names=("CUDA", "CUDA:1")), config.override(parallel_devices=True, parallel_devices_min_work=0):
        for _ in range(3):
            sharded = fast.MultiLazyBuffer.from_sharded(fast.from_numpy(data, "CLANG"), ("CUDA", "CUDA:1"), 0)
            fast.realize(sharded)
            total = fast.to_numpy(sharded.e(BinaryOps.MUL, sharded).r(ReduceOps.SUM, (1,)))
            np.testing.assert_allclose(total.ravel(), (data * data).sum(1), rtol=1e-4)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64, np.uint8])
def test_gathers_match_reference(launch, index_dtype):
    """Gathered loads rendered as CUDA C: edge indices along each axis of a flipped, padded view,
    fused with an add (the embedding pattern), against reference; out-of-range indices raise."""
    data = np.arange(6 * 40, dtype=np.float32).reshape(6, 40)
    results = {}
    for impl in (fast, reference):
        x = impl.from_numpy(data, "CUDA").stride((-1, 1)).pad(((1, 0), (0, 3)))  # (7, 43)
        outs = []
        for axis, n in enumerate((7, 43)):
            edges = [0, n - 1, 1, n // 2] + ([-1, -n] if np.dtype(index_dtype).kind == "i" else [])
            idx = impl.from_numpy(np.array(edges, index_dtype), "CUDA")
            gathered = x.gather(idx, axis)
            outs.append(gathered.e(impl.BinaryOps.ADD, gathered))
        results[impl.__name__] = [impl.to_numpy(out) for out in outs]
        with pytest.raises(IndexError, match="take"):
            impl.realize(x.gather(impl.from_numpy(np.array([7], index_dtype), "CUDA"), 0))
    for got, want in zip(results["fast"], results["reference"], strict=True):
        _same(got, want, "gather")
