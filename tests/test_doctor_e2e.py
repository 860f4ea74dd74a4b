"""The doctor end to end: `shardlab train --nproc 2` with injected faults, then `shardlab doctor ...`.
Each run is a few seconds of a tiny 3-layer GPT; every subprocess has a hard timeout."""
import json

from shardlab.testing import run_cli

BASE = ["--nproc", "2", "model.preset=tiny", "model.n_layer=3", "train.seq_len=32", "train.micro_batch=4",
        "train.eval_every=0", "train.log_every=5", "train.warmup_steps=2", "parallel.strategy=ddp"]


def train(out, *overrides, timeout=120):
    return run_cli(["train", "--out", str(out), *BASE, *overrides], timeout=timeout)


def test_injected_nan_stops_with_step_rank_module(tmp_path):
    r = train(tmp_path, "train.steps=10", "debug.inject_nan=7:1:blocks.2.mlp", "doctor.hang_timeout_s=20")
    assert r.returncode != 0
    assert "ANOMALY at step 7: non-finite loss on rank 1" in r.stderr and "module blocks.2.mlp" in r.stderr
    report = json.loads((tmp_path / "anomalies" / "step_7.json").read_text())
    assert report["step"] == 7 and report["ranks"] == [1]
    assert report["per_rank"]["1"]["localisation"]["module"] == "blocks.2.mlp"
    assert len(report["per_rank"]["1"]["sample_indices"]) == 4


def test_skip_and_uneven_join_finish_with_consistent_replicas(tmp_path):
    r = train(tmp_path, "train.steps=10", "debug.inject_nan=7:0:blocks.1.attn", "doctor.on_anomaly=skip",
              "debug.uneven_rank=1@4", "data.uneven=join", "doctor.checksum_every=3")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ranks_consistent"] is True and summary["anomalies"] == 1 and summary["steps"] == 10
    report = json.loads((tmp_path / "anomalies" / "step_7.json").read_text())
    assert report["ranks"] == [0] and report["per_rank"]["0"]["localisation"]["module"] == "blocks.1.attn"


def test_rollback_heals_corruption_and_nan_then_replay_says_distributed(tmp_path):
    # corruption of rank 1 after step 2 -> checksum after step 3 names it -> rollback to step_000002;
    # NaN at step 7 -> rollback to step_000006 and skip step 7's batch; the run then finishes consistent.
    r = train(tmp_path, "train.steps=10", "ckpt.every=2", "doctor.on_anomaly=rollback", "doctor.checksum_every=2",
              "debug.corrupt_rank=1@2", "debug.inject_nan=7:1:blocks.2.mlp")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "REPLICAS DIVERGED: rank 1 differs" in r.stderr
    div = json.loads((tmp_path / "doctor" / "divergence_step_3.json").read_text())
    assert div["first"]["ranks"] == [1] and div["first"]["param"]
    assert "rolled back to step_000002" in r.stdout and "rolled back to step_000006" in r.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ranks_consistent"] is True and summary["anomalies"] == 1
    rep = run_cli(["doctor", "replay", str(tmp_path), "--step", "7"], timeout=90)
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert "does NOT reproduce" in rep.stdout and "DISTRIBUTED or TRANSIENT" in rep.stdout


def test_injected_hang_exits_and_is_named(tmp_path):
    # The job must end by itself: run_cli's timeout (far above the 3 s watchdog plus start-up, even on a
    # loaded machine) raises if it hangs; how fast it ends is not asserted (no timed assertions in tests).
    r = train(tmp_path, "train.steps=10", "debug.hang_rank=1@2", "doctor.hang_timeout_s=3", timeout=180)
    assert r.returncode != 0
    assert "no progress for" in r.stderr  # the watchdog ended it, not some other failure
    h = run_cli(["doctor", "hang", str(tmp_path)], timeout=60)
    assert h.returncode == 0, h.stderr
    first = h.stdout.splitlines()[0]
    assert first.startswith("rank 1 never joined all_reduce #") and "it was in: data loading" in first
    assert "rank 0 is waiting in all_reduce #" in h.stdout
