"""The trainer run the parity tests compare layouts with (tests/parallel/test_parity.py,
tests/optim/test_muon_parity.py): a short run of the tiny model through the real trainer, every step logged,
no checkpoint. Call it on every rank (under `in_float64` for the float64 comparisons)."""
from __future__ import annotations

import json

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=8", "train.micro_batch=2",
        "train.steps=5", "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0", "train.lr=1e-2",
        "ckpt.final=false"]


def train_run(run_dir, overrides, world):
    """(losses and gradient norms on rank 0, else None; the full parameters; the summary) of a run of
    `BASE + overrides` at `world` ranks."""
    from shardlab import config
    from shardlab.train.trainer import Trainer

    cfg = config.validate(config.load(None, BASE + overrides), world)
    trainer = Trainer(cfg, run_dir)
    summary = trainer.run()
    params = {k: v.clone() for k, v in trainer.strategy.full_parameters().items()}
    losses = None
    if trainer.rank == 0:
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        losses = [(r["loss"], r["grad_norm"]) for r in rows if "loss" in r]
    return losses, params, summary
