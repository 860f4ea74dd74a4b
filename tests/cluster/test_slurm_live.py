"""The generated sbatch script on a real (private, one-node) Slurm: a job runs to the end; a job stopped by
`scancel --signal=TERM` mid-run saves, exits 143, requeues itself, and the requeued attempt resumes to the
same final parameters as the uninterrupted job, bit for bit; the same script runs inside an salloc allocation."""
import os
import time
from pathlib import Path

import torch

from shardlab.testing import run_cli

RUN = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.global_batch=4", "train.steps=30",
       "train.log_every=5", "train.eval_every=0", "train.warmup_steps=2", "parallel.strategy=ddp",
       "debug.slow_rank=1", "debug.slow_ms=150"]  # 30 steps of ~0.2 s: time to signal it mid-run


def _write(tmp: Path, name: str, extra=()) -> Path:
    script = tmp / f"{name}.sbatch"
    res = run_cli(["launch", "slurm", "--nodes", "1", "--nproc", "2", "--cpus-per-node", str(os.cpu_count()),
                   "--time", "00:10:00", "--partition", "debug", "--iface", "lo", "--timeout", "60",
                   "--name", name, "--out", str(tmp / name), "--write", str(script), *RUN, *extra], cwd=tmp, timeout=60)
    assert res.returncode == 0, res.stderr
    return script


def _wait_gone(slurm, job: str, timeout_s: float, seen: list) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = slurm.state(job)
        if not state:
            return
        if not seen or seen[-1] != state:
            seen.append(state)
        time.sleep(0.5)
    slurm.run(["scancel", job], check=False)
    raise AssertionError(f"job {job} still queued after {timeout_s:g} s: {seen}")


def _wait_pending(slurm, job: str, timeout_s: float, seen: list) -> None:
    """Until the job is back in the queue (PENDING after its requeue); its states so far in `seen`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = slurm.state(job)
        if state and (not seen or seen[-1] != state):
            seen.append(state)
        if not state or state.startswith("PENDING"):  # (gone: _wait_gone and the log say why)
            return
        time.sleep(0.2)
    slurm.run(["scancel", job], check=False)
    raise AssertionError(f"job {job} not back in the queue after {timeout_s:g} s: {seen}")


def _final(run: Path) -> dict:
    from shardlab.checkpoint.hf import load_model_tensors

    return load_model_tensors(run / "checkpoints" / "step_000030")


def _log(tmp: Path, name: str, job: str) -> str:
    return (tmp / f"slurm-{name}-{job}.out").read_text()


def test_sbatch_runs_then_scancel_term_saves_and_the_requeued_job_resumes_bitwise(slurm, tmp_path):
    job = slurm.run(["sbatch", "--parsable", str(_write(tmp_path, "stopped"))]).stdout.strip()
    log_path = tmp_path / f"slurm-stopped-{job}.out"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and "step      5/30" not in (log_path.read_text() if log_path.exists() else ""):
        time.sleep(0.2)
    slurm.run(["scancel", "--signal=TERM", job])  # the job steps' tasks, not the batch shell
    seen = []
    _wait_pending(slurm, job, 120, seen)
    # The uninterrupted job runs while the requeued one waits out its credential's lifetime (slurm_local.py's
    # cred_expire) in the queue: the node is idle then. It needs no slow steps (nothing signals it; the sleep
    # changes no number); the requeued attempt starts once it has ended (both ask for every CPU of the node).
    script = _write(tmp_path, "straight", ["debug.slow_ms=0"])
    straight = slurm.run(["sbatch", "--parsable", str(script)]).stdout.strip()
    _wait_gone(slurm, job, 300, seen)
    _wait_gone(slurm, straight, 240, [])
    log = _log(tmp_path, "straight", straight)
    assert "step     30/30" in log and "run directory:" in log, log[-3000:]
    log = log_path.read_text()
    assert "shardlab: interrupted by SIGTERM: every rank stopped after step" in log, log[-3000:]
    assert "exit code 143" in log and f"requeueing job {job}" in log, log[-3000:]
    assert f"job {job} attempt 2" in log and "[ckpt] resumed from" in log and "step     30/30" in log, log[-3000:]
    assert any(s.startswith("PENDING") for s in seen), seen  # it was back in the queue between the attempts
    stopped_at = int(log.split("every rank stopped after step ")[1].split(".")[0])
    assert 5 <= stopped_at < 30, stopped_at
    ref, got = _final(tmp_path / "straight"), _final(tmp_path / "stopped")
    assert ref.keys() == got.keys()
    for name, tensor in ref.items():
        assert torch.equal(got[name], tensor), name  # bitwise
    print(f"\n[slurm] job {job} stopped after step {stopped_at}, requeued ({' -> '.join(seen)}), resumed; "
          f"{len(ref)} tensors bitwise equal to job {straight}")


def test_the_script_runs_inside_an_salloc_allocation(slurm, tmp_path):
    script = _write(tmp_path, "alloc", ["train.steps=4", "debug.slow_ms=0"])
    res = slurm.run(["salloc", "-N1", "--exclusive", "--time=00:05:00", "bash", str(script)], check=False, timeout=240)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "step      4/4" in res.stdout and "requeue" not in res.stdout, res.stdout[-3000:]
    assert (tmp_path / "alloc" / "checkpoints" / "step_000004").is_dir()
