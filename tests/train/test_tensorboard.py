"""TensorBoard is an optional extra: without the package, training says so once and goes on."""
import sys

from shardlab.train import metrics


def test_missing_tensorboard_is_said_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed: import fails
    monkeypatch.setattr(metrics, "_TB_SAID", False)
    runs = [tmp_path / str(i) for i in range(3)]  # three runs in one process, as a bench does
    for run in runs:
        run.mkdir()
    logs = [metrics.MetricsLog(run, 10, enabled=True) for run in runs]
    assert all(log.tb is None for log in logs)
    for log in logs:
        log.log({"step": 1, "loss": 2.0, "lr": 1e-3, "tokens_per_s": 100.0})
        log.close()
    err = capsys.readouterr().err.splitlines()
    said = [line for line in err if "tensorboard" in line.lower()]
    assert len(said) == 1 and "not installed" in said[0] and "shardlab[tensorboard]" in said[0], err
    assert all((run / "metrics.jsonl").read_text() for run in runs)  # the record either way
