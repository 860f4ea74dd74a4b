"""`shardlab bench data`: the prepare-throughput rows and figures (results.json contract), on a small corpus."""
import json

from shardlab.bench import data


def test_prepare_throughput_rows_and_figures(tmp_path, monkeypatch):
    def small(work, quick):
        path = work / "small.jsonl"
        path.write_text("".join(json.dumps({"text": f"def f{i}(x):\n    return x + {i}\n" * 40}) + "\n"
                                for i in range(60)))
        return path

    monkeypatch.setattr(data, "corpus", small)
    monkeypatch.setattr(data, "VOCAB", 300)
    monkeypatch.setattr(data, "SHARD_MB", 0.01)
    doc = data.run(tmp_path, quick=True)
    assert doc == json.loads((tmp_path / "results.json").read_text()) and doc["suite"] == "data"
    assert [(r["round"], r["workers"]) for r in doc["rows"]] == [(0, 1), (0, 2), (1, 2), (1, 1)]  # A B, B A
    assert len({r["tokens"] for r in doc["rows"]}) == 1  # the same corpus every time
    f = doc["figures"]
    assert f["prepare_tokens_per_s_w1"] > 0 and f["prepare_tokens_per_s_w2"] > 0 and f["prepare_speedup_w2"] > 0
    assert "tokens/s, 2 workers" in (tmp_path / "REPORT.md").read_text()
