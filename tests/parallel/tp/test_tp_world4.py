"""tp=2 x dp=2 (world 4): a traced run (own TP under own ddp) has TP's collectives on their own track per
group in trace.json and `shardlab trace` splits communication and exposed communication by group; the
planner's bytes equal comm's records under every own data-parallel layer, with and without SP. The doctor:
a replica divergence seen by one group only (tp x dp's data-parallel group, tp x pp's TP group) stops all
four ranks with the same error, and rank 0 reports it."""
import json

import pytest

from shardlab.cli import trace as cli
from shardlab.plan.comm import dp_bytes_per_step, tp_bytes_per_step
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.model import ModelSpec
from tp_account_harness import BATCH, TINY, doctor_stop_run, recorded_bytes, traced_steps

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


def test_planner_bytes_equal_recorded_under_tp_x_dp(pool4):
    """Every own dp layer under own TP, with and without SP: payload bytes per op of one step, recorded on
    every rank, equal the planner's data-parallel plus tensor-parallel bytes for the layout (ZeRO sums SP's
    replicated gradients on its shards, and both norms carry two floats)."""
    m = ModelSpec("tiny", n_layer=TINY["n_layer"], d_model=TINY["d_model"], n_head=TINY["n_head"],
                  vocab=TINY["vocab_size"], seq=TINY["max_seq_len"])
    tr = TrainSpec(global_batch=2 * BATCH, micro_batch=BATCH, precision="fp32")
    for dp in ("ddp", "zero1", "zero2", "zero3"):
        for sp in (False, True):
            lay = Layout(dp=2, strategy=dp, tp=2, sp=sp)
            want = dp_bytes_per_step(m, tr, lay)
            for op, b in tp_bytes_per_step(m, tr, lay).items():
                want[op] = want.get(op, 0) + b
            for rank, got in enumerate(pool4.run(recorded_bytes, sp, dp)):
                assert got == want, (dp, sp, rank)


def test_doctor_stops_every_rank_on_one_replicas_divergence_under_tp_x_dp(pool4, tmp_path):
    """Rank 3 corrupted after step 0: only its data-parallel group (and its TP group) can see it, yet all four
    ranks stop after step 0's checksum with the same error naming rank 3 and the parameter (the other groups'
    "ok" would have run them into the next step's collectives: a hang), and rank 0 writes the report."""
    out = pool4.run(doctor_stop_run, str(tmp_path), 3, timeout=120)
    assert out[3]["dp_group"] != out[0]["dp_group"] and out[3]["tp_group"] != out[0]["tp_group"]
    error = out[0]["error"]
    assert error is not None and all(o["error"] == error for o in out), [o["error"] for o in out]
    first = error.splitlines()[0]
    assert first.startswith("step 0: REPLICAS DIVERGED: rank 3 differs") and out[3]["corrupted"] in first, first
    assert f"replica group {out[3]['dp_group']}" in first  # the group that diverged, named
    div = json.loads((tmp_path / "doctor" / "divergence_step_0.json").read_text())  # written by rank 0
    assert div["first"]["ranks"] == [3] and div["first"]["param"] == out[3]["corrupted"]
    assert div["group_ranks"] == out[3]["dp_group"]
    assert div["first"]["detail"]["3"]["n_diff"] == 1


def test_doctor_stops_every_rank_on_one_tp_copys_divergence_under_tp_x_pp(pool4, tmp_path):
    """tp=2 x pp=2, no data-parallel replica: rank 3's copy of a parameter TP keeps whole drifts; only its TP
    group (its stage) can see it, yet all four ranks stop with the same TP COPIES DIVERGED error."""
    out = pool4.run(doctor_stop_run, str(tmp_path), 3, ("parallel.pp=2", "train.micro_batch=1"), timeout=120)
    assert out[3]["tp_group"] != out[0]["tp_group"]
    error = out[0]["error"]
    assert error is not None and all(o["error"] == error for o in out), [o["error"] for o in out]
    first = error.splitlines()[0]
    assert first.startswith(f"step 0: TP COPIES DIVERGED within the tensor-parallel group {out[3]['tp_group']}: "
                            "rank(s) 3 differ") and out[3]["corrupted"] in first, first
    div = json.loads((tmp_path / "doctor" / "divergence_step_0.json").read_text())  # written by rank 0
    assert div["tp"]["first"]["ranks"] == [3] and div["tp"]["first"]["param"] == out[3]["corrupted"]
