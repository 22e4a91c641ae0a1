"""SPMD: a sharded (a*b+c) sum over CLANG@0,CLANG@1 (uneven shards), all-reduced, equal to numpy and
bit-identical on every rank. Run as `mpiexec -n 2 python -m mpi4py sharded_sum.py`."""
import numpy as np

import fast
import fast.mpi
from fast import BinaryOps, MultiLazyBuffer, ReduceOps

rank = fast.mpi.rank()
rng = np.random.default_rng(7)
a, b, c = (rng.standard_normal((9, 5)).astype(np.float32) for _ in range(3))
devices = ("CLANG@0", "CLANG@1")
ma, mb, mc = (MultiLazyBuffer.from_sharded(fast.from_numpy(x, "CLANG"), devices, 0) for x in (a, b, c))
total = ma.e(BinaryOps.MUL, mb).e(BinaryOps.ADD, mc).r(ReduceOps.SUM, (0, 1))
assert total.axis is None, total.axis
got = fast.to_numpy(total)
expected = (a.astype(np.float64) * b + c).sum()
assert np.allclose(got, expected, rtol=1e-5), (got, expected)
bits = got.view(np.uint32).reshape(-1)
from mpi4py import MPI  # noqa: E402

all_bits = MPI.COMM_WORLD.allgather(bits.tobytes())
assert len(set(all_bits)) == 1, all_bits
rows = fast.mpi.allgather(ma.e(BinaryOps.MUL, mb).e(BinaryOps.ADD, mc).r(ReduceOps.SUM, (1,)))
assert np.allclose(rows[:, 0], (a.astype(np.float64) * b + c).sum(axis=1), rtol=1e-5), rows
print(f"rank {rank}: sum {got.reshape(-1)[0]!r} bits {bits[0]:#x} ok", flush=True)
