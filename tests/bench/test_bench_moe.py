"""`shardlab bench moe --quick` end to end (world 2): the results.json contract and figures, recorded
all-to-all bytes equal to the routing counts' (ep_comm_exact), the report and plot; and, from the same
MoE trainer runs (no extra launch), the expert-load heat-map each MoE run writes into its run directory
with the per-layer counts it is drawn from. (Loss and speed figures are measurements, not asserted.)"""
import json

from shardlab.train.moe_heatmap import FILE, load_matrix
from shardlab.testing import run_cli
from shardlab.train.metrics import read_rows


def test_bench_moe_quick_and_the_runs_expert_load_heatmap(tmp_path):
    r = run_cli(["bench", "moe", "--quick", "--out", str(tmp_path)], timeout=420)
    assert r.returncode == 0, r.stderr[-8000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    f = doc["figures"]
    assert doc["suite"] == "moe"
    assert {"moe_loss_gain", "moe_imbalance_aux", "moe_imbalance_noaux", "ep_comm_exact"} <= set(f)
    assert f["ep_comm_exact"] == 1 and f["ranks_consistent"] is True
    assert f["moe_loss_gain"] > 0 and f["moe_imbalance_aux"] >= 1 and f["moe_imbalance_noaux"] >= 1
    assert {row["model"] for row in doc["rows"] if "params" in row} == {"dense", "moe", "moe-noaux"}
    assert "moe_loss_gain" in (tmp_path / "REPORT.md").read_text() and (tmp_path / "moe.png").is_file()

    run = tmp_path / "runs" / "w2" / "moe-0"
    assert (run / FILE).is_file() and not (tmp_path / "runs" / "w2" / "dense-0" / FILE).exists()
    rows = [x for x in read_rows(run / "metrics.jsonl") if "moe_tokens_per_expert" in x]
    for x in rows:  # the per-layer counts add up to the logged per-expert counts
        assert [sum(c) for c in zip(*x["moe_tokens_per_layer_expert"])] == x["moe_tokens_per_expert"]
    steps, labels, load = load_matrix(rows)
    assert labels == [f"L{i}.e{j}" for i in range(2) for j in range(4)] and len(steps) == len(rows)
    assert all(abs(sum(col[i * 4:(i + 1) * 4]) / 4 - 1) < 1e-9 for col in zip(*load) for i in range(2))
