"""The learning-rate schedule (whatever the optimizer): linear warm-up, then `train.lr_schedule`:

    cosine  cosine decay from train.lr to train.min_lr at train.steps
    wsd     warm-up, stable, decay (Hu et al. 2024, MiniCPM; the schedule of Muon recipes and torchtitan):
            train.lr until the last `train.decay_fraction` of the steps, then linear to train.min_lr

A pure function of the step, so a run resumed mid-phase continues on the same curve.
"""
from __future__ import annotations

import math


def lr_at(step: int, cfg) -> float:
    """The learning rate of step `step` (0-based)."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    if getattr(t, "lr_schedule", "cosine") == "wsd":
        return _wsd(step, t)
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps))
    return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + math.cos(math.pi * progress))


def _wsd(step: int, t) -> float:
    """Stable at lr, then linear decay over the last ceil(decay_fraction x steps) steps (at most those
    after the warm-up), reaching min_lr at the last step."""
    decay = min(math.ceil(t.decay_fraction * t.steps), t.steps - t.warmup_steps)
    start = t.steps - decay
    if step < start or decay <= 0:
        return t.lr
    progress = min(1.0, (step - start + 1) / decay)
    return t.min_lr + (t.lr - t.min_lr) * (1 - progress)


def set_lr(optimizer, lr: float) -> None:
    """The schedule's lr on every group, times the group's `lr_scale` (the MoE routers' group has one)."""
    for g in optimizer.param_groups:
        g["lr"] = lr * g.get("lr_scale", 1.0)
