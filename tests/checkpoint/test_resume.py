"""Resuming a run by its directory keeps that run's config and says what changes; the default run keeps a
final checkpoint; the launcher's verdict on failures. Two short world-2 runs; the rest needs no process."""
import json
import re
import tomllib

import pytest

from shardlab import cli, config
from shardlab.launch import failure, resume
from shardlab.testing import run_cli

TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.eval_every=0",
        "train.warmup_steps=1"]


def test_resume_keeps_the_runs_config_and_names_differences(tmp_path):
    run = tmp_path / "run"
    # ckpt.final is not set: the default keeps the final model (step 7) besides ckpt.every=3's saves
    first = run_cli(["train", "--nproc", "2", "--out", str(run), *TINY, "parallel.strategy=zero3", "ckpt.every=3",
                     "train.log_every=3", "train.steps=7"], timeout=180)
    assert first.returncode == 0, first.stderr[-3000:]
    saved = re.findall(r"\[ckpt\] saved \S+step_(\d+) \(step (\d+), [\d.]+ [KM]iB, [\d.]+ s\)", first.stderr)
    assert [s for s, _ in saved] == ["000003", "000006", "000007"]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000007"

    # what the user ran: only the step count given; everything else must come from the run
    again = run_cli(["resume", str(run), "train.steps=9"], timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    said = [line for line in again.stderr.splitlines() if line.startswith("[resume]")]
    assert "step_000007, world size 2" in said[0]
    assert any("train.steps: 7 -> 9" in line and "changes the trajectory" in line for line in said)
    assert any(line.endswith("change the trajectory (a different run from here on): train.steps") for line in said)
    assert not any("parallel.strategy" in line or "world size:" in line for line in said)  # nothing else changed
    cfg = tomllib.loads((run / "config.toml").read_text())
    assert cfg["parallel"]["strategy"] == "zero3" and cfg["ckpt"]["every"] == 3 and cfg["train"]["log_every"] == 3
    assert cfg["train"]["steps"] == 9
    (kept,) = (run / "config_history").iterdir()
    assert "train.steps: 7 -> 9" in kept.read_text() and tomllib.loads(kept.read_text())["train"]["steps"] == 7
    summary = json.loads((run / "summary.json").read_text())
    assert summary["strategy"] == "zero3" and summary["world_size"] == 2 and summary["steps"] == 9
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [3, 6, 7, 9]  # step 9 (the end) once, nothing logged twice


def test_world_size_and_derived_keys_are_named():
    old = config.load(None, ["train.global_batch=8", "train.micro_batch=2"])
    old = config.validate(old, 2)
    new = config.load(None, ["parallel.strategy=zero2", "train.lr=1e-3"], base=resume.base_config(old))
    new = config.validate(new, 1)
    lines, trajectory = resume.differences(old, new, 2, 1)
    assert lines[0].startswith("world size: 2 -> 1") and "train.global_batch=8" in lines[0]
    assert any(line.startswith("train.grad_accum: 2 -> 4  (derived") for line in lines)
    assert any(line.startswith("parallel.strategy: 'ddp' -> 'zero2'  (same maths") for line in lines)
    assert trajectory == ["train.lr"]


def test_resume_needs_a_run_with_a_checkpoint(tmp_path, capsys):
    cfg = config.Config()
    cfg.ckpt.final = False
    (tmp_path / "config.toml").write_text(config.to_toml(cfg))
    assert cli.cmd_resume([str(tmp_path)]) == 2
    assert "this run saved no checkpoint (ckpt.every=0, ckpt.final=false)" in capsys.readouterr().err
    assert cli.cmd_resume([str(tmp_path / "nope")]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert not (tmp_path / "config_history").exists()


@pytest.mark.parametrize("sub", [["ls"], ["export", "--hf", "OUT"]])
def test_ckpt_on_a_run_that_saved_none_says_so(tmp_path, capsys, sub):
    from shardlab.checkpoint import cli as ckpt_cli

    cfg = config.Config()
    cfg.ckpt.final = False
    (tmp_path / "config.toml").write_text(config.to_toml(cfg))
    args = [sub[0], str(tmp_path), *[str(tmp_path / a) if a == "OUT" else a for a in sub[1:]]]
    assert ckpt_cli.main(args) == 2
    assert "this run saved no checkpoint (ckpt.every=0, ckpt.final=false)" in capsys.readouterr().err
    assert config.Config().ckpt.final is True  # ...which is no longer the default


def test_verdict_names_the_killed_rank_not_the_bystanders(tmp_path):
    fails = tmp_path / "failures"
    fails.mkdir()
    # rank 1 was SIGKILLed; rank 0 then failed in a collective (an echo) and torchrun stopped the rest
    (fails / "launcher.json").write_text(json.dumps({"failures": {
        "0": {"exitcode": 1, "signal": None}, "1": {"exitcode": -9, "signal": "SIGKILL"},
        "2": {"exitcode": 143, "signal": None}}}))
    (fails / "rank0.json").write_text(json.dumps({"rank": 0, "kind": "crash", "time": 2.0,
                                                  "error": "RuntimeError: Connection closed by peer"}))
    lines, code = failure.verdict(tmp_path, 1, tmp_path / "launcher.log")
    assert code == 1 and lines[0].startswith("shardlab: FAILED: rank 1 was killed by SIGKILL")
    assert lines[-1] == "shardlab: exit code 1 (crash)"
    (fails / "launcher.json").write_text(json.dumps({"failures": {"0": {"exitcode": 1, "signal": None},
                                                                  "1": {"exitcode": 1, "signal": None}}}))
    (fails / "rank1.json").write_text(json.dumps({"rank": 1, "kind": "crash", "time": 1.0, "where": "x.py:3 in f",
                                                  "error": "ValueError: bad"}))
    lines, code = failure.verdict(tmp_path, 1)
    assert lines[0] == "shardlab: FAILED: rank 1 raised ValueError: bad at x.py:3 in f (its traceback is above)."


def test_verdict_of_ranks_that_found_bad_input_is_exit_2(tmp_path):
    """Ranks that refused a damaged checkpoint themselves (no launcher checked first) make the job's exit code 2."""
    fails = tmp_path / "failures"
    fails.mkdir()
    (fails / "launcher.json").write_text(json.dumps({"failures": {"0": {"exitcode": 2, "signal": None},
                                                                  "1": {"exitcode": 2, "signal": None}}}))
    for rank in (0, 1):
        (fails / f"rank{rank}.json").write_text(json.dumps({
            "rank": rank, "kind": "bad input", "time": 1.0 + rank,
            "error": "CheckpointError: cannot resume runs/x: it has checkpoints but none is intact: step_000004 (...)"}))
    lines, code = failure.verdict(tmp_path, 1, tmp_path / "launcher.log")
    assert code == 2 and lines[-1] == "shardlab: exit code 2 (bad input)"
    assert lines[0] == "shardlab: FAILED (bad input): cannot resume runs/x: it has checkpoints but none is intact: step_000004 (...)"


def test_fp16_on_cpu_warns_once(capsys):
    from shardlab import precision

    precision._warned = False
    assert precision.warn_if_slow("fp16", "cpu", True) and not precision.warn_if_slow("fp16", "cpu", True)
    assert not precision.warn_if_slow("bf16", "cpu", True)
    err = capsys.readouterr().err
    assert err.count("warning: train.dtype=fp16 on CPU") == 1 and "slower than fp32" in err and "bf16" in err
