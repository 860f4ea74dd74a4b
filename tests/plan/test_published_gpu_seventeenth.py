"""The seventeenth set (plan/published_gpu_seventeenth.py) loads and plans, and every row is the recipe its module
reads: its cases' novelty and finite plans are tests/plan/test_published_sets.py's;
no accuracy is asserted here (the set estimates the planner's error on runs it was not given;
scripts/planner_seventeenth.py)."""
from shardlab.plan import published_gpu_seventeenth as s17


def test_rows_are_complete_and_sourced():
    rows = s17.SEVENTEENTH
    assert [r["case"] for r in rows] == ["OLMo-core 1B H100x8 BF16", "OLMo-core 1B H100x8 FP8",
                                         "OLMo-core 7B H100x8 BF16", "OLMo-core 7B H100x8 FP8",
                                         "OLMo-core 13B H100x8 BF16"]
    for r in rows:
        assert "@8c03ca8a2" in r["source"] and r["published"] and r["tokens_per_gpu"] > 0
        assert r["layout"]["dp"] == r["gpus"] == 8 and r["global_batch"] % (8 * r["micro_batch"]) == 0
        assert r["layout"]["strategy"] == "zero3" and r["comm_dtype"] == "fp32" and r["compile"]
        assert r["cluster_fields"] == {"attention": "cudnn"} and not r["dropout"]
        assert r["z_loss"] == r["case"].startswith("OLMo-core 1B ")  # the eager loss; 7B / 13B fuse it


def test_the_model_shapes_are_the_codes():
    # llama_like's SwiGLU width: int(8h/3) rounded up to a multiple of 256; dolma2's 100,278 padded to 128
    for r in s17.SEVENTEENTH:
        h, f = r["shape"]["d_model"], r["shape"]["ffn"]
        assert f == -(-int(8 * h / 3) // 256) * 256
        assert r["shape"]["vocab"] == -(-100278 // 128) * 128 and r["shape"]["n_head"] * 128 == h


def test_every_row_fits():  # finite plans: test_published_sets.py
    for r in s17.evaluate_rows(s17.SEVENTEENTH):
        assert r["fits"], r["case"]
