"""The sixth set (plan/published_gpu_unseen.py) loads and plans, and every row cites its source: no accuracy is
asserted here (the set estimates the planner's error on runs it was not given; scripts/planner_unseen.py)."""
import math

from shardlab.plan import published_gpu, published_gpu_heldout as heldout, published_gpu_unseen as unseen


def test_rows_are_complete_and_sourced():
    rows = unseen.UNSEEN
    assert len(rows) >= 15
    cases = [r["case"] for r in rows]
    assert len(set(cases)) == len(cases)
    for r in rows:
        assert r["source"] and "@" in r["source"] and r["published"], r["case"]
        assert r["tokens_per_gpu"] > 0 and r["gpus"] > 0
        lay = r["layout"]
        assert lay["dp"] * lay.get("tp", 1) * lay.get("pp", 1) * lay.get("cp", 1) == r["gpus"], r["case"]
        assert r["global_batch"] % (r["micro_batch"] * lay["dp"]) == 0, r["case"]


def test_rows_in_no_other_set():
    other = {r["case"] for s in (published_gpu.GIVEN, published_gpu.HELD_OUT, published_gpu.EXAMINED,
                                 published_gpu.HELD_OUT_2, heldout.HELD_OUT) for r in s}
    assert not other & {r["case"] for r in unseen.UNSEEN}


def test_every_row_plans():
    for r in unseen.evaluate_rows(unseen.UNSEEN):
        assert math.isfinite(r["planner"]) and r["planner"] > 0, r["case"]
        assert math.isfinite(r["planner_mem_gib"]) and r["planner_mem_gib"] > 0, r["case"]


def test_conversion_is_the_logs():
    # README "Important checkpoints": 104.70 s/iteration is the log's "samples per second: 19.561" at GBS 2048
    assert abs(unseen.tokens_per_gpu(104.70, 384) * 384 / 2048 - 19.561) < 0.001
