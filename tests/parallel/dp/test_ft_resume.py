"""Coordinated resume of a whole fault-tolerant job (parallel.ft_job_dir, parallel/ft/resume.py): every
replica killed, then all started again with the same commands, resume from the newest step every replica
committed, in a new epoch of the job's keys, and end bitwise equal to a run that was never stopped.

The replicas are one `single` process each (the resume logic does not depend on the layout inside). Replica
1 hangs at the start of step 3 (debug.hang_rank), after it committed step 2, while replica 0 goes on alone and
saves one more checkpoint than it, so the newest *common* step is older than replica 0's latest: the resume must
load replica 0's older checkpoint. The hang is injected in replica 1's own step rather than sent as SIGSTOP after
a log line is seen: on a loaded machine the line reached the log late enough for replica 1 to commit step 4
first (a CI run). Every wait has a deadline."""
from __future__ import annotations

import json
import time

import pytest

import ft_harness as ft

STEPS = 8
DEADLINE_S = 240
# parallel.ft_timeout: the test sits it out 4 times (the hang's failed collective and its quorum, then 2 x with no
# quorum before the resume); the replicas' quorums otherwise wait ~0.2 s for each other (replica 0's straggler)
FT_TIMEOUT_S = 3


def _ov(port: int, job: str, job_dir, *extra: str) -> list[str]:
    return ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.warmup_steps=1", "train.log_every=1",
            "train.eval_every=0", "ckpt.final=false", f"train.steps={STEPS}", "train.threads=1", "ckpt.every=2",
            "ckpt.async=false", "ckpt.keep=0", "parallel.strategy=single", "parallel.fault_tolerant=true",
            "parallel.replicas=2", f"parallel.ft_store=127.0.0.1:{port}", f"parallel.ft_job={job}",
            f"parallel.ft_job_dir={job_dir}", f"parallel.ft_timeout={FT_TIMEOUT_S}", "parallel.ft_join_timeout=60",
            "debug.slow_rank=0", "debug.slow_ms=150", *extra]


@pytest.mark.timeout(DEADLINE_S + 60)
def test_whole_job_killed_resumes_from_the_newest_common_step(tmp_path):
    from shardlab.launch.launcher import free_port

    t_end = time.monotonic() + DEADLINE_S
    port = free_port()
    job_dir = tmp_path / "job"
    procs = []
    try:
        procs.append(ft.lighthouse(tmp_path, port, t_end))
        ov = _ov(port, "resume", job_dir)
        r0 = ft.replica(tmp_path, "r0", 0, 1, ov, t_end)
        r1 = ft.replica(tmp_path, "r1", 1, 1, ov + ["debug.hang_rank=0@3"], t_end)
        procs += [r0, r1]
        r1.wait_for(r"injected hang at step 3 ")  # replica 1 committed step 2 (synchronous saves), never step 4
        r0.wait_for(r"quorum \d+ for step 5 ")  # replica 0 went on alone and committed step 4
        for p in (r0, r1):
            p.kill()  # the whole job is dead
        # The uninterrupted reference job runs meanwhile: its keys and its liveness beat are its own (another
        # job name and job dir on the same lighthouse), so it cannot keep the killed job's epoch alive.
        ref = _ov(port, "reference", tmp_path / "refjob")
        q0, q1 = ft.replica(tmp_path, "ref0", 0, 1, ref, t_end), ft.replica(tmp_path, "ref1", 1, 1, ref, t_end)
        procs += [q0, q1]
        time.sleep(2 * FT_TIMEOUT_S + 0.5)  # no quorum for 2 x parallel.ft_timeout: the lighthouse's epoch is over
        # the resumed run starts from its own config.toml (launch/resume.py): the injected hang is lifted by name
        again = ov + ["ckpt.resume=latest", "debug.hang_rank="]
        a0, a1 = ft.replica(tmp_path, "r0", 0, 1, again, t_end), ft.replica(tmp_path, "r1", 1, 1, again, t_end)
        procs += [a0, a1]
        assert a0.exitcode() == 0, a0.text()[-4000:]
        assert a1.exitcode() == 0, a1.text()[-4000:]
        assert q0.exitcode() == 0 and q1.exitcode() == 0, q0.text()[-3000:] + q1.text()[-3000:]
    finally:
        for p in procs:
            p.kill()
    epoch = json.loads((job_dir / "epoch.json").read_text())
    assert epoch["epoch"] == 1 and epoch["step"] == 2, epoch  # replica 1 committed only step 2
    assert 4 in epoch["committed"]["0"] and 4 not in epoch["committed"]["1"], epoch
    assert "resuming it at step 2" in a0.text() + a1.text()
    # replica 0 went on alone for steps 2..4 before the kill; the resumed job replays them with both
    sums = {ft.summary(tmp_path / r)["param_checksum"] for r in ("r0", "r1", "ref0", "ref1")}
    assert len(sums) == 1, sums
