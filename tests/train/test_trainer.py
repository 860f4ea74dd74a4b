"""Trainer behaviour that parity tests do not cover: fp16 overflow steps are skipped on every rank."""
import json

from shardlab import config
from shardlab.train.trainer import Trainer

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=8", "train.micro_batch=2",
        "train.steps=8", "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0",
        "ckpt.final=false"]


def fp16_overflow_run(run_dir, strategy):
    cfg = config.load(None, BASE + [f"parallel.strategy={strategy}", "train.dtype=fp16"])
    cfg = config.validate(cfg, 2)
    trainer = Trainer(cfg, run_dir)
    # fp16 gradients overflow at this scale (fp16's max 65504 / 2^20: any gradient entry above 0.0625): the first
    # steps must be skipped, and halving per skip brings it within reach in the run's 8 steps (from 2^24 it
    # depends on how large the initial weights' largest gradient entry is)
    trainer.state.scaler.scale = 2.0 ** 20
    before = {k: v.clone() for k, v in trainer.strategy.full_parameters().items()}
    summary = trainer.run()
    after = trainer.strategy.full_parameters()
    rows = []
    if trainer.rank == 0:
        # strict JSON: a bare NaN (what json.dumps writes by default) is rejected here
        rows = [json.loads(line, parse_constant=_reject) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return summary, rows, trainer.state.scaler.state_dict(), any(not (before[k] == after[k]).all() for k in before)


def _reject(name):
    raise ValueError(f"{name} is not JSON")


def test_fp16_overflow_skipped_consistently(pool2, tmp_path):
    results = pool2.run(fp16_overflow_run, tmp_path, "torch-fsdp2")
    (summary, rows, scaler0, moved), (_, _, scaler1, _) = results
    assert summary["skipped_steps"] >= 1  # the first steps overflowed and were skipped...
    assert scaler0 == scaler1  # ...on both ranks alike, so the scale stays identical
    # one record per step; each overflow is a `skip` event (not a loss line with a throughput), and the
    # summary's counts are those of the records
    assert [r["step"] for r in rows] == list(range(1, 9))
    skips = [r for r in rows if r.get("event") == "skip"]
    assert skips and skips[0]["step"] == 1 and all(r["skipped"] and "fp16 overflow" in r["reason"] for r in skips)
    assert all("tokens_per_s" not in r for r in skips) and all("tokens_per_s" in r for r in rows if r not in skips)
    assert any(r["grad_norm"] is None and r["nonfinite"] == ["grad_norm"] for r in skips)  # NaN -> null + flag
    assert summary["skipped_steps"] == len(skips) == summary["events"]["skip"]
    assert summary["skipped_steps"] < 8 and moved  # the scale came down and training resumed
    assert summary["ranks_consistent"] is True
    # summary.json names the layout; FSDP2's ranks hold their local shards, which add up to the whole model
    assert summary["layout"]["dp"] == "torch-fsdp2" and summary["layout"]["dp_shard"] == 2
    assert sum(summary["params_per_rank"]) == summary["params_total"] and len(summary["params_per_rank"]) == 2
    assert len(summary["peak_mem_bytes_per_rank"]) == 2 and "mfu" in summary
