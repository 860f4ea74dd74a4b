"""The thirteenth set's rows as the source's tables give them (plan/published_gpu_thirteenth_rows.py, frozen) and as
the planner takes them (plan/published_gpu_thirteenth.py): DeepSeek-V3's shape, the tables' layouts, the recipes'
inputs."""
from collections import Counter

import pytest

from shardlab.plan.layout import Layout
from shardlab.plan.published_gpu_heldout import row_model
from shardlab.plan.published_gpu_thirteenth import THIRTEENTH, runs
from shardlab.plan.published_gpu_thirteenth_rows import ROWS


def test_the_rows_are_the_tables_deepseek_v3_rows():
    """20 distinct layouts (25.09 to 26.08), none seen before freezing; 18 of them can run (two tables give EP 64
    over a stage's 32 ranks) and every one of those is a layout the planner takes (no plan: a layout check)."""
    assert len(ROWS) == 20 and len(THIRTEENTH) == 18 and len({r["case"] for r in THIRTEENTH}) == 18
    assert sorted(r["case"] for r in ROWS if not runs(r)) == ["MB DeepSeek-V3 GB200x256 MXFP8 tokendrop",
                                                             "MB DeepSeek-V3 GB300x256 MXFP8 gbs2048"]
    assert Counter(r["cluster"] for r in THIRTEENTH) == {"GB300": 5, "GB200": 5, "B200": 5, "B300": 2, "H100-SXM": 1}
    assert not any(r["seen"] for r in THIRTEENTH) and {r["seq"] for r in THIRTEENTH} == {4096}
    r = next(r for r in THIRTEENTH if r["case"] == "MB DeepSeek-V3 B200x256 MXFP8 pp8")
    lay = r["layout"]
    assert (lay["dp"], lay["pp"], lay["v"], lay["ep"], lay["ep_overlap"], lay["ep_dedup"], r["tokens_per_gpu"]) \
        == (32, 8, 2, 32, True, True, 3328)
    for row in THIRTEENTH:
        Layout(**row["layout"], comm_dtype=row["comm_dtype"]).check(row_model(row))


def test_the_shape_is_deepseek_v3s_and_its_flops_are_the_tables():
    """671.0 B parameters (682.6 B with the MTP depth, the embedding and head shared) and, every row, the table's
    model FLOPs per token (TFLOP/s/GPU over tokens/s/GPU: 249-261 G) from the planner's count with causal attention
    counted half (the planner counts it whole, as its MFU always has)."""
    for r in THIRTEENTH:
        m = row_model(r)
        src = next(x for x in ROWS if x["case"] == r["case"])
        assert m.params == pytest.approx(671.03e9 if not m.mtp_layers else 682.64e9, rel=1e-4)
        half = 3 * (m.n_layer + m.mtp_layers) * 4096 * m.n_head * (m.qk_dim + m.v_dim)
        assert 3 * m.flops_fwd(1, 4096) - half == pytest.approx(
            src["model_tflops_per_gpu"] * 1e12 / src["tokens_per_gpu"], rel=0.006)


def test_every_row_is_planned_to_fit_with_the_recipes_memory_savings():
    """Every published row ran, so every plan must fit. With the recipes' recompute modules (mla_up_proj, moe_act,
    mlp; Megatron-Core's default core_attn where the 25.09 yaml lists none) and the precision-aware optimizer's bf16
    moments, all 18 do (5 did at the first evaluation, 10 once TE's MoE blocks kept no expert output)."""
    from shardlab.plan.published_gpu_heldout import plan_row

    mods = {r["case"]: r["layout"]["recompute_modules"] for r in THIRTEENTH}
    assert mods["MB DeepSeek-V3 GB200x256 FP8-CS tokendrop"] == "mla_up_proj,mlp,moe_act"
    assert mods["MB DeepSeek-V3 B200x256 MXFP8 tokendrop"] == "core_attn"
    assert mods["MB DeepSeek-V3 GB300x256 MXFP8"] == ""
    assert {r["optim_dtype"] for r in THIRTEENTH} == {"bf16"}
    assert all(plan_row(r).fits for r in THIRTEENTH)
