"""An mpi4py program as users write it, unmodified: mpi4py initialises MPI
with its default, MPI_THREAD_MULTIPLE. Allreduce, Bcast and Reduce of numpy
arrays from one chunk to several, every result checked. mpi_interposer_test
runs it under mpirun with libnetfold_mpi.so preloaded, using Debian's
/usr/bin/python3 (python3-mpi4py, python3-numpy)."""
import sys

import numpy as np
from mpi4py import MPI

OPS = 50


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    wrong = []
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        wrong.append(f"thread level {MPI.Query_thread()}, expected MPI_THREAD_MULTIPLE")
    for i in range(OPS):
        n = 1 + (i * 997) % 20000
        index = np.arange(n, dtype=np.float64)
        x = index + rank + i
        y = np.empty_like(x)
        comm.Allreduce(x, y, op=MPI.SUM)
        if not np.array_equal(y, size * (index + i) + size * (size - 1) // 2):
            wrong.append(f"allreduce {i}")
        root = i % size
        b = (np.arange(n, dtype=np.int32) * (i + 1)) if rank == root else np.zeros(n, np.int32)
        comm.Bcast(b, root=root)
        if not np.array_equal(b, np.arange(n, dtype=np.int32) * (i + 1)):
            wrong.append(f"bcast {i}")
        r = np.empty_like(x) if rank == root else None
        comm.Reduce(x, r, op=MPI.MAX, root=root)
        if rank == root and not np.array_equal(r, index + size - 1 + i):
            wrong.append(f"reduce {i}")
    if wrong:
        print(f"rank {rank}: mpi4py FAIL {', '.join(wrong[:5])}", flush=True)
        return 1
    print(f"rank {rank}: mpi4py ok, {3 * OPS} checked", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
