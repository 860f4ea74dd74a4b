"""`shardlab bench faults [--quick]`: chaos drills of every-step fault tolerance (docs/fault_tolerance.md).

A drill is a 2-replica job (every replica its own `shardlab train`, one lighthouse) with one fault: SIGKILL of a
rank of replica 1 after a random delay (forward, backward, mid all-reduce: wherever it lands), repeated deaths
(killed again after its first heal), killed again while it heals (its heal widened by SHARDLAB_HEAL_DELAY),
SIGKILL while replica 1 writes a checkpoint, SIGSTOP of replica 1 past parallel.ft_timeout (a straggler), the
lighthouse killed (the replicas keep their quorum) and started again. After each: the replicas' exit codes,
their final parameters (bitwise equal?), and replica 0's loss trajectory against a reference run in which
replica 1 sits out exactly the steps its quorum log says it missed (debug.ft_absent). The quick matrix runs
replicas of one `single` rank; the full one replicas of 2 zero2 ranks.

Figures: ft_drills, ft_survived (exit 0 everywhere, bitwise equal, the reference's trajectory), ft_divergence
(drills whose replicas, or whose trajectory and the reference's, differ: goal 0), ft_heal_s (median seconds from
a join request to the healed state), ft_steps_lost (job steps no replica trained: goal 0), ft_throughput_ratio
(a fault-free run's wall time over the drill's, median), ft_heal_bytes_ratio (bytes a heal moved over the state
of one rank: parameters and optimizer state).
"""
from __future__ import annotations

import random
import signal
import statistics
import time
from pathlib import Path

from shardlab.checkpoint.storage import DELAY_ENV
from shardlab.parallel.ft.every_step import HEAL_DELAY_ENV
from shardlab.testing import ft_drill as ft

STEPS = 12
DRILL_S = 300  # one drill's deadline
HEAL_DELAY_S = 3  # the widened heal of replica 1's first restart (below parallel.ft_timeout=4)


def _overrides(port: int, job: str, strategy: str, *extra: str) -> list[str]:
    return ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.warmup_steps=1",
            "train.log_every=1", "train.eval_every=0", "ckpt.final=false", f"train.steps={STEPS}", "train.threads=1",
            f"parallel.strategy={strategy}", "parallel.fault_tolerant=true", "parallel.replicas=2",
            f"parallel.ft_store=127.0.0.1:{port}", f"parallel.ft_job={job}", "parallel.ft_timeout=4",
            "parallel.ft_join_timeout=120", "debug.slow_rank=0", "debug.slow_ms=150", *extra]


def _job(work: Path, name: str, port: int, strategy: str, nproc: int, fault, extra=(), restarts: int = 0,
         env1: dict | None = None) -> dict:
    """Run replicas 0 and 1 of job `name`; `fault(r0, r1, p0, p1, t_end, row)` does the damage. Returns the row."""
    from shardlab.launch.launcher import free_port  # noqa: F401 - the caller chose the port

    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    t_end, t0 = time.monotonic() + DRILL_S, time.monotonic()
    row: dict = {"drill": name}
    ov = _overrides(port, name, strategy, *extra)
    r0 = ft.replica(d, "r0", 0, nproc, ov, t_end)
    r1 = ft.replica(d, "r1", 1, nproc, ov, t_end, max_restarts=restarts, env=env1)
    try:
        p0, p1 = ft.rank_pids(r0, 0, nproc), ft.rank_pids(r1, 1, nproc)
        if fault is not None:
            fault(r0, r1, p0, p1, t_end, row)
        row["exit"] = [r0.exitcode(), r1.exitcode()]
    except ft.Deadline as e:
        row["exit"], row["error"] = [r0.proc.poll(), r1.proc.poll()], str(e)[-1500:]
    finally:
        r0.kill()
        r1.kill()
    row["wall_s"] = round(time.monotonic() - t0, 2)
    row["dir"] = str(d)
    return row


def _hold_survivor_until_rejoin(r0, r1, p0, n_joins: int) -> None:
    """Stop replica 0 once it went on alone, until replica 1 asked to join again: the survivor must not finish
    the job before a restarted replica (seconds of start-up) is back."""
    r0.wait_for(r"replica 1 gone", n_joins)
    ft.signal_ranks(p0.values(), signal.SIGSTOP)
    try:
        r1.wait_for(r"rank \d+ asking to join", len(p0) * n_joins)
    finally:
        ft.signal_ranks(p0.values(), signal.SIGCONT)


def _kill(delay_s: tuple[float, float], times: int = 1):
    def fault(r0, r1, p0, p1, t_end, row):
        n_ranks, pids = len(p1), dict(p1)
        r0.wait_for(r"quorum \d+ for step 2 ")
        for n in range(times):
            if n:  # the restarted processes, once healed and training again
                r1.wait_for(r"healed at step", n_ranks * n)
                found = r1.wait_for(r"rank (\d+) asking to join \(process (\d+)", n_ranks * n)[-n_ranks:]
                pids = {int(m.group(1)): int(m.group(2)) for m in found}
            time.sleep(random.uniform(*delay_s))  # forward, backward, the all-reduce: wherever it lands
            ft.signal_ranks([pids[max(pids)]], signal.SIGKILL)  # the replica's last rank
            _hold_survivor_until_rejoin(r0, r1, p0, n + 1)
    return fault


def _kill_in_heal():
    """SIGKILL a rank of replica 1; its first restart is admitted and its heal paused (SHARDLAB_HEAL_DELAY, that
    restart only): SIGKILL its last rank again inside the heal, once every rank printed that it heals. The
    survivor's heal broadcast or the step's all-reduce fails, the step is redone without replica 1, and its
    second restart is healed at a later step."""
    def fault(r0, r1, p0, p1, t_end, row):
        r0.wait_for(r"quorum \d+ for step 2 ")
        ft.signal_ranks([p1[max(p1)]], signal.SIGKILL)
        _hold_survivor_until_rejoin(r0, r1, p0, 1)
        found = r1.wait_for(r"rank (\d+) healing at step (\d+) from replica \d+ \(quorum \d+, process (\d+)\)", len(p1))
        pids = {int(m.group(1)): int(m.group(3)) for m in found}
        row["killed_in_heal_at"] = int(found[-1].group(2))
        ft.signal_ranks([pids[max(pids)]], signal.SIGKILL)
        _hold_survivor_until_rejoin(r0, r1, p0, 2)
    return fault


def _stop(hold_s: float):
    def fault(r0, r1, p0, p1, t_end, row):
        r0.wait_for(r"quorum \d+ for step 3 ")
        ft.signal_ranks(p1.values(), signal.SIGSTOP)  # a straggler: longer than parallel.ft_timeout
        r0.wait_for(r"replica 1 gone")
        ft.signal_ranks(p0.values(), signal.SIGSTOP)
        time.sleep(hold_s)
        ft.signal_ranks(p1.values(), signal.SIGCONT)  # it finds itself dropped and asks to join
        try:
            r1.wait_for(r"rank \d+ asking to join", len(p1))
        finally:
            ft.signal_ranks(p0.values(), signal.SIGCONT)
    return fault


def _kill_in_save(marker: Path):
    """SIGKILL while replica 1 writes its checkpoint of step 4 (widened by SHARDLAB_CKPT_DELAY)."""
    def fault(r0, r1, p0, p1, t_end, row):
        while not marker.exists():
            if time.monotonic() > t_end or r1.proc.poll() is not None:
                raise ft.Deadline(f"replica 1 never reached its widened save:\n{r1.text()[-3000:]}")
            time.sleep(0.02)
        ft.signal_ranks([p1[max(p1)]], signal.SIGKILL)
        _hold_survivor_until_rejoin(r0, r1, p0, 1)
    return fault


def _lighthouse(work: Path, port: int, holder: dict):
    def fault(r0, r1, p0, p1, t_end, row):
        r0.wait_for(r"quorum \d+ for step 3 ")
        holder["lh"].kill()
        r0.wait_for(r"keeping quorum")  # no lighthouse: the replicas train on with their last quorum
        # held while the new one starts (seconds of imports), so they still have steps to take up with it
        pids = [*p0.values(), *p1.values()]
        ft.signal_ranks(pids, signal.SIGSTOP)
        try:
            holder["lh"] = ft.lighthouse(work, port, t_end, name=f"lighthouse-{time.monotonic_ns()}")
        finally:
            ft.signal_ranks(pids, signal.SIGCONT)
    return fault


def _judge(work: Path, row: dict, port: int, strategy: str, nproc: int, baseline_s: float) -> dict:
    """Survived? Against the reference run that follows replica 0's quorum log."""
    d = Path(row["dir"])
    row.update(survived=False, divergent=None, heal_s=[], steps_lost=None, heal_bytes_ratio=None)
    if row.get("exit") != [0, 0]:
        return row
    s0, s1 = ft.summary(d / "r0"), ft.summary(d / "r1")
    missed = ft.absent_steps(d / "r0", 1)
    row.update(missed=missed, restarts=[s0["restarts"], s1["restarts"]], heals=[s0["heals"], s1["heals"]],
               heal_s=s1["ft"]["heal_s"], steps_lost=STEPS - len(ft.losses(d / "r0")),
               heal_bytes_ratio=(round(s1["ft"]["heal_bytes"] / s1["ft"]["heals"] / s1["ft"]["state_bytes"], 3)
                                 if s1["heals"] else None),
               throughput_ratio=round(baseline_s / row["wall_s"], 3))
    equal = s0["param_checksum"] == s1["param_checksum"]
    spans = _spans(missed)
    same_trajectory = True
    if missed and len(spans) == 1 and spans[0][1] + 1 < STEPS:
        a, b = spans[0]
        ref = _job(work, row["drill"] + "-ref", port, strategy, nproc, None, extra=[f"debug.ft_absent=1@{a}-{b}"])
        same_trajectory = ref.get("exit") == [0, 0] and ft.losses(d / "r0") == ft.losses(Path(ref["dir"]) / "r0") \
            and ft.summary(Path(ref["dir"]) / "r0")["param_checksum"] == s0["param_checksum"]
    elif missed:
        same_trajectory = None  # several gaps: no one-span reference to compare with
    else:  # replica 1 contributed to every step (restarted before the next quorum decided): the fault-free run
        base = work / "fault-free"
        same_trajectory = ft.losses(d / "r0") == ft.losses(base / "r0") and \
            ft.summary(base / "r0")["param_checksum"] == s0["param_checksum"]
    row["divergent"] = not equal or same_trajectory is False
    row["reference_equal"] = same_trajectory
    row["survived"] = equal and same_trajectory is not False and row["steps_lost"] == 0
    return row


def _spans(steps: list[int]) -> list[tuple[int, int]]:
    out = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def matrix(quick: bool) -> list[tuple[str, str]]:
    if quick:
        return [("kill-random", "kill"), ("kill-in-heal", "heal"), ("kill-in-checkpoint", "save"),
                ("straggler", "stop"), ("lighthouse", "lighthouse")]
    return [("kill-early", "kill"), ("kill-random", "kill"), ("kill-twice", "kill2"), ("kill-in-heal", "heal"),
            ("kill-in-checkpoint", "save"), ("straggler", "stop"), ("lighthouse", "lighthouse")]


def run(out_dir: Path, quick: bool) -> dict:
    from shardlab.bench import common
    from shardlab.launch.launcher import free_port

    random.seed(0)
    strategy, nproc = ("single", 1) if quick else ("zero2", 2)
    work = out_dir / "runs"
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    holder = {"lh": ft.lighthouse(work, port, time.monotonic() + 3600)}
    rows = []
    try:
        common.progress("faults: the fault-free run")
        base = _job(work, "fault-free", port, strategy, nproc, None)
        baseline_s = base["wall_s"]
        for name, kind in matrix(quick):
            common.progress(f"faults: {name}")
            fault = {"kill": _kill((0.0, 1.0)), "kill2": _kill((0.0, 0.5), times=2), "stop": _stop(2.0),
                     "lighthouse": _lighthouse(work, port, holder), "save": None, "heal": _kill_in_heal()}[kind]
            extra, env1 = (), None
            if name == "kill-early":
                fault = _kill((0.0, 0.1))
            if kind == "save":  # checkpoints every 2 steps; replica 1's of step 4 takes 3 s longer
                marker = work / name / "save-started"
                fault, extra = _kill_in_save(marker), ("ckpt.every=2", "ckpt.async=false", "ckpt.keep=0")
                env1 = {DELAY_ENV: f"save@4:3:{marker}"}
            if kind == "heal":  # the heal of replica 1's first restart, widened
                env1 = {HEAL_DELAY_ENV: f"{HEAL_DELAY_S}@1"}
            row = _job(work, name, port, strategy, nproc, fault, extra=extra,
                       restarts=2 if kind in ("kill2", "heal") else 1, env1=env1)
            row = _judge(work, row, port, strategy, nproc, baseline_s)
            common.progress(f"  survived={row['survived']} exit={row['exit']} missed={row.get('missed')} "
                            f"heal_s={row['heal_s']} ({row['wall_s']:.1f} s)")
            rows.append(row)
    finally:
        holder["lh"].kill()
    heals = [h for r in rows for h in r["heal_s"]]
    ratios = [r["heal_bytes_ratio"] for r in rows if r.get("heal_bytes_ratio")]
    figs = {"ft_drills": len(rows), "ft_survived": sum(r["survived"] for r in rows),
            "ft_divergence": sum(bool(r["divergent"]) for r in rows),
            "ft_heal_s": round(statistics.median(heals), 3) if heals else None,
            "ft_steps_lost": max((r["steps_lost"] or 0 for r in rows), default=0),
            "ft_throughput_ratio": round(statistics.median([r["throughput_ratio"] for r in rows
                                                            if r.get("throughput_ratio")] or [0]), 3),
            "ft_heal_bytes_ratio": round(statistics.median(ratios), 3) if ratios else None}
    doc = common.write_results(out_dir, "faults", figs, rows)
    table = common.md_table(
        ["drill", "exit", "missed steps", "restarts", "heals", "heal s", "bitwise", "reference", "wall s", "survived"],
        [[r["drill"], r.get("exit"), r.get("missed"), r.get("restarts"), r.get("heals"), r["heal_s"],
          r["divergent"] is False, r.get("reference_equal"), r["wall_s"], r["survived"]] for r in rows])
    common.write_report(out_dir, "Fault drills: every-step training survives a replica", [
        f"Tiny GPT, 2 replicas x {nproc} rank(s) of `{strategy}`, {STEPS} steps, parallel.ft_timeout=4 s. Each "
        "drill: one fault, then the replicas' final parameters compared bitwise, and replica 0's losses compared "
        "with a reference run in which replica 1 sits out exactly the steps the quorum log says it missed.",
        "Figures: " + ", ".join(f"`{k}` = {v}" for k, v in figs.items()), table])
    return doc
