"""summary.json names what runs: `params` is the whole model and `params_rank0` rank 0's part (under pp=2
a stage, under tp=2 a shard), and `strategy` is the data-parallel layer the step runs (`single` when tp or pp
take every rank), not parallel.strategy's default. Two 2-rank runs of the tiny model, two steps each: what each
rank of `shardlab train --nproc 2` runs (its CLI entry, torchrun's variables set) on the session's pool of 2
ranks (tests/drivers/cli_harness.py); a real launch writes its run directory in tests/launch/test_launch.py."""
import json

import pytest

from cli_harness import as_rank

BASE = ["model.preset=tiny", "train.seq_len=16", "train.micro_batch=2", "train.grad_accum=2", "train.steps=2",
        "train.eval_every=0", "train.log_every=1", "ckpt.final=false", "train.threads=1"]


@pytest.mark.parametrize("layout", ["parallel.tp=2", "parallel.pp=2"])
def test_params_and_strategy_say_what_runs(tmp_path, pool2, layout):
    out = tmp_path / "run"
    ranks = pool2.run(as_rank, ["train", "--out", str(out), *BASE, layout], timeout=300)
    assert [code for code, _, _ in ranks] == [0, 0], [err[-3000:] for _, _, err in ranks]
    s = json.loads((out / "summary.json").read_text())
    assert s["layout"]["dp"] == "single" and s["strategy"] == "single"
    assert s["params"] == s["params_total"]  # the whole model
    # rank 0 holds a part: a stage (pp) or its shards (tp)
    assert s["params_rank0"] == s["params_per_rank"][0] and 0 < s["params_rank0"] < s["params"]
    stdout = ranks[0][1]  # rank 0 prints the summary
    assert "strategy           single" in stdout and "strategy           ddp" not in stdout
