"""The twentieth set (plan/published_gpu_twentieth.py) loads and plans, and every row is the recipe its module reads:
its cases' novelty and finite plans are tests/plan/test_published_sets.py's;
no accuracy is asserted here (the set estimates the planner's error on runs it was not given;
scripts/planner_mb.py twentieth)."""
from shardlab.plan import published_gpu_twentieth as s20


def test_rows_are_the_readmes_tables():
    rows = s20.TWENTIETH
    assert [(r["gpus"], r["tokens_per_gpu"]) for r in rows] == [(8, 3698.7), (8, 8103), (8, 10486), (16, 7914),
                                                                 (16, 10280), (64, 851)]
    for r in rows:
        lay = r["layout"]
        assert lay["dp"] * lay["tp"] * lay["pp"] == r["gpus"] and lay["sp"] == (lay["tp"] > 1)
        assert lay["strategy"] == "zero1" and not lay["overlap_grad_reduce"] and lay["recompute"] == "none"
        assert (r["micro_batch"], r["global_batch"], r["seq"]) == (1, 512, 8192)
        assert r["comm_dtype"] == "fp32" and r["fp32_grad_accum"] and r["llama_impl"] == "te"
        assert r["shape"]["tied"] and r["shape"]["vocab"] % (128 * lay["tp"]) == 0 and r["dropout"]
        assert r["fp8"] == ("tensorwise" if " fp8 " in r["case"] else "none")
        # TE 1.x: cuDNN's fused attention on sm90, FlashAttention-2 on the A800 (the A100 preset's)
        assert r["cluster_fields"].get("attention") == ("cudnn" if r["cluster"] == "H100-SXM" else None)
    assert rows[0]["cluster"] == "A100-80G" and rows[0]["cluster_fields"]["intra_bw"] == 200e9
