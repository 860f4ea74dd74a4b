"""Two hosts with their own network stacks (network namespaces joined by a veth pair): one torchrun agent in
each (`shardlab launch node --nnodes 2 --iface ...`) trains ddp and zero3 to the same parameters as the same
world on one host, bit for bit, both writing into one run directory; a wrong interface or an unreachable head
node is one line within the timeout, not a hang."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from cli_harness import as_rank
from shardlab.testing import free_port

TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.global_batch=4", "train.steps=8",
        "train.log_every=4", "train.eval_every=0", "train.warmup_steps=1"]


@pytest.fixture(scope="module")
def hosts():
    from netns import TwoHosts, Unavailable

    try:
        with TwoHosts() as made:
            yield made
    except Unavailable as e:
        print(f"\n[two-host tests skipped] {e}")
        pytest.skip(str(e))


def _wait(procs, timeout_s):
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    return [p.communicate()[0] for p in procs]


def _node(hosts, rank, port, out, args, head=None, iface=None, timeout=60):
    cmd = [sys.executable, "-m", "shardlab", "launch", "node", "--nnodes", "2", "--node-rank", str(rank),
           "--head", f"{head or hosts.addr[0]}:{port}", "--iface", iface or hosts.iface[rank],
           "--timeout", str(timeout), "--", "--nproc", "1", "--out", str(out), *args]
    return subprocess.Popen(hosts.exec(rank, cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _params(run, step=8):
    from shardlab.checkpoint.hf import load_model_tensors

    return load_model_tensors(run / "checkpoints" / f"step_{step:06d}")


@pytest.mark.parametrize("strategy", ["ddp", "zero3"])
def test_two_hosts_train_bitwise_like_one_host(hosts, tmp_path, strategy, pool2):
    args = [f"parallel.strategy={strategy}", *TINY]
    # the same world on one host: what each rank of `shardlab train --nproc 2` runs, on the session's pool
    ranks = pool2.run(as_rank, ["train", "--nproc", "2", "--out", str(tmp_path / "one"), *args], timeout=240)
    assert [code for code, _, _ in ranks] == [0, 0], [err[-3000:] for _, _, err in ranks]
    port, out = free_port(), tmp_path / "two"
    procs = [_node(hosts, r, port, out, args) for r in (0, 1)]
    outputs = _wait(procs, 240)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2500:] for o in outputs)
    assert "step      8/8" in outputs[0]
    ref, got = _params(tmp_path / "one"), _params(out)
    assert ref.keys() == got.keys()
    for name, tensor in ref.items():
        assert torch.equal(got[name], tensor), name
    shards = sorted(p.name for p in (out / "checkpoints" / "step_000008").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"], shards  # both hosts wrote into the one directory
    print(f"\n[two hosts] {strategy}: {hosts.addr[0]} ({hosts.iface[0]}) + {hosts.addr[1]} ({hosts.iface[1]}): "
          f"{len(ref)} tensors bitwise equal to 2 ranks on one host")


def _one_line_within(proc, seconds):
    out = _wait([proc], seconds)[0]
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return proc.returncode, lines


def test_a_missing_interface_is_one_line(hosts, tmp_path):
    proc = _node(hosts, 1, free_port(), tmp_path / "x", TINY, iface="eth9")
    code, lines = _one_line_within(proc, 60)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("shardlab: error: --iface eth9: no such interface") and hosts.iface[1] in lines[0]


def test_a_wrong_interface_or_an_unreachable_head_is_one_line_after_the_timeout(hosts, tmp_path):
    # the wrong interface: loopback cannot reach the head's address; the head: an address nobody has. The two
    # nodes run at once (each waits out its own 2 s; neither writes anything).
    started = [(time.monotonic(), _node(hosts, 1, free_port(), tmp_path / "x", TINY, head=head, iface=iface,
                                        timeout=2))
               for head, iface in ((None, "lo"), ("10.77.0.9", None))]
    for start, proc in started:
        code, lines = _one_line_within(proc, 60)
        took = time.monotonic() - start
        assert code == 2 and len(lines) == 1, lines
        assert "did not answer" in lines[0] and "within 2 s" in lines[0], lines
        assert took < 30, took
        assert not (tmp_path / "x").exists()
