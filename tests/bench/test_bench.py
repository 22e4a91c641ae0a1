"""The benchmark suite: a quick run of every workload on CLANG writes complete, passing results, and
the measurement's safeguards (the weak-cache probe, the correctness check) catch what they must."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fast
from bench import minilm_model
from bench.runner import BenchError, check_result, probe_repeat, realized_inputs
from bench.timing import Budget, blocks, repeat
from bench.workloads import WORKLOADS, by_name

REPO = Path(__file__).resolve().parents[2]
ROW_FIELDS = {"workload", "device", "median_ms", "min_ms", "max_ms", "repeats", "kernels", "check"}


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m bench ARGS` from the repository root."""
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Every workload, quick sizes, CLANG only, a tiny time budget, into a private directory."""
    out = tmp_path_factory.mktemp("bench")
    done = run_bench("--quick", "--devices", "CLANG", "--budget", "0.02", "--max-repeats", "3",
                     "--bandwidth-mib", "8", "--out-dir", str(out), "--out-prefix", "quick")
    return done, out


def load(out: Path) -> dict[str, Any]:
    return json.loads((out / "quick.json").read_text())


def test_quick_run_succeeds_and_writes_outputs(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, out = quick_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "quick.md").read_text().count("| CLANG |") == len(WORKLOADS)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in done.stdout
    else:
        assert (out / "quick.png").stat().st_size > 0


def test_json_has_machine_bandwidth_and_every_row(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result = load(quick_run[1])
    assert {"cpu_model", "cpu_flags", "cores", "numpy", "environment"} <= set(result["machine"])
    assert "OPENBLAS_CORETYPE" in result["machine"]["environment"]
    bandwidth = result["bandwidth"]
    assert bandwidth["bandwidth_gbs"] == max(bandwidth["single_thread_gbs"], bandwidth["all_cores_gbs"]) > 0
    assert result["fast"]["file"] == str(Path(fast.__file__).resolve())
    assert [row["workload"] for row in result["results"]] == [workload.name for workload in WORKLOADS]
    assert result["failures"] == []


def test_read_ceiling_is_measured_and_reported(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """The hand-written C reduction ran (this machine has a C compiler: CLANG needs one) and every
    reduction reading 16M float32 gets a line comparing it with the ceiling."""
    done, out = quick_run
    ceiling = load(out)["read_ceiling"]
    assert ceiling["elements"] == (1 << 24) // 64 and ceiling["threads"] >= 1, ceiling
    assert ceiling["single_thread_gbs"] > 0 and ceiling["all_cores_gbs"] > 0, ceiling
    assert "read ceiling (hand-written C sum" in done.stdout
    for name in ("sum", "row_sum", "col_sum"):
        assert f"{name} on CLANG: " in done.stdout and "x at the ceiling" in done.stdout


def test_reachable_ratio_is_numpy_time_over_ceiling_time() -> None:
    from bench.ceiling import reachable_ratio
    assert reachable_ratio(12.0, {"all_cores_ms": 4.0}) == 3.0
    assert reachable_ratio(None, {"all_cores_ms": 4.0}) is None
    assert reachable_ratio(12.0, {"error": "no C compiler"}) is None


def _has_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def test_rows_pass_their_checks_and_count_kernels(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    for row in load(quick_run[1])["results"]:
        if row.get("skipped") and row["workload"].startswith("minilm"):  # only without the `model` extra
            assert minilm_model.unavailable() and "is not installed" in row["skipped"], row
            continue
        if row.get("skipped"):  # only mpi_sharded, only without MPI (it says so)
            assert row["workload"] == "mpi_sharded" and not _has_mpi() and "mpi4py" in row["skipped"], row
            continue
        if row["workload"].startswith("minilm"):  # every round's time, in order, besides the median
            assert len(row["rounds_ms"]) == row["repeats"] and min(row["rounds_ms"]) == pytest.approx(row["min_ms"],
                                                                                               abs=0.01), row
        assert ROW_FIELDS <= set(row), row
        assert row["check"]["ok"] is True, row
        assert isinstance(row["kernels"], int) and row["kernels"] > 0, row
        assert 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"], row
        if by_name(row["workload"])[0].kind == "compute":
            assert row["numpy_ms"] > 0 and row["ratio_numpy"] > 0, row
            assert row["compiles"] >= 0 and row["warm_compiles"] == 0, row
            assert ("gbs" in row) != ("gflops" in row), row


def test_mpi_sharded_row_compares_two_ranks_with_one_process(
        quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """Two ranks (THREADS=1 each, under mpiexec) against one process (THREADS=1) timed in the same run;
    the speed itself is the bench's to report, not a test's to assert."""
    if not _has_mpi():
        pytest.skip("mpi4py is not installed (pip install 'fast-lazy[mpi]'): the row records why it did not run")
    row = next(row for row in load(quick_run[1])["results"] if row["workload"] == "mpi_sharded")
    assert row["sharded_devices"] == ["CLANG@0", "CLANG@1"] and row["ranks"] == 2 and len(row["rank_median_ms"]) == 2
    assert row["single_threads1_ms"] > 0 and row["speedup_threads1"] == row["single_threads1_ms"] / row["median_ms"]
    assert row["speedup_threads1_target"] == 1.6 and row["check"]["ok"] and row["warm_compiles"] == 0, row
    assert f"mpi_sharded on CLANG@0,CLANG@1 ({row['ranks']} MPI ranks" in (quick_run[1] / "quick.md").read_text()


def test_unknown_workload_is_a_usage_error() -> None:
    done = run_bench("--only", "no_such_workload")
    assert done.returncode == 2 and "no_such_workload" in done.stderr


def test_probe_refuses_a_rebuild_that_hits_the_live_output() -> None:
    workload = by_name("row_sum")[0]  # one op on a realized input: the rebuilt node is the live one
    inputs = realized_inputs([np.full((8, 8), 0.5, dtype=np.float32)], "CLANG")
    alive = workload.build(*inputs)  # type: ignore[misc]
    fast.realize(alive)
    with pytest.raises(BenchError, match="already realized"):
        probe_repeat(workload, inputs)
    del alive
    assert probe_repeat(workload, inputs) == 1


def test_check_result_flags_wrong_values_and_accepts_keepdims_layouts() -> None:
    want = np.arange(6, dtype=np.float32)
    assert check_result(want.reshape(1, 6), want, 1e-3, 0.0)["ok"]
    wrong = want.copy()
    wrong[3] += 1.0
    failed = check_result(wrong, want, 1e-3, 0.0)
    assert not failed["ok"] and failed["bad_elements"] == 1 and failed["max_abs_err"] == 1.0
    assert not check_result(want[:5], want, 1e-3, 0.0)["ok"]


def test_repeat_stops_at_the_budget_and_drops_results() -> None:
    calls: list[int] = []
    stats = repeat(lambda: calls.append(1), Budget(seconds=0.0, min_repeats=2, max_repeats=10))
    assert len(stats.times_s) == len(calls) == 2
    assert len(repeat(lambda: None, Budget(seconds=10.0, max_repeats=4)).times_s) == 4


def test_repeat_frees_a_cyclic_result_before_the_next_repeat_without_a_full_collection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A result caught in a reference cycle is dead when the next repeat starts (the youngest
    generation is collected between repeats), and the whole heap is collected once, first."""
    import gc
    import weakref

    from bench import timing

    class Node:
        pass

    collected: list[tuple[int, ...]] = []
    real_collect = gc.collect
    def collect(*generation: int) -> int:
        collected.append(generation)
        return real_collect(*generation)
    monkeypatch.setattr(timing.gc, "collect", collect)
    previous: list[weakref.ref[Node]] = []
    alive_at_start: list[bool] = []

    def once() -> Node:
        alive_at_start.append(bool(previous) and previous[-1]() is not None)
        node = Node()
        node.self = node  # type: ignore[attr-defined]  # a cycle: refcounting alone never frees it
        previous.append(weakref.ref(node))
        return node

    repeat(once, Budget(seconds=10.0, max_repeats=4))
    assert alive_at_start == [False, False, False, False]
    assert collected == [(), (0,), (0,), (0,), (0,)]


def test_blocks_alternate_the_systems_and_keep_a_failure_to_its_own_system() -> None:
    """Every system's repeats come in `count` blocks, the systems' blocks alternating; a system that
    raises is not called again, the others keep their blocks."""
    order: list[str] = []

    def call(name: str) -> Any:
        def once() -> None:
            order.append(name)
            if name == "c" and order.count("c") == 3:
                raise ValueError("third call of c")
        return once

    stats, errors = blocks([call("a"), call("b"), call("c")], Budget(seconds=10.0, min_repeats=1, max_repeats=4),
                           count=2, pause_s=0.0)
    assert order == ["a", "a", "b", "b", "c", "c", "a", "a", "b", "b", "c"]
    assert [len(s.times_s) for s in stats] == [4, 4, 2]
    assert errors[:2] == [None, None] and isinstance(errors[2], ValueError)
    short, _ = blocks([call("d")], Budget(seconds=0.0, min_repeats=3, max_repeats=40), count=4, pause_s=0.0)
    assert len(short[0].times_s) == 4  # one repeat per block: ceil(3 / 4), the budget spent at once


def test_fma_spread_orders_its_percentiles() -> None:
    """The spread of short FMA runs: median >= 25th >= 10th percentile, all positive."""
    import tempfile

    from bench.machine import _fma_library, fma_spread, fma_variants
    name, flags = fma_variants(set(open("/proc/cpuinfo").read().split()))[-1]
    with tempfile.TemporaryDirectory() as folder:
        spread = fma_spread(_fma_library(folder, name, flags), 1, samples=12, sample_s=0.001)
    assert spread["samples"] == 12 and spread["threads"] == 1
    assert spread["median_gflops"] >= spread["p25_gflops"] >= spread["p10_gflops"] > 0


def test_the_tile_probe_reports_or_says_why_not() -> None:
    """Without AMX flags the probe says so; with them (this host) bfloat16 rates, the float32 rate a
    sixth of them, the spread of short runs (at the start and, taken again, at the end of a run),
    and one line for the machine section."""
    from bench.machine import cpu_flags
    from bench.tile_peak import PRODUCTS_PER_FLOAT32, measure_tile_peak, measure_tile_spread, tile_line
    missing = measure_tile_peak({"avx512f"})
    assert "error" in missing and "AMX" in (tile_line(missing) or "")
    assert "AMX" in measure_tile_spread({"avx512f"})["error"]
    if not {"amx_tile", "amx_bf16"} <= cpu_flags():
        pytest.skip("no AMX tiles on this host: the measuring half needs them")
    tiles = measure_tile_peak(cpu_flags(), seconds=0.005, repeats=2, samples=8)
    if "error" in tiles:
        pytest.skip(f"AMX listed but not usable here: {tiles['error']}")
    assert tiles["bf16_gflops"] > 0 and tiles["single_thread_bf16_gflops"] > 0
    assert tiles["float32_gflops"] == pytest.approx(tiles["bf16_gflops"] / PRODUCTS_PER_FLOAT32, abs=0.1)
    assert "float32 GFLOP/s at most" in (tile_line(tiles) or "")
    spread, end = tiles["spread"], measure_tile_spread(cpu_flags(), samples=8, best=tiles["bf16_gflops"])
    for sampled in (spread, end):
        assert sampled["samples"] == 8
        assert sampled["median_gflops"] >= sampled["p25_gflops"] >= sampled["p10_gflops"] > 0
        assert 0 <= sampled["below_half_best"] <= 1
    line = tile_line(tiles, end) or ""
    assert "at the start, 8 runs of 5.0 ms" in line and "at the end, 8 runs" in line
    assert "spread" not in measure_tile_peak(cpu_flags(), seconds=0.005, repeats=1, samples=0)


def test_groups_select_their_members_and_the_matmul_shapes_are_right() -> None:
    """`--only matmul` and `--only minilm` name sets; each matmul workload's peer function and fast
    graph agree on a small input, a @ b.T reads b stored (N, K) and a.T @ b a stored (K, M), and the
    flops count 2 per multiply-add."""
    from bench.peers import ArrayOps
    names = [workload.name for workload in by_name("matmul")]
    assert {"matmul_512", "matmul_bt_512", "matmul_at_1024", "linear_up", "linear_down", "attn_scores",
            "attn_context"} <= set(names)
    assert [workload.name for workload in by_name("minilm")] == ["minilm_32x128", "minilm_1x16"]
    rng = np.random.default_rng(0)
    for workload in by_name("matmul"):
        arrays = workload.make_inputs(rng, True)  # quick sizes
        want = workload.peer(ArrayOps(), *arrays)  # type: ignore[misc]
        out = workload.build(*realized_inputs(arrays, "CLANG"))  # type: ignore[misc]
        np.testing.assert_allclose(fast.to_numpy(out), want, rtol=1e-4, atol=2e-4)
        k = arrays[0].shape[-2 if workload.name.startswith("matmul_at") else -1]
        assert workload.flops(arrays) == 2.0 * want.size * k, workload.name  # type: ignore[misc]


def test_fma_peak_and_minilm_agreement() -> None:
    """The FMA probe picks instruction sets from the CPU's flags; agreement is cosine and max abs."""
    from bench.machine import fma_variants
    from bench.minilm import agreement
    assert [name for name, _ in fma_variants({"avx512f", "avx2", "fma"})] == ["avx512", "avx2+fma"]
    assert [name for name, _ in fma_variants({"avx2"})] == ["native"]
    same = agreement(np.ones((2, 4), np.float32), np.ones((2, 4), np.float32))
    assert same["ok"] and same["min_cosine"] == pytest.approx(1.0) and same["max_abs_err"] == 0.0
    flipped = agreement(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]))
    assert not flipped["ok"] and flipped["min_cosine"] == 0.0


def test_minilm_kernels_time_the_matmuls_and_the_floor_counts_every_kernel() -> None:
    """bench/minilm_kernels.py on a small forward of two kernels (a GEMM, then a softmax-like row
    kernel): one matmul row with its count and rate, and a floor that also holds the other kernel."""
    from bench import graphs
    from bench.minilm_kernels import matmul_kernels
    rng = np.random.default_rng(0)
    a, b = realized_inputs([rng.standard_normal((64, 48)).astype(np.float32),
                            rng.standard_normal((48, 40)).astype(np.float32)], "CLANG")

    def build() -> fast.LazyBuffer:
        product = graphs.matmul(a, b)
        return product.e(fast.ops.BinaryOps.SUB, product.r(fast.ops.ReduceOps.MAX, (1,)).expand(product.shape))

    rows, floor = matmul_kernels(build, 100.0)
    assert [row["count"] for row in rows] == [1] and rows[0]["gflops"] > 0 and rows[0]["batched"] is False
    assert rows[0]["fma_fraction"] == pytest.approx(rows[0]["gflops"] / 100.0)
    assert floor > rows[0]["ms"] > 0


def test_minilm_split_says_what_the_target_leaves() -> None:
    """bench/minilm_split.py's lines: 1.2x of torch's 300 ms is 250 ms; fast's floor of 260 ms less its
    matmul kernels (230 ms) leaves 30 ms of other kernels, so its 88 GFLOP of matmuls would have to
    fit in 220 ms: 400 GFLOP/s, 80% of a 500 GFLOP/s peak; they run at 88 / 0.23 = 383 (77%). torch's
    linears: 80 GFLOP in 70% of 300 ms, 381 GFLOP/s (76%)."""
    from bench.minilm_split import attach, target_lines
    split = {"profiled_ms": 290.0, "gemm_share": 0.7, "attention_share": 0.1, "other_share": 0.2,
             "top_ops": [["aten::addmm", 203.0]]}
    row = {"device": "CLANG", "median_ms": 268.0, "kernel_floor_ms": 260.0,
           "matmul_kernels": [{"kernel": "r_a", "ms": 200.0, "gflop": 80.0, "batched": False},
                              {"kernel": "r_b", "ms": 30.0, "gflop": 8.0, "batched": True}]}
    lines = target_lines(split, 300.0, row, 500.0)
    assert "linears' GEMMs 70.0%, fused attention 10.0%, the rest 20.0%" in lines[0]
    assert "needs 250.0 ms" in lines[1] and "other kernels take 30.0 ms" in lines[1]
    assert "average 400 GFLOP/s, 80% of the FMA peak; they average 383 (77%)" in lines[1]
    assert "torch's linears at its median: 381 GFLOP/s (76%)" in lines[1]
    assert len(target_lines(split, 300.0, row, None)) == 1  # no peak measured: the profile line only
    calls: list[int] = []
    attach([row, {"device": "LLVM"}], {"torch": {"median_ms": 300.0}}, lambda: calls.append(1) or split, 500.0)
    assert calls == [1] and row["torch_split"]["torch_median_ms"] == 300.0 and row["torch_split"]["fma_gflops"] == 500.0
    attach([{"device": "LLVM"}], {}, lambda: calls.append(1) or split, 500.0)  # no torch row: nothing measured
    assert calls == [1]


def test_minilm_split_profiles_torch() -> None:
    """torch_split on a tiny module of a linear layer and a softmax: the GEMM share is counted."""
    torch = pytest.importorskip("torch", reason="torch is an optional bench peer")
    from bench.minilm_split import torch_split

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(64, 64)

        def forward(self, ids: object, mask: object) -> object:
            return torch.softmax(self.linear(torch.ones(128, 64) * ids.shape[0]), -1)

    split = torch_split(Tiny(), np.zeros((2, 4), np.int32), np.ones((2, 4), np.int32))
    assert 0 < split["gemm_share"] < 1 and split["attention_share"] == 0
    assert split["gemm_share"] + split["other_share"] == pytest.approx(1.0)
    assert split["top_ops"] and split["profiled_ms"] > 0
