"""SPMD: `python -m conformance --mpi` on two fixed sharded programs, with a bug planted on rank 1.
Run as `MPI_TIMEOUT=5 mpiexec -n 2 python conformance_planted.py MODE [conformance options...]`:

- `clean`: nothing planted; the run must agree everywhere.
- `values`: rank 1's allgather adds 1 to the first float32 element it returns: a value only rank 1
  sees wrong, to be reported as a failure "on rank 1" (the ranks stay in lockstep).
- `diverge`: rank 1 raises in a sharded elementwise op that rank 0 runs: the ranks leave lockstep;
  the job must abort with the driver's message (not hang).
- `crash`: rank 1 fails outside any replay (receiving the first program): the job must abort.
- `readback`: nothing planted; the program reads a view of rank 1's buffer, then uses the
  contiguous() of that view after an assign: every rank must raise the same RuntimeError (before
  the fix in fast/engine/readback.py only rank 1 had realized it while reading, and the ranks left
  lockstep; tests/conformance/test_conf_regressions.py).
"""
import sys

import numpy as np

import conformance.mpi_driver as driver
import fast
import fast.mpi
from conformance.__main__ import main
from conformance.program import (
    ArrayData,
    Assign,
    Contiguous,
    Copy,
    Elementwise,
    Fetch,
    Leaf,
    Movement,
    Program,
    Realize,
    Reduce,
    Shard,
)

MODE = sys.argv[1]


def fixed_programs(cfg: object) -> list[Program]:
    data = Leaf(ArrayData("float32", (5, 3), seed=11), "CLANG")
    total = (data, Shard(0, ("CLANG", "CLANG:1"), 0), Elementwise("MUL", (1, 1)), Reduce(2, "SUM", (0,)), Fetch(3))
    rows = (data, Shard(0, ("CLANG", "CLANG:1", "CLANG:2"), 1), Elementwise("ADD", (1, 1)), Fetch(2))
    return [Program(total), Program(rows)]


def readback_program(cfg: object) -> list[Program]:
    data, other = ArrayData("int32", (2, 3), tuple(range(6))), ArrayData("int32", (2, 3), tuple(range(6, 12)))
    return [Program((Leaf(data, "CLANG:1"), Movement(0, "permute", (1, 0)), Contiguous(1), Fetch(1),
                     Leaf(other, "CLANG:1"), Assign(0, 4), Realize((5,)), Copy(2, "CLANG"), Fetch(7)),
                    expect="RuntimeError")]


def wrong_first_float(buffer: object) -> np.ndarray:
    values = original_allgather(buffer)
    if values.dtype == np.float32 and values.size:
        values.reshape(-1)[0] += 1
    return values


def refuse(*args: object, **kwargs: object) -> object:
    raise ValueError("planted: rank 1 refuses this op")


def fail_to_rename(*args: object, **kwargs: object) -> object:
    raise RuntimeError("planted: rank 1 crashes outside a replay")


driver.directed_programs = readback_program if MODE == "readback" else fixed_programs
original_allgather = fast.mpi.allgather
if fast.mpi.rank() == 1:
    if MODE == "values":
        fast.mpi.allgather = wrong_first_float
    elif MODE == "diverge":
        fast.MultiLazyBuffer.e = refuse
    elif MODE == "crash":
        driver.rename_devices = fail_to_rename
sys.exit(main(["--mpi", "--profile", "mpi", "--devices", "CLANG", "--examples", "0", *sys.argv[2:]]))
