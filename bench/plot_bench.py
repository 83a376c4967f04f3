#!/usr/bin/python3
"""Plots of `netfold bench` results (run by the CLI when matplotlib exists).

Usage: plot_bench.py RESULTS.csv OUT_DIR
Writes latency_vs_size.png (one panel per rank count: netfold and Open MPI
over shared memory and TCP) and ratio_vs_ranks.png (netfold / Open MPI TCP
and shared memory, one line per size).
"""
import csv
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


def main(path, out_dir):
    rows = list(csv.DictReader(open(path)))
    if not rows:
        return 1
    op = rows[0]["op"]
    data = defaultdict(dict)  # (variant, ranks) -> size -> avg_us
    for r in rows:
        data[(r["variant"], int(r["ranks"]))][int(r["size_bytes"])] = float(r["avg_us"])
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
