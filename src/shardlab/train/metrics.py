"""Metrics: `metrics.jsonl` (one JSON object per logged step), TensorBoard scalars when installed,
a progress line on rank 0, and the loss plot at the end."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


class MetricsLog:
    def __init__(self, run_dir: Path, total_steps: int, enabled: bool):
        self.enabled = enabled
        self.total = total_steps
        self.t0 = time.perf_counter()
        self.rows: list[dict] = []
        self.tb = None
        if not enabled:
            return
        self.file = open(run_dir / "metrics.jsonl", "a", buffering=1)
        self.tb = _tensorboard(run_dir / "tb")

    def log(self, row: dict, start_step: int = 0) -> None:
        if not self.enabled:
            return
        self.rows.append(row)
        self.file.write(json.dumps(row) + "\n")
        if self.tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)) and v is not None:
                    self.tb.add_scalar(k, v, row["step"])
        if "loss" in row:
            done = row["step"] - start_step
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / max(done, 1) * (self.total - row["step"])
            val = f" | val {row['val_loss']:.3f}" if row.get("val_loss") is not None else ""
            print(f"step {row['step']:>6}/{self.total} | loss {row['loss']:.4f}{val} | lr {row['lr']:.2e} | "
                  f"{row['tokens_per_s']:>9,.0f} tok/s | ETA {_hms(eta)}", flush=True)
        elif "val_loss" in row:
            print(f"step {row['step']:>6}/{self.total} | val {row['val_loss']:.4f}", flush=True)

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            if self.tb is not None:
                self.tb.close()


_TB_SAID = False  # the missing-package line, once per process (a bench runs many jobs in one)


def _tensorboard(log_dir: Path):
    """A SummaryWriter when the optional `tensorboard` package is installed (`pip install
    'shardlab[tensorboard]'`), else None after saying so once; metrics.jsonl is the record either way."""
    global _TB_SAID
    try:
        from torch.utils.tensorboard import SummaryWriter
        return SummaryWriter(str(log_dir))
    except Exception as e:  # noqa: BLE001 - missing or broken: training goes on without it
        if not _TB_SAID:
            _TB_SAID = True
            why = "is not installed" if isinstance(e, ImportError) else f"failed ({type(e).__name__}: {e})"
            print(f"[metrics] TensorBoard scalars off: the tensorboard package {why}; metrics.jsonl has every "
                  "figure (pip install 'shardlab[tensorboard]' for tb/)", file=sys.stderr, flush=True)
        return None


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def plot_losses(run_dir: Path) -> Path | None:
    """loss.png from metrics.jsonl: training loss per logged step and validation loss."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    train = [(r["step"], r["loss"]) for r in rows if r.get("loss") is not None]
    val = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    if not train and not val:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    if train:
        ax.plot(*zip(*train), label="train")
    if val:
        ax.plot(*zip(*val), "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/byte)")
    ax.set_title(run_dir.name)
    ax.legend()
    ax.grid(alpha=0.3)
    path = run_dir / "loss.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def print_summary(summary: dict, file=None) -> None:
    file = file or sys.stdout  # looked up now, not at import (a redirected stdout is honoured)
    keys = ("strategy", "world_size", "params", "steps", "tokens_per_s", "step_time_s", "final_train_loss",
            "final_val_loss", "peak_mem_bytes", "ranks_consistent")
    print("\nsummary:", file=file)
    for k in keys:
        v = summary.get(k)
        if isinstance(v, float):
            v = f"{v:,.4g}"
        elif isinstance(v, int) and not isinstance(v, bool):
            v = f"{v:,}"
        print(f"  {k:<18} {v}", file=file)
