"""The doctor end to end: `shardlab train --nproc 2` with injected faults, then `shardlab doctor ...`.
Each run is a few seconds of a tiny 3-layer GPT; every subprocess has a hard timeout. A run whose launcher's
lines are asserted (a failure's verdict) is a real launch; one that finishes is what each of its ranks runs,
on the session's pool (cli_harness.as_rank)."""
import json
import re

from cli_harness import as_rank, run_in_process
from shardlab.testing import run_cli

BASE = ["--nproc", "2", "model.preset=tiny", "model.n_layer=3", "train.seq_len=32", "train.micro_batch=4",
        "train.eval_every=0", "train.log_every=5", "train.warmup_steps=2", "parallel.strategy=ddp",
        "ckpt.final=false"]


def _strict_rows(run):
    def reject(name):
        raise ValueError(f"metrics.jsonl holds {name}: not JSON")
    return [json.loads(line, parse_constant=reject) for line in (run / "metrics.jsonl").read_text().splitlines()]


def train(out, *overrides, timeout=120):
    return run_cli(["train", "--out", str(out), *BASE, *overrides], timeout=timeout)


def train_on(pool, out, *overrides, timeout=120):
    """The run's ranks on `pool`: (exit codes, the ranks' stdout, their stderr), each output joined."""
    ranks = pool.run(as_rank, ["train", "--out", str(out), *BASE, *overrides], timeout=timeout)
    return [c for c, _, _ in ranks], "".join(o for _, o, _ in ranks), "".join(e for _, _, e in ranks)


def test_injected_nan_stops_with_step_rank_module(tmp_path):
    r = train(tmp_path, "train.steps=10", "debug.inject_nan=7:1:blocks.2.mlp", "doctor.hang_timeout_s=20")
    assert r.returncode == 4  # anomaly (shardlab.launch.failure.CODES)
    assert "ANOMALY at step 7: non-finite loss on rank 1" in r.stderr and "module blocks.2.mlp" in r.stderr
    # the last lines are shardlab's verdict naming the culprit rank; torchrun's report is in launcher.log
    last = r.stderr.strip().splitlines()[-4:]
    assert last[0].startswith("shardlab: FAILED (anomaly, rank 1 at step 7)") and "blocks.2.mlp" in last[0]
    assert last[1] == f"shardlab: report: {tmp_path}/anomalies/step_7.json; replay: shardlab doctor replay {tmp_path} --step 7"
    assert last[2] == f"shardlab: launcher messages (torchrun): {tmp_path}/launcher.log"
    assert last[3] == "shardlab: exit code 4 (anomaly)"
    noise = (tmp_path / "launcher.log").read_text()
    assert "ChildFailedError" in noise and "Root Cause" in noise and "Root Cause" not in r.stderr
    report = json.loads((tmp_path / "anomalies" / "step_7.json").read_text())
    assert report["step"] == 7 and report["ranks"] == [1]
    assert report["per_rank"]["1"]["localisation"]["module"] == "blocks.2.mlp"
    assert len(report["per_rank"]["1"]["sample_indices"]) == 4


def test_skip_and_uneven_join_finish_with_consistent_replicas(tmp_path, pool2):
    codes, _, err = train_on(pool2, tmp_path, "train.steps=10", "debug.inject_nan=7:0:blocks.1.attn",
                             "doctor.on_anomaly=skip", "debug.uneven_rank=1@4", "data.uneven=join",
                             "doctor.checksum_every=3")
    assert codes == [0, 0], err[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ranks_consistent"] is True and summary["anomalies"] == 1 and summary["steps"] == 10
    report = json.loads((tmp_path / "anomalies" / "step_7.json").read_text())
    assert report["ranks"] == [0] and report["per_rank"]["0"]["localisation"]["module"] == "blocks.1.attn"
    # the skipped step is an event record (strict JSON: the NaN loss is null and flagged), not a loss line
    rows = _strict_rows(tmp_path)
    skip = [row for row in rows if row.get("event")]
    assert [row["step"] for row in skip] == [8] and skip[0]["event"] == "skip" and skip[0]["skipped"] is True
    assert skip[0]["loss"] is None and "loss" in skip[0]["nonfinite"] and "tokens_per_s" not in skip[0]
    assert summary["skipped_steps"] == 1 and summary["events"] == {"skip": 1, "rollback": 0}


def test_rollback_heals_corruption_and_nan_then_replay_says_distributed(tmp_path, pool2):
    # corruption of rank 1 after step 2 -> checksum after step 3 names it -> rollback to step_000002;
    # NaN at step 7 -> rollback to step_000006 and skip step 7's batch; the run then finishes consistent.
    codes, out, err = train_on(pool2, tmp_path, "train.steps=10", "ckpt.every=2", "doctor.on_anomaly=rollback",
                               "doctor.checksum_every=2", "debug.corrupt_rank=1@2", "debug.inject_nan=7:1:blocks.2.mlp")
    assert codes == [0, 0], err[-3000:]
    assert "REPLICAS DIVERGED: rank 1 differs" in err
    div = json.loads((tmp_path / "doctor" / "divergence_step_3.json").read_text())
    assert div["first"]["ranks"] == [1] and div["first"]["param"]
    assert "rolled back to step_000002" in out and "rolled back to step_000006" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ranks_consistent"] is True and summary["anomalies"] == 1
    # metrics: one record per step however often it was replayed; each rollback is an event at the step it
    # happened; step 8's batch (index 7) was skipped on the replay; the summary counts match the records
    rows = _strict_rows(tmp_path)
    steps = [row["step"] for row in rows]
    assert len(steps) == len(set(steps)) and steps == sorted(steps)
    events = {row["step"]: row for row in rows if row.get("event")}
    assert sorted(events) == [4, 8] and all(e["event"] == "rollback" for e in events.values())
    assert events[4]["rolled_back_to"] == 2 and events[4]["skipped"] is False and events[4]["loss"] > 0
    assert events[8]["rolled_back_to"] == 6 and events[8]["skipped"] is True and "loss" not in events[8]
    assert summary["skipped_steps"] == 1 and summary["events"] == {"skip": 0, "rollback": 2}
    # the notebook API reads the same run
    import shardlab.run
    run = shardlab.run.load(tmp_path)
    assert run.config.doctor.on_anomaly == "rollback" and run.metrics == rows and run.summary == summary
    assert run.events == [events[4], events[8]] and run.series("loss")[0] == [row["step"] for row in rows if "loss" in row]
    rep = run_in_process(["doctor", "replay", str(tmp_path), "--step", "7"])  # one process either way
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert "does NOT reproduce" in rep.stdout and "DISTRIBUTED or TRANSIENT" in rep.stdout


def test_injected_hang_exits_and_is_named(tmp_path):
    # Exit code 3 is the watchdog's own (os._exit(3) after it dumps the flight record): a run that merely
    # hung would be killed by run_cli's timeout instead. No wall-clock bound: it measures the machine's load.
    r = train(tmp_path, "train.steps=10", "debug.hang_rank=1@2", "doctor.hang_timeout_s=3", timeout=120)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "no progress for" in r.stderr
    last = r.stderr.strip().splitlines()[-4:]
    assert last[0].startswith("shardlab: FAILED: hang") and "rank 1 never joined all_reduce #" in last[0]
    assert last[-1] == "shardlab: exit code 3 (hang)"
    h = run_in_process(["doctor", "hang", str(tmp_path)])
    assert h.returncode == 0, h.stderr
    first = h.stdout.splitlines()[0]
    assert first.startswith("rank 1 never joined all_reduce #") and "it was in: data loading" in first
    assert "rank 0 is waiting in all_reduce #" in h.stdout
    # one numbering: rank 0's watchdog line (its own timeout, or torchrun's SIGTERM after rank 1's)
    # names the collective doctor hang names
    op = first[len("rank 1 never joined "):first.index("; its last")]
    # (the ranks' stderr lines can run into each other: search, do not split lines)
    rank0 = re.findall(r"\[shardlab doctor\] rank 0: [^\n]*?Flight record", r.stderr)
    assert rank0 and f"blocked in {op}." in rank0[0], (op, rank0)
