"""Checkpoints through the real trainer at world 2: exact resume, retention, and the fault drills (a rank
failing during save, a corrupted shard, kill -9 of a rank under elastic restarts). One module, so one pool."""
import json

import pytest

from ckpt_harness import assert_params_equal, train_run

from shardlab.checkpoint import cli as ckpt_cli
from shardlab.checkpoint import manifest as mf


COMMON12 = ["parallel.strategy=torch-zero1", "train.steps=12"]  # torch-zero1: our own optimizer-state path


@pytest.fixture(scope="module")
def straight(pool2, tmp_path_factory):
    """The uninterrupted 12-step run both the resume test and the kill -9 drill compare with."""
    return pool2.run(train_run, tmp_path_factory.mktemp("straight"), COMMON12, 2)


def test_exact_resume_world2(pool2, tmp_path, straight):
    """12 steps straight == 6 steps, stop, resume, 6 more: same losses, bitwise parameters, same samples,
    same RNG streams afterwards."""
    common = COMMON12
    run = tmp_path / "resumed"
    # async saves at 3 and 6; the copy of step 3's state overlaps step 4 (its optimizer step must wait for it)
    pool2.run(train_run, run, common + ["ckpt.every=3", "ckpt.async=true"], 2, stop_after=6, wait_each=False)
    assert mf.read_latest(run / "checkpoints").name == "step_000006"
    resumed = pool2.run(train_run, run, common + ["ckpt.resume=latest"], 2, rng_seed=7)
    for r in range(2):
        assert resumed[r]["start"] == 6
        assert_params_equal(resumed[r]["params"], straight[r]["params"], exact=True)
        assert torch_equal(resumed[r]["rng"], straight[r]["rng"])  # per-rank RNG restored
        assert resumed[r]["batches"] == {s: straight[r]["batches"][s] for s in range(6, 12)}
    # metrics.jsonl is appended to: steps 7..12 were logged by the resumed run
    assert [straight[0]["losses"][s] for s in range(7, 13)] == [resumed[0]["losses"][s] for s in range(7, 13)]
    from3 = pool2.run(train_run, tmp_path / "from3", common + [f"ckpt.resume={run}/checkpoints/step_000003"], 2)
    assert from3[0]["start"] == 3
    assert_params_equal(from3[0]["params"], straight[0]["params"], exact=True)


def test_retention_and_manifest(pool2, tmp_path):
    run = tmp_path / "run"
    pool2.run(train_run, run, ["parallel.strategy=torch-fsdp2", "train.steps=8", "ckpt.every=1",
                               "ckpt.keep=2", "ckpt.keep_every=4", "ckpt.final=true"], 2)
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["latest", "step_000004", "step_000007", "step_000008"]
    manifest = mf.read_manifest(run / "checkpoints" / "step_000008")
    assert manifest["world_size"] == 2 and manifest["strategy"] == "torch-fsdp2" and manifest["step"] == 8
    assert {".metadata", "train_state.json", "__0_0.distcp", "__1_0.distcp"} <= set(manifest["files"])
    assert mf.verify(run / "checkpoints" / "step_000008") == []
    meta = json.loads((run / "checkpoints" / "step_000008" / "train_state.json").read_text())
    assert meta["sampler"]["cursor"] == 64 and meta["step"] == 8


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
    assert ckpt_cli.main(["verify", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "CORRUPT" in out and "step_000004/__1_0.distcp: xxh3_128 mismatch" in out and "ok      " in out
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


def test_kill9_one_rank_elastic_restart_finishes_identically(tmp_path, straight):
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

    overrides = COMMON12 + ["ckpt.every=3", "ckpt.final=true"]
    reference = straight[0]["params"]
    run = tmp_path / "killed"
    # rank 1 sleeps 100 ms a step, so there is time to kill it between checkpoints
    cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", "2", "--max-restarts", "1", "--out", str(run),
           *BASE, *overrides, "debug.slow_rank=1", "debug.slow_ms=100"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline, killed = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None and killed is None:
            latest = mf.read_latest(run / "checkpoints")
            if latest is not None and latest.name >= "step_000003":
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
    final = load_model_tensors(run / "checkpoints" / "step_000012")
    for name, ref in reference.items():
        assert torch_equal(final[name], ref), name


def torch_equal(a, b):
    import torch
    return torch.equal(a, b)


def _resume_counting_torch_loads(run, overrides):
    """train_run's resume, counting torch's Optimizer.load_state_dict calls and recording the lr that the
    fresh optimizer held when the checkpoint was applied."""
    import torch

    from shardlab.parallel.dp import in_place

    calls, fresh = [], []
    torch_load, direct = torch.optim.Optimizer.load_state_dict, in_place.load_optim_in_place

    def counted(self, sd):
        calls.append(1)
        return torch_load(self, sd)

    def recorded(optimizer, sd):
        fresh.append((optimizer.param_groups[0]["lr"], sd["param_groups"][0]["lr"]))
        return direct(optimizer, sd)

    torch.optim.Optimizer.load_state_dict, in_place.load_optim_in_place = counted, recorded
    try:
        out = train_run(run, overrides, 2)
    finally:
        torch.optim.Optimizer.load_state_dict, in_place.load_optim_in_place = torch_load, direct
    return {**out, "torch_loads": len(calls), "fresh": fresh}


def test_ddp_resume_applies_the_optimizer_without_torchs_repacking(pool2, tmp_path):
    """A real torch-ddp resume (the fresh optimizer's lr, the schedule's first, differs from the checkpoint's)
    applies the optimizer state read in place without torch's Optimizer.load_state_dict
    (parallel/dp/in_place.py), and continues exactly as the run that was not stopped."""
    common = ["parallel.strategy=torch-ddp", "train.steps=6", "train.warmup_steps=4"]
    straight = pool2.run(train_run, tmp_path / "straight", common, 2)
    run = tmp_path / "resumed"
    pool2.run(train_run, run, common + ["ckpt.every=3"], 2, stop_after=3)
    resumed = pool2.run(_resume_counting_torch_loads, run, common + ["ckpt.resume=latest"])
    for r in range(2):
        assert resumed[r]["start"] == 3 and resumed[r]["torch_loads"] == 0
        (live_lr, saved_lr), = resumed[r]["fresh"]
        assert live_lr != saved_lr  # a real resume's case
        assert_params_equal(resumed[r]["params"], straight[r]["params"], exact=True)
    assert [straight[0]["losses"][s] for s in (4, 5, 6)] == [resumed[0]["losses"][s] for s in (4, 5, 6)]
