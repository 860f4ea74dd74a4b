"""Every-step fault tolerance (parallel.sync=every_step parallel.fault_tolerant=true, parallel/ft/every_step.py):
2 replicas x 2 ranks of torch-fsdp2, one rank of replica 1 killed mid-run; and of zero2, killed mid-run and
killed again while its first restart is being healed (the heal widened by SHARDLAB_HEAL_DELAY).

Replica 0 never restarts and finishes; replica 1's launcher restarts it (--max-restarts 1), it is healed by
replica 0 shard to shard and ends bitwise equal; and replica 0's loss trajectory is bitwise equal to a
reference run in which replica 1 sits out exactly the steps the quorum log says it missed (debug.ft_absent).
SIGSTOP holds the survivor while replica 1 comes back, so the outcome does not depend on the machine's load
(only which steps are missed does, and the reference follows the log). Every wait has a deadline; every
process is killed at the end.
"""
from __future__ import annotations

import signal
import time

import pytest

import ft_harness as ft

STEPS = 8
DEADLINE_S = 420  # both runs, however loaded the machine; a stuck wait fails with the logs


def _overrides(port: int, job: str, strategy: str, *extra: str) -> list[str]:
    return ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.warmup_steps=1",
            "train.log_every=1", "train.eval_every=0", "ckpt.final=false", f"train.steps={STEPS}", "train.threads=1",
            f"parallel.strategy={strategy}", "parallel.fault_tolerant=true", "parallel.replicas=2",
            f"parallel.ft_store=127.0.0.1:{port}", f"parallel.ft_job={job}", "parallel.ft_timeout=10",
            "parallel.ft_join_timeout=150",
            # 0.2 s per step: a kill lands mid-step, and the survivor is stopped before it could finish
            "debug.slow_rank=0", "debug.slow_ms=200", *extra]



def _reference(tmp_path, port, strategy, plan, t_end, procs) -> None:
    """The reference job (the same lighthouse, keys of its own): replica 1 absent exactly as `plan` says. Nothing
    is killed here: no straggler (the sleep changes no number; replica 0 waits for the planned joiner at its
    quorum, debug.ft_absent, whatever its pace)."""
    ref = _overrides(port, "reference", strategy, *plan, "debug.slow_ms=0")
    q0 = ft.replica(tmp_path, "ref0", 0, 2, ref, t_end)
    q1 = ft.replica(tmp_path, "ref1", 1, 2, ref, t_end)
    procs += [q0, q1]
    assert q0.exitcode() == 0, q0.text()[-4000:]
    assert q1.exitcode() == 0, q1.text()[-4000:]

@pytest.mark.timeout(DEADLINE_S + 60)
# zero2's single kill and heal is the first half of the next test (same kill, same heal, then more): that test
# checks it for zero2, with the heal's bytes; this one keeps torch-fsdp2, whose shards the heal moves otherwise.
@pytest.mark.parametrize("strategy", ["torch-fsdp2"])
def test_replica_killed_mid_step_heals_and_matches_the_reference(tmp_path, strategy):
    from shardlab.launch.launcher import free_port

    t_end = time.monotonic() + DEADLINE_S
    port = free_port()
    procs = []
    try:
        procs.append(ft.lighthouse(tmp_path, port, t_end))
        ov = _overrides(port, "drill", strategy)
        r0 = ft.replica(tmp_path, "r0", 0, 2, ov, t_end)
        r1 = ft.replica(tmp_path, "r1", 1, 2, ov, t_end, max_restarts=1)
        procs += [r0, r1]
        p0, p1 = ft.rank_pids(r0, 0, 2), ft.rank_pids(r1, 1, 2)
        r0.wait_for(r"quorum 1 for step 3 ")
        ft.signal_ranks([p1[1]], signal.SIGKILL)  # rank 1 of replica 1, mid-step
        r0.wait_for(r"replica 1 gone")
        ft.signal_ranks(p0.values(), signal.SIGSTOP)  # hold the survivor until replica 1 is back
        r1.wait_for(r"rank \d asking to join", 2)
        ft.signal_ranks(p0.values(), signal.SIGCONT)
        r1.wait_for(r"healed at step", 2)
        assert r0.exitcode() == 0, r0.text()[-4000:]
        assert r1.exitcode() == 0, r1.text()[-4000:]

        # One gap, healed before the end; or none, when the kill fell between a step's all-reduce and the next
        # quorum and the restarted replica asked to join before that quorum's timeout: admitted at once.
        missed = ft.absent_steps(tmp_path / "r0", 1)
        plan = []
        if missed:
            a, b = missed[0], missed[-1]
            assert missed == list(range(a, b + 1)) and b + 1 < STEPS, missed
            plan = [f"debug.ft_absent=1@{a}-{b}"]
        _reference(tmp_path, port, strategy, plan, t_end, procs)
    finally:
        for p in procs:
            p.kill()

    s0, s1 = ft.summary(tmp_path / "r0"), ft.summary(tmp_path / "r1")
    assert s0["restarts"] == 0 and s0["heals"] == 0
    assert s1["restarts"] == 1 and s1["heals"] == 1
    # healed and trained on: the replicas end bitwise equal, and equal to the reference's
    sums = {ft.summary(tmp_path / r)["param_checksum"] for r in ("r0", "r1", "ref0", "ref1")}
    assert len(sums) == 1, sums
    assert ft.absent_steps(tmp_path / "ref0", 1) == missed
    l0, lref = ft.losses(tmp_path / "r0"), ft.losses(tmp_path / "ref0")
    assert sorted(l0) == list(range(1, STEPS + 1)) and l0 == lref  # bitwise: floats compared exactly
    # the heal moved this rank's shard of the state, nothing more (parameters, Adam's moments and step)
    state = s1["ft"]["state_bytes"]
    assert state <= s1["ft"]["heal_bytes"] <= state + 64 * 1024, s1["ft"]


# the heal of replica 1's first restart pauses this long (below parallel.ft_timeout): the kill, sent once its
# "healing" line is seen (~0.1 s later on 2 cores), lands inside it; every process sits it out
HEAL_DELAY_S = 2


def _hold_survivor_until_rejoin(r0, r1, p0, n: int) -> None:
    """Stop replica 0 once it went on without replica 1 for the n-th time, until replica 1's n-th incarnation
    asked to join on both ranks: the survivor must not finish before a restarted replica is back."""
    r0.wait_for(r"replica 1 gone", n)
    ft.signal_ranks(p0.values(), signal.SIGSTOP)
    try:
        r1.wait_for(r"rank \d asking to join", 2 * n)
    finally:
        ft.signal_ranks(p0.values(), signal.SIGCONT)


@pytest.mark.timeout(DEADLINE_S + 60)
def test_replica_killed_again_while_it_heals_recovers_and_matches_the_reference(tmp_path):
    """Rank 1 of replica 1 is SIGKILLed mid-step; torchrun restarts replica 1, which asks to join and is admitted;
    its heal pauses (SHARDLAB_HEAL_DELAY, first restart only) and its rank 1 is SIGKILLed inside it. The survivor's
    heal or the step's all-reduce fails, the step is redone without the joiner (a retry at attempt 1), and the
    second restart joins with a request of its own (not confused by the first's half-done admission), is healed
    at a later step and ends bitwise equal; replica 0 never restarts and its losses equal the reference run's."""
    from shardlab.launch.launcher import free_port
    from shardlab.parallel.ft.every_step import HEAL_DELAY_ENV

    t_end = time.monotonic() + DEADLINE_S
    port = free_port()
    procs = []
    try:
        procs.append(ft.lighthouse(tmp_path, port, t_end))
        ov = _overrides(port, "drill", "zero2")
        r0 = ft.replica(tmp_path, "r0", 0, 2, ov, t_end)
        r1 = ft.replica(tmp_path, "r1", 1, 2, ov, t_end, max_restarts=2, env={HEAL_DELAY_ENV: f"{HEAL_DELAY_S}@1"})
        procs += [r0, r1]
        p0, p1 = ft.rank_pids(r0, 0, 2), ft.rank_pids(r1, 1, 2)
        r0.wait_for(r"quorum 1 for step 2 ")
        ft.signal_ranks([p1[1]], signal.SIGKILL)  # the first death, mid-step
        _hold_survivor_until_rejoin(r0, r1, p0, 1)
        # the first restart is admitted; both its ranks enter the (widened) heal: kill its rank 1 there
        found = r1.wait_for(r"rank (\d) healing at step (\d+) from replica 0 \(quorum \d+, process (\d+)\)", 2)
        healing = {int(m.group(1)): int(m.group(3)) for m in found}
        heal_step = int(found[0].group(2))
        ft.signal_ranks([healing[1]], signal.SIGKILL)
        _hold_survivor_until_rejoin(r0, r1, p0, 2)
        r1.wait_for(r"rank \d healed at step", 2)
        assert r0.exitcode() == 0, r0.text()[-4000:]
        assert r1.exitcode() == 0, r1.text()[-4000:]

        missed = ft.absent_steps(tmp_path / "r0", 1)
        a, b = missed[0], missed[-1]
        assert missed == list(range(a, b + 1)) and a <= heal_step <= b < STEPS - 1, (missed, heal_step)
        _reference(tmp_path, port, "zero2", [f"debug.ft_absent=1@{a}-{b}"], t_end, procs)
    finally:
        for p in procs:
            p.kill()

    # the killed heal: admitted at attempt 0 of heal_step, then that step was completed without replica 1
    decisions = [q for q in ft.quorums(tmp_path / "r0") if q["step"] == heal_step]
    assert decisions[0]["attempt"] == 0 and decisions[0]["joiners"] == [1], decisions
    assert decisions[-1]["attempt"] >= 1 and decisions[-1]["participants"] == [0], decisions
    s0, s1 = ft.summary(tmp_path / "r0"), ft.summary(tmp_path / "r1")
    assert s0["restarts"] == 0 and s0["heals"] == 0
    assert s1["restarts"] == 2 and s1["heals"] == 1  # the second restart, healed once
    # that heal moved this rank's shard of the state, nothing more (parameters, Adam's moments and step)
    state = s1["ft"]["state_bytes"]
    assert state <= s1["ft"]["heal_bytes"] <= state + 64 * 1024, s1["ft"]
    sums = {ft.summary(tmp_path / r)["param_checksum"] for r in ("r0", "r1", "ref0", "ref1")}
    assert len(sums) == 1, sums
    assert ft.absent_steps(tmp_path / "ref0", 1) == missed
    l0, lref = ft.losses(tmp_path / "r0"), ft.losses(tmp_path / "ref0")
    assert sorted(l0) == list(range(1, STEPS + 1)) and l0 == lref  # bitwise: floats compared exactly
