#!/usr/bin/python3
"""torch.distributed all_reduce on the netfold backend against gloo, in the
same job: one process group of each over the same ranks, the same tensors,
the two backends alternating at every size so that load drifts hit both.

Run on every rank by bench/torch/run_torch_bench.sh (or by hand under
torchrun with a fabric up and build/host/torch on PYTHONPATH):

  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 8 \\
      --redirects 1 --tee 1 bench/torch/torch_allreduce_bench.py --sizes 8,65536 --seconds 1

For each size (bytes of float32, SUM) and backend: a few warm-up calls, then
as many blocking all_reduce calls as fill --seconds on rank 0 (at least
--min-iterations; the same count on every rank), timed on every rank. With
--wait future each call is all_reduce(async_op=True) and a wait on its
future, as DDP's gradient hooks complete their buckets. Rank 0 prints one line per size,

  torch_bench ranks=8 bytes=65536 netfold_us=... gloo_us=... ratio=...

with each backend's average over its rounds of the slowest rank's mean time
per call, and ratio = netfold / gloo (below 1: netfold is faster).
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import netfold_torch  # noqa: F401  (registers the backend; imported for --gloo-only too)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="8,65536,1048576,16777216",
                   help="bytes per all_reduce (float32), comma-separated")
    p.add_argument("--seconds", type=float, default=1.0, help="time per size, backend and round")
    p.add_argument("--rounds", type=int, default=3, help="alternations of the two backends")
    p.add_argument("--min-iterations", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--wait", choices=("blocking", "future"), default="blocking",
                   help="blocking all_reduce, or async_op=True and a wait on the Work's future")
    p.add_argument("--gloo-only", action="store_true",
                   help="a job of gloo alone (no netfold in the processes): the control run")
    return p.parse_args()


def timed(tensor, group, calls, wait):
    start = time.perf_counter()
    for _ in range(calls):
        if wait == "future":
            dist.all_reduce(tensor, group=group, async_op=True).get_future().wait()
        else:
            dist.all_reduce(tensor, group=group)
    return time.perf_counter() - start


def mean_call_us(tensor, group, seconds, min_iterations, warmup, gloo, wait):
    """The slowest rank's mean time per blocking all_reduce, in microseconds."""
    timed(tensor, group, warmup, wait)
    # Every rank must make the same number of calls (they are collective):
    # rank 0 times a few and says how many fill `seconds`.
    probe = timed(tensor, group, min_iterations, wait) / min_iterations
    calls = torch.tensor([max(min_iterations, int(seconds / probe))], dtype=torch.int64)
    dist.broadcast(calls, src=0, group=gloo)
    dist.barrier(group=gloo)
    mine = torch.tensor([timed(tensor, group, calls.item(), wait) / calls.item() * 1e6],
                        dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=gloo)
    return mine.item()


def main():
    args = parse_args()
    if args.gloo_only:
        dist.init_process_group("gloo")
        gloo = dist.group.WORLD
        backends = (("gloo", gloo),)
    else:
        dist.init_process_group("netfold")
        gloo = dist.new_group(backend="gloo")
        backends = (("netfold", dist.group.WORLD), ("gloo", gloo))
    rank, size = dist.get_rank(), dist.get_world_size()
    for nbytes in [int(s) for s in args.sizes.split(",")]:
        tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        results = {name: [] for name, _ in backends}
        for _ in range(args.rounds):
            for name, group in backends:
                results[name].append(mean_call_us(tensor, group, args.seconds,
                                                  args.min_iterations, args.warmup, gloo,
                                                  args.wait))
        if rank == 0 and args.gloo_only:
            g = statistics.fmean(results["gloo"])
            rounds = " ".join(f"{b:.0f}" for b in results["gloo"])
            print(f"torch_bench ranks={size} bytes={nbytes} gloo_alone_us={g:.1f} rounds_us={rounds}",
                  flush=True)
        elif rank == 0:
            n = statistics.fmean(results["netfold"])
            g = statistics.fmean(results["gloo"])
            rounds = " ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(results["netfold"], results["gloo"]))
            print(f"torch_bench ranks={size} bytes={nbytes} netfold_us={n:.1f} gloo_us={g:.1f} "
                  f"ratio={n / g:.2f} rounds_us={rounds}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
