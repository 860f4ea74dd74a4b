"""The tenth set's rows as the source's tables give them (plan/published_gpu_tenth.py)."""
from collections import Counter

from shardlab.plan.layout import Layout
from shardlab.plan.published_gpu_heldout import row_model
from shardlab.plan.published_gpu_tenth import TENTH


def test_the_rows_are_the_tables_dense_llama_mxfp8_rows_on_blackwell():
    """Thirteen layouts (the latest container's figure of each) in MXFP8, none seen before freezing; the table's
    columns where no preset has them; every layout is one the planner takes."""
    assert len(TENTH) == 13 and len({r["case"] for r in TENTH}) == 13
    assert Counter(r["cluster"] for r in TENTH) == {"B200": 2, "GB200": 5, "GB300": 6}
    assert {r["fp8"] for r in TENTH} == {"mxfp8"} and not any(r["seen"] for r in TENTH)
    assert {r["layout"]["strategy"] for r in TENTH} == {"zero1"}  # the distributed optimizer on every row
    r = next(r for r in TENTH if r["case"] == "MB Llama3-70B GB300x64 MXFP8 mbs2")
    assert (r["layout"]["dp"], r["layout"]["pp"], r["micro_batch"], r["tokens_per_gpu"]) == (16, 4, 2, 4798)
    assert "schedule" not in r["layout"]  # no interleaving: 1F1B
    r = next(r for r in TENTH if r["case"] == "MB Llama3.1-405B GB300x128 MXFP8")
    assert (r["layout"]["tp"], r["layout"]["cp"], r["layout"]["v"]) == (4, 2, 8)  # the table's VP 8
    for row in TENTH:
        Layout(**row["layout"], comm_dtype=row["comm_dtype"]).check(row_model(row))  # no plan: a layout check
