"""The sixteenth set's rows as the planner takes them (plan/published_gpu_sixteenth.py, over the frozen
plan/published_gpu_sixteenth_rows.py): each model's shape by its family's mapping, the run's own vocabulary, the
recipes' layouts, graphs, dispatchers and gradient dtypes."""
from shardlab.plan.layout import Layout
from shardlab.plan.published_gpu_heldout import plan_row, row_model
from shardlab.plan.published_gpu_sixteenth import SIXTEENTH
from shardlab.plan.published_gpu_sixteenth_rows import ROWS


def test_the_rows_map_their_models_and_recipes():
    """16 rows; each layout one the planner takes; the library GPT-OSS rows on their tokenizer's 32,000 entries and
    reducing gradients in fp32 as their recipe says; the dense Qwen3-8B without experts; GPT-OSS's experts biased."""
    assert len(SIXTEENTH) == len(ROWS) == 16
    for r, src in zip(SIXTEENTH, ROWS):
        m = row_model(r)
        Layout(**r["layout"], comm_dtype=r["comm_dtype"]).check(m)
        assert m.vocab == src["recipe"]["extra"]["padded_vocab_size_in_run"]
        assert r["comm_dtype"] == ("fp32" if src["recipe"]["grad_reduce_in_fp32"] is True else "bf16")
        assert m.expert_bias is src["model"].startswith("gpt-oss")
        assert bool(m.moe_experts) is (src["model"] != "qwen3-8b")


def test_every_row_plans():
    for r in SIXTEENTH:
        p = plan_row(r)
        assert p.step_time > 0 and p.tokens_per_s > 0
