"""A node's processes killed mid-run across the two network namespaces (docs/cluster.md, "A node lost mid-run").
Every node runs `shardlab train --max-restarts 1 ... ckpt.resume=latest`, as the recipes start it:

- host 1's ranks killed (kill -9): torchrun restarts the worker group on both nodes, the ranks resume from the
  latest checkpoint, and the run ends with the parameters of an uninterrupted run, bit for bit;
- host 1's torchrun agent killed (kill -9): host 1 ends with one line; host 0's agent restarts its ranks and
  waits for the node to rejoin. Started again with the same command (what a scheduler's restart does), it
  rejoins and the run ends bitwise equal; never started again, host 0 ends with one line after --timeout and
  nothing is lost beyond the latest checkpoint.
Root only (network namespaces), 2 ranks in all, every process under a timeout."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from cli_harness import as_rank
from shardlab.testing import free_port
from test_two_hosts import hosts  # noqa: F401 (the module's namespaces: the fixture)

STEPS = 12
# A node is killed once node 0 printed this step (step 5's checkpoint is written before it: the save is
# synchronous): resumed from step 5, or 10 where the kill lands late, before the run's end (6 steps of ~0.3 s).
KILL_AFTER = 6
RUN = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.global_batch=4",
       f"train.steps={STEPS}", "train.log_every=1", "train.eval_every=0", "train.warmup_steps=1",
       "parallel.strategy=ddp", "ckpt.every=5", "ckpt.keep=0",
       "debug.slow_rank=1", "debug.slow_ms=300"]  # ~0.3 s a step: time to kill a node mid-run
NODE = ["--max-restarts", "1", *RUN, "ckpt.resume=latest"]  # what every recipe passes (launch/cluster/job.py)
KEEP_ALIVE = {"SHARDLAB_RDZV_KEEP_ALIVE": "2"}  # the agents' heartbeat period, s (launch/launcher.py)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, pool2):
    """The uninterrupted run: the same world (2 ranks) on one host, as what each rank of `shardlab train
    --nproc 2` runs, on the session's pool."""
    out = tmp_path_factory.mktemp("reference") / "run"
    # no straggler: nothing is killed here, and the sleep changes no number (6 s less)
    ranks = pool2.run(as_rank, ["train", "--nproc", "2", "--out", str(out), *RUN, "debug.slow_ms=0"], timeout=240)
    assert [code for code, _, _ in ranks] == [0, 0], [err[-3000:] for _, _, err in ranks]
    return out


def _tensors(run, step):
    from shardlab.checkpoint.hf import load_model_tensors

    return load_model_tensors(run / "checkpoints" / f"step_{step:06d}")


def _assert_bitwise(ref_run, run, step=STEPS) -> int:
    ref, got = _tensors(ref_run, step), _tensors(run, step)
    assert ref.keys() == got.keys()
    for name, tensor in ref.items():
        assert torch.equal(got[name], tensor), name
    return len(ref)


def _start(hosts, rank, port, out, log, timeout, env=None):
    """`shardlab launch node` in the host's namespace (as in test_two_hosts), its output in `log`."""
    cmd = [sys.executable, "-m", "shardlab", "launch", "node", "--nnodes", "2", "--node-rank", str(rank),
           "--head", f"{hosts.addr[0]}:{port}", "--iface", hosts.iface[rank], "--timeout", str(timeout), "--",
           "--nproc", "1", "--out", str(out), *NODE]
    with open(log, "a") as f:
        return subprocess.Popen(hosts.exec(rank, cmd), stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})})


def _wait_for(log, text, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {log} within {timeout_s} s:\n{log.read_text()[-3000:]}")


def _end(procs, timeout_s):
    """Wait for the nodes (killing what is left after `timeout_s`); their exit codes."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return [p.returncode for p in procs]


def _pids(hosts, host, match):
    """The processes in the host's namespace whose command line (or environment) `match` accepts."""
    listed = subprocess.run(["ip", "netns", "pids", hosts.ns[host]], capture_output=True, text=True, timeout=30)
    found = []
    for pid in listed.stdout.split():
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if match(cmdline, environ):
            found.append(int(pid))
    return found


def _ranks(cmdline, environ):
    return any(e.startswith(b"LOCAL_RANK=") for e in environ)


def _agent(cmdline, environ):
    return "torch.distributed.run" in cmdline and not _ranks(cmdline, environ)


def _kill(hosts, host, match):
    victims = _pids(hosts, host, match)
    assert victims, "nothing to kill"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    return victims


def _last_line(log):
    return [ln for ln in log.read_text().splitlines() if ln.strip()][-1]


def _resumed_at(log) -> int:
    found = re.findall(r"\[ckpt\] resumed from \S+ at step (\d+)", log.read_text())
    assert found, log.read_text()[-3000:]
    return int(found[-1])


def test_a_hosts_ranks_killed_restart_both_nodes_and_resume_bitwise(hosts, tmp_path, reference):
    port, out, logs = free_port(), tmp_path / "run", [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [_start(hosts, r, port, out, logs[r], timeout=60) for r in (0, 1)]
    _wait_for(logs[0], f"step {KILL_AFTER:6d}/{STEPS}", 180)
    killed = _kill(hosts, 1, _ranks)
    assert _end(procs, 300) == [0, 0], "\n".join(log.read_text()[-2500:] for log in logs)
    resumed = _resumed_at(logs[0])
    assert resumed in (5, 10)  # (rank 0 says it; host 1's rank 1 prints nothing)
    assert f"step {STEPS:6d}/{STEPS}" in logs[0].read_text()
    n = _assert_bitwise(reference, out)
    print(f"\n[lost node] host 1's rank(s) {killed} killed after step {KILL_AFTER}: both nodes restarted, resumed "
          f"from step {resumed}; {n} tensors bitwise equal to the uninterrupted run")


def test_a_hosts_agent_killed_is_one_line_and_the_node_started_again_rejoins(hosts, tmp_path, reference):
    port, out, logs = free_port(), tmp_path / "run", [tmp_path / "node0.log", tmp_path / "node1.log"]
    # Node 0's agent admits the node started again once the killed agent has left the rendezvous: 3 missed
    # heartbeats, 15 s at torchrun's 5 s period, which the test sat out; 2 s beats (6 s) do the same.
    procs = [_start(hosts, r, port, out, logs[r], timeout=90, env=KEEP_ALIVE) for r in (0, 1)]
    _wait_for(logs[0], f"step {KILL_AFTER:6d}/{STEPS}", 180)
    _kill(hosts, 1, _agent)
    assert _end([procs[1]], 120) == [1]
    said = _last_line(logs[1])
    assert "this node's torchrun agent was killed by SIGKILL" in said, logs[1].read_text()[-3000:]
    again = tmp_path / "node1.again.log"
    procs[1] = _start(hosts, 1, port, out, again, timeout=90, env=KEEP_ALIVE)  # what a scheduler's restart does
    assert _end(procs, 300) == [0, 0], "\n".join(log.read_text()[-2500:] for log in (logs[0], again))
    resumed = _resumed_at(logs[0])
    assert resumed in (5, 10)
    n = _assert_bitwise(reference, out)
    print(f"\n[lost node] host 1's agent killed after step {KILL_AFTER}: {said!r}; started again, it rejoined, both "
          f"resumed from step {resumed}; {n} tensors bitwise equal to the uninterrupted run")


def test_a_node_that_never_comes_back_is_one_line_after_the_timeout(hosts, tmp_path, reference):
    port, out, logs = free_port(), tmp_path / "run", [tmp_path / "node0.log", tmp_path / "node1.log"]
    # Node 0's --timeout is the wait this test proves, and it must also cover node 1's start (its probe of the
    # head, a fresh interpreter, torchrun's import) at the first rendezvous: 10 s. Node 1 waits for nothing here
    # (its agent is killed), so its --timeout only bounds its probe of the head: 60 s, a margin on a loaded host.
    procs = [_start(hosts, r, port, out, logs[r], timeout=T) for r, T in ((0, 10), (1, 60))]
    _wait_for(logs[0], f"step {KILL_AFTER:6d}/{STEPS}", 180)
    _kill(hosts, 1, _agent)
    start = time.monotonic()
    assert _end(procs, 180) == [1, 1]
    took = time.monotonic() - start
    said = _last_line(logs[0])
    assert said.startswith("shardlab: FAILED: not every node joined the rendezvous within 10 s"), \
        logs[0].read_text()[-3000:]
    after = logs[0].read_text().split("[ckpt] saved")[-1]
    assert sum(ln.startswith("shardlab:") for ln in after.splitlines()) == 1, after  # one line, no traceback
    assert took < 120, took
    # nothing lost beyond the latest checkpoint: it is the uninterrupted run's, bit for bit
    latest = max(int(p.name[5:]) for p in (out / "checkpoints").glob("step_*"))
    assert latest in (5, 10), latest
    n = _assert_bitwise(reference, out, latest)
    print(f"\n[lost node] host 1's agent killed, never started again: host 0 after {took:.0f} s: {said!r}; "
          f"checkpoint step {latest} kept ({n} tensors bitwise equal to the uninterrupted run's)")
