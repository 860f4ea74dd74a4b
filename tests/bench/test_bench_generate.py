"""`shardlab bench generate --quick` end to end: the results.json contract, both figures, a row per layout,
KV bytes equal to the formula, the report and the plot. (Its speed figures are measurements, not asserted.)"""
import json

from shardlab.bench.generate import CFG
from shardlab.model.kv_cache import nbytes
from shardlab.testing import run_cli


def test_bench_generate_quick(tmp_path):
    # the one bench test that is a real `shardlab bench` process (the other suites' tests call bench's main
    # in-process): keep it a subprocess
    r = run_cli(["bench", "generate", "--quick", "--out", str(tmp_path)], timeout=420)
    assert r.returncode == 0, r.stderr[-8000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["suite"] == "generate"
    assert set(doc["figures"]) == {"kv_cache_speedup", "pp_lanes_gain"}
    assert all(v > 0 for v in doc["figures"].values())
    assert {row["layout"] for row in doc["rows"]} == {"single", "tp=2", "dp=2", "pp=2, 1 lane", "pp=2, 2 lanes"}
    for row in doc["rows"]:
        assert row["ttft_ms"] > 0 and row["per_token_ms"] > 0 and row["tokens_per_s"] > 0
        if row["layout"] == "single":  # one rank holds every layer, row and head
            assert row["kv_bytes"] == nbytes(CFG.n_layer, row["batch"], row["prompt_len"] + row["new_tokens"],
                                             CFG.d_model)
    assert "kv_cache_speedup" in (tmp_path / "REPORT.md").read_text()
    assert (tmp_path / "tokens_per_s.png").is_file()
