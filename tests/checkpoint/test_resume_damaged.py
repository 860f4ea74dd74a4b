"""A resume never costs a silent restart: when every checkpoint of a run is damaged, `shardlab resume` stops with
exit 2 naming each damaged checkpoint and file, and nothing in the run directory changes (listing, bytes and
modification times compared); `ckpt.resume=none` starts from step 0 on purpose. metrics.jsonl never repeats a
step: records past the step a run starts from move to metrics.archived-<n>.jsonl, named in one line.

One tiny one-process run (strategy single, in-process) is trained for the module; each test damages a copy.
"""
import hashlib
import json
import shutil

import pytest

from shardlab import cli
from shardlab.checkpoint import manifest as mf

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=4", "train.warmup_steps=1",
        "train.eval_every=0", "train.log_every=1", "parallel.strategy=single", "ckpt.every=2", "ckpt.keep=0"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "run"
    assert cli.cmd_train(["--nproc", "1", "--out", str(run), *BASE, "train.steps=4"]) == 0
    assert [c.path.name for c in mf.list_checkpoints(run / "checkpoints")] == ["step_000002", "step_000004"]
    return run


@pytest.fixture
def run(trained, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _snapshot(run):
    """Every file and directory of the run: its bytes' hash and modification time."""
    return {str(p.relative_to(run)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()
                                      if p.is_file() else None) for p in sorted(run.rglob("*"))}


def _truncate(path):
    path.write_bytes(path.read_bytes()[:1000])


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _steps(path):
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("damage", [_truncate, _flip], ids=["truncate", "bit-flip"])
def test_resume_with_every_checkpoint_damaged_exits_2_naming_each_and_changes_nothing(run, capsys, damage):
    damage(run / "checkpoints" / "step_000004" / "__0_0.distcp")
    damage(run / "checkpoints" / "step_000002" / "train_state.json")
    before = _snapshot(run)
    capsys.readouterr()
    for argv in (["resume", str(run), "train.steps=6"],
                 ["train", "--out", str(run), "ckpt.resume=latest", "train.steps=6"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2, err
        (line,) = err.strip().splitlines()
        assert "none is intact" in line and "ckpt.resume=none" in line, line
        assert "step_000004 (__0_0.distcp: " in line and "step_000002 (train_state.json: " in line, line
        assert _snapshot(run) == before  # no config.toml rewritten, no config_history/, metrics untouched


def test_a_damaged_checkpoint_named_by_path_is_refused_before_anything_is_written(run, tmp_path, capsys):
    step = run / "checkpoints" / "step_000004"
    _flip(step / "__0_0.distcp")
    new = tmp_path / "new"
    assert cli.cmd_train(["--out", str(new), f"ckpt.resume={step}", "train.steps=6"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"checkpoint {step} is damaged (__0_0.distcp: xxh3_128 mismatch" in line and "nothing was changed" in line
    assert not new.exists()


def test_the_ranks_refuse_too_when_the_launcher_did_not_check(run, capsys, monkeypatch):
    """A rank (a plain torchrun job, an elastic restart) that finds no intact checkpoint: one line, exit 2."""
    from shardlab import config, train

    _flip(run / "checkpoints" / "step_000004" / "__0_0.distcp")
    _truncate(run / "checkpoints" / "step_000002" / "__0_0.distcp")
    cfg = config.load(run / "config.toml", ["ckpt.resume=latest"])
    cfg = config.validate(cfg, 1)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.main(cfg, run)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("shardlab:")]
    assert e.value.code == 2
    assert len(err) == 1 and "none is intact" in err[0] and "step_000004" in err[0] and "step_000002" in err[0]
    assert _steps(run / "metrics.jsonl") == [1, 2, 3, 4] and not list(run.glob("metrics.archived-*"))


def test_resume_falls_back_past_a_damaged_latest_and_says_which_it_uses(run, capsys):
    _truncate(run / "checkpoints" / "step_000004" / "__0_0.distcp")
    assert cli.cmd_resume([str(run), "train.steps=4"]) == 0
    err = capsys.readouterr().err
    assert f"[resume] {run} (step_000002, " in err
    assert "step_000004 failed verification" in err and "falling back to step_000002" in err
    # steps 3 and 4 are trained again: their earlier records are archived, not repeated
    assert _steps(run / "metrics.jsonl") == [1, 2, 3, 4]
    assert _steps(run / "metrics.archived-1.jsonl") == [3, 4]
    (said,) = [ln for ln in err.splitlines() if ln.startswith("[metrics] ") and "archived" in ln]
    assert f"moved to {run / 'metrics.archived-1.jsonl'}" in said and "continues from step 2" in said


def test_resume_none_starts_from_step_0_on_purpose_and_archives_every_record(run, capsys):
    _flip(run / "checkpoints" / "step_000004" / "__0_0.distcp")
    _flip(run / "checkpoints" / "step_000002" / "__0_0.distcp")
    (run / "metrics.archived-1.jsonl").write_text('{"step": 9}\n')  # an earlier archive is kept as it is
    assert cli.cmd_resume([str(run), "ckpt.resume=none", "train.steps=2"]) == 0
    err = capsys.readouterr().err
    assert "from step 0 on purpose (ckpt.resume=none)" in err
    assert _steps(run / "metrics.jsonl") == [1, 2]
    assert _steps(run / "metrics.archived-1.jsonl") == [9]
    assert _steps(run / "metrics.archived-2.jsonl") == [1, 2, 3, 4]
    assert "starts from step 0" in err


def test_ckpt_verify_exits_2_on_damage(run, capsys):
    from shardlab.checkpoint import cli as ckpt_cli

    assert ckpt_cli.main(["verify", str(run)]) == 0
    _truncate(run / "checkpoints" / "step_000002" / "__0_0.distcp")
    assert ckpt_cli.main(["verify", str(run)]) == 2
    assert "__0_0.distcp: size 1000 !=" in capsys.readouterr().out
