"""`shardlab explain` of an expert-parallel run plans the routing's load the run measured: summary.json's
moe.load_imbalance_ep (the busiest ep rank's tokens over the mean, train/moe_log.py) becomes the plan's moe_load,
so the busiest rank's experts and all-to-all are planned as it ran; 1.0 without it (older runs) or without ep.
A run directory written by hand (config.toml + summary.json) on a GPU preset: no training, no calibration."""
import json

from shardlab import config
from shardlab.cli import explain as cli
from shardlab.plan.layout import Layout


def _run(tmp_path, name: str, moe: dict | None):
    cfg = config.load(overrides=["model.preset=small", "model.moe_experts=4", "parallel.ep=2", "train.seq_len=128",
                                 "train.micro_batch=4", "train.grad_accum=2"])
    run = tmp_path / name
    run.mkdir()
    (run / "config.toml").write_text(config.to_toml(cfg))
    (run / "summary.json").write_text(json.dumps({"world_size": 2, "step_time_s": 1.0,
                                                  **({"moe": moe} if moe else {})}))
    return run


def test_explain_plans_the_busiest_ranks_measured_load(tmp_path, capsys):
    got = {}
    for name, moe in (("even", None), ("busy", {"load_imbalance_ep": 1.6})):
        assert cli.main([str(_run(tmp_path, name, moe)), "--json", "--cluster", "A100-80G"]) == 0
        got[name] = json.loads(capsys.readouterr().out)["predicted"]
    assert got["busy"]["step_time_s"] > got["even"]["step_time_s"]
    assert cli.measured_load({"moe": {"load_imbalance_ep": 1.6}}, Layout(dp=2, ep=2)) == 1.6
    assert cli.measured_load({"moe": {"load_imbalance_ep": 1.6}}, Layout(dp=2)) == 1.0  # no ep: every expert here
    assert cli.measured_load({"moe": {"load_imbalance_ep": None}}, Layout(dp=2, ep=2)) == 1.0
