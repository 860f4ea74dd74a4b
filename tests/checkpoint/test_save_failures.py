"""Failures are not silent: a failed checkpoint save (the final one included) makes the run exit non-zero
and is recorded in summary.json; a deletion that fails is logged; at world size 1 `ranks_consistent` is
null (nothing was compared). In-process, strategy single."""
import json
import os

import pytest

from shardlab import config
from shardlab.checkpoint import retention
from shardlab.checkpoint.storage import FAIL_ENV

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=4",
        "train.warmup_steps=1", "train.eval_every=0", "parallel.strategy=single"]


def _main(run_dir, overrides):
    from shardlab.train import main

    cfg = config.load(None, BASE + overrides)
    cfg = config.validate(cfg, 1)
    return main(cfg, run_dir)


@pytest.mark.parametrize("fail_step, overrides", [
    (2, ["train.steps=4", "ckpt.every=2"]),  # a periodic save; the next one commits
    (3, ["train.steps=3", "ckpt.final=true"]),  # the final save
])
def test_failed_save_exits_nonzero_and_is_in_the_summary(tmp_path, monkeypatch, capsys, fail_step, overrides):
    monkeypatch.setenv(FAIL_ENV, f"0@{fail_step}")
    with pytest.raises(SystemExit) as e:
        _main(tmp_path, overrides)
    assert e.value.code == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    failed = summary["ckpt_failed_saves"]
    assert len(failed) == 1 and f"checkpoint at step {fail_step} abandoned" in failed[0]
    assert summary["steps"] == int(overrides[0].split("=")[1])  # training itself went to the end
    err = capsys.readouterr().err
    assert "1 checkpoint save(s) failed" in err


def test_clean_run_exits_zero_with_null_ranks_consistent(tmp_path):
    summary = _main(tmp_path, ["train.steps=2", "ckpt.final=true"])
    assert summary["ckpt_failed_saves"] == []
    assert summary["ranks_consistent"] is None  # one rank: no replica to compare with
    assert json.loads((tmp_path / "summary.json").read_text())["ranks_consistent"] is None


def test_failed_deletion_is_logged(tmp_path, monkeypatch, capsys):
    victim = tmp_path / "step_000002"
    victim.mkdir()
    (victim / "x.distcp").write_bytes(b"x")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "unlink", refuse)
    retention.remove(victim, "retention (ckpt.keep=1)")
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert "could not delete" in err and "x.distcp" in err and "retention (ckpt.keep=1)" in err
    assert (victim / "x.distcp").exists()
