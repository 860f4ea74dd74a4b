"""Metrics: `metrics.jsonl` (one JSON object per logged step), the same numbers to the trackers
`train.tracker` names (TensorBoard, MLflow, W&B: train/trackers.py), a progress line on rank 0, and the loss
plot at the end.

`metrics.jsonl` is strict JSON (RFC 8259 has no NaN/Infinity): a non-finite value is written as `null` and
its key listed in the record's `nonfinite`. Each step number appears at most once: a step whose update did
not happen has an `event` record, always written whatever `train.log_every` says:

    {"step": 8, "event": "skip", "skipped": true, "reason": "...", "loss": null, "nonfinite": ["loss"], ...}
    {"step": 8, "event": "rollback", "skipped": true, "rolled_back_to": 6, "reason": "..."}

a rollback drops the records after the step it returns to (the replay writes them again), and a run
that starts (a resume, or a fresh start in a used directory) moves the records after the step it starts
from into `metrics.archived-<n>.jsonl` (n = 1, 2, ...; one line says so), so nothing an earlier attempt
logged is lost. `summary.json`'s `skipped_steps` and `events` are counted from this file, so they match it.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from pathlib import Path

from shardlab.degrees import Degrees
from shardlab.train.trackers import open_trackers


_ARCHIVE_RE = re.compile(r"^metrics\.archived-(\d+)\.jsonl$")


def strict(row: dict) -> dict:
    """Non-finite floats -> None, their keys listed under `nonfinite` (so the record is valid JSON)."""
    out, bad = {}, []
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            out[k] = None
            bad.append(k)
        else:
            out[k] = v
    if bad:
        out["nonfinite"] = bad
    return out


def strict_json(obj):
    """The same for a nested object (summary.json): non-finite floats become None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def read_rows(path: Path) -> list[dict]:
    """The records of a metrics.jsonl (older files with bare NaN parse too)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def counts(rows: list[dict]) -> dict:
    """summary.json's counts, from the records themselves."""
    events = [r for r in rows if r.get("event")]
    return {"skipped_steps": sum(1 for r in events if r.get("skipped")),
            "events": {kind: sum(1 for r in events if r["event"] == kind) for kind in ("skip", "rollback")}}


class MetricsLog:
    """On rank 0 (`enabled`): metrics.jsonl and the trackers `tracker` names (train.tracker), opened with the
    resolved config (`config`: {section: {key: value}}, what config.toml holds)."""

    def __init__(self, run_dir: Path, total_steps: int, enabled: bool, tracker: str = "none",
                 config: dict | None = None):
        self.enabled = enabled
        self.total = total_steps
        self.t0 = time.perf_counter()
        self.rows: list[dict] = []
        self.trackers: list = []
        if not enabled:
            return
        self.file = open(run_dir / "metrics.jsonl", "a", buffering=1)
        self.trackers = open_trackers(tracker, run_dir, config or {})

    def log(self, row: dict, start_step: int = 0) -> None:
        if not self.enabled:
            return
        row = strict(row)
        self.rows.append(row)
        self.file.write(json.dumps(row, allow_nan=False) + "\n")
        if self.trackers:
            scalars = scalars_of(row)
            for t in self.trackers:
                t.log(row["step"], scalars)
        if row.get("event"):
            extra = f" (rolled back to step {row['rolled_back_to']})" if "rolled_back_to" in row else ""
            print(f"step {row['step']:>6}/{self.total} | {row['event']}{extra}: {row.get('reason', '')}", flush=True)
        elif row.get("tokens_per_s") is not None:
            done = row["step"] - start_step
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / max(done, 1) * (self.total - row["step"])
            val = f" | val {row['val_loss']:.3f}" if row.get("val_loss") is not None else ""
            loss = f"{row['loss']:.4f}" if row.get("loss") is not None else "n/a"
            print(f"step {row['step']:>6}/{self.total} | loss {loss}{val} | lr {row['lr']:.2e} | "
                  f"{row['tokens_per_s']:>9,.0f} tok/s | ETA {_hms(eta)}", flush=True)
        elif row.get("val_loss") is not None:
            print(f"step {row['step']:>6}/{self.total} | val {row['val_loss']:.4f}", flush=True)

    def archive_after(self, step: int) -> Path | None:
        """When a run starts (a resume from `step` completed steps, or a fresh start in a used directory:
        step -1): move the records after `step` out of metrics.jsonl into the next free
        `metrics.archived-<n>.jsonl`, unchanged, and say so in one line. The run writes those steps again,
        so metrics.jsonl never repeats a step, and what an earlier attempt logged (an interrupted stretch, a
        run with another config) is kept, not lost. Returns the archive, or None when nothing was moved."""
        if not self.enabled:
            return None
        self.file.close()
        path = Path(self.file.name)
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()] if path.is_file() else []
        steps = [json.loads(ln).get("step", 0) for ln in lines]
        moved = [ln for ln, s in zip(lines, steps) if s > step]
        archive = None
        if moved:
            taken = [int(m.group(1)) for p in path.parent.glob("metrics.archived-*.jsonl")
                     if (m := _ARCHIVE_RE.match(p.name))]
            archive = path.parent / f"metrics.archived-{max(taken, default=0) + 1}.jsonl"
            archive.write_text("\n".join(moved) + "\n")  # first: a crash now leaves a copy, never a loss
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(ln + "\n" for ln, s in zip(lines, steps) if s <= step))
            os.replace(tmp, path)
            span = sorted(s for s in steps if s > step)
            what = f"this run continues from step {step}" if step >= 0 else "this run starts from step 0"
            print(f"[metrics] {len(moved)} record(s) of steps {span[0]}-{span[-1]} from an earlier attempt moved "
                  f"to {archive}: {what}", file=sys.stderr, flush=True)
        self.rows = [r for r in self.rows if r.get("step", 0) <= step]
        self.file = open(path, "a", buffering=1)
        return archive

    def truncate(self, step: int) -> None:
        """Drop the records after `step` (completed steps): a rollback continues from there and writes
        them again, so no step is logged twice."""
        if not self.enabled:
            return
        self.file.close()
        path = self.file.name
        rows = read_rows(Path(path))
        kept = [r for r in rows if r.get("step", 0) <= step]
        if len(kept) != len(rows):
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(strict(r), allow_nan=False) + "\n" for r in kept)
            os.replace(tmp, path)
        self.rows = [r for r in self.rows if r.get("step", 0) <= step]
        self.file = open(path, "a", buffering=1)

    def counts(self) -> dict:
        return counts(read_rows(Path(self.file.name))) if self.enabled else {}

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            for t in self.trackers:
                t.close()
            self.trackers = []


def scalars_of(row: dict) -> dict[str, float]:
    """What a tracker gets of a metrics.jsonl record: its numbers (a null, a flag, a reason or a list is not one)."""
    return {k: v for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def plot_losses(run_dir: Path) -> Path | None:
    """loss.png from metrics.jsonl: training loss per logged step and validation loss."""
    rows = read_rows(run_dir / "metrics.jsonl")
    train = [(r["step"], r["loss"]) for r in rows if r.get("loss") is not None]
    val = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    if not train and not val:
        return None
    try:
        import matplotlib
    except ImportError:  # optional where shardlab runs from src/ on another environment (make gpu-check)
        print("loss.png skipped: matplotlib is not installed", flush=True)
        return None
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
    keys = ("strategy", "layout", "world_size", "params", "params_total", "steps", "tokens_per_s", "step_time_s",
            "mfu", "final_train_loss", "final_val_loss", "peak_mem_bytes", "ranks_consistent")
    print("\nsummary:", file=file)
    for k in keys:
        print(f"  {k:<18} {readable(k, summary.get(k), summary)}", file=file)


def readable(key: str, v, summary: dict | None = None) -> str:
    """One summary.json value as the step lines write it: `12,565 tok/s`, `4.4958`, `0.204 s`,
    `328,794,112 (313.6 MiB)`; summary.json keeps the raw numbers."""
    if key == "layout" and isinstance(v, dict):
        return describe_layout(v)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if key == "mfu":
        peak = (summary or {}).get("peak_flops_per_rank")
        return f"{v:.2%}" + (f" (peak {_si(peak)}FLOP/s per rank)" if peak else "")
    if key == "tokens_per_s":
        return f"{v:,.0f} tok/s"
    if key == "step_time_s":
        return f"{v:.3g} s"
    if key.endswith("_loss"):
        return f"{v:.4f}"
    if key.endswith("_bytes"):
        return f"{int(v):,} ({v / 2**20:,.1f} MiB)"
    if isinstance(v, int) or abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def _si(x: float) -> str:
    """71,700,000,000 -> '71.7 G' (FLOP/s read in G and T)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}"
    return f"{x:.3g} "


def describe_layout(lay: dict) -> str:
    """summary.json's `layout` in one line: `zero3 | dp 2 x tp 2 | pp 1f1b | sync every_step`."""
    deg = Degrees(**{k: lay.get(k, 1) for k in ("dp_replicate", "dp_shard", "tp", "pp", "cp", "ep")})
    parts = [str(lay.get("dp")), deg.describe()]
    if lay.get("pp_schedule"):
        parts.append(f"pp {lay['pp_schedule']}")
    if lay.get("sync") not in (None, "every_step"):
        parts.append(f"sync {lay['sync']}")
    return " | ".join(parts)


class StepLog:
    """Turns each finished step into its metrics record: a regular line every `train.log_every` steps,
    an `event` record for every step whose update was skipped or that a rollback returned to.
    The trainer calls `rolled_back` when it reloads a checkpoint and `finished` after every step."""

    def __init__(self, trainer):
        self.tr = trainer
        self.pending: dict[int, dict] = {}  # step index -> the rollback that happened there
        self.last_train_loss: float | None = None
        self.last_val: float | None = None
        self.window_t0, self.window_steps = time.perf_counter(), 0

    def rolled_back(self, at_index: int, to_step: int, reason: str) -> None:
        """A rollback at step index `at_index` to the checkpoint of `to_step` completed steps."""
        self.pending[at_index] = {"event": "rollback", "rolled_back_to": to_step, "reason": reason}
        self.tr.metrics.truncate(to_step)

    def event(self, index: int, verdict: str, skipped: bool) -> dict | None:
        """The event of step `index` (0-based), identical on every rank (verdicts are agreed)."""
        if index in self.pending:
            ev = self.pending.pop(index)
        elif verdict == "skip":
            report = self.tr.doctor.last_report or {}
            ev = {"event": "skip", "reason": f"anomaly: {report.get('reason', 'doctor.on_anomaly=skip')}"}
        elif skipped:
            scaler = self.tr.state.scaler
            ev = {"event": "skip", "reason": "fp16 overflow: the loss scale was halved"
                                             + (f" to {scaler.scale:g}" if scaler is not None else "")}
        else:
            return None
        return {**ev, "skipped": bool(skipped)}

    def finished(self, step: int, verdict: str, skipped: bool, loss_sum, grad_norm: float, dt: float,
                 evaluate_fn) -> None:
        """After step `step` (completed steps, 1-based) on every rank: log what is due."""
        from shardlab.optim import lr_at

        tr, t = self.tr, self.tr.cfg.train
        self.window_steps += 1
        ev = self.event(step - 1, verdict, skipped)
        shares = tr.balance.pop_log() if getattr(tr, "balance", None) is not None else None  # new shares
        log_now = step % t.log_every == 0 or step == t.steps or shares is not None
        eval_now = t.eval_every and (step % t.eval_every == 0 or step == t.steps)
        if not (log_now or eval_now or ev):
            return
        row = {"step": step, **(ev or {}), **(shares or {})}
        ran = not (ev and ev["event"] == "rollback" and ev["skipped"])  # a skipped bad batch never ran
        if (log_now or ev) and ran:
            tr.par.sum_over_data(loss_sum, tag="metrics")  # data-parallel ranks saw different tokens
            loss = loss_sum.item() / tr.tokens_per_step
            row.update(loss=loss, grad_norm=grad_norm, lr=lr_at(step - 1, tr.cfg))
            if getattr(tr, "moe_log", None) is not None:
                row.update(tr.moe_log.row())  # tokens per expert, dropped, aux and z losses
            if tr.cfg.train.fp8 != "none":  # every rank's float8 casts (amax, scale, underflow, saturation)
                from shardlab.fp8.stats import gather  # one object all-gather: TP/pp/EP hold other layers
                # from this rank's part (par.model is the whole, unsplit); a non-finite figure -> null
                row["fp8"] = strict_json(gather(tr.par.dp.model))
            if tr.state.scaler is not None:
                row["loss_scale"] = tr.state.scaler.scale
            if not ev:  # a throughput only for steps that updated the model
                self.last_train_loss = loss
                elapsed = time.perf_counter() - self.window_t0
                row.update(tokens_per_s=self.window_steps * tr.tokens_per_step / elapsed, step_time_s=dt)
        if eval_now:
            self.last_val = evaluate_fn(tr)
            row["val_loss"] = self.last_val
        tr.metrics.log(row, tr.start_step)
        if not ev:
            self.window_t0, self.window_steps = time.perf_counter(), 0
