"""The learning-rate schedule: linear warm-up, then cosine decay (whatever the optimizer)."""
from __future__ import annotations

import math


def lr_at(step: int, cfg) -> float:
    """Linear warm-up to train.lr, then cosine decay to train.min_lr at train.steps."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps))
    return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + math.cos(math.pi * progress))


def set_lr(optimizer, lr: float) -> None:
    """The schedule's lr on every group, times the group's `lr_scale` (the MoE routers' group has one)."""
    for g in optimizer.param_groups:
        g["lr"] = lr * g.get("lr_scale", 1.0)
