"""A lighthouse that may die (launch/lighthouse.py, parallel/dp/ft_manager.py): killed with SIGKILL mid-run
and started again on its port, it loses no job. The replicas (every-step fault tolerance, one process each)
reconnect, post again, and the quorum id continues; no replica restarts and they end bitwise equal.

The replicas are held with SIGSTOP while the lighthouse is down and back, so the outage is seen at their
next quorum whatever the machine's load. Every wait has a deadline; every process is killed at the end."""
from __future__ import annotations

import signal
import time

import pytest

import ft_harness as ft

STEPS = 8
DEADLINE_S = 180


@pytest.mark.timeout(DEADLINE_S + 60)
def test_lighthouse_killed_and_restarted_loses_no_job(tmp_path):
    from shardlab.launch.launcher import free_port

    t_end = time.monotonic() + DEADLINE_S
    port = free_port()
    ov = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.warmup_steps=1", "train.log_every=1",
          "train.eval_every=0", "ckpt.final=false", f"train.steps={STEPS}", "train.threads=1",
          "parallel.strategy=single", "parallel.fault_tolerant=true", "parallel.replicas=2",
          f"parallel.ft_store=127.0.0.1:{port}", "parallel.ft_job=lh", "parallel.ft_timeout=10",
          "parallel.ft_join_timeout=60", "debug.slow_rank=0", "debug.slow_ms=150"]
    procs = []
    try:
        lh = ft.lighthouse(tmp_path, port, t_end)
        procs.append(lh)
        r0 = ft.replica(tmp_path, "r0", 0, 1, ov, t_end)
        r1 = ft.replica(tmp_path, "r1", 1, 1, ov, t_end)
        procs += [r0, r1]
        pids = [*ft.rank_pids(r0, 0, 1).values(), *ft.rank_pids(r1, 1, 1).values()]
        r0.wait_for(r"quorum 1 for step 3 ")
        ft.signal_ranks(pids, signal.SIGSTOP)
        lh.kill()  # SIGKILL: every key of the job is gone with it
        lh2 = ft.lighthouse(tmp_path, port, t_end, name="lighthouse2")
        procs.append(lh2)
        ft.signal_ranks(pids, signal.SIGCONT)
        assert r0.exitcode() == 0, r0.text()[-4000:]
        assert r1.exitcode() == 0, r1.text()[-4000:]
    finally:
        for p in procs:
            p.kill()
    assert "reconnected to the lighthouse" in r0.text() + r1.text()
    for r in ("r0", "r1"):
        q = ft.quorums(tmp_path / r)
        # one decision per step, every one with both replicas, and one quorum id throughout: nothing was lost
        assert [d["step"] for d in q] == list(range(STEPS)), q
        assert all(d["participants"] == [0, 1] and d["qid"] == 1 for d in q), q
        s = ft.summary(tmp_path / r)
        assert s["restarts"] == 0 and s["heals"] == 0
    assert ft.summary(tmp_path / "r0")["param_checksum"] == ft.summary(tmp_path / "r1")["param_checksum"]
