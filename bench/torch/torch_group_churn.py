#!/usr/bin/python3
"""What a process group costs a torch program that makes many: each round
dist.new_group over every rank, one checked all_reduce of 1000 floats on
it, and dist.destroy_process_group of it (docs/performance.md, "Kept
groups under torch").

Under mpirun with torch's env:// rendezvous, a fabric up and
build/host/torch on PYTHONPATH (docs/pytorch.md):

  mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 \\
      -x MASTER_PORT=29511 -x PYTHONPATH -x NETFOLD_MANAGER -x NETFOLD_CREDENTIAL_FILE \\
      -x NETFOLD_TLS_CA /usr/bin/python3 bench/torch/torch_group_churn.py netfold 100

BACKEND is netfold or gloo; rank 0 prints the slowest rank's mean time per
round:

  netfold: per round T ms
"""
import os
import sys
import time

# env:// reads RANK and WORLD_SIZE, which mpirun does not set.
os.environ.setdefault("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
os.environ.setdefault("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main():
    if (len(sys.argv) != 3 or sys.argv[1] not in ("netfold", "gloo") or
            not sys.argv[2].isdigit() or int(sys.argv[2]) == 0):
        sys.exit("usage: torch_group_churn.py netfold|gloo ROUNDS")
    backend, rounds = sys.argv[1], int(sys.argv[2])
    if backend == "netfold":
        import netfold_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    x = torch.ones(1000)
    dist.barrier()
    start = time.perf_counter()
    for i in range(rounds):
        group = dist.new_group(list(range(size)))
        y = x * (rank + i)
        dist.all_reduce(y, group=group)
        if not torch.all(y == sum(r + i for r in range(size))):
            sys.exit("rank %d: wrong sum in round %d" % (rank, i))
        dist.destroy_process_group(group)
    slowest = torch.tensor([(time.perf_counter() - start) / rounds])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        print("%s: per round %.2f ms" % (backend, 1e3 * slowest.item()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
