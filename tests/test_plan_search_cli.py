"""`shardlab plan` CLI and `plan search`."""
import json
import time

from shardlab.plan.cli import main
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import TrainSpec
from shardlab.plan.model import PRESETS
from shardlab.plan.search import search, why


def test_search_7b_on_64_h100_returns_valid_layouts_with_a_reason_fast():
    m = PRESETS["7b"]
    c = load_cluster("H100-SXM", 64)
    t0 = time.perf_counter()
    plans = search(m, TrainSpec(global_batch=512), c)
    assert time.perf_counter() - t0 < 10
    fitting = [p for p in plans if p.fits]
    assert len(fitting) > 10
    for p in fitting[:5]:
        lay = p.layout
        assert lay.world == 64 and p.mem_total <= c.hbm_bytes * c.mem_usable_fraction
        assert p.train.global_batch == 512 and p.m * p.train.micro_batch * lay.dp == 512
    assert all(a.tokens_per_s >= b.tokens_per_s for a, b in zip(fitting, fitting[1:]))
    # plain DDP of 6.7B with Adam needs 16 B/param > 80 GB: never fits
    assert not any(p.fits for p in plans if p.layout.strategy == "ddp" and p.layout.tp == 1 and p.layout.pp == 1)
    reason = why(fitting[0], fitting[1])
    assert "tokens/s" in reason and "more per step" in reason


def test_cli_search_prints_table_and_reason(capsys):
    t0 = time.perf_counter()
    assert main(["search", "model=7b", "cluster=H100-SXM", "gpus=64", "global_batch=512", "--top", "3"]) == 0
    assert time.perf_counter() - t0 < 10
    out = capsys.readouterr().out
    assert "why #1:" in out and out.count("GiB") >= 3


def test_cli_plan_json_and_explain(capsys):
    assert main(["model=gpt2", "cluster=A100-80G", "gpus=8", "strategy=zero2", "global_batch=64",
                 "micro_batch=8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    psi = PRESETS["gpt2"].params
    assert d["model"]["params"] == psi
    assert d["comm"]["bytes_per_step"]["reduce_scatter"] >= 2 * psi
    assert d["memory"]["fits"] and d["step_time_s"] > 0 and 0 < d["mfu"] < 1
    assert main(["model=gpt2", "cluster=h100", "gpus=8", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "sbh(34 + 5as/h)" in out and "2*Psi" in out and "MFU =" in out


def test_cli_bad_input_is_one_line_and_exit_2(capsys):
    for argv in (["model=nope"], ["foo=1"], ["tp=abc"], ["model=gpt2", "tp=5"], ["cluster=missing.toml"],
                 ["search", "model=gpt2", "precision=fp8"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("shardlab plan:") and err.count("\n") == 1, (argv, err)


def test_profile_file_round_trip(tmp_path):
    from dataclasses import replace
    from shardlab.plan.hardware import read_profile, write_profile
    c = replace(load_cluster("H200"), name="lab", collectives={"all_reduce": (1e-3, 5e8)},
                gemm_table={"linear:8,8,8": 1e9}, gemm_fit=(2e9, 1e4))
    write_profile(c, tmp_path / "lab.toml")
    back = read_profile(tmp_path / "lab.toml")
    assert back.collectives == c.collectives and back.gemm_table == c.gemm_table
    assert back.hbm_bytes == c.hbm_bytes and back.gemm_fit == c.gemm_fit
    assert main(["model=small", f"cluster={tmp_path / 'lab.toml'}", "gpus=2"]) == 0


def test_example_cluster_profile_in_configs_loads_and_plans(capsys):
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "configs" / "clusters" / "h100-roce-example.toml"
    c = load_cluster(str(path), 128)
    assert c.inter_bw == 25e9 and c.nodes == 16
    assert main(["model=gpt3-13b", f"cluster={path}", "gpus=128", "strategy=zero3", "global_batch=256",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["comm"]["wire_by_tier"]["inter"] > 0
