"""The fifteenth set's rows as the planner takes them (plan/published_gpu_fifteenth.py, over the frozen
plan/published_gpu_fifteenth_rows.py): GPT-OSS 120B's shape with its sliding window, the tables' layouts, the
recipes' graphs and dispatchers."""
import pytest

from shardlab.plan.layout import Layout
from shardlab.plan.published_gpu_fifteenth import FIFTEENTH
from shardlab.plan.published_gpu_fifteenth_rows import ROWS
from shardlab.plan.published_gpu_heldout import plan_row, row_model


def test_the_shape_is_gpt_oss_and_its_flops_are_the_tables():
    """116.8 B parameters without the biases the planner does not hold (the rows' hand count, 116.83 B, with them);
    the 26.06+ tables' model FLOPs per token (their counter: three projections an expert, the windowed blocks'
    exact band) from the planner's count with the attention as each block's causal work, within 0.5%."""
    assert len(FIFTEENTH) == len(ROWS) == 16
    m = row_model(next(r for r in FIFTEENTH if "26.06" in r["source"]))
    assert m.params == pytest.approx(116.829e9, rel=5e-4) and (m.moe_experts, m.moe_top_k, m.window, m.window_skip) \
        == (128, 4, 128, 2)
    s = 4096
    full_attention = 3 * m.n_layer * 4 * s * m.q_width  # a token's attention FLOPs at full square, x3 for training
    per_token = 3 * m.flops_fwd(1, s) - full_attention * (1 - m.attention_share(s) / 2)
    for src in ROWS:
        if src["container"] >= "26.06" and src["seq"] == s:
            assert per_token == pytest.approx(src["model_tflops_per_gpu"] * 1e12 / src["tokens_per_gpu"], rel=0.005)


def test_the_rows_map_their_recipes():
    """Every layout is one the planner takes; CUDA graphs and the dispatcher as each recipe set them."""
    for r, src in zip(FIFTEENTH, ROWS):
        Layout(**r["layout"], comm_dtype=r["comm_dtype"]).check(row_model(r))
        impl = src["recipe"]["cuda_graph_impl"]
        assert r["cuda_graphs"] == ("full" if impl == "full_iteration" else
                                    ",".join(src["recipe"]["cuda_graph_scope"]) if impl == "transformer_engine"
                                    else "none")
        assert r["layout"]["ep_dispatcher"] == ("flex" if src["recipe"]["moe_token_dispatcher_type"] == "flex"
                                                else "alltoall")
        assert "layernorm" not in r["layout"]["recompute_modules"]  # not a module the planner models


def test_every_row_plans():
    for r in FIFTEENTH:
        p = plan_row(r)
        assert p.step_time > 0 and "host_wait" in p.explain
