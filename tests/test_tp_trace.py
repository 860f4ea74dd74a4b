"""A traced tp=2 x dp=2 run (own TP under own ddp, world 4): TP's collectives on their own track per group in
trace.json, and `shardlab trace` splitting communication and exposed communication by group."""
import json

import pytest

from shardlab.observe import cli
from tp_account_harness import traced_steps

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def traced(pool4, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("tp_trace")
    pool4.run(traced_steps, str(run_dir), 2)
    return run_dir


def test_tp_collectives_have_their_own_track_per_group(traced):
    doc = json.loads((traced / "trace" / "trace.json").read_text())
    ev = doc["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    comm = [e for e in ev if e.get("cat") == "comm" and e["ph"] == "X"]
    for rank in range(4):
        mine = [e for e in comm if e["pid"] == rank]
        tracks = {threads[(rank, e["tid"])].split()[1]: set() for e in mine}
        for e in mine:  # every slice sits on its own group's track
            assert threads[(rank, e["tid"])].split()[1] == e["args"]["group"], e
            tracks[e["args"]["group"]].add(e["args"]["tag"].split(".")[0])
        dp = [g for g in tracks if g.startswith("dp")]  # ddp replicates: the mesh names it dp_replicate
        assert "tp" in tracks and len(dp) == 1, tracks
        assert "tp" in tracks["tp"] and "tp" not in tracks[dp[0]]  # TP's region collectives on the tp track only
        assert {e["args"]["group_ranks"][0] // 2 for e in mine if e["args"]["group"] == "tp"} == {rank // 2}


def test_trace_cli_splits_exposed_comm_by_group(traced):
    rep = cli.build(traced, max_rows=5)
    groups = rep["summary"]["comm_by_group"]
    dp = [g for g in groups if g.startswith("dp")]
    assert "tp" in groups and len(dp) == 1, groups
    for g in ("tp", dp[0]):
        d = groups[g]
        assert d["collectives"] > 0 and d["comm_bytes"] > 0
        assert 0 <= d["exposed_comm_s"] <= d["comm_s"] + 1e-12
    # own TP: 2 regions per block per pass, the embedding / head, the loss's 2; the ddp gradient buckets on dp
    assert groups["tp"]["collectives"] >= 4 * 2 + 2 + 2
    text = cli.render(rep)
    assert "communication by process group" in text
    shown = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert {"tp", dp[0]} <= shown
