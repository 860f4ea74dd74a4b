"""The eighth set's rows as the source's tables give them (plan/published_gpu_eighth.py)."""
from collections import Counter

from shardlab.plan.published_gpu_eighth import EIGHTH


def test_the_rows_are_the_tables_dense_llama_rows_on_h100_and_b200():
    """Seven layouts (the latest container's figure of each), FP8 current scaling, the recipe's layout; two seen."""
    assert len(EIGHTH) == 7 and len({r["case"] for r in EIGHTH}) == 7
    assert Counter(r["cluster"] for r in EIGHTH) == {"H100-SXM": 5, "B200": 2}
    assert {r["fp8"] for r in EIGHTH} == {"tensorwise"} and {r["comm_dtype"] for r in EIGHTH} == {"bf16"}
    assert sum(bool(r["seen"]) for r in EIGHTH) == 2
    r = next(r for r in EIGHTH if r["case"] == "MB Llama3.1-405B H100x1024 FP8 gbs1536")
    lay = r["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["cp"], lay["v"], lay["pp_split"]) == (8, 8, 8, 2, 8, "ends-as-blocks")
    assert lay["sp"] and lay["tp_comm_overlap"] and r["tokens_per_gpu"] == 326
    assert r["shape"]["vocab"] == 129024  # 128,256 padded to a multiple of 128 x 8
    assert r["cluster_fields"] == {"attention": "cudnn"}  # Transformer Engine's FusedAttention
