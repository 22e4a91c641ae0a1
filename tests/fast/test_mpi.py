"""MPI SPMD (docs/mpi.md): device names with `@RANK` in-process, and small programs
(tests/mpi_programs/*.py) run under `mpiexec -n 2 python -m mpi4py` as subprocesses."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import mpiexec

import fast
import reference
from fast.device import Device
from fast.runtime import mpi
from reference.shape import canonical_device

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "mpi_programs"


# ---------------------------------------------------------------- names, in-process

@pytest.mark.parametrize(("name", "canonical"), [
    ("CLANG@1", "CLANG@1"), ("CLANG:0@1", "CLANG@1"), ("LLVM:1@2", "LLVM:1@2"), ("CUDA:03@007", "CUDA:3@7"),
    ("CLANG:0@0", "CLANG@0"), ("DISK:/tmp/a@1", "DISK:/tmp/a@1"),
])
def test_rank_names_canonicalize_alike(name: str, canonical: str) -> None:
    assert Device.canonicalize(name) == canonical
    assert canonical_device(name) == canonical


@pytest.mark.parametrize("name", ["CLANG@", "CLANG@-1", "CLANG@1@2", "DISK@1", "CLANG@x", "@1", "CLANG@ 1", "clang@1"])
def test_malformed_rank_names_are_value_errors_in_both(name: str) -> None:
    with pytest.raises(ValueError, match="unknown device"):
        Device.canonicalize(name)
    with pytest.raises(ValueError, match="unknown device"):
        canonical_device(name)


def test_kind_and_owner_of_rank_names() -> None:
    assert Device.kind("LLVM:1@2") == "LLVM"
    assert (mpi.owner("LLVM:1@2"), mpi.local_name("LLVM:1@2")) == (2, "LLVM:1")
    assert (mpi.owner("CLANG"), mpi.owner("DISK:/x@3")) == (None, None)


def test_reference_keeps_rank_names_as_labels() -> None:
    lb = reference.from_numpy(np.arange(3), "CLANG:0@1")
    assert lb.device == "CLANG@1"
    assert np.array_equal(reference.to_numpy(lb.copy_to_device("LLVM@0")), np.arange(3))


def test_without_mpi_only_rank_zero_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpi, "communicator", lambda: None)
    monkeypatch.setattr(Device, "opened", {})
    assert (mpi.rank(), mpi.size()) == (0, 1)
    with pytest.raises(ValueError, match="'CLANG@1': rank 1 does not exist"):
        Device["CLANG@1"]
    on0 = fast.from_numpy(np.arange(4, dtype=np.int32), "CLANG@0")
    assert not Device["CLANG@0"].remote
    assert np.array_equal(fast.to_numpy(on0.e(fast.BinaryOps.ADD, on0).copy_to_device("CLANG")), 2 * np.arange(4))


class _FakeComm:
    """Rank 0 of 2 (no transfer may happen in the tests that use it)."""

    def Get_rank(self) -> int:  # noqa: N802  (mpi4py's name)
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return 2


def test_another_ranks_device_holds_placeholders_and_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpi, "communicator", lambda: _FakeComm())
    monkeypatch.setattr(Device, "opened", {})
    assert Device["CLANG@1"].remote and not Device["CLANG@0"].remote
    x = fast.from_numpy(np.arange(6, dtype=np.float32), "CLANG@1")
    y = x.e(fast.BinaryOps.MUL, x)
    fast.realize(y)  # rank 1's kernel: not compiled or run here, only a placeholder taken
    assert isinstance(y.base.realized.handle, mpi.RemoteHandle)
    with pytest.raises(RuntimeError, match=r"CLANG@1, owned by rank 1, not this rank 0; use fast.mpi.gather"):
        fast.to_numpy(y)
    fast.realize(y.e(fast.BinaryOps.ADD, y))  # again: a replayed template never launches it either


# ---------------------------------------------------------------- SPMD programs under mpiexec

def _run(program: str, tmp_path: Path, *, abort: bool = True, timeout: float = 30,
         **env: str) -> subprocess.CompletedProcess[str]:
    launcher = [sys.executable, "-m", "mpi4py"] if abort else [sys.executable]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MPI_TIMEOUT": str(timeout), **env}
    return subprocess.run([mpiexec(), "-n", "2", *launcher, str(PROGRAMS / program)], cwd=tmp_path,
                          env=environment, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.parametrize("ring", ["0", "2"])
def test_sharded_sum_is_numpys_and_bit_identical_on_both_ranks(tmp_path: Path, ring: str) -> None:
    done = _run("sharded_sum.py", tmp_path, RING=ring)
    assert done.returncode == 0, done.stdout + done.stderr
    found = sorted(re.findall(r"rank (\d): sum (\S+) bits (\S+) ok", done.stdout))  # ranks' lines may interleave
    assert [rank for rank, *_ in found] == ["0", "1"], done.stdout
    assert found[0][1:] == found[1][1:], found  # the same value and bits


def test_copies_between_ranks_gather_and_remote_readback(tmp_path: Path) -> None:
    done = _run("copies.py", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(re.findall(r"rank (\d): copies ok", done.stdout)) == ["0", "1"], done.stdout


def test_a_failing_rank_aborts_the_job(tmp_path: Path) -> None:
    start = time.monotonic()
    done = _run("failing_rank.py", tmp_path, timeout=60)
    assert done.returncode != 0 and time.monotonic() - start < 50, done.stdout + done.stderr
    assert "rank 1 fails on purpose" in done.stderr and "unreachable" not in done.stdout


def test_without_abort_the_waiting_rank_times_out(tmp_path: Path) -> None:
    start = time.monotonic()
    done = _run("failing_rank.py", tmp_path, abort=False, timeout=3)
    assert done.returncode != 0 and time.monotonic() - start < 60, done.stdout + done.stderr
    assert "did not complete within MPI_TIMEOUT=3.0 s" in done.stderr, done.stderr
