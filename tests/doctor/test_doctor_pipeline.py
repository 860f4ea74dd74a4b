"""The doctor under pipeline parallelism: its per-microbatch hook runs under every schedule (own and
torch's), and a NaN planted in one stage is named at its step, rank, stage and module, as without pp.
World-2 gloo pools and `shardlab train --nproc 2` runs of a tiny GPT, each with a hard timeout."""
import json
from pathlib import Path

import pytest
import torch

from cli_harness import as_rank
from shardlab.testing import run_cli

ROOT = Path(__file__).resolve().parents[2]
TINY4 = dict(n_layer=4, n_head=2, d_model=32, vocab_size=256, max_seq_len=16)


def _hooked(schedule: str, virtual: int, accum: int = 4) -> list:
    """One step through the composition; what `after_backward` saw: (microbatch, its x, loss or None)."""
    from shardlab import parallel
    from shardlab.config import Config
    from shardlab.model.gpt import GPTConfig, build_model

    cfg = Config()
    cfg.train.grad_accum, cfg.train.seq_len = accum, TINY4["max_seq_len"]
    cfg.parallel.pp, cfg.parallel.pp_schedule, cfg.parallel.pp_virtual = 2, schedule, virtual
    par = parallel.build(cfg, torch.device("cpu"), build_model(GPTConfig(**TINY4), seed=0))
    gen = torch.Generator().manual_seed(7)
    batch = torch.randint(0, TINY4["vocab_size"], (accum, 2, TINY4["max_seq_len"] + 1), generator=gen)
    micro = [(r[:, :-1], r[:, 1:]) for r in batch]
    seen = []
    par.step(micro, 1e-3, 1.0, after_backward=lambda i, mb, loss: seen.append(
        (i, torch.equal(mb[0], micro[i][0]), None if loss is None else float(loss))))
    return seen


@pytest.mark.parametrize("schedule,virtual", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb", 1),
                                              ("torch-gpipe", 1), ("torch-1f1b", 1), ("torch-interleaved", 2)])
def test_the_per_microbatch_hook_runs_under_every_schedule(pool2, schedule, virtual):
    first, last = pool2.run(_hooked, schedule, virtual, timeout=120)
    assert [(i, same) for i, same, _ in first] == [(i, True) for i in range(4)]  # once each, in order
    assert [(i, same) for i, same, _ in last] == [(i, True) for i in range(4)]
    assert all(loss is None for *_, loss in first)  # stage 0 computes no loss
    assert all(loss is not None and loss > 0 for *_, loss in last)  # the last stage's, per microbatch


BASE = ["--nproc", "2", "--config", "configs/tiny.toml", "model.n_layer=4", "train.global_batch=8",
        "train.micro_batch=4", "train.grad_accum=2", "train.seq_len=32", "train.steps=6", "train.eval_every=0",
        "ckpt.final=false", "parallel.pp=2", "parallel.pp_schedule=1f1b", "doctor.hang_timeout_s=30"]


@pytest.mark.parametrize("rank,module,stage", [(0, "blocks.0.mlp", 0), (1, "blocks.3.attn", 1)])
def test_a_nan_planted_in_one_stage_is_named_at_its_step_rank_stage_and_module(tmp_path, rank, module, stage):
    out = tmp_path / "run"
    r = run_cli(["train", "--out", str(out), *BASE, f"debug.inject_nan=3:{rank}:{module}"], timeout=180, cwd=ROOT)
    assert r.returncode == 4, r.stderr[-3000:]  # anomaly
    report = json.loads((out / "anomalies" / "step_3.json").read_text())
    assert report["step"] == 3 and 1 in report["ranks"]  # the loss (on the last stage) went non-finite
    for r_ in report["ranks"]:  # every suspect rank of the pipeline replays the whole model: one answer
        loc = report["per_rank"][str(r_)]["localisation"]
        assert (loc["module"], loc["stage"], loc["stage_rank"], loc["where"]) == (module, stage, rank, "forward")
    assert f"module {module} (pipeline stage {stage}, on rank {rank})" in report["summary"]
    last = [ln for ln in r.stderr.splitlines() if ln.startswith("shardlab: FAILED")][0]
    assert "at step 3" in last and f"{module} (pipeline stage {stage}, on rank {rank})" in last


def test_a_nan_target_off_its_rank_is_refused(tmp_path, pool2):
    # refused where the ranks build the trainer (every rank places the stages alike): what each rank of the
    # 2-rank run does, on the session's pool (cli_harness.as_rank)
    ranks = pool2.run(as_rank, ["train", "--out", str(tmp_path / "run"), *BASE, "debug.inject_nan=3:1:blocks.0.mlp"],
                      timeout=180)
    err = "".join(e for _, _, e in ranks)
    assert all(code != 0 for code, _, _ in ranks), err[-2000:]
    assert "runs on pipeline stage 0, held by rank 0, not by rank 1" in err, err[-2000:]
