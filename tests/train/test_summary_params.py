"""summary.json names what runs: `params` is the whole model and `params_rank0` rank 0's part (under pp=2
a stage, under tp=2 a shard), and `strategy` is the data-parallel layer the step runs (`single` when tp or pp
take every rank), not parallel.strategy's default. Two real 2-rank runs of the tiny model, two steps each."""
import json
import os

import pytest

from shardlab.testing.cli import run_cli

BASE = ["model.preset=tiny", "train.seq_len=16", "train.micro_batch=2", "train.grad_accum=2", "train.steps=2",
        "train.eval_every=0", "train.log_every=1", "ckpt.final=false", "train.threads=1"]


@pytest.mark.parametrize("layout", ["parallel.tp=2", "parallel.pp=2"])
def test_params_and_strategy_say_what_runs(tmp_path, layout):
    out = tmp_path / "run"
    r = run_cli(["train", "--nproc", "2", "--out", str(out), *BASE, layout], timeout=300,
                env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["layout"]["dp"] == "single" and s["strategy"] == "single"
    assert s["params"] == s["params_total"]  # the whole model
    # rank 0 holds a part: a stage (pp) or its shards (tp)
    assert s["params_rank0"] == s["params_per_rank"][0] and 0 < s["params_rank0"] < s["params"]
    assert "strategy           single" in r.stdout and "strategy           ddp" not in r.stdout
