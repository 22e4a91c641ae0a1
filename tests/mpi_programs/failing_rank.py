"""SPMD: rank 1 raises before its side of a transfer; rank 0 must not hang. Run as
`MPI_TIMEOUT=5 mpiexec -n 2 python [-m mpi4py] failing_rank.py`: with -m mpi4py the job aborts at once,
without it rank 0's receive gives up after MPI_TIMEOUT seconds with a RuntimeError."""
import numpy as np

import fast
import fast.mpi

rank = fast.mpi.rank()
data = fast.from_numpy(np.arange(8, dtype=np.int32), "CLANG@1")
if rank == 1:
    raise RuntimeError("rank 1 fails on purpose")
fast.realize(data.copy_to_device("CLANG@0"))
print(f"rank {rank}: unreachable", flush=True)
