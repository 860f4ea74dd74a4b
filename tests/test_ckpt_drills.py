"""Fault drills: a rank failing during save, a corrupted shard, (and kill -9 under elastic restarts)."""
from ckpt_harness import train_run

from shardlab.checkpoint import cli as ckpt_cli

COMMON = ["parallel.strategy=torch-fsdp2", "ckpt.every=2"]


def test_save_failure_on_one_rank_is_abandoned(pool2, tmp_path):
    """Rank 1's write fails at step 4 (async save): no manifest, no .tmp left, step 2 stays latest,
    training goes on and the next checkpoint commits."""
    res = pool2.run(train_run, tmp_path, COMMON + ["train.steps=6", "ckpt.async=true"], 2, fail="1@4")
    saves = {s[0]: s for s in res[0]["saves"]}
    step, outcome, latest, listing = saves[4]
    assert "abandoned" in outcome and "rank(s) [1]" in outcome and "step_000002 stays latest" in outcome
    assert latest == "step_000002" and listing == ["latest", "step_000002"]
    assert res[1]["saves"][1][1] == outcome  # every rank knows the save was abandoned
    assert saves[6][1] is None and saves[6][2] == "step_000006"  # training continued; the next save commits


def test_flipped_byte_verify_names_file_and_resume_falls_back(pool2, tmp_path, capsys):
    pool2.run(train_run, tmp_path, COMMON + ["train.steps=4"], 2)
    shard = tmp_path / "checkpoints" / "step_000004" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    assert ckpt_cli.main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "CORRUPT" in out and "step_000004/__1_0.distcp: sha256 mismatch" in out and "ok      " in out
    res = pool2.run(train_run, tmp_path, COMMON + ["train.steps=6", "ckpt.resume=latest"], 2)
    assert res[0]["start"] == 2 and res[1]["start"] == 2
    note = res[0]["notes"][0]
    assert "step_000004 failed verification" in note and "__1_0.distcp" in note and "falling back to step_000002" in note


def _rank_pid(run_dir, rank: int) -> int | None:
    """The pid of rank `rank` of the job writing to `run_dir` (first attempt), found through /proc."""
    import os

    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = dict(e.split(b"=", 1) for e in open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if str(run_dir).encode() in cmd and env.get(b"RANK") == str(rank).encode() \
                and env.get(b"TORCHELASTIC_RESTART_COUNT", b"0") == b"0" and b"torch.distributed.run" not in cmd:
            return int(pid)
    return None


def test_kill9_one_rank_elastic_restart_finishes_identically(pool2, tmp_path):
    """`kill -9` of rank 1 mid-run under --max-restarts 1: torchrun restarts the job, it resumes from
    `latest` by itself, finishes, and its final parameters equal an uninterrupted run's, bit for bit."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from ckpt_harness import BASE

    from shardlab.checkpoint import manifest as mf
    from shardlab.checkpoint.hf import load_model_tensors

    overrides = ["parallel.strategy=torch-ddp", "train.steps=24", "ckpt.every=4", "ckpt.final=true"]
    reference = pool2.run(train_run, tmp_path / "reference", overrides, 2)[0]["params"]
    run = tmp_path / "killed"
    # rank 1 sleeps 150 ms a step, so there is time to kill it between checkpoints
    cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", "2", "--max-restarts", "1", "--out", str(run),
           *BASE, *overrides, "debug.slow_rank=1", "debug.slow_ms=150"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline, killed = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None and killed is None:
            latest = mf.read_latest(run / "checkpoints")
            if latest is not None and latest.name >= "step_000008":
                killed = _rank_pid(run, 1)
                if killed:
                    os.kill(killed, signal.SIGKILL)
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert killed, f"never found rank 1 to kill\n{out[-3000:]}"
    assert proc.returncode == 0, out[-3000:]
    assert "elastic restart: resuming from the latest checkpoint" in out and "resumed from" in out, out[-3000:]
    final = load_model_tensors(run / "checkpoints" / "step_000024")
    for name, ref in reference.items():
        assert torch_equal(final[name], ref), name


def torch_equal(a, b):
    import torch
    return torch.equal(a, b)
