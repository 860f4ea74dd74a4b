"""The eighteenth set (plan/published_gpu_eighteenth.py) loads and plans, and its rows are the study's: no accuracy is
asserted here (the set estimates the planner's error on runs it was not given; scripts/planner_eighteenth.py)."""
import math

from shardlab.plan import published_gpu_eighteenth as s18


def test_rows_are_the_studys():
    rows = s18.EIGHTEENTH
    assert len(rows) == 5 and len({r["case"] for r in rows}) == 5
    for r, (modules, peak, step) in zip(rows, s18.STUDY):
        assert r["layout"]["recompute_modules"] == ",".join(modules)
        assert r["gpus"] == 8 and r["global_batch"] == 4 and r["micro_batch"] == 1 and r["layout"]["dp"] == 4
        assert r["layout"]["tp"] == 2 and r["layout"]["ep"] == 8 and r["layout"]["ep_dispatcher"] == "alltoall"
        assert r["mem_gib"] == round(peak * 1e9 / 2**30, 3)  # Megatron-Bridge reports decimal gigabytes
        assert r["tokens_per_gpu"] == round(4 * 4096 / (step / 1e3 * 8), 1) and "@067f987df" in r["source"]
    assert rows[0]["tokens_per_gpu"] == 4479.6


def test_every_row_plans():
    for r in s18.evaluate_rows(s18.EIGHTEENTH):
        assert math.isfinite(r["planner"]) and r["planner"] > 0 and math.isfinite(r["mem_err"]), r["case"]
