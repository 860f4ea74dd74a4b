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


def test_message_key_reads_the_engines_tags():
    from shardlab.bench.pipeline import _message_key
    from shardlab.parallel.pp.posting import label
    from shardlab.parallel.pp.schedule import Instr

    assert _message_key("act 3->4 mb0") == ("F", 3, 4, 0)
    assert _message_key(label(Instr("SEND_B", 2, 5, peer=1))) == ("B", 2, 1, 5)


def _timeline(name, p, m, v, stretch=None):
    """Ranks' steps as emulated_step_times returns them, every op at its nominal length (F 1, I = W 1 per
    chunk), messages free; `stretch`: (rank, index of its compute, extra) lengthens one op."""
    from shardlab.parallel.pp import build
    from shardlab.parallel.pp.schedule import COMPUTE

    sched = build(name, p, m, v)
    ranks = []
    for r, instrs in enumerate(sched.ranks):
        took = [{"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}[i.op] for i in instrs if i.op in COMPUTE]
        if stretch and stretch[0] == r:
            took[stretch[1]] += stretch[2]
        ranks.append([{"took_s": took, "late_s": 0.0, "sent": {}, "received": {}}])
    return ranks


@pytest.mark.parametrize("name,v", [("1f1b", 1), ("zbv", 2), ("dualpipev", 2)])
def test_replay_at_nominal_lengths_is_the_formula_and_a_late_op_on_the_path_adds_idle(name, v):
    from shardlab.bench.pipeline import replayed

    got = replayed(name, 4, 8, v, _timeline(name, 4, 8, v))
    assert got["ops"] == pytest.approx(analytic_bubble(name, 4, 8, v), abs=1e-9)
    assert got["ops_messages"] == got["ops"]  # no delays recorded: the messages add nothing
    late = replayed(name, 4, 8, v, _timeline(name, 4, 8, v, stretch=(3, 5, 2.0)))
    assert late["ops"] > got["ops"]  # the tip rank's sixth op late: the others wait for it


def test_replay_counts_a_message_delay_where_the_receiver_waited():
    """Rank 1 waits from before the send: the message's delay (done - sent) enters the replay."""
    from shardlab.bench.pipeline import replayed

    ranks = _timeline("1f1b", 2, 2, 1)
    base = replayed("1f1b", 2, 2, 1, ranks)["ops_messages"]
    ranks[0][0]["sent"]["act 0->1 mb0"] = 10.0
    ranks[1][0]["received"]["act 0->1 mb0"] = (9.0, 10.5)  # waiting since 9, had it at 10.5: 0.5 late
    got = replayed("1f1b", 2, 2, 1, ranks)["ops_messages"]
    assert got > base
