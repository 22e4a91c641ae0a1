"""Finding `mpiexec` for the tests that run programs under it (tests/fast/test_mpi.py,
tests/conformance/test_conf_mpi.py): the one beside this Python first (the mpich wheel of the `mpi`
extra puts it there), then PATH. A test without mpi4py or mpiexec skips, saying which is missing."""
from __future__ import annotations

import os
import shutil
import sys

import pytest


def mpiexec() -> str:
    """The path of `mpiexec`, or a skip naming what to install."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'fast-lazy[mpi]')")
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if found is None:
        pytest.skip("mpiexec was not found (pip install 'fast-lazy[mpi]' brings MPICH's)")
    return found
