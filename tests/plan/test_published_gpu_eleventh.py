"""The eleventh set's rows as the source's table gives them (plan/published_gpu_eleventh.py)."""
from collections import Counter

from shardlab.plan.layout import Layout
from shardlab.plan.published_gpu_eleventh import ELEVENTH
from shardlab.plan.published_gpu_heldout import row_model


def test_the_rows_are_the_tables_llama_sft_rows():
    """Five layouts of Llama 3 70B SFT on 32 GPUs (26.06), none seen before freezing: 4,096 tokens, GBS 32, micro
    batch 1, the distributed optimizer; every layout is one the planner takes."""
    assert len(ELEVENTH) == 5 and len({r["case"] for r in ELEVENTH}) == 5
    assert Counter(r["cluster"] for r in ELEVENTH) == {"GB300": 2, "GB200": 2, "H100-SXM": 1}
    assert Counter(r["fp8"] for r in ELEVENTH) == {"tensorwise": 3, "mxfp8": 2} and not any(r["seen"] for r in ELEVENTH)
    assert {(r["seq"], r["gpus"], r["global_batch"], r["micro_batch"]) for r in ELEVENTH} == {(4096, 32, 32, 1)}
    assert {r["layout"]["strategy"] for r in ELEVENTH} == {"zero1"}
    r = next(r for r in ELEVENTH if r["case"] == "MB Llama3-70B SFT GB300x32 FP8-CS")
    assert (r["layout"]["dp"], r["layout"]["tp"], r["layout"]["pp"], r["layout"]["v"], r["tokens_per_gpu"]) == (
        16, 1, 2, 20, 4819)
    r = next(r for r in ELEVENTH if r["cluster"] == "H100-SXM")
    assert (r["layout"]["tp"], r["layout"]["sp"], r["layout"]["tp_comm_overlap"]) == (4, True, True)
    for row in ELEVENTH:
        Layout(**row["layout"], comm_dtype=row["comm_dtype"]).check(row_model(row))  # no plan: a layout check
