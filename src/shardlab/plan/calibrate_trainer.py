"""Calibration, trainer half: what shardlab's trainer and strategies cost per step beyond the model,
the optimizer and the collectives' transfer time — data, the doctor's check, bookkeeping, each
collective's Python path and, on shared cores, the ranks' scheduling skew at each sync point.

`shardlab train` runs a miniature of the model (same blocks, 1 dim per head, 8 positions) with the
same strategy and world size; the run's step time minus what the profile predicts for it is the
residual, charged to every step of the real model. The profile knows the miniature's own forward,
backward, hooks and optimizer step (calibrated in situ beside the model), so the residual is the
trainer's work, not an error of the compute model at shapes it was never calibrated on.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .hardware import Cluster
from .layout import Layout
from .train_spec import TrainSpec
from .model import ModelSpec
from .step import evaluate


def _residual(c: Cluster, world: int, mini: ModelSpec, strategy: str, steps: int) -> tuple[float, int] | None:
    """(measured - predicted step seconds, collective calls per step) for one miniature run."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", str(world), "--out", tmp,
               "model.preset=custom", f"model.n_layer={mini.n_layer}", f"model.n_head={mini.n_head}",
               f"model.d_model={mini.d_model}", "train.seq_len=8", "train.micro_batch=1",
               f"train.global_batch={world}", f"parallel.strategy={strategy}", f"train.steps={steps}",
               "train.eval_every=0", f"train.log_every={steps}", "ckpt.final=false"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:  # no trainer here (the planner used on its own): nothing to add
            tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
            print(f"shardlab plan calibrate: trainer overhead not measured ({strategy}, world {world}): "
                  f"{tail[0]}", file=sys.stderr)
            return None
        measured = json.loads((Path(tmp) / "summary.json").read_text())["step_time_s"]
    lay = Layout(dp=world, strategy="ddp" if strategy == "single" else strategy, health_check=True)
    pred = evaluate(mini, TrainSpec(global_batch=world, micro_batch=1, precision="fp32", flash_attention=True),
                    lay, c)
    calls = sum(cl.c.calls for cl in pred.comm) if world > 1 else 0
    return measured - pred.step_time, calls


def trainer_overhead(c: Cluster, world: int, like: ModelSpec, strategy: str | None = None,
                     steps: int = 40) -> tuple[float, float]:
    """(fixed seconds per step, seconds per collective call) for `strategy` at `world` ranks. The
    miniature keeps `like`'s number of blocks, so it issues the same collectives (one per ZeRO unit)
    and runs the same Python per block: its residual is the whole per-step overhead, and nothing is
    extrapolated (a per-call split from two small miniatures proved too noisy on shared cores)."""
    strategy = strategy or ("single" if world == 1 else "ddp")
    mini = like.miniature()
    r = _residual(c, world, mini, strategy, steps)
    return (max(0.0, r[0]) if r else 0.0), 0.0
