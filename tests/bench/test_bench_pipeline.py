"""`shardlab bench pipeline`'s arithmetic, without running the bench: the measured bubble subtracts what
the emulated compute really took, and the planner's view of an emulated layout."""
import pytest

from shardlab.bench.pipeline import D_MODEL, MICRO, SEQ, nominal_bubble, pipeline_step, planner_view
from shardlab.parallel.pp import analytic_bubble
from shardlab.parallel.pp.engine import Emulation


def test_measured_bubble_is_idle_over_the_pipelines_step():
    """Step = the last rank to finish; bubble = 1 - busy / step per rank, averaged; the median step's."""
    def rank(ends, busys):
        return [{"end_s": e, "busy_s": b, "op_s": {"F": 0.01}, "p2p_bytes": 8} for e, b in zip(ends, busys)]
    got = pipeline_step([rank([1.0, 2.0, 1.2], [0.8, 0.8, 0.8]), rank([0.9, 1.0, 1.1], [0.7, 0.7, 0.7])])
    assert got["step_s"] == 1.2  # the median of the pipeline's steps 1.0, 2.0, 1.2
    assert got["bubble"] == pytest.approx(((1.2 - 0.8) + (1.2 - 0.7)) / 2 / 1.2)
    assert got["step_times_s"] == [1.0, 2.0, 1.2]


def test_emulated_sleeps_record_what_they_took_and_the_nominal_bubble_counts_it_as_idle():
    e = Emulation(f_s=0.001, b_s=0.002)
    e.sleep("F", 0.001)
    e.sleep("F", 0.001)
    assert e.spent["F"][1] == 2 and e.spent["F"][0] >= 0.002
    # 8 microbatches of f + b = 3 ms in a 30 ms step: nominal bubble 0.2, whatever the sleeps took
    assert nominal_bubble(0.030, 8, 0.001, 0.002) == pytest.approx(0.2)


@pytest.mark.parametrize("name,p,m,v", [("gpipe", 2, 8, 1), ("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2), ("zb", 4, 8, 1)])
def test_planner_view_of_an_emulated_layout(name, p, m, v):
    got = planner_view(name, p, m, v)
    assert got["plan_bubble"] == pytest.approx(analytic_bubble(name, p, m, v), rel=1e-9)
    assert got["plan_p2p_bytes"] == 2 * m * v * MICRO * SEQ * D_MODEL * 4  # fp32 activations and gradients
    assert planner_view("torch-zbv", 4, 8, 2) == {"plan_bubble": None, "plan_p2p_bytes": None}  # not modelled
