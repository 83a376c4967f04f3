#!/usr/bin/python3
"""Plots of `netfold bench` results (run by the CLI when matplotlib exists).

Usage: plot_bench.py RESULTS.csv OUT_DIR
Writes latency_vs_size.png (one panel per rank count: netfold and Open MPI
over shared memory and TCP) and ratio_vs_ranks.png (netfold / Open MPI TCP
and shared memory, one line per size); for `--testbed` runs (a
link_rate_bps column) testbed_vs_rate.png (time against the link rate, and
in-network over the ring against the bound).
"""
import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def human(size):
    """4 B, 64 B, 1 KiB, 16 KiB, 64 MiB: the table's spelling."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def plot_testbed(rows, out_dir):
    """`--testbed` runs: time and the ratio to the ring against the link rate."""
    op = rows[0]["op"]
    p = int(rows[0]["ranks"])
    data = defaultdict(dict)  # (variant, size) -> rate -> avg_us
    for r in rows:
        data[(r["variant"], int(r["size_bytes"]))][float(r["link_rate_bps"])] = float(r["avg_us"])
    sizes = sorted({k[1] for k in data})
    variants = [v for v in ("netfold", "ring", "ompi-tcp") if any(k[0] == v for k in data)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for s in sizes:
        for v in variants:
            pts = sorted(data.get((v, s), {}).items())
            if pts:
                axes[0].loglog([r / 1e6 for r, _ in pts], [t / 1000 for _, t in pts], marker="o",
                               label=f"{v}, {human(s)}")
        nf, ring = data.get(("netfold", s), {}), data.get(("ring", s), {})
        pts = sorted((r, nf[r] / ring[r]) for r in nf if r in ring)
        if pts:
            axes[1].semilogx([r / 1e6 for r, _ in pts], [x for _, x in pts], marker="o",
                             label=human(s))
    axes[0].set_xlabel("link rate (Mbit/s)")
    axes[0].set_ylabel("average time per operation (ms)")
    axes[0].set_title(f"{op}, {p} ranks, every link shaped")
    axes[0].grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    axes[1].axhline(p / (2 * (p - 1)), color="black", linewidth=0.8, linestyle="--",
                    label=f"bound p/(2(p-1)) = {p / (2 * (p - 1)):.3f}")
    axes[1].set_xlabel("link rate (Mbit/s)")
    axes[1].set_ylabel("in-network / ring time")
    axes[1].set_title("in-network against libnetfold's ring, same links")
    axes[1].grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out_dir}/testbed_vs_rate.png", dpi=110)
    return 0


def main(path, out_dir):
    rows = list(csv.DictReader(open(path)))
    if not rows:
        return 1
    if "link_rate_bps" in rows[0]:
        return plot_testbed(rows, out_dir)
    op = rows[0]["op"]
    # (variant, ranks) -> size -> avg_us; with --rounds, the median of the
    # rounds' averages, as the table gives it.
    rounds = defaultdict(list)
    for r in rows:
        rounds[(r["variant"], int(r["ranks"]), int(r["size_bytes"]))].append(float(r["avg_us"]))
    data = defaultdict(dict)
    for (variant, ranks_, size), avgs in rounds.items():
        data[(variant, ranks_)][size] = statistics.median(avgs)
    ranks = sorted({k[1] for k in data})
    # In-network and Open MPI first, then libnetfold's host algorithms
    # (dashed) when the run measured them.
    variants = ["netfold", "ompi-sm", "ompi-tcp"]
    variants += sorted({k[0] for k in data} - set(variants))
    fig, axes = plt.subplots(1, len(ranks), figsize=(4.5 * len(ranks), 4), squeeze=False)
    for ax, p in zip(axes[0], ranks):
        for v in variants:
            pts = sorted(data.get((v, p), {}).items())
            if pts:
                style = "-" if v in ("netfold", "ompi-sm", "ompi-tcp") else "--"
                ax.loglog([max(s, 1) for s, _ in pts], [t for _, t in pts], marker="o",
                          linestyle=style, label=v if style == "-" else f"host {v}")
        ax.set_title(f"{op}, {p} ranks")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("average latency (us)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(f"{out_dir}/latency_vs_size.png", dpi=110)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    sizes = sorted({int(r["size_bytes"]) for r in rows})
    for ax, ref in zip(axes, ["ompi-tcp", "ompi-sm"]):
        for s in sizes:
            xs, ys = [], []
            for p in ranks:
                nf = data.get(("netfold", p), {}).get(s)
                om = data.get((ref, p), {}).get(s)
                if nf and om:
                    xs.append(p)
                    ys.append(nf / om)
            if xs:
                ax.plot(xs, ys, marker="o", label=human(s))
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel("ranks")
        ax.set_ylabel(f"netfold / {ref} latency")
        ax.set_yscale("log")
        ax.set_title(f"{op}: ratio to Open MPI ({ref})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out_dir}/ratio_vs_ranks.png", dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
