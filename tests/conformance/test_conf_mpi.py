"""`python -m conformance --mpi` (conformance/mpi_driver.py): where devices are placed, how programs
are renamed, and whole runs under `mpiexec -n 2` with a bug planted on rank 1
(tests/mpi_programs/conformance_planted.py), skipped, saying why, without mpi4py or mpiexec."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import mpiexec

import fast
import reference
from conformance.driver import replay
from conformance.mpi_driver import _disk_moved, mpi_snippet, placement, rename_devices
from conformance.profiles import GenConfig
from conformance.program import ArrayData, Copy, Elementwise, Fetch, Leaf, Program, Reduce, Shard
from conformance.vocab import canonical_device
from fast.device import Device
from fast.runtime import mpi

ROOT = Path(__file__).resolve().parents[2]


def test_placement_spreads_each_kind_over_ranks_and_kinds() -> None:
    placed = placement(GenConfig(kinds=("CLANG", "LLVM"), max_devices=4), ranks=3)
    assert [placed[f"CLANG{suffix}"] for suffix in ("", ":1", ":2", ":3")] == \
        ["CLANG@0", "LLVM:1@1", "CLANG:2@2", "LLVM:3"]  # the fourth stays local to every rank
    assert [placed[f"LLVM{suffix}"] for suffix in ("", ":1", ":2", ":3")] == \
        ["LLVM@1", "CLANG:1@2", "LLVM:2@0", "CLANG:3"]
    assert placed["CLANG:0"] == "CLANG:0@0" and Device.canonicalize(placed["CLANG:0"]) == placed["CLANG"]


@pytest.mark.parametrize(("kinds", "count", "ranks"),
                         [(("CLANG",), 2, 2), (("CLANG",), 4, 3), (("CLANG", "LLVM"), 3, 2)])
def test_placement_keeps_distinct_devices_distinct(kinds: tuple[str, ...], count: int, ranks: int) -> None:
    placed = placement(GenConfig(kinds=kinds, max_devices=count), ranks)
    canonical = {generic: Device.canonicalize(name) for generic, name in placed.items()}
    for generic, name in canonical.items():
        assert canonical_device(generic) in placed and name == canonical[canonical_device(generic)]
    assert len(set(canonical.values())) == len({canonical_device(g) for g in placed}) == len(kinds) * count
    assert all(int(name.rpartition("@")[2]) < ranks for name in canonical.values() if "@" in name)


def test_renaming_touches_every_device_name_and_nothing_else() -> None:
    program = Program((Leaf(ArrayData("int32", (4,), tuple(range(4))), "CLANG"), Shard(0, ("CLANG", "CLANG:1"), 0),
                       Copy(1, "DISK:/a/x"), Elementwise("ADD", (0, 0)), Fetch(3)), ring=2)
    moved = rename_devices(program, _disk_moved("/a", "/b"))
    placed = rename_devices(moved, lambda name: {"CLANG": "CLANG@0", "CLANG:1": "CLANG:1@1"}.get(name, name))
    assert placed.steps[0].device == "CLANG@0" and placed.steps[1].devices == ("CLANG@0", "CLANG:1@1")  # type: ignore[attr-defined]
    assert placed.steps[2].device == "DISK:/b/x" and placed.steps[3:] == program.steps[3:] and placed.ring == 2  # type: ignore[attr-defined]
    assert rename_devices(program, lambda name: name) == program


def test_rank_names_replay_alike_in_one_process_for_rank_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """A placed program whose devices are all rank 0's runs without MPI and agrees with reference."""
    monkeypatch.setattr(mpi, "communicator", lambda: None)  # rank 0 of 1, mpi4py not initialized
    monkeypatch.setattr(Device, "opened", {})
    program = Program((Leaf(ArrayData("float32", (6, 2), seed=3), "CLANG@0"), Shard(0, ("CLANG@0", "CLANG:1@0"), 0),
                       Reduce(1, "SUM", (0,)), Fetch(2)))
    want, got = replay(reference, program), replay(fast, program)
    assert want.error is None and got.error is None
    assert np.allclose(want.fetched[0].array, got.fetched[0].array, rtol=1e-6)


def test_failure_snippets_gather_fast_values_undermpiexec() -> None:
    program = Program((Leaf(ArrayData("int32", (2,), (1, 2)), "CLANG@1"), Fetch(0)))
    snippet = mpi_snippet(program.render("fast"), 3)
    assert "mpiexec -n 3 python -m mpi4py" in snippet and "gathered(T, v0)" in snippet
    assert "T.to_numpy(" not in snippet.split("def gathered")[1].split("\n\n")[1]
    assert "fast.debug" not in snippet
    namespace: dict[str, object] = {}
    exec(snippet.replace("print(", "(lambda *a: None)("), namespace)  # noqa: S102 - our own snippet, run for reference
    assert namespace["attempt"](reference)[0].tolist() == [1, 2]  # type: ignore[operator, index]


# ---------------------------------------------------------------- under mpiexec -n 2

def _planted(mode: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MPI_TIMEOUT": "5"}
    start = time.monotonic()
    done = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(ROOT / "tests" / "mpi_programs" /
                                                                   "conformance_planted.py"), mode],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=240, check=False)
    return done, time.monotonic() - start


def test_an_mpi_run_without_bugs_agrees(tmp_path: Path) -> None:
    done, _ = _planted("clean", tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "conformance under MPI: reference vs fast, 2 ranks" in done.stdout and "2 programs sharded" in done.stdout
    assert "No disagreements." in done.stdout


def test_reading_a_view_on_its_owner_keeps_the_ranks_in_lockstep(tmp_path: Path) -> None:
    """The regression of test_reading_a_view_does_not_realize_the_programs_contiguous_of_it, under MPI:
    only rank 1 reads the view (it owns it); every rank must still raise the same stale-read error."""
    done, _ = _planted("readback", tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "No disagreements." in done.stdout and "left SPMD lockstep" not in done.stdout


def test_a_value_wrong_on_one_rank_is_a_failure_named_by_rank(tmp_path: Path) -> None:
    done, _ = _planted("values", tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FAILURE 1: value:" in done.stdout and "on rank 1: step" in done.stdout, done.stdout[-3000:]
    assert "fast.mpi.gather(x, 0)" in done.stdout  # the snippet runs under mpiexec


def test_ranks_leaving_lockstep_abort_the_job_with_a_message(tmp_path: Path) -> None:
    done, seconds = _planted("diverge", tmp_path)
    assert done.returncode != 0 and seconds < 120, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the ranks disagree on what `fast` did (they left SPMD lockstep)" in done.stdout
    assert "rank 1: ValueError at step 2: planted" in done.stdout, done.stdout[-3000:]


def test_an_exception_outside_a_replay_aborts_the_job(tmp_path: Path) -> None:
    done, seconds = _planted("crash", tmp_path)
    assert done.returncode != 0 and seconds < 120, done.stdout[-3000:] + done.stderr[-3000:]
    assert "conformance --mpi: rank 1 failed" in done.stderr and "planted: rank 1 crashes" in done.stderr
