"""Uneven data-parallel shares (data.shares, docs/balance.md): the partition, the sampler's cut, the
config's one-line refusals, parity of shares 1:3 with equal shares through the real trainer (ddp and
zero2, world 2), auto measuring a slowed rank, and checkpoints recording the shares."""
import json

import pytest
import torch

from shardlab import config
from shardlab.config import ConfigError
from shardlab.data import GlobalSampler
from shardlab.testing import assert_params_close
from shardlab.testing.compare import lr_sum
from shardlab.train import balance
from shardlab.train.trainer import Trainer

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=8", "train.micro_batch=2",
        "train.steps=10", "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0", "train.lr=1e-2",
        "ckpt.final=false"]


def test_partition_is_proportional_whole_and_at_least_the_minimum():
    assert balance.partition(8, [1, 3]) == [2, 6]
    assert balance.partition(24, [2, 1]) == [16, 8]
    assert balance.partition(10, [1, 1, 1]) == [4, 3, 3]  # largest remainder, ties to the lower rank
    assert balance.partition(8, [1, 100], minimum=2) == [2, 6]  # clamped, the rest to the others
    assert sum(balance.partition(97, [0.3, 1.7, 2.2, 5.0], minimum=3)) == 97


def test_sampler_shares_cut_the_same_global_batch_differently():
    """Each step's samples, read rank by rank, are the same at any shares: only the cut moves."""
    equal = [GlobalSampler(1000, 8, seed=3, world_size=2, rank=r) for r in range(2)]
    uneven = [GlobalSampler(1000, 8, seed=3, world_size=2, rank=r) for r in range(2)]
    for s in uneven:
        s.set_shares([2, 6])
    for _ in range(5):
        a = [i for s in equal for i in s.next_batch()]
        b = [s.next_batch() for s in uneven]
        assert [len(x) for x in b] == [2, 6] and b[0] + b[1] == a
    with pytest.raises(Exception, match="sum to the global batch"):
        uneven[0].set_shares([3, 6])


@pytest.mark.parametrize("overrides, message", [
    (["data.shares=1,2,3"], "3 weight\\(s\\) for 2 data-parallel rank"),
    (["data.shares=1,x"], "expected auto, equal or one weight"),
    (["data.shares=0,1"], "positive number"),
    (["data.shares=1,20"], "fewer than train.grad_accum=2"),
    (["data.shares_resume=sometimes"], "must be one of keep, measure"),
    (["debug.slow_factor=0.5"], "at least 1"),
])
def test_bad_shares_are_one_line_config_errors(overrides, message):
    cfg = config.load(None, BASE + overrides)
    with pytest.raises(ConfigError, match=message):
        config.validate(cfg, 2)


def train_run(run_dir, overrides, world):
    cfg = config.load(None, BASE + overrides)
    config.validate(cfg, world)
    trainer = Trainer(cfg, run_dir)
    summary = trainer.run()
    params = {k: v.clone() for k, v in trainer.strategy.full_parameters().items()}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()] if trainer.rank == 0 else []
    losses = [(r["loss"], r["grad_norm"]) for r in rows if "loss" in r]
    return losses, params, summary, rows


@pytest.mark.parametrize("strategy", ["ddp", "zero2"])
def test_shares_1_3_match_equal_shares(pool2, tmp_path, strategy):
    """The loss is the mean over every token of the global batch whatever the cut: shares 1:3 give the
    same losses, gradient norms and final parameters as equal shares (fp32, 10 steps)."""
    equal = pool2.run(train_run, tmp_path / "equal", [f"parallel.strategy={strategy}"], 2)
    uneven = pool2.run(train_run, tmp_path / "uneven", [f"parallel.strategy={strategy}", "data.shares=1,3"], 2)
    (ref_losses, ref_params, _, _), (losses, params, summary, _) = equal[0], uneven[0]
    assert summary["shares"]["samples"] == [2, 6] and summary["shares"]["mode"] == "weights"
    assert len(losses) == 10
    # rtol 1e-5: the ranks' partial gradients are summed in another grouping, round-off only
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=0)
    assert_params_close(params, ref_params, lr_sum=lr_sum(config.load(None, BASE), 10))
    assert summary["ranks_consistent"] is True
