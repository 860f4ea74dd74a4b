"""Strategy parity through the real trainer: with the same seed and global batch, ddp, torch-ddp,
torch-fsdp2 (both reshard modes) and torch-zero1 at world 2 compute the same losses and final
parameters as `single` at world 1."""
import json

import pytest
import torch

from shardlab import config
from shardlab.testing import assert_params_close
from shardlab.testing.compare import lr_sum
from shardlab.train.trainer import Trainer

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=8", "train.micro_batch=2",
        "train.steps=5", "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0", "train.lr=1e-2", "ckpt.final=false"]


def train_run(run_dir, overrides, world):
    cfg = config.load(None, BASE + overrides)
    config.validate(cfg, world)
    trainer = Trainer(cfg, run_dir)
    summary = trainer.run()
    params = {k: v.clone() for k, v in trainer.strategy.full_parameters().items()}
    losses = None
    if trainer.rank == 0:
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        losses = [(r["loss"], r["grad_norm"]) for r in rows if "loss" in r]
    return losses, params, summary


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("single"), ["parallel.strategy=single"], 1)


@pytest.mark.parametrize("overrides", [
    ["parallel.strategy=ddp"],
    ["parallel.strategy=torch-ddp"],
    ["parallel.strategy=torch-fsdp2", "parallel.reshard_after_forward=true"],
    ["parallel.strategy=torch-fsdp2", "parallel.reshard_after_forward=false"],
    ["parallel.strategy=torch-zero1"],
], ids=lambda o: "-".join(x.split("=")[1] for x in o))
def test_native_strategies_match_single(pool2, tmp_path, reference, overrides):
    ref_losses, ref_params, _ = reference
    results = pool2.run(train_run, tmp_path, overrides, 2)
    losses, params, summary = results[0]
    assert len(losses) == 5
    # every step's loss and gradient norm (before clipping) tightly: Adam's update hides a gradient's scale
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=0)
    assert_params_close(params, ref_params, lr_sum=lr_sum(config.load(None, BASE), 5))
    assert summary["ranks_consistent"] is True
    assert summary["world_size"] == 2 and summary["tokens_per_step"] == 8 * 32
    # both ranks end with identical full parameters
    for name in params:
        assert torch.equal(results[1][1][name], params[name])
