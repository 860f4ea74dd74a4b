"""The held-out published GPU rows (plan/published_gpu_heldout.py) load and plan: no accuracy is asserted here
(the set is for estimating the planner's error on runs it was not given, evaluated by scripts/planner_heldout.py)."""
import math

from shardlab.plan import published_gpu, published_gpu_heldout as heldout


def test_rows_are_complete_and_sourced():
    assert len(heldout.HELD_OUT) >= 15
    cases = [r["case"] for r in heldout.HELD_OUT]
    assert len(set(cases)) == len(cases)
    for r in heldout.HELD_OUT:
        assert r["source"] and r["tokens_per_gpu"] > 0 and r["gpus"] > 0
        lay = r["layout"]
        assert lay["dp"] * lay.get("tp", 1) * lay.get("pp", 1) * lay.get("cp", 1) == r["gpus"], r["case"]
        assert r["global_batch"] % (r["micro_batch"] * lay["dp"]) == 0, r["case"]


def test_rows_not_in_the_given_sets():
    given = {r["case"] for s in (published_gpu.GIVEN, published_gpu.HELD_OUT, published_gpu.EXAMINED,
                                 published_gpu.HELD_OUT_2) for r in s}
    assert not given & {r["case"] for r in heldout.HELD_OUT}
    assert set(heldout.SEEN) <= {r["case"] for r in heldout.HELD_OUT}


def test_every_row_plans():
    for r in heldout.evaluate_rows():
        assert math.isfinite(r["planner"]) and r["planner"] > 0, r["case"]
        assert math.isfinite(r["planner_mem_gib"]) and r["planner_mem_gib"] > 0, r["case"]


def test_conversion_is_the_papers():
    # Narayanan et al. eq. (3): the 1T row's 163 TFLOP/s is 502 PFLOP/s over 3072 GPUs
    tok = heldout.narayanan_tokens(163, 128, 25600)
    assert abs(tok * 3072 * 96 * 128 * 25600**2 * (1 + 2048 / (6 * 25600) + 51200 / (16 * 128 * 25600))
               / 1e15 - 502) < 2
