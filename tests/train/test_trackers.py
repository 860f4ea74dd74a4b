"""`train.tracker=tensorboard,mlflow,wandb`: each tracker's files, read back by its own library, hold the same
numbers as metrics.jsonl and the resolved config; a tracker without its package is one line, exit 2, before
anything is written."""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from shardlab.cli import cmd_train
from shardlab.train import trackers
from shardlab.train.metrics import read_rows, scalars_of

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tiny.toml"
ARGS = ["--config", str(CONFIG), "--nproc", "1", "parallel.strategy=single", "train.steps=4", "train.log_every=2",
        "train.eval_every=3"]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """One short run with every tracker whose package is installed (`make test` installs all three)."""
    names = [n for n in trackers.NAMES if trackers.installed(trackers.PACKAGES[n][0])]
    if not names:
        pytest.skip("no tracker package installed (pip install 'shardlab[track]')")
    run = tmp_path_factory.mktemp("trackers") / "run"
    assert cmd_train([*ARGS, "--out", str(run), f"train.tracker={','.join(names)}"]) == 0
    return run, names


def expected(run: Path) -> dict[tuple[str, int], float]:
    """(name, step) -> value of every number metrics.jsonl holds: what each tracker must hold."""
    want = {(k, r["step"]): v for r in read_rows(run / "metrics.jsonl") for k, v in scalars_of(r).items()}
    assert {"loss", "lr", "tokens_per_s", "grad_norm", "val_loss"} <= {k for k, _ in want}
    return want


def config_flat(run: Path) -> dict[str, object]:
    return trackers.flat(tomllib.loads((run / "config.toml").read_text()))


def _needs(name: str, names: list[str]) -> None:
    pytest.importorskip(trackers.PACKAGES[name][0])
    assert name in names


def test_mlflow_store_read_by_mlflows_client(tracked):
    run, names = tracked
    _needs("mlflow", names)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run.resolve() / 'mlflow.db'}")
    exp = client.get_experiment_by_name("shardlab")
    (found,) = client.search_runs([exp.experiment_id])
    assert found.info.status == "FINISHED" and found.info.run_name == run.name
    got = {(k, m.step): m.value for k in {k for k, _ in expected(run)}
           for m in client.get_metric_history(found.info.run_id, k)}
    assert got == expected(run)  # float64 in the store: the very numbers
    assert found.data.params == {k: str(v) for k, v in config_flat(run).items()}
    assert not (Path.cwd() / "mlruns").exists() and not (Path.cwd() / "mlartifacts").exists()  # nothing outside RUN


def test_wandb_offline_run_read_by_wandbs_inspector(tracked):
    run, names = tracked
    _needs("wandb", names)
    (offline,) = (run / "wandb").glob("offline-run-*")  # offline mode's directory: nothing was sent
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", str(offline), "--json"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    got = {(k, int(h["history"]["item"]["step"])): v for h in records if h["type"] == "history"
           for k, v in h["history"]["item"].items() if not k.startswith("_") and k != "step"}
    assert got == expected(run)  # JSON in the run's file: the very numbers
    (start,) = [r["run"] for r in records if r["type"] == "run"]
    config = {s: keys for s, keys in start["config"]["update"].items() if s != "_wandb"}
    assert trackers.flat(config) == config_flat(run)


def test_tensorboard_events_read_by_tensorboards_reader(tracked):
    run, names = tracked
    _needs("tensorboard", names)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    got = {(k, e.step): e.value for k in acc.Tags()["scalars"] for e in acc.Scalars(k)}
    assert got == {key: float(np.float32(v)) for key, v in expected(run).items()}  # event files hold float32
    (text,) = acc.Tensors("config/text_summary")
    shown = text.tensor_proto.string_val[0].decode()
    assert all(f"{k} = {v!r}" in shown for k, v in config_flat(run).items())


def test_a_tracker_without_its_package_is_refused_before_the_run(tmp_path, monkeypatch, capsys):
    from shardlab.config import trackers as names  # where the check runs (config validation)
    monkeypatch.setattr(names, "installed", lambda module: module != "mlflow")
    capsys.readouterr()
    assert cmd_train([*ARGS, "--out", str(tmp_path / "run"), "train.tracker=tensorboard,mlflow"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.tracker=mlflow needs the mlflow-skinny package" in err[0], err
    assert "pip install 'shardlab[track]'" in err[0]
    assert not (tmp_path / "run").exists()  # nothing half-written


@pytest.mark.parametrize("spec, says", [("neptune", "unknown tracker 'neptune'"),
                                         ("mlflow,mlflow", "names a tracker twice")])
def test_a_bad_tracker_name_is_one_line(spec, says):
    with pytest.raises(trackers.ConfigError, match=says):
        trackers.parse(spec)
    assert trackers.parse("none") == [] and trackers.parse("tensorboard, wandb") == ["tensorboard", "wandb"]
