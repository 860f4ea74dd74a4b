"""`shardlab bench packing` (bench/packing.py): the suite runs end to end on a small corpus and model and
writes the figures its report and docs/data.md name (timings are the bench's business, not asserted)."""
import json
import math

from shardlab.bench import packing


def test_bench_packing_writes_its_figures(tmp_path, monkeypatch):
    monkeypatch.setitem(packing.STEPS, "quick", (12, 4, 1))
    monkeypatch.setattr(packing, "PRESET", "tiny")
    doc = packing.run(tmp_path, quick=True)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["suite"] == "packing" and saved["figures"].keys() == doc["figures"].keys()
    figs = doc["figures"]
    for name in ("loader_s", "loader_masked_s", "loader_fraction_of_step", "masked_step_ratio", "step_masked_s"):
        assert math.isfinite(figs[name]) and figs[name] > 0, name
    assert figs["documents"] > 1 and len(doc["rows"]) == (12 - 1) + (4 - 1)
    assert "loader per step" in (tmp_path / "REPORT.md").read_text()
