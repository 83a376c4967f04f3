#!/usr/bin/python3
"""Every collective of the netfold torch.distributed backend, checked.

Run by tests/torch/torch_backend_test.cc on each rank, under torchrun or
under mpirun with env:// rendezvous (MASTER_ADDR, MASTER_PORT and Open MPI's
rank variables). For every collective x every type netfold has (and bool,
and the types broadcast and allgather only move) x every op: the result is
compared exactly with one computed here from every rank's input, whose
values are chosen so that any reduction order gives the same bits; and with
the gloo backend on the same ranks where gloo has the type and op, bitwise
where the order of a reduction cannot matter (integers, MIN, MAX, and
floating-point SUM and PRODUCT of two ranks, since a + b == b + a).
Then: tensors that are not contiguous, all_gather_into_tensor in place,
subgroups (dist.new_group), several asynchronous Works outstanding and
their futures, errors that name what is not supported (and leave the group
usable), and netfold's counters (nothing ran on the hosts).

Prints "rank R: torch_collectives ok, N checked" or the first failures,
and exits 1 if anything failed.
"""
import datetime
import faulthandler
import os
import sys
import time

import torch
import torch.distributed as dist

import netfold_torch

ReduceOp = dist.ReduceOp
INTEGER_TYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT_TYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NETFOLD_TYPES = INTEGER_TYPES + FLOAT_TYPES
REDUCED_TYPES = NETFOLD_TYPES + [torch.bool]
MOVED_TYPES = REDUCED_TYPES + [torch.complex64, torch.complex128]
OPS = {"SUM": ReduceOp.SUM, "PRODUCT": ReduceOp.PRODUCT, "MIN": ReduceOp.MIN,
       "MAX": ReduceOp.MAX, "BAND": ReduceOp.BAND, "BOR": ReduceOp.BOR,
       "BXOR": ReduceOp.BXOR, "AVG": ReduceOp.AVG}
# What gloo (torch 1.13) reduces and moves: no int16, bfloat16 or bool, no AVG.
GLOO_TYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16,
              torch.float32, torch.float64]


class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.checked = 0
        self.failures = []

    def expect(self, ok, what):
        self.checked += 1
        if not ok:
            self.failures.append(what)

    def equal(self, got, want, what):
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        self.expect(ok, f"{what}: got {got.flatten()[:6].tolist()}, "
                        f"want {want.flatten()[:6].tolist()}")


def say(line):
    """One write per line: mpirun forwards each write of every rank as it comes."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def supported(dtype, op):
    if op == "AVG":
        return dtype.is_floating_point
    if op in ("BAND", "BOR", "BXOR"):
        return not dtype.is_floating_point
    return True


def make_input(dtype, op, rank, n, salt=0):
    """Rank `rank`'s input: values whose reduction is exact in any order."""
    i = torch.arange(n, dtype=torch.int64) + salt
    if dtype == torch.bool:
        return ((i * 7 + rank * 3) % 5 < 2)
    if op in ("SUM", "AVG"):
        v = (i * 7 + rank * 3) % 11 + 1           # at most 11 * 8 = 88 for 8 ranks
    elif op == "PRODUCT":
        v = 1 + ((i + rank) % 3 == 0).long()      # 1 or 2: at most 2^3
        if dtype.is_signed or dtype.is_floating_point:
            v = torch.where((i + 2 * rank) % 5 == 0, -v, v)
    elif op in ("MIN", "MAX"):
        v = (i * 13 + rank * 29) % 100
        if dtype.is_signed or dtype.is_floating_point:
            v = v - 50
    else:  # bitwise: the type's whole width, negative values included
        width = min(torch.iinfo(dtype).bits, 62)
        v = ((i * 2654435761 + rank * 97531 + 12345) * 2246822519) % (1 << width)
        if dtype.is_signed:
            v = v - (1 << (width - 1))
    if dtype.is_floating_point and op in ("MIN", "MAX"):
        return v.to(dtype) / 4                    # quarters: exact in every float type
    return v.to(dtype)


def reduce_all(inputs, op, size):
    """What the reduction of `inputs` (one per rank) must give."""
    fold = {"SUM": torch.add, "AVG": torch.add, "PRODUCT": torch.mul, "MIN": torch.minimum,
            "MAX": torch.maximum, "BAND": torch.bitwise_and, "BOR": torch.bitwise_or,
            "BXOR": torch.bitwise_xor}[op]
    if inputs[0].dtype == torch.bool and op in ("SUM", "PRODUCT"):
        fold = torch.logical_or if op == "SUM" else torch.logical_and
    out = inputs[0].clone()
    for x in inputs[1:]:
        out = fold(out, x)
    if op == "AVG":
        out = out.div(size)
    return out


def bitwise_with_gloo(dtype, op, size):
    """Whether gloo's result must be bitwise ours for random data."""
    if not dtype.is_floating_point or op in ("MIN", "MAX"):
        return True
    return size == 2  # a + b == b + a: two ranks cannot differ in order


def check_allreduce(c, gloo, rank, size):
    for dtype in REDUCED_TYPES:
        for name in OPS:
            if not supported(dtype, name):
                continue
            for n in (7, 20000):  # one chunk, several chunks of the fabric's slots
                inputs = [make_input(dtype, name, r, n) for r in range(size)]
                t = inputs[rank].clone()
                dist.all_reduce(t, op=OPS[name])
                c.equal(t, reduce_all(inputs, name, size), f"all_reduce {dtype} {name} n={n}")
                if dtype in GLOO_TYPES and name != "AVG" and n == 7:
                    g = inputs[rank].clone()
                    dist.all_reduce(g, op=OPS[name], group=gloo)
                    c.equal(t, g, f"all_reduce {dtype} {name} against gloo")
    # Random floating-point data: the same bits on every rank; against gloo
    # bitwise where the order cannot matter, else within rounding.
    for dtype in (torch.float32, torch.float64):
        gen = torch.Generator().manual_seed(1000 + rank)
        x = torch.randn(5000, generator=gen, dtype=dtype)
        t, g = x.clone(), x.clone()
        dist.all_reduce(t)
        dist.all_reduce(g, group=gloo)
        everyone = [torch.empty_like(t) for _ in range(size)]
        dist.all_gather(everyone, t, group=gloo)
        c.expect(all(torch.equal(e, t) for e in everyone), f"random {dtype} sum differs between ranks")
        if bitwise_with_gloo(dtype, "SUM", size):
            c.equal(t, g, f"random {dtype} sum against gloo (bitwise)")
        else:
            c.expect(torch.allclose(t, g, rtol=1e-5, atol=1e-5), f"random {dtype} sum against gloo")


def check_broadcast(c, gloo, rank, size):
    for dtype in MOVED_TYPES:
        for root in range(size):
            want = (make_input(dtype, "MAX", root, 9) if not dtype.is_complex
                    else torch.complex(torch.arange(9.0) + root, -torch.arange(9.0)).to(dtype))
            t = want.clone() if rank == root else torch.zeros_like(want)
            dist.broadcast(t, src=root)
            c.equal(t, want, f"broadcast {dtype} root {root}")
            if dtype in GLOO_TYPES:
                g = want.clone() if rank == root else torch.zeros_like(want)
                dist.broadcast(g, src=root, group=gloo)
                c.equal(t, g, f"broadcast {dtype} against gloo")


def check_reduce(c, gloo, rank, size):
    for dtype in REDUCED_TYPES:
        for name in OPS:
            if not supported(dtype, name):
                continue
            root = list(OPS).index(name) % size
            inputs = [make_input(dtype, name, r, 11) for r in range(size)]
            t = inputs[rank].clone()
            dist.reduce(t, dst=root, op=OPS[name])
            if rank == root:
                c.equal(t, reduce_all(inputs, name, size), f"reduce {dtype} {name} root {root}")
            else:
                c.equal(t, inputs[rank], f"reduce {dtype} {name}: a non-root's tensor changed")
            if dtype in GLOO_TYPES and name != "AVG" and rank == root:
                g = inputs[rank].clone()
                dist.reduce(g, dst=root, op=OPS[name], group=gloo)
                c.equal(t, g, f"reduce {dtype} {name} against gloo")
            elif dtype in GLOO_TYPES and name != "AVG":
                dist.reduce(inputs[rank].clone(), dst=root, op=OPS[name], group=gloo)


def check_allgather(c, gloo, rank, size):
    for dtype in MOVED_TYPES:
        def part(r, dtype=dtype):
            if dtype.is_complex:
                return torch.complex(torch.arange(6.0) * (r + 1), torch.full((6,), float(r))).to(dtype).view(2, 3)
            return make_input(dtype, "MAX", r, 6).view(2, 3)
        want = [part(r) for r in range(size)]
        out = [torch.zeros_like(want[0]) for _ in range(size)]
        dist.all_gather(out, part(rank))
        for r in range(size):
            c.equal(out[r], want[r], f"all_gather {dtype} block {r}")
        if dtype in GLOO_TYPES:
            g = [torch.zeros_like(want[0]) for _ in range(size)]
            dist.all_gather(g, part(rank), group=gloo)
            c.expect(all(torch.equal(a, b) for a, b in zip(out, g)), f"all_gather {dtype} against gloo")
        # Into one tensor, and in place: the input is this rank's block.
        flat = torch.zeros((size * 2, 3), dtype=dtype)
        dist.all_gather_into_tensor(flat, part(rank))
        c.equal(flat, torch.cat(want), f"all_gather_into_tensor {dtype}")
        flat = torch.zeros((size * 2, 3), dtype=dtype)
        flat[2 * rank:2 * rank + 2] = part(rank)
        dist.all_gather_into_tensor(flat, flat[2 * rank:2 * rank + 2])
        c.equal(flat, torch.cat(want), f"all_gather_into_tensor {dtype} in place")


def check_reduce_scatter(c, rank, size):
    for dtype in REDUCED_TYPES:
        for name in OPS:
            if not supported(dtype, name):
                continue
            n = 5
            inputs = [make_input(dtype, name, r, n * size, salt=3) for r in range(size)]
            want = reduce_all(inputs, name, size)[rank * n:(rank + 1) * n]
            out = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter(out, list(inputs[rank].chunk(size)), op=OPS[name])
            c.equal(out, want, f"reduce_scatter {dtype} {name}")
            out = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter_tensor(out, inputs[rank], op=OPS[name])
            c.equal(out, want, f"reduce_scatter_tensor {dtype} {name}")


def check_not_contiguous(c, rank, size):
    base = torch.arange(24, dtype=torch.float32).view(4, 6) + rank
    t = base.t()  # a transposed view: staged through a contiguous copy
    dist.all_reduce(t)
    want = (torch.arange(24, dtype=torch.float32).view(4, 6) * size + sum(range(size))).t()
    c.equal(t, want, "all_reduce of a transposed view")
    c.equal(base, want.t(), "all_reduce of a view wrote through to its base")
    b = torch.zeros(10, dtype=torch.int64)
    if rank == 0:
        b[::2] = torch.arange(5) * 3
    dist.broadcast(b[::2], src=0)
    c.equal(b, torch.tensor([0, 0, 3, 0, 6, 0, 9, 0, 12, 0]), "broadcast of a strided slice")
    m = torch.zeros(3, 2 * size, dtype=torch.int32)
    outs = [m[:, 2 * r:2 * r + 2] for r in range(size)]  # columns: not contiguous
    dist.all_gather(outs, torch.full((3, 2), rank, dtype=torch.int32))
    want = torch.arange(size, dtype=torch.int32).repeat_interleave(2).expand(3, -1)
    c.equal(m, want.contiguous(), "all_gather into column slices")


def check_barrier(c, rank, size):
    if rank == 0:
        time.sleep(1.0)
    start = time.monotonic()
    dist.barrier()
    waited = time.monotonic() - start
    c.expect(rank == 0 or waited > 0.5, f"barrier returned after {waited:.3f} s, before rank 0 came")


def check_subgroups(c, rank, size):
    evens = list(range(0, size, 2))
    odds = list(range(1, size, 2))
    groups = {"evens": (evens, dist.new_group(evens)), "odds": (odds, dist.new_group(odds))}
    pair = [size - 1, 0]
    groups["pair"] = (sorted(pair), dist.new_group(pair))
    groups["all"] = (list(range(size)), dist.new_group(list(range(size))))
    for label, (ranks, group) in groups.items():
        if rank not in ranks:
            continue
        me, n = ranks.index(rank), len(ranks)
        c.expect(dist.get_rank(group) == me and dist.get_world_size(group) == n,
                 f"{label}: rank {dist.get_rank(group)} of {dist.get_world_size(group)}")
        t = torch.tensor([rank, 1], dtype=torch.int64)
        dist.all_reduce(t, group=group)
        c.equal(t, torch.tensor([sum(ranks), n]), f"{label} all_reduce")
        b = torch.tensor([float(rank)] * 3)
        dist.broadcast(b, src=ranks[-1], group=group)  # src is a global rank
        c.equal(b, torch.tensor([float(ranks[-1])] * 3), f"{label} broadcast")
        out = [torch.zeros(2, dtype=torch.int16) for _ in ranks]
        dist.all_gather(out, torch.tensor([rank, -rank], dtype=torch.int16), group=group)
        c.expect(all(torch.equal(o, torch.tensor([r, -r], dtype=torch.int16)) for o, r in zip(out, ranks)),
                 f"{label} all_gather")
        rs = torch.zeros(2, dtype=torch.float64)
        dist.reduce_scatter_tensor(rs, torch.arange(2.0 * n, dtype=torch.float64) + rank, group=group)
        want = torch.arange(2.0 * n, dtype=torch.float64)[2 * me:2 * me + 2] * n + sum(ranks)
        c.equal(rs, want, f"{label} reduce_scatter_tensor")
        dist.barrier(group=group)
    # The world still works after the subgroups, and they can be dropped.
    t = torch.ones(3)
    dist.all_reduce(t)
    c.equal(t, torch.full((3,), float(size)), "world all_reduce after subgroups")


def check_async(c, rank, size):
    # Several Works outstanding at once, of several kinds, waited in reverse.
    sizes = [1, 100, 5000, 70000, 3, 260000]
    tensors = [torch.full((n,), float(rank + i), dtype=torch.float32) for i, n in enumerate(sizes)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    b = torch.arange(1000, dtype=torch.int64) if rank == 0 else torch.zeros(1000, dtype=torch.int64)
    works.append(dist.broadcast(b, src=0, async_op=True))
    gathered = [torch.zeros(4, dtype=torch.int32) for _ in range(size)]
    works.append(dist.all_gather(gathered, torch.full((4,), rank, dtype=torch.int32), async_op=True))
    works.append(dist.barrier(async_op=True))
    for w in reversed(works):
        w.wait()
    for i, (t, n) in enumerate(zip(tensors, sizes)):
        c.equal(t, torch.full((n,), float(sum(range(size)) + size * i)), f"async all_reduce {i}")
    c.equal(b, torch.arange(1000, dtype=torch.int64), "async broadcast")
    c.expect(all(torch.equal(g, torch.full((4,), r, dtype=torch.int32)) for r, g in enumerate(gathered)),
             "async all_gather")
    # is_completed() turns true by itself (the group's completion thread).
    t = torch.ones(100000)
    w = dist.all_reduce(t, async_op=True)
    deadline = time.monotonic() + 30
    while not w.is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    c.expect(w.is_completed(), "is_completed() never became true")
    c.equal(t, torch.full((100000,), float(size)), "all_reduce completed through is_completed()")
    # Futures (what DDP waits on), with a callback chained.
    t = torch.full((10,), 2.0)
    fut = dist.all_reduce(t, async_op=True).get_future()
    halved = fut.then(lambda f: f.value()[0] / 2).wait()
    c.equal(halved, torch.full((10,), float(size)), "future of all_reduce, chained")
    # Work.wait(timeout): raises if the operation is not done by then; the
    # operation goes on, and a later wait() completes it.
    big = torch.ones(4 << 20)  # 16 MiB: tens of milliseconds on the fabric
    w = dist.all_reduce(big, async_op=True)
    try:
        w.wait(timeout=datetime.timedelta(milliseconds=1))
        c.expect(False, "wait(timeout=1 ms) returned before a 16 MiB all_reduce could be done")
    except RuntimeError as e:
        c.expect("not complete after 1 ms" in str(e), f"wait(timeout) raised {str(e)[:200]!r}")
    w.wait()
    c.equal(big[:8], torch.full((8,), float(size)), "all_reduce waited for again after a timeout")
    # A Work nobody waits for still completes and frees its tensors.
    for i in range(20):
        dist.all_reduce(torch.ones(1000), async_op=True)
    t = torch.ones(4)
    dist.all_reduce(t)
    c.equal(t, torch.full((4,), float(size)), "all_reduce after unwaited Works")


def check_errors(c, rank, size):
    def error_of(call):
        try:
            call()
        except RuntimeError as e:
            return str(e)
        return ""
    cases = [
        (lambda: dist.all_reduce(torch.ones(3), op=ReduceOp.BAND),
         "ReduceOp.BAND on Float is not supported: bitwise ops need integer"),
        (lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=ReduceOp.AVG),
         "ReduceOp.AVG on Int is not supported: AVG is defined on floating-point"),
        (lambda: dist.all_reduce(torch.ones(3, dtype=torch.complex64), op=ReduceOp.MAX),
         "all_reduce does not support"),  # torch itself refuses
        (lambda: dist.all_reduce(torch.ones(3).to_sparse()), "dense tensors only"),
        (lambda: dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(3 * size + 1)),
         "reduce_scatter_tensor: input of"),
    ]
    for call, words in cases:
        message = error_of(call)
        c.expect(words in message, f"error {words!r} not raised: got {message[:200]!r}")
    t = torch.ones(3)
    dist.all_reduce(t)
    c.equal(t, torch.full((3,), float(size)), "all_reduce after refused calls")


def main():
    # A hang shows where every thread was, well before the test's deadline.
    faulthandler.dump_traceback_later(float(os.environ.get("NETFOLD_TEST_HANG_S", "200")), exit=True)
    # Under mpirun: torch's env:// rendezvous reads RANK and WORLD_SIZE.
    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    dist.init_process_group("netfold")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    c = Checker(rank)
    before = netfold_torch.stats()
    check_allreduce(c, gloo, rank, size)
    check_broadcast(c, gloo, rank, size)
    check_reduce(c, gloo, rank, size)
    check_allgather(c, gloo, rank, size)
    check_reduce_scatter(c, rank, size)
    check_not_contiguous(c, rank, size)
    check_barrier(c, rank, size)
    check_async(c, rank, size)
    check_errors(c, rank, size)
    check_subgroups(c, rank, size)
    after = netfold_torch.stats()
    c.expect(dist.get_backend() == "netfold", f"the default backend is {dist.get_backend()}")
    c.expect(after["ops_completed"] - before["ops_completed"] > 400,
             f"only {after['ops_completed'] - before['ops_completed']} operations on the fabric")
    c.expect(after["host_ops"] == 0 and after["failovers"] == 0,
             f"operations ran on the hosts: {after}")
    c.expect(after["ops_failed"] == 0, f"operations failed: {after}")
    dist.destroy_process_group()
    if c.failures:
        say(f"rank {rank}: torch_collectives FAIL ({len(c.failures)} of {c.checked}): "
            + "; ".join(c.failures[:8]))
        return 1
    say(f"rank {rank}: torch_collectives ok, {c.checked} checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
