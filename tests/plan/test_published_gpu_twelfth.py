"""The twelfth set's rows as the source's tables give them (plan/published_gpu_twelfth_rows.py, frozen) and as the
planner takes them (plan/published_gpu_twelfth.py): Qwen3 MoE shapes, the tables' layouts, the recipes' inputs."""
from collections import Counter

import pytest

from shardlab.plan.layout import Layout
from shardlab.plan.published_gpu_heldout import row_model
from shardlab.plan.published_gpu_twelfth import TWELFTH
from shardlab.plan.published_gpu_twelfth_rows import ROWS


def test_the_rows_are_the_tables_qwen3_moe_rows():
    """23 distinct layouts of Qwen3 30B-A3B and 235B-A22B (25.11 to 26.08), none seen before freezing; every layout
    is one the planner takes (no plan: a layout check)."""
    assert len(ROWS) == len(TWELFTH) == 23 and len({r["case"] for r in TWELFTH}) == 23
    assert Counter(r["cluster"] for r in TWELFTH) == {"GB300": 6, "GB200": 5, "H100-SXM": 5, "B200": 4, "B300": 3}
    assert Counter(r["fp8"] for r in TWELFTH) == {"mxfp8": 16, "tensorwise": 5, "none": 2}
    assert not any(r["seen"] for r in TWELFTH) and {r["seq"] for r in TWELFTH} == {4096}
    r = next(r for r in TWELFTH if r["case"] == "MB Qwen3-235B-A22B GB300x256 MXFP8")
    lay = r["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["v"], lay["ep"], lay["ep_overlap"], lay["ep_sms"], r["tokens_per_gpu"]) \
        == (64, 1, 4, 12, 32, True, 32, 8816)
    for row in TWELFTH:
        Layout(**row["layout"], comm_dtype=row["comm_dtype"]).check(row_model(row))


@pytest.mark.parametrize("name,total,flops", [("Qwen3-30B-A3B", 30.53e9, 23.0e9), ("Qwen3-235B-A22B", 235.09e9, 148e9)])
def test_the_shapes_are_qwen3s(name, total, flops):
    """The models' sizes (30.5B and 235B parameters) and the tables' model FLOPs per token (22.8-23.2 G and
    147.7-148.6 G, causal attention counted half; the planner counts it whole, as its MFU always has)."""
    m = row_model(next(r for r in TWELFTH if name in r["case"]))
    assert m.params == pytest.approx(total, rel=1e-3)
    causal_half = 3 * m.n_layer * 2 * 4096 * m.q_width  # half of 3 x 4sd per token per layer
    assert 3 * m.flops_fwd(1, 4096) - causal_half == pytest.approx(flops, rel=0.01)
