"""Fault-tolerant DiLoCo replicas (parallel.fault_tolerant, parallel/ft/periodic.py): a replica's process
killed with SIGKILL does not stop the other; the launcher restarts it, it joins with the survivor's state and
they end equal. The outer step runs over each quorum's gloo group (the transport of every-step fault
tolerance, parallel/ft/manager.py): the store carries membership only.

Each replica is what `shardlab train --nproc 1 ...` runs (replica 1 with `--max-restarts 1`: the launcher runs
the replica in a child process and starts a new one when it dies), started from a forkserver that imported
shardlab once (cold imports of torch, DCP and matplotlib would dominate the test). The store is the
lighthouse's own code (`shardlab lighthouse`), forked likewise. SIGSTOP/SIGCONT order the events: the survivor
is held while replica 1 dies and comes back, so the outcome does not depend on the machine's load. Every wait
has a deadline; every process is killed at the end.
"""
from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import re
import signal
import sys
import time

import pytest

STEPS, H, TIMEOUT_S = 12, 2, 6
DEADLINE_S = 240  # the whole test, however loaded the machine; a stuck wait fails with the logs


def _replica(argv: list[str], log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from shardlab import cli
    code = cli.cmd_train(argv)
    sys.stdout.flush()
    sys.exit(code)


def _argv(out, rid: int, port: int) -> list[str]:
    return ["--nproc", "1", "--out", str(out), "model.preset=tiny", "train.seq_len=32", "train.micro_batch=2",
            "train.warmup_steps=1", "train.log_every=2", "train.eval_every=0", "ckpt.final=false",
            f"train.steps={STEPS}", "parallel.strategy=single", "parallel.sync=diloco", f"parallel.sync_every={H}",
            "parallel.fault_tolerant=true", "parallel.replicas=2", f"parallel.replica_id={rid}",
            f"parallel.ft_store=127.0.0.1:{port}", f"parallel.ft_timeout={TIMEOUT_S}", "parallel.ft_join_timeout=120",
            # 0.3 s per step: the test kills replica 1 well before it could post its next pseudo-gradient
            "debug.slow_rank=0", "debug.slow_ms=300"]


class _Replica:
    def __init__(self, ctx, argv, log, t_end):
        self.log, self.t_end = log, t_end
        self.proc = ctx.Process(target=_replica, args=(argv, str(log)))
        self.proc.start()

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, pattern: str) -> re.Match:
        while True:
            m = re.search(pattern, self.text())
            if m:
                return m
            if not self.proc.is_alive() and not re.search(pattern, self.text()):
                pytest.fail(f"{self.log.name} exited ({self.proc.exitcode}) without {pattern!r}:\n{self.text()}")
            if time.monotonic() > self.t_end:
                pytest.fail(f"{self.log.name}: no {pattern!r} before the deadline:\n{self.text()}")
            time.sleep(0.01)

    def signal(self, sig) -> None:
        os.kill(self.proc.pid, sig)

    def exitcode(self) -> int | None:
        self.proc.join(timeout=max(1.0, self.t_end - time.monotonic()))
        return self.proc.exitcode


def _outer_lines(text: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"outer step (\d+) \(step \d+\): [^\n]*", text)}


def _fingerprint(line: str) -> str:
    return line.rsplit("parameters ", 1)[1]


def test_killed_diloco_replica_rejoins_with_the_peers_parameters(tmp_path):
    from shardlab.launch import lighthouse as lighthouse_mod  # the store the replicas meet at
    from shardlab.launch.launcher import free_port

    ctx = mp.get_context("forkserver")
    # What a replica would import on its own: torch, DCP (checkpoint), matplotlib (loss.png)
    ctx.set_forkserver_preload(["shardlab.cli", "shardlab.train.trainer", "shardlab.launch.resume", "shardlab.checkpoint",
                                "matplotlib.pyplot"])
    t_end = time.monotonic() + DEADLINE_S
    port = free_port()
    lighthouse = ctx.Process(target=lighthouse_mod.serve, args=(port, "127.0.0.1"), daemon=True)
    lighthouse.start()  # what `shardlab lighthouse --port PORT` runs
    replicas = []
    try:
        r0 = _Replica(ctx, _argv(tmp_path / "r0", 0, port), tmp_path / "r0.log", t_end)
        # replica 1 under the launcher with --max-restarts 1: it runs the replica in a child process
        r1 = _Replica(ctx, _argv(tmp_path / "r1", 1, port) + ["--max-restarts", "1"], tmp_path / "r1.log", t_end)
        replicas += [r0, r1]
        r0.wait_for(r"outer step 1 \(")
        r0.signal(signal.SIGSTOP)  # hold the survivor until replica 1 has died and come back
        rank_pid = int(r1.wait_for(r"founding member \(process (\d+)\)").group(1))
        r1.wait_for(r"outer step 1 \(")
        os.kill(rank_pid, signal.SIGKILL)  # the rank's process, not the launcher
        r1.wait_for(r"its process ended \(signal SIGKILL\); restarting it")
        r1.wait_for(r"asking to join")
        assert r0.proc.is_alive(), "the survivor finished before replica 1 came back"
        r0.signal(signal.SIGCONT)
        joined = r1.wait_for(r"joined at outer step (\d+) \(step (\d+)\) with the state of replica 0; "
                             r"members \[0, 1\]; parameters (\w+)")
        assert r0.exitcode() == 0, r0.text()
        assert r1.exitcode() == 0, r1.text()
    finally:
        for r in replicas:
            if r.proc.is_alive():
                r.signal(signal.SIGCONT)
                r.proc.kill()
                r.proc.join(timeout=10)
        lighthouse.kill()
        lighthouse.join(timeout=10)

    survivor, rejoined = _outer_lines(r0.text()), _outer_lines(r1.text())
    last = STEPS // H
    # Alone: the outer step replica 1 missed was averaged over replica 0 only, and its log says why.
    assert any("averaged 1 of 2 replicas [0]; replica 1 gone" in line for line in survivor.values()), r0.text()
    # The join: replica 1 took exactly the survivor's parameters after outer step k.
    k = int(joined.group(1))
    assert k < last and "admitting replica(s) [1]" in survivor[k]
    assert joined.group(3) == _fingerprint(survivor[k])
    # Both were members of every later outer step, and end with bitwise equal parameters.
    for j in range(k + 1, last + 1):
        assert "averaged 2 of 2 replicas [0, 1]" in survivor[j] and j in rejoined, (j, r0.text(), r1.text())
        assert _fingerprint(survivor[j]) == _fingerprint(rejoined[j])
    assert _fingerprint(rejoined[1]) == _fingerprint(survivor[1])  # the killed process's only outer step
    # The outer step's bytes are counted (comm's quorum records): at the last step one all-reduce of the fp32
    # pseudo-gradient and its weight over the quorum's group; the store carried membership only (0 bytes).
    summary = json.loads((tmp_path / "r0" / "summary.json").read_text())
    sent = summary["comm"]["bytes_per_step"]
    assert sent.get("all_reduce") == 4 * (summary["params"] + 1), sent
    assert not any(sent.get(op) for op in ("store_set", "store_get")), sent
    assert summary["restarts"] == 0 and json.loads((tmp_path / "r1" / "summary.json").read_text())["heals"] == 1


# --- bad input: one line, exit 2, nothing written ------------------------------------------------------------

FT = ["parallel.strategy=single", "parallel.fault_tolerant=true", "parallel.replicas=2", "parallel.replica_id=0",
      "parallel.ft_store=127.0.0.1:29510"]


@pytest.mark.parametrize("overrides, needle", [
    (FT + ["parallel.sync=async"], "use parallel.sync=every_step, diloco or local_sgd"),
    (FT + ["parallel.strategy=torch-ddp"], "strategy=torch-ddp"),  # every_step: torch DDP's hooks would reduce
    (FT + ["parallel.ft_job=a/b"], "parallel.ft_job='a/b'"),
    (FT + ["debug.ft_absent=1@x"], "debug.ft_absent='1@x'"),
    (FT + ["parallel.sync=diloco", "parallel.replica_id=2"], "parallel.replica_id=2"),
    (FT + ["parallel.sync=diloco", "parallel.ft_store=nowhere"], "parallel.ft_store='nowhere'"),
    (FT + ["parallel.sync=local_sgd", "parallel.ft_timeout=0"], "parallel.ft_timeout=0"),
    (FT + ["parallel.sync=diloco", "data.shares=auto"], "data.shares=auto"),
])
def test_fault_tolerant_bad_input_exits_2(tmp_path, capsys, monkeypatch, overrides, needle):
    from shardlab import cli
    from shardlab.launch import launcher as launch
    launched = []
    monkeypatch.setattr(launch, "launch", lambda *a: launched.append(a) or 0)
    out = tmp_path / "run"
    code = cli.cmd_train(["--nproc", "1", "--out", str(out), *overrides])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not out.exists() and not launched


def test_fault_tolerant_needs_one_process_per_replica(tmp_path, capsys, monkeypatch):
    from shardlab import cli
    from shardlab.launch import launcher as launch
    monkeypatch.setattr(launch, "launch", lambda *a: 0)
    code = cli.cmd_train(["--nproc", "2", "--out", str(tmp_path / "run"), "parallel.strategy=ddp",
                          "parallel.sync=diloco", *FT[1:]])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--nproc 1" in err, err


def test_lighthouse_bad_port_exits_2(capsys):
    from shardlab.launch import lighthouse
    assert lighthouse.main(["--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--port 70000" in err, err


# --- the protocol in one process: a live replica that misses the deadline is dropped and rejoins --------------

def _ft_replica(rid: int, port: int):
    """A FaultTolerantSync over a 4x4 linear model (the same start on both), with its train state."""
    from types import SimpleNamespace

    import torch

    from shardlab.data import GlobalSampler
    from shardlab.parallel.dp.base import Strategy
    from shardlab.parallel.ft.periodic import FaultTolerantSync

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dp = Strategy(None, None, torch.device("cpu"))  # the base layer: a whole replica, no communication of its own
    dp.wrap(model)
    pcfg = SimpleNamespace(sync="diloco", sync_every=1, outer_lr=0.7, outer_momentum=0.9, outer_dtype="fp32",
                           replica_id=rid, replicas=2, ft_store=f"127.0.0.1:{port}", ft_timeout=0.3,
                           ft_join_timeout=30, ft_job="t", ft_job_dir="")
    state = SimpleNamespace(step=0, sampler=GlobalSampler(100, 4, 0, 2, rid))
    return FaultTolerantSync(dp, pcfg, None, opt), state


def _inner_steps(ft, seed: int) -> None:
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ft.params:
            p.add_(torch.randn(p.shape, generator=g), alpha=0.01)


def _wait_key(store, key: str, t_end: float) -> None:
    while not store.check([key]):
        assert time.monotonic() < t_end, f"no {key} in the store before the deadline"
        time.sleep(0.01)


def test_late_replica_is_dropped_and_rejoins_mid_run():
    import threading

    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    store = dist.PrefixStore("t/e0", server)  # the job's keys (parallel.ft_job=t, its first epoch)
    t_end = time.monotonic() + 60
    seen, errors = {}, []

    def replica0():
        ft, st = _ft_replica(0, server.port)
        st.step = ft.on_start(st, 0)
        _inner_steps(ft, 10)
        ft.synchronise()  # outer step 1: replica 1 posts nothing within 0.3 s, so it is averaged alone
        seen["members1"] = ft.members
        _wait_key(store, "join/1/0", t_end)
        st.step = 1
        _inner_steps(ft, 11)
        ft.synchronise()  # outer step 2: admits replica 1, serves it the state
        seen["after2"] = ft.fingerprint()
        st.step = 2
        _inner_steps(ft, 12)
        ft.synchronise()  # outer step 3: both
        seen["final0"] = ft.fingerprint()

    def replica1():
        ft, st = _ft_replica(1, server.port)
        st.step = ft.on_start(st, 0)
        _wait_key(store, "s1/a0/decision", t_end)  # late on purpose: the others decided outer step 1 already
        _inner_steps(ft, 20)
        ft.synchronise()  # finds itself dropped, joins again, takes the state after outer step 2
        seen["joined"], seen["step1"], seen["sampler1"] = ft.fingerprint(), st.step, st.sampler.step
        st.step = 2
        _inner_steps(ft, 21)
        ft.synchronise()
        seen["final1"] = ft.fingerprint()

    def guard(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(f,), daemon=True) for f in (replica0, replica1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, t_end - time.monotonic()))
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a replica is still waiting"
    assert seen["members1"] == [0]  # dropped from the next step's expected members
    assert seen["joined"] == seen["after2"]  # took the peer's parameters after outer step 2
    assert seen["step1"] == 1 and seen["sampler1"] == 2  # the trainer adds the step it is in: step 2 next
    assert seen["final0"] == seen["final1"]
