"""`shardlab explain` of a pipeline run: the schedule is planned as it runs where the planner models it (zb:
the zero-bubble bubble, a third of 1F1B's), and the output says so where it plans another one; "what to try"
lists only layouts predicted faster than the run, at most --top of them. A run directory written by hand
(config.toml + summary.json) on a GPU preset: no training and no calibration needed."""
import json

import pytest

from shardlab import config
from shardlab.cli import explain as cli


def _run(tmp_path, schedule: str, step_time_s: float, *extra: str):
    cfg = config.load(overrides=["model.preset=small", "train.seq_len=128", "train.micro_batch=1",
                                 "train.grad_accum=8", "parallel.pp=2", f"parallel.pp_schedule={schedule}", *extra])
    run = tmp_path / schedule
    run.mkdir()
    (run / "config.toml").write_text(config.to_toml(cfg))
    (run / "summary.json").write_text(json.dumps({"world_size": 4, "step_time_s": step_time_s}))
    return run


def _explain(run, capsys, *args):
    assert cli.main([str(run), "--json", "--cluster", "A100-80G", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_zb_is_planned_as_zero_bubble(tmp_path, capsys):
    zb = _explain(_run(tmp_path, "zb", 1.0), capsys)
    one = _explain(_run(tmp_path, "1f1b", 1.0), capsys)
    assert "pp=2 zb" in zb["layout"] and zb["context"]["schedule_note"] is None
    # explain's bubble adds the pipeline's sends (the same for both) to the schedule's idle time
    assert zb["predicted"]["bubble"] < one["predicted"]["bubble"]
    # the planner's idle time: ZB-H1 with F = I = W idles (p-1)/3 of a micro batch's time, 1F1B (p-1)
    from shardlab.plan.from_config import from_config
    from shardlab.plan.hardware import load_cluster
    from shardlab.plan.step import evaluate
    bubbles = {}
    for name in ("zb", "1f1b"):
        model, train, lay = from_config(config.load(tmp_path / name / "config.toml"), 4)
        bubbles[name] = evaluate(model, train, lay, load_cluster("A100-80G", 4)).times["bubble"]
    assert bubbles["zb"] * 3 == pytest.approx(bubbles["1f1b"], rel=1e-12)


def test_a_schedule_planned_as_another_says_so(tmp_path, capsys):
    run = _run(tmp_path, "torch-zbv", 1.0, "parallel.pp_virtual=2")
    d = _explain(run, capsys)
    assert "planned as 1f1b" in d["context"]["schedule_note"]
    assert cli.main([str(run), "--cluster", "A100-80G"]) == 0
    assert "note: parallel.pp_schedule=torch-zbv is planned as 1f1b" in capsys.readouterr().out


def test_what_to_try_lists_only_faster_layouts_up_to_top(tmp_path, capsys):
    run = _run(tmp_path, "1f1b", 1.0)
    d = _explain(run, capsys, "--top", "2")
    tries = d["what_to_try"]
    assert 0 < len(tries) <= 2
    assert all(t["step_time_s"] < d["predicted"]["step_time_s"] and t["speedup_vs_predicted"] > 1 for t in tries)
    assert tries == sorted(tries, key=lambda t: t["step_time_s"])
    assert all("parallel.pp_schedule=1f1b" not in t["train_args"] or "parallel.pp=2" not in t["train_args"]
               or t["layout"] != d["layout"] for t in tries)  # never the run's own layout
    assert cli.main([str(run), "--cluster", "A100-80G", "--top", "0"]) == 2
    assert "--top must be at least 1" in capsys.readouterr().err
