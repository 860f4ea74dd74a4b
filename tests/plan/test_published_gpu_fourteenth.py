"""The fourteenth set's row as the planner takes it (plan/published_gpu_fourteenth.py, over the frozen
plan/published_gpu_fourteenth_rows.py): Kimi-K2's shape, the table's layout, Muon in Megatron-Core's layer-wise
distributed optimizer."""
import pytest

from shardlab.plan.layout import Layout
from shardlab.plan.published_gpu_fourteenth import FOURTEENTH
from shardlab.plan.published_gpu_fourteenth_rows import ROWS
from shardlab.plan.published_gpu_heldout import plan_row, row_model


def test_the_row_is_kimi_k2_with_muon_and_its_flops_are_the_tables():
    """1,026 B parameters; the table's model FLOPs per token (1,099 TFLOP/s/GPU over 5,372 tokens/s/GPU) from the
    planner's count with causal attention counted half, within 0.6%; the layout is one the planner takes, whole
    parameters per rank (zero_partition=params), Muon in fp32 states; the plan fits."""
    assert len(FOURTEENTH) == len(ROWS) == 1
    r, src = FOURTEENTH[0], ROWS[0]
    m = row_model(r)
    assert m.params == pytest.approx(1026.4e9, rel=1e-4) and (m.moe_experts, m.moe_first_dense, m.mtp_layers) == (384, 1, 0)
    half = 3 * m.n_layer * 4096 * m.n_head * (m.qk_dim + m.v_dim)
    assert 3 * m.flops_fwd(1, 4096) - half == pytest.approx(
        src["model_tflops_per_gpu"] * 1e12 / src["tokens_per_gpu"], rel=0.006)
    lay = r["layout"]
    assert (lay["dp"], lay["pp"], lay["v"], lay["ep"], lay["zero_partition"], lay["zero1_impl"]) == \
        (64, 4, 4, 64, "params", "all_reduce")
    assert (r["optimizer"], r["optim_dtype"], lay["recompute_modules"], lay["pp_layout"]) == \
        ("muon", "fp32", "mla_up_proj", "Et*4|(t*4|)*14tL")
    Layout(**lay, comm_dtype=r["comm_dtype"]).check(m)
    p = plan_row(r)
    assert p.fits and "muon" in p.explain["optimizer"].lower()
