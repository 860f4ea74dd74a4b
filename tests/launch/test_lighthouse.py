"""A lighthouse that may die (launch/lighthouse.py, parallel/ft/manager.py): killed with SIGKILL mid-run and
not started again for several steps, it stops nothing: both replicas (every-step fault tolerance, one process
each) keep their last quorum and train on over the group it built. Started again on its port, it loses no job:
the replicas reconnect and the quorum id continues. No replica restarts or heals, the quorum log has one row
per step with both replicas, and they end bitwise equal.

The replicas are held with SIGSTOP while the new lighthouse starts (its imports take seconds on a loaded
machine), so they still have steps to train when it is back. Every wait has a deadline; every process is killed
at the end."""
from __future__ import annotations

import signal
import time

import pytest

import ft_harness as ft

STEPS = 12
DEADLINE_S = 180


@pytest.mark.timeout(DEADLINE_S + 60)
def test_lighthouse_killed_keeps_the_quorum_and_restarted_loses_no_job(tmp_path):
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
        lh.kill()  # SIGKILL: every key of the job is gone with it
        for r in (r0, r1):  # no lighthouse: both train on with quorum 1
            r.wait_for(r"lighthouse unreachable[^\n]*; keeping quorum 1 ", 2)
        ft.signal_ranks(pids, signal.SIGSTOP)
        lh2 = ft.lighthouse(tmp_path, port, t_end, name="lighthouse2")
        procs.append(lh2)
        ft.signal_ranks(pids, signal.SIGCONT)
        assert r0.exitcode() == 0, r0.text()[-4000:]
        assert r1.exitcode() == 0, r1.text()[-4000:]
    finally:
        for p in procs:
            p.kill()
    for r in (r0, r1):
        assert "reconnected to the lighthouse" in r.text(), r.text()[-4000:]
    for r in ("r0", "r1"):
        q = ft.quorums(tmp_path / r)
        # one row per step, every one with both replicas, and one quorum id throughout: nothing was lost
        assert [d["step"] for d in q] == list(range(STEPS)), q
        assert all(d["participants"] == [0, 1] and d["qid"] == 1 for d in q), q
        # kept for a span of steps after the kill, then decided at the lighthouse again
        kept = [i for i, d in enumerate(q) if d.get("kept")]
        assert len(kept) >= 2 and kept == list(range(kept[0], kept[-1] + 1)) and kept[0] >= 3, q
        assert not q[-1].get("kept"), q
        s = ft.summary(tmp_path / r)
        assert s["restarts"] == 0 and s["heals"] == 0 and s["ft"]["retries"] == 0, s["ft"]
        assert s["ft"]["kept_quorums"] >= 2 and s["ft"]["reconnects"] >= 1, s["ft"]
    assert ft.summary(tmp_path / "r0")["param_checksum"] == ft.summary(tmp_path / "r1")["param_checksum"]
