"""`shardlab plan` CLI and `plan search`."""
import json
import time

from shardlab.plan.cli import main
from shardlab.plan.hardware import load_cluster
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS
from shardlab.plan.search import search, why


def test_search_7b_on_64_h100_returns_valid_layouts_with_a_reason():
    m = PRESETS["gpt3-6.7b"]
    c = load_cluster("H100-SXM", 64)
    plans = search(m, TrainSpec(global_batch=512), c)
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
    # the search for fitting layouts only (the fixes a plan that does not fit gets) times only those, with the
    # same plans in the same order
    counts = {}
    only = search(m, TrainSpec(global_batch=512), c, fitting_only=True, counts=counts)
    assert [(p.layout, p.train, p.step_time, p.mem_total) for p in only] == \
        [(p.layout, p.train, p.step_time, p.mem_total) for p in fitting]
    assert counts["tried"] == len(plans)  # what `plan search` reports as evaluated, fitting or not


def test_cli_search_prints_table_and_reason(capsys):
    assert main(["search", "model=gpt3-6.7b", "cluster=H100-SXM", "gpus=64", "global_batch=512", "--top", "3"]) == 0
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
    # the paper's formula is the unfused one (the default is the trainer's fused SDPA)
    assert main(["model=gpt2", "cluster=h100", "gpus=8", "flash_attention=false", "precision=bf16-mixed", "--explain"]) == 0
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
    path = Path(__file__).resolve().parents[2] / "configs" / "clusters" / "h100-roce-example.toml"
    c = load_cluster(str(path), 128)
    assert c.inter_bw == 25e9 and c.nodes == 16
    assert main(["model=gpt3-13b", f"cluster={path}", "gpus=128", "strategy=zero3", "global_batch=256",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["comm"]["wire_by_tier"]["inter"] > 0


def _one_line_exit_2(capsys, argv, needle):
    assert main(argv) == 2, argv
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("shardlab plan:") and cap.err.count("\n") == 1, (argv, cap.err)
    assert needle in cap.err, (argv, cap.err)


def test_huge_model_dimensions_are_refused_at_once_not_planned(capsys):
    # n_layer=1e6 d_model=1e6 used to build million-entry parameter lists for minutes
    _one_line_exit_2(capsys, ["n_layer=1e6", "d_model=1e6", "n_head=8", "vocab=256", "seq=64"], "n_layer must be")
    _one_line_exit_2(capsys, ["model=small", "d_model=1000000"], "d_model must be between")


def test_search_on_a_billion_gpus_is_refused_at_once(capsys):
    # gpus=1e9 used to enumerate divisors one by one up to 1e9
    _one_line_exit_2(capsys, ["search", "gpus=1e9"], "gpus must be between")


def test_search_at_the_largest_gpu_count_accepted_finishes(capsys):
    t0 = time.perf_counter()
    assert main(["search", "model=gpt3-175b", "gpus=1048576", "--top", "1"]) in (0, 1)
    assert time.perf_counter() - t0 < 60  # a hang guard (divisors by sqrt), not a performance figure
    assert "layouts evaluated" in capsys.readouterr().out


def test_search_top_below_one_is_bad_input(capsys):
    _one_line_exit_2(capsys, ["search", "--top", "-1"], "--top must be at least 1")
    _one_line_exit_2(capsys, ["search", "--top", "0"], "--top must be at least 1")


def test_integers_in_scientific_notation_are_read_fractions_refused(capsys):
    from shardlab.plan.cli import _parse_kv
    assert _parse_kv(["global_batch=1e3", "gpus=8"]) == {"global_batch": 1000, "gpus": 8}
    _one_line_exit_2(capsys, ["model=small", "micro_batch=1.5"], "bad value for micro_batch")


def test_a_layout_that_does_not_fit_says_so_first_and_what_would_fit(capsys):
    argv = ["model=gpt3-6.7b", "cluster=H100-SXM", "gpus=8", "strategy=ddp", "global_batch=64", "micro_batch=8"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "does not fit" in first and "GiB per GPU needed" in first
    assert out.index("does not fit") < out.index("tokens/s")  # the verdict before any speed
    assert "best fitting layouts on 8 GPUs" in out and "it does not fit" in out
    # every suggested layout, run as printed, fits
    sugg = [ln.split("tokens/s", 1)[1].split() for ln in out.splitlines() if "tokens/s   dp=" in ln]
    assert len(sugg) >= 2
    for args in sugg:
        assert main(argv[:3] + ["global_batch=64"] + args) == 0, args
        assert "fits" in capsys.readouterr().out


def test_does_not_fit_json_gives_fits_false_and_suggestions(capsys):
    assert main(["model=gpt3-6.7b", "gpus=8", "strategy=ddp", "global_batch=64", "micro_batch=8", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is False and d["memory"]["fits"] is False and "does not fit" in d["verdict"]
    assert d["suggestions"] and all(s["mem_total"] <= d["memory"]["capacity"] for s in d["suggestions"])
    assert d["search"]["truncated"] is False and d["search"]["candidates"] >= d["search"]["tried"] > 0  # whole search
    assert main(["model=gpt2", "gpus=8", "strategy=zero2", "global_batch=64", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is True and "suggestions" not in d


def test_training_strategy_names_are_accepted(capsys):
    from shardlab.plan.cli import _parse_kv
    assert _parse_kv(["strategy=torch-fsdp2"])["strategy"] == "zero3"
    assert _parse_kv(["strategy=fsdp"])["strategy"] == "zero3"
    assert _parse_kv(["strategy=torch-ddp"])["strategy"] == "ddp"
    assert _parse_kv(["strategy=torch-zero1"])["strategy"] == "zero1"
    assert _parse_kv(["strategy=single"]) == {"strategy": "ddp", "dp": 1}
    assert main(["model=gpt2", "gpus=8", "strategy=torch-fsdp2", "global_batch=64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["strategy"] == "zero3"
    _one_line_exit_2(capsys, ["strategy=single", "dp=2"], "single runs on one rank")
    _one_line_exit_2(capsys, ["strategy=fsdp3"], "torch-fsdp2")


def test_presets_are_named_by_what_they_are_and_7b_resolves_with_a_note(capsys):
    assert "7b" not in PRESETS and PRESETS["gpt3-6.7b"].name == "gpt3-6.7b"
    assert main(["model=7b", "gpus=64", "strategy=zero3", "global_batch=512", "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["model"]["name"] == "gpt3-6.7b"
    assert "model=7b is read as gpt3-6.7b" in cap.err and cap.err.count("\n") == 1


def test_training_keys_plan_as_they_train(capsys):
    """One vocabulary: training's key names and values are accepted (train.seq_len, train.dtype=bf16,
    parallel.pp_schedule=torch-1f1b) and give the plan of the planner's own spelling; a typo gets a hint."""
    from shardlab.plan import cli as plan_cli

    train_names = plan_cli._parse_kv(["model.preset=llama3-8b", "train.seq_len=4096", "parallel.tp=2",
                                      "train.dtype=bf16", "parallel.pp_schedule=torch-1f1b", "parallel.pp_virtual=1"])
    own = plan_cli._parse_kv(["model=llama3-8b", "seq=4096", "tp=2", "precision=bf16-autocast", "schedule=1f1b", "v=1"])
    assert train_names == own
    assert plan_cli.main(["model=llama3-8b", "seq_len=8192"]) == 2
    assert "unknown key 'seq_len' (did you mean train.seq_len?)" in capsys.readouterr().err
    assert plan_cli.main(["model=llama3-8b", "parallel.tpp=2"]) == 2
    assert "(did you mean tp?)" in capsys.readouterr().err


def test_a_budgeted_search_says_where_it_stopped_and_an_uncut_one_is_the_full_search(capsys):
    """A budget the search finishes within returns what the unbudgeted search does, ties in the same order (it
    visits the candidates in a spread order, ranks by enumeration order among equals); a budget that cuts it says
    so, in `counts` and in `plan search`'s text, having tried a spread of the space. A negative budget is refused."""
    m = PRESETS["gpt3-6.7b"]
    c = load_cluster("H100-SXM", 64)
    full = search(m, TrainSpec(global_batch=512), c, fitting_only=True)
    counts = {}
    uncut = search(m, TrainSpec(global_batch=512), c, fitting_only=True, counts=counts, budget_s=3600)
    assert [(p.layout, p.train, p.step_time) for p in uncut] == [(p.layout, p.train, p.step_time) for p in full]
    assert not counts["truncated"] and counts["candidates"] >= counts["tried"] > 0
    cut = {}
    # 0.05 s: far below the ~1 s the whole search takes on 2 cores, so it is cut on a fast machine too; the deadline
    # is checked before each candidate, after the first, so at least one is tried
    some = search(m, TrainSpec(global_batch=512), c, fitting_only=True, counts=cut, budget_s=0.05)
    assert cut["truncated"] and 0 < cut["tried"] < cut["candidates"] == counts["candidates"]
    assert all(p.fits for p in some)
    from shardlab.plan.search import _spread
    first = _spread(counts["candidates"])[:20]  # what any cut search tries first: from all over the enumeration
    assert max(first) > counts["candidates"] / 2 > min(first) and _spread(100) == _spread(100)
    assert main(["search", "model=gpt3-6.7b", "cluster=H100-SXM", "gpus=64", "global_batch=512", "--budget", "0.05"]) \
        in (0, 1)
    assert "the budget (0.05 s) ran out" in capsys.readouterr().out
    assert main(["search", "model=gpt3-6.7b", "gpus=64", "--budget", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budget" in err[0], err
