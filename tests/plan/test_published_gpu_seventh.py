"""The seventh set's rows as the source's tables give them (plan/published_gpu_seventh.py)."""
from collections import Counter

from shardlab.plan.published_gpu_seventh import SEVENTH


def test_the_rows_are_the_tables_rows_never_evaluated():
    """18 large-scale H100 rows, and every row at a sequence other than 2048 of the H100 (32), A100 80GB (50) and
    A100 40GB (39) tables, each with its table's recipe."""
    assert len(SEVENTH) == 139 and len({r["case"] for r in SEVENTH}) == 139
    large = [r for r in SEVENTH if r["gpus"] > 8]
    assert len(large) == 18 and {r["seq"] for r in large} == {2048}
    assert Counter(r["layout"]["strategy"] for r in large) == {"zero3": 12, "zero2": 6}
    eight = [r for r in SEVENTH if r["gpus"] == 8]
    assert Counter(r["cluster"] for r in eight) == {"H100-SXM": 32, "A100-80G": 50, "A100-40G": 39}
    assert 2048 not in {r["seq"] for r in eight} and min(r["seq"] for r in eight) == 512
    assert {r["comm_dtype"] for r in eight if r["cluster"] == "A100-40G"} == {"bf16"}  # PURE: bf16 reduce
    assert {r["comm_dtype"] for r in SEVENTH if r["cluster"] != "A100-40G"} == {"fp32"}  # DEFAULT
    # MPT-7B at 65,536 on 8 H100s: micro batch 1, accumulation 2, 1,956 tokens/s/GPU, checkpointed
    r = next(r for r in SEVENTH if r["case"] == "MPT-7b H100-SXMx8 s65536 mb1")
    assert (r["accum"], r["tokens_per_gpu"], r["layout"]["recompute"]) == (2, 1956, "full")
