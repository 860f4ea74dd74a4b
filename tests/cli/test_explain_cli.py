"""`shardlab explain RUN`: its JSON shape on a tiny traced run, the components adding up to the step, and
one held-out accuracy row end to end (a smoke test: the error is reported, not asserted)."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardlab.cli import explain as cli
from shardlab.observe.analysis import from_events
from shardlab.observe.components import step_components

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("forward", "backward", "optimizer", "bubble", "data", "python_overhead", "exposed_comm", "step_time_s")


def _train(out: Path, *overrides: str) -> None:
    cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", "1", "--out", str(out), "model.preset=tiny",
           "train.seq_len=32", "train.micro_batch=2", "train.steps=4", "train.eval_every=0", "train.log_every=4",
           "train.threads=1", "ckpt.final=false", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("explain") / "run"
    _train(out, "trace.enabled=true")
    return out


def test_explain_json_shape(traced_run, capsys):
    # a GPU preset: no calibration of this machine needed to check the shape
    assert cli.main([str(traced_run), "--json", "--cluster", "A100-80G"]) == 0
    d = json.loads(capsys.readouterr().out)
    for side in ("predicted", "measured"):
        assert set(COMPONENTS) <= set(d[side]), side
        assert {"params", "grads", "optimizer"} <= set(d[side]["memory"])
    assert d["predicted"]["data"] is None  # the planner has one trainer cost for data and Python
    assert d["measured"]["step_time_s"] > 0 and d["measured"]["forward"] > 0 and d["measured"]["backward"] > 0
    # the planner's model states are exact for shardlab's own layers (tests/plan/test_plan_vs_strategies.py)
    for k in ("params", "grads", "optimizer"):
        assert d["predicted"]["memory"][k] == d["measured"]["memory"][k]
    names = [r["component"] for r in d["components"]]
    assert names[:4] == ["forward", "backward", "optimizer", "bubble"]
    assert all(r["cause"] for r in d["off"]) and all(r["off"] for r in d["off"])
    # only layouts predicted faster than the run's own (tests/plan/test_explain_schedule.py), at most --top
    assert len(d["what_to_try"]) <= 3 and all("train_args" in t and t["speedup_vs_predicted"] > 1
                                              for t in d["what_to_try"])


def test_the_run_records_its_core_share_and_explain_uses_it(traced_run, tmp_path, monkeypatch):
    """summary.json's core_share: the scheduler's run / (run + run-queue wait) over the timed steps, a share
    of a core in (0, 1]; explain predicts with it (not a probe taken later, at another moment)."""
    summary = json.loads((traced_run / "summary.json").read_text())
    if not Path("/proc/self/task").is_dir():
        assert summary["core_share"] is None
        return
    assert 0 < summary["core_share"] <= 1 and summary["core_share_by_rank"] == [summary["core_share"]]
    _synthetic_profile(tmp_path / "cache", monkeypatch)
    context = cli.build(traced_run)["context"]
    assert context["share_from"] == "recorded during the run" and context["share"] == summary["core_share"]
    from shardlab.observe.core_share import CoreShare
    share = CoreShare()
    share.begin()
    sum(i * i for i in range(200_000))  # busy: on a CPU or waiting for one, never blocked
    share.end(count=True)
    assert 0 < share.value <= 1 and share.run > 0


def test_explain_text_and_bad_input(traced_run, tmp_path, capsys):
    assert cli.main([str(traced_run), "--cluster", "A100-80G"]) == 0
    text = capsys.readouterr().out
    assert "predicted" in text and "what to try" in text and "memory per rank" in text
    assert cli.main([str(tmp_path), "--cluster", "A100-80G"]) == 2
    err = capsys.readouterr().err
    assert "not a shardlab run directory" in err and len(err.strip().splitlines()) == 1


def test_components_add_up_to_the_step():
    """step = forward + backward + optimizer + exposed comm + bubble + data + python overhead, exactly."""
    ev = [{"name": "data", "cat": "data", "t0": 0.0, "t1": 1.0, "args": {}},
          {"name": "forward", "cat": "compute", "t0": 1.0, "t1": 4.0, "args": {}},
          {"name": "backward", "cat": "compute", "t0": 4.0, "t1": 8.0, "args": {}},
          # a synchronous all-reduce inside the backward (blocked 7-8), then one after it (8.5-9.5)
          {"name": "all_reduce", "cat": "comm", "t0": 7.0, "t1": 8.0, "t_wait": None, "async": False,
           "args": {"op": "all_reduce", "group": "tp", "bytes": 8, "tag": "x"}},
          {"name": "all_reduce", "cat": "comm", "t0": 8.5, "t1": 9.5, "t_wait": None, "async": False,
           "args": {"op": "all_reduce", "group": "dp", "bytes": 8, "tag": "b0"}},
          {"name": "optimizer", "cat": "optim", "t0": 9.5, "t1": 11.0, "args": {}},
          {"name": "step", "cat": "step", "t0": 0.0, "t1": 12.0, "args": {"step": 0}}]
    c = step_components(from_events(0, ev), 0.0, 12.0)
    assert (c["forward"], c["backward"], c["optimizer"], c["data"]) == (3.0, 3.0, 1.5, 1.0)
    assert c["exposed_comm"] == {"all_reduce tp": 1.0, "all_reduce dp": 1.0}
    assert c["python_overhead"] == pytest.approx(1.5)  # 8.0-8.5 and 11-12: in no span, in no collective
    parts = sum(c[k] for k in ("forward", "backward", "optimizer", "data", "bubble", "python_overhead"))
    assert parts + sum(c["exposed_comm"].values()) == pytest.approx(c["step_s"])


def test_one_heldout_row(tmp_path, monkeypatch):
    """The held-out script's row, end to end on a small synthetic profile (no calibration: the test checks
    the machinery, a prediction and a measurement of the same run, not the planner's accuracy)."""
    _synthetic_profile(tmp_path / "cache", monkeypatch)
    sys.path.insert(0, str(ROOT / "scripts"))
    import explain_heldout
    monkeypatch.setattr(explain_heldout, "SHAPES", {"tiny": ["model.preset=tiny", "train.seq_len=32"]})
    row = explain_heldout.trial(tmp_path, "tiny-single-w1", "tiny", 1, ["train.micro_batch=2"], steps=4)
    assert row["predicted_s"] > 0 and row["measured_s"] > 0 and math.isfinite(row["error"])
    assert "| tiny-single-w1 |" in explain_heldout.table([row])


def test_the_layouts_miniature_is_measured_once_and_cached(traced_run, tmp_path, monkeypatch):
    """On a profile calibrated here, explain measures the run's own layout on a miniature (its trainer cost per
    step, in CPU seconds), uses it as the predicted trainer cost at the run's core share, and caches it: a
    second explain of the same layout runs nothing."""
    _synthetic_profile(tmp_path / "cache", monkeypatch, source="calibrated synthetic")
    d = cli.build(traced_run)
    over = d["context"]["trainer_overhead"]
    assert over["from"] == "a miniature of this layout", over
    assert over["cpu_s"] >= 0 and 0 < over["miniature_share"] <= 1
    share = d["context"]["share"]
    assert d["predicted"]["python_overhead"] == pytest.approx(over["cpu_s"] / share)
    cache = json.loads((tmp_path / "cache" / "explain_calibration.json").read_text())
    assert cache["profile"] == "calibrated synthetic" and sum(k.startswith("layout/") for k in cache) == 1

    def no_run(*a, **k):
        raise AssertionError("the miniature ran again")
    monkeypatch.setattr(subprocess, "run", no_run)
    assert cli.build(traced_run)["context"]["trainer_overhead"] == over
    # the profile alone: no per-run measurement
    assert cli.build(traced_run, per_run=False)["context"]["trainer_overhead"]["from"].startswith("profile")


def _synthetic_profile(cache: Path, monkeypatch, source: str = "synthetic") -> None:
    """A `this` cluster profile in a private cache, so nothing calibrates this machine (a source that does
    not start with "calibrated" also keeps explain from measuring the run's layout and world)."""
    from dataclasses import replace

    from shardlab.plan.hardware import PRESETS, write_profile
    write_profile(replace(PRESETS["A100-80G"], name="this", peak_flops=5e10, peak_flops_fp32=5e10, hbm_bw=5e9,
                          elementwise_bw=5e9, gemm_efficiency=1.0, measured_world=2, source=source),
                  cache / "this.toml")
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache))
