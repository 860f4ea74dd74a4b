"""Expert load over steps, drawn from metrics.jsonl: `expert_load.png` in the run directory.

One row per expert of each MoE layer (`L{i}.e{j}`: the i-th MoE layer in block order, its expert j), one
column per logged step; the colour is the token-slots routed to the expert that step divided by the mean
over the layer's experts (1 = its fair share). A diverging map centred on 1 shows at a glance an expert
that starves (blue) or hogs (red) the layer's tokens, and whether the auxiliary loss evens them out as
training goes on. Counts are before dropping (what the router asked for, not what capacity let through).
"""
from __future__ import annotations

from pathlib import Path

from shardlab.train.metrics import read_rows

FILE = "expert_load.png"


def load_matrix(rows: list[dict]) -> tuple[list[int], list[str], list[list[float]]]:
    """(steps, row labels, load[expert row][step]) from metrics rows; load = tokens ÷ the layer's mean.
    Rows without per-layer counts fall back to the counts summed over layers (labels `e{j}`)."""
    logged = [r for r in rows if r.get("moe_tokens_per_expert") is not None]
    if not logged:
        return [], [], []
    per_layer = all(r.get("moe_tokens_per_layer_expert") for r in logged)
    steps, cols = [], []
    for r in logged:
        layers = r["moe_tokens_per_layer_expert"] if per_layer else [r["moe_tokens_per_expert"]]
        col = []
        for counts in layers:
            mean = sum(counts) / len(counts)
            col += [c / mean if mean else 0.0 for c in counts]
        steps.append(r["step"])
        cols.append(col)
    shape = logged[0]["moe_tokens_per_layer_expert"] if per_layer else [logged[0]["moe_tokens_per_expert"]]
    labels = [f"L{i}.e{j}" if per_layer else f"e{j}" for i, layer in enumerate(shape) for j in range(len(layer))]
    return steps, labels, [list(row) for row in zip(*cols)]


def plot_expert_load(run_dir: Path) -> Path | None:
    """Write run_dir/expert_load.png from run_dir/metrics.jsonl; None when the run logged no routing."""
    steps, labels, load = load_matrix(read_rows(Path(run_dir) / "metrics.jsonl"))
    if not steps:
        return None
    try:
        import matplotlib
    except ImportError:  # optional where shardlab runs from src/ on another environment (make gpu-check)
        print("expert_load.png skipped: matplotlib is not installed", flush=True)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    top = max(2.0, max(max(row) for row in load))
    fig, ax = plt.subplots(figsize=(min(12, 4 + 0.06 * len(steps)), min(10, 1.5 + 0.25 * len(labels))))
    im = ax.imshow(load, aspect="auto", cmap="RdBu_r", norm=TwoSlopeNorm(vmin=0.0, vcenter=1.0, vmax=top),
                   interpolation="nearest", extent=(steps[0] - 0.5, steps[-1] + 0.5, len(labels) - 0.5, -0.5))
    ax.set_yticks(range(len(labels)), labels, fontsize=7 if len(labels) > 16 else 9)
    ax.set_xlabel("step")
    ax.set_ylabel("MoE layer . expert")
    ax.set_title(f"expert load (tokens ÷ layer mean): {Path(run_dir).name}")
    fig.colorbar(im, ax=ax, label="tokens routed ÷ mean")
    fig.tight_layout()
    path = Path(run_dir) / FILE
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
