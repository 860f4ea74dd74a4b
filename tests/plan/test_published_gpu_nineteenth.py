"""The nineteenth set (plan/published_gpu_nineteenth.py) loads and plans, and every row is the recipe its module
reads: its cases' novelty and finite plans are tests/plan/test_published_sets.py's;
no accuracy is asserted here (the set estimates the planner's error on runs it was not given;
scripts/planner_mb.py nineteenth)."""
from shardlab.plan import published_gpu_nineteenth as s19


def test_rows_are_the_readmes_table():
    rows = s19.NINETEENTH
    assert [(r["case"], r["tokens_per_gpu"], r["mem_gib"]) for r in rows] == [
        ("torchao 8B H100x8 bf16", 6150, 47.65), ("torchao 8B H100x8 tensorwise", 7689.5, 47.77),
        ("torchao 8B H100x8 rowwise", 6768, 47.79)]
    assert [r["fp8"] for r in rows] == ["none", "tensorwise", "rowwise"]
    for r in rows:
        assert "8c81863ba" in r["source"] and r["published"] and r["seen"]
        assert r["cluster"] == "H100-SXM-500W" and r["gpus"] == r["layout"]["dp"] == 8
        assert (r["micro_batch"], r["global_batch"], r["seq"]) == (1, 8, 8192)
        assert r["layout"]["strategy"] == "zero3" and r["layout"]["recompute"] == "selective-op"
        assert r["comm_dtype"] == "fp32" and r["compile"] and r["llama_impl"] == "torchtitan"
        # torchtitan at 54ef42221: fused AdamW, the loss eager on fp32 logits; reserved memory in GiB
        assert not r["eager_adam"] and not r["fused_loss"] and r["mem_measure"] == "reserved"
