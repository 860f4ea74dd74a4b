"""Node 0 waiting alone for a node that never joins: one line after `--timeout`, not a hang (no root needed:
node 0 on the loopback interface, the other node never started)."""
import time

from shardlab.testing import free_port, run_cli

TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.global_batch=4", "train.steps=4",
        "train.eval_every=0", "train.warmup_steps=1"]


def test_node_0_alone_ends_with_one_line_after_the_timeout(tmp_path):
    out = tmp_path / "run"
    start = time.monotonic()
    res = run_cli(["launch", "node", "--nnodes", "2", "--node-rank", "0", "--head", f"127.0.0.1:{free_port()}",
                   "--iface", "lo", "--timeout", "2", "--", "--nproc", "1", "--out", str(out), *TINY], timeout=120)
    took = time.monotonic() - start
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 1, res.stderr[-3000:]
    assert lines[0].startswith("[launch] starting 2 ranks (torchrun, 2 nodes)"), lines
    assert len(lines) == 2, lines  # the start line, then one line: no traceback, no torchrun messages
    assert lines[1] == ("shardlab: FAILED: not every node joined the rendezvous within 2 s (--timeout): a node was "
                        "not started, or died and was not started again; the checkpoints written so far are kept, "
                        "ckpt.resume=latest continues from the latest (exit code 1)")
    assert took < 60, took  # the timeout and the launcher's start, not torchrun's 600 s
    assert not (out / "checkpoints").exists()
    print(f"\n[join timeout] node 0 alone, --timeout 2: one line after {took:.1f} s: {lines[1]!r}")


def test_a_node_whose_agent_was_killed_says_so_not_another_nodes_records(tmp_path):
    """The run directory is shared: a record there may be another node's; the agent's own end comes first."""
    import json

    from shardlab.launch import failure

    (tmp_path / "failures").mkdir()
    (tmp_path / "failures" / "rank0.json").write_text(json.dumps(  # node 0's rank, which lost its peer
        {"rank": 0, "kind": "crash", "error": "RuntimeError: Connection closed by peer", "echo": True, "time": 1}))
    lines, code = failure.verdict(tmp_path, -9)
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith("shardlab: FAILED: this node's torchrun agent was killed by SIGKILL"), lines
