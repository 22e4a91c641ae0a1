"""SPMD: copies between ranks both ways, to a rank-less device, remote to_numpy raising, gather/allgather,
placeholders for other ranks' data. Run as `mpiexec -n 2 python -m mpi4py copies.py`."""
import numpy as np

import fast
import fast.mpi
from fast import BinaryOps, MultiLazyBuffer
from fast.device import Device

rank = fast.mpi.rank()
x = np.arange(12, dtype=np.float32).reshape(3, 4)
on0 = fast.from_numpy(x, "CLANG@0")
held = on0.base.buffer.allocator
assert (type(held).__name__ == "RemoteAllocator") == (rank != 0), type(held)  # rank 1 holds a placeholder

on1 = on0.e(BinaryOps.ADD, on0).copy_to_device("CLANG@1")  # 0 -> 1
back = on1.e(BinaryOps.MUL, on1).copy_to_device("LLVM@0")  # 1 -> 0, onto another kind
everywhere = back.copy_to_device("CLANG")  # 0 -> every rank
fast.realize(everywhere)
assert np.array_equal(fast.to_numpy(everywhere), (2 * x) ** 2)
mine = on1 if rank == 1 else back
assert np.array_equal(fast.to_numpy(mine), 2 * x if rank == 1 else (2 * x) ** 2)
other = back if rank == 1 else on1
try:
    fast.to_numpy(other)
except RuntimeError as error:
    assert "owned by rank" in str(error) and "fast.mpi.gather" in str(error), error
else:
    raise AssertionError("to_numpy of another rank's buffer did not raise")

got = fast.mpi.gather(on1, root=0)
assert (got is None) == (rank != 0) and (got is None or np.array_equal(got, 2 * x)), got
assert np.array_equal(fast.mpi.allgather(back), (2 * x) ** 2)
sharded = MultiLazyBuffer.from_sharded(fast.from_numpy(x, "CLANG"), ("CLANG@1", "CLANG@0"), 1)
try:
    fast.to_numpy(sharded)
except RuntimeError as error:
    assert "fast.mpi.allgather" in str(error), error
else:
    raise AssertionError("to_numpy of a multi buffer sharded over ranks did not raise")
assert np.array_equal(fast.mpi.allgather(sharded.e(BinaryOps.ADD, sharded)), 2 * x)
gathered = fast.mpi.gather(sharded, root=1)
assert (gathered is None) == (rank != 1) and (gathered is None or np.array_equal(gathered, x)), gathered
try:
    Device["CLANG@2"]
except ValueError as error:
    assert "CLANG@2" in str(error), error
else:
    raise AssertionError("a rank outside the communicator did not raise")
print(f"rank {rank}: copies ok", flush=True)
