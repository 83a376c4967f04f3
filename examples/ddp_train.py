#!/usr/bin/python3
"""A small model trained with DistributedDataParallel on synthetic data, its
gradients averaged by the netfold torch.distributed backend (docs/pytorch.md).

With a fabric up (`netfold up --hosts 4`, its NETFOLD_MANAGER and
NETFOLD_CREDENTIAL_FILE exported) and build/host/torch on PYTHONPATH:

  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 4 \\
      --redirects 1 --tee 1 examples/ddp_train.py
  mpirun -np 4 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 -x PYTHONPATH \\
      -x NETFOLD_MANAGER -x NETFOLD_CREDENTIAL_FILE /usr/bin/python3 examples/ddp_train.py

`--backend gloo` trains the same model on gloo, for comparison. Rank 0
prints one line per step, "step N loss L HEX" (HEX: the float's exact bits,
float.hex()), and every rank prints a digest of its parameters at the end
(the same on every rank, since DDP keeps them equal).
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="netfold", choices=["netfold", "gloo"])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--bucket-mb", type=float, default=0.01,
                   help="DDP's bucket size: small, so that gradients go in several allreduces")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def say(line):
    """One write per line: mpirun forwards each write of every rank as it comes."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def synthetic_batch(seed, rank, step, batch):
    """This rank's batch of step `step`: y = sin(x . w) + x0 * x1, the same for any backend."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + step)
    x = torch.randn(batch, 16, generator=g)
    w = torch.linspace(-1, 1, 16)
    y = torch.sin(x @ w) + x[:, 0] * x[:, 1]
    return x, y.unsqueeze(1)


def main():
    args = parse_args()
    # Under mpirun: torch's env:// rendezvous reads RANK and WORLD_SIZE.
    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
    if args.backend == "netfold":
        import netfold_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()

    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 1))
    # DDP's first bucket (1 MiB unless told, torch's documented knob) would
    # hold this whole model: with small buckets each step's gradients go
    # out in several allreduces, in flight together, completed through
    # their futures.
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_mb * 2**20)
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.MSELoss()
    for step in range(args.steps):
        x, y = synthetic_batch(args.seed, rank, step, args.batch)
        optimizer.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP averages the gradients across ranks here
        optimizer.step()
        if rank == 0:
            say(f"step {step} loss {loss.item():.9g} {loss.item().hex()}")

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    say(f"rank {rank} params {digest.hexdigest()}")
    if args.backend == "netfold":
        stats = netfold_torch.stats()
        say(f"rank {rank} netfold ops_completed {stats['ops_completed']} "
            f"host_ops {stats['host_ops']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
