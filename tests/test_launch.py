"""The launcher: `--nproc 2` through torchrun writes a complete run directory; two launcher
processes ("nodes") meet through c10d rendezvous on localhost."""
import json
import os
import signal
import subprocess
import sys
import time

from shardlab.testing import free_port, run_cli

TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.steps=6", "train.log_every=2",
        "train.eval_every=3", "train.eval_seqs=8", "train.warmup_steps=1", "ckpt.final=false"]


def test_nproc2_writes_run_directory(tmp_path):
    out = tmp_path / "run"
    res = run_cli(["train", "--nproc", "2", "--out", str(out), "parallel.strategy=torch-ddp", *TINY], timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for key in ("strategy", "world_size", "params", "steps", "tokens_per_step", "tokens_per_s", "step_time_s",
                "final_train_loss", "final_val_loss", "peak_mem_bytes", "state_bytes", "comm", "overlap_pct",
                "exposed_comm_s", "ranks_consistent"):
        assert key in summary, key
    assert summary["world_size"] == 2 and summary["steps"] == 6 and summary["ranks_consistent"] is True
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [2, 4, 6]
    assert rows[0] == {"step": 0, "val_loss": rows[0]["val_loss"]} and rows[0]["val_loss"] > 5.0
    assert (out / "config.toml").exists() and (out / "loss.png").stat().st_size > 1000
    assert "step      6/6" in res.stdout and "summary:" in res.stdout


def test_two_nodes_c10d_rendezvous(tmp_path):
    port = free_port()
    out = tmp_path / "run"
    cmds = [[sys.executable, "-m", "shardlab", "train", "--nnodes", "2", "--node-rank", str(r), "--nproc", "1",
             "--master-addr", "127.0.0.1", "--master-port", str(port), "--out", str(out),
             "parallel.strategy=torch-ddp", *TINY] for r in (0, 1)]
    # each launcher in its own session, so that on a timeout its torchrun agent and worker die with it
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for c in cmds]
    deadline = time.monotonic() + 180
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    outputs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outputs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_consistent"] is True
