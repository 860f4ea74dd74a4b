"""The strategies Pareto plot: tokens/s against memory per rank, frontier marked.

`bench strategies` measures; this draws. A point is on the frontier when no other strategy is
both at least as fast and at most as memory-hungry (and strictly better in one of the two).
"""
from __future__ import annotations

from pathlib import Path

from shardlab.bench import common


def frontier(points: list[dict], x: str = "mem_bytes", y: str = "tokens_per_s") -> list[dict]:
    """Non-dominated points (less memory is better, more tokens/s is better), sorted by memory."""
    def dominated(p):
        return any(q[x] <= p[x] and q[y] >= p[y] and (q[x] < p[x] or q[y] > p[y]) for q in points)
    return sorted((p for p in points if not dominated(p)), key=lambda p: p[x])


def plot(out: Path, points: list[dict], title: str = "strategies: throughput vs memory per rank",
         x: str = "mem_bytes", y: str = "tokens_per_s", filename: str = "pareto.png") -> Path:
    """points: [{"name", x, y, optional f"{y}_min"/f"{y}_max" for error bars}]."""
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in points:
        err = None
        if p.get(f"{y}_min") is not None and p.get(f"{y}_max") is not None:
            err = [[p[y] - p[f"{y}_min"]], [p[f"{y}_max"] - p[y]]]
        ax.errorbar(p[x] / 2**20, p[y], yerr=err, fmt="o", capsize=3)
        ax.annotate(p["name"], (p[x] / 2**20, p[y]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    f = frontier(points, x, y)
    ax.plot([p[x] / 2**20 for p in f], [p[y] for p in f], "--", color="grey", label="Pareto frontier")
    ax.set(xlabel="memory per rank (MiB)", ylabel="tokens/s", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / filename
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
