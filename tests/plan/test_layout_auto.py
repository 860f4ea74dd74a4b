"""`parallel.layout=auto`: the planner's choice among the layouts shardlab runs, written into the config before
the run starts, trained, and said in two lines; bad values and a budget nothing fits are one line, exit 2.
A fabricated machine profile (SHARDLAB_CACHE) stands in for `shardlab plan calibrate`: the choice's
memory side does not depend on it, and no calibration runs in the test."""
import json
import tomllib

import pytest

from shardlab import cli
from shardlab.plan.hardware import Cluster, write_profile
from shardlab.testing import run_cli

TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.global_batch=4", "train.steps=2",
        "train.warmup_steps=1", "train.eval_every=0", "train.log_every=1", "ckpt.final=false"]


@pytest.fixture
def profile(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    write_profile(Cluster(name="this", num_gpus=2, gpus_per_node=2, peak_flops=5e10, peak_flops_fp32=5e10,
                          hbm_bytes=8e9, hbm_bw=1e10, intra_bw=2e9, intra_latency=5e-5, inter_bw=2e9,
                          inter_latency=5e-5, op_overhead_s=1e-5, source="test profile"), cache / "this.toml")
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache))
    return cache


def test_auto_resolves_to_a_concrete_layout_that_fits_and_trains(tmp_path, profile):
    out = tmp_path / "run"
    # 3 MB per rank: the tiny model's ddp (3.6 MiB predicted) does not fit, sharded or split layouts do
    res = run_cli(["train", "--nproc", "2", "--out", str(out), *TINY, "parallel.layout=auto",
                   "parallel.mem_budget_gb=0.003"], timeout=300, env={"SHARDLAB_CACHE": str(profile)})
    assert res.returncode == 0, res.stderr[-3000:]
    said = [ln for ln in res.stderr.splitlines() if ln.startswith("[layout=auto]")]
    assert len(said) == 2 and said[0].startswith("[layout=auto] chose ") and said[1].startswith("[layout=auto] why: ")
    assert "of 2.9 MiB per rank" in said[0] and "planner cluster: test profile" in said[0]
    with open(out / "config.toml", "rb") as f:
        p = tomllib.load(f)["parallel"]
    assert p["layout"] == "manual"  # the stored config names the concrete layout: a resume trains it again
    keys = said[0].split("(", 1)[1].split(")", 1)[0].split()
    chosen = dict(k.split("=", 1) for k in keys)
    assert chosen["parallel.strategy"] == p["strategy"] != "ddp" or p["tp"] * p["pp"] > 1
    summary = json.loads((out / "summary.json").read_text())
    lay = summary["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"]) == (p["strategy"], p["tp"], p["pp"]) and summary["steps"] == 2
    assert str(p["tp"]) == chosen.get("parallel.tp", "1") and str(p["pp"]) == chosen.get("parallel.pp", "1")
    # and `shardlab compare` reads the real run directory (here beside itself: comparable, one layout)
    from shardlab.cli import compare
    assert compare.main([str(out), str(out), "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "memory.png").is_file()


@pytest.mark.parametrize("args,needle", [
    (["parallel.layout=magic"], "parallel.layout='magic': must be one of manual, auto"),
    (["parallel.layout=auto", "parallel.mem_budget_gb=-1"], "parallel.mem_budget_gb=-1.0: must be at least 0"),
    (["parallel.layout=auto", "parallel.mem_budget_gb=0.0001"], "no layout fits 0.0001 GB per rank at world 2"),
    (["parallel.layout=auto", "parallel.sync=diloco"], "plans every-step layouts only"),
])
def test_bad_layout_settings_are_one_line_exit_2(tmp_path, capsys, profile, args, needle):
    out = tmp_path / "run"
    assert cli.cmd_train(["--nproc", "2", "--out", str(out), *TINY, *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()  # nothing written


def test_world_4_candidates_include_the_2d_mixes_and_ties_go_to_the_own_layer(profile):
    """No training: which layouts the choice weighs at world 4, and that the planner's twins count once."""
    from shardlab import config
    from shardlab.cli.auto_layout import runnable
    from shardlab.plan import auto

    cfg = config.load(None, ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.global_batch=8"])
    check = runnable(4)
    seen = []
    for over in auto.candidates(4):
        c = config.load(None, ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.global_batch=8"])
        auto.apply(c, over)
        if check(c):
            seen.append((over["parallel.strategy"], over["parallel.tp"], over["parallel.pp"],
                         over.get("parallel.pp_schedule")))
    assert ("ddp", 2, 1, None) in seen and ("zero3", 2, 1, None) in seen  # dp 2 x tp 2
    assert ("ddp", 1, 2, "1f1b") in seen and ("zero1", 1, 2, "zb") in seen  # dp 2 x pp 2
    assert ("ddp", 2, 2, "1f1b") in seen  # tp 2 x pp 2
    ch = auto.choose(cfg, 4, auto.machine_cluster(), 8e9, check)
    assert ch.plan.fits and ch.runnable == len(seen) and ch.distinct < ch.runnable  # fsdp2 = zero3, zb = 1f1b
    assert ch.overrides["parallel.strategy"] != "torch-fsdp2" and ch.overrides.get("parallel.pp_schedule") != "zb"
    assert cfg.parallel.layout == "manual" and cfg.parallel.strategy == "ddp"  # the caller's config untouched
