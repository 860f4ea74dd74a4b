"""Pipeline parallelism: schedules as data (checked and timed without a model), stage splits, and the
engine's step equal to one device's for every schedule."""
import pytest
import torch

from shardlab.parallel.pp import ScheduleError, analytic_bubble, build
from shardlab.parallel.pp.simulate import simulate
from shardlab.parallel.pp.stage import layer_costs, stage_ranges

CASES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 3), ("zb", 1)]


@pytest.mark.parametrize("name,v", CASES)
def test_every_schedule_is_complete_ordered_and_deadlock_free(name, v):
    """simulate() raises on a missing or repeated instruction, a backward before its forward, a receive
    order that differs from the send order on a pair of ranks, and a deadlock."""
    runs = 0
    for pp in (2, 3, 4, 8):
        for m in range(1, 17):
            try:
                s = build(name, pp, m, v)
            except ScheduleError:
                continue
            simulate(s)
            runs += 1
    assert runs >= 16


@pytest.mark.parametrize("name,v", CASES)
@pytest.mark.parametrize("pp,m", [(2, 4), (4, 4), (4, 8), (4, 16)])
def test_simulated_bubble_equals_the_formula(name, v, pp, m):
    """Equal stage times (F = 1, B = 2, I = W = 1) and free communication: the schedules reach exactly
    the textbook bubble, so any gap in a measured run is the machine's, not the schedule's."""
    if m % pp and name == "interleaved":
        pytest.skip("interleaved needs m divisible by pp")
    t = simulate(build(name, pp, m, v), f=1, b=2)
    assert max(t.bubble) == pytest.approx(analytic_bubble(name, pp, m, v), abs=1e-9)
    assert min(t.bubble) == pytest.approx(analytic_bubble(name, pp, m, v), abs=1e-9)


def test_zero_bubble_is_a_third_of_1f1b_and_interleaving_divides_by_v():
    one = simulate(build("1f1b", 4, 8)).makespan - 3 * 8
    zb = simulate(build("zb", 4, 8)).makespan - 3 * 8
    il = simulate(build("interleaved", 4, 8, 2), f=0.5, b=1.0).makespan - 3 * 8 / 2 * 2
    assert one == 9 and zb == 3  # idle time: 3(p-1) vs (p-1)
    assert il == pytest.approx(one / 2)


def test_activation_memory_per_schedule():
    """GPipe holds every microbatch; 1F1B at most p - r on rank r; ZB-H1 at most p (1F1B's peak)."""
    assert simulate(build("gpipe", 4, 8)).peak_activations == [8, 8, 8, 8]
    assert simulate(build("1f1b", 4, 8)).peak_activations == [4, 3, 2, 1]
    assert max(simulate(build("zb", 4, 8)).peak_activations) == 4


@pytest.mark.parametrize("args,needle", [
    (("1f1b", 4, 2), "needs at least 4 microbatches"),
    (("zb", 4, 3), "needs at least 4 microbatches"),
    (("interleaved", 2, 3, 2), "multiple of pp=2"),
    (("1f1b", 2, 4, 2), "needs parallel.pp_schedule=interleaved"),
    (("pipedream", 2, 4), "must be one of"),
])
def test_bad_schedule_requests_are_one_line(args, needle):
    with pytest.raises(ScheduleError, match=needle) as e:
        build(*args)
    assert "\n" not in str(e.value)


def test_gpipe_accepts_fewer_microbatches_than_stages():
    assert simulate(build("gpipe", 4, 2)).makespan > 0


def test_stage_split_balances_cost_and_accepts_explicit_points():
    assert stage_ranges(4, 2) == [range(0, 2), range(2, 4)]
    # the head of a 50k vocabulary outweighs blocks of a narrow model: the last stage gets fewer blocks
    ranges = stage_ranges(12, 4, costs=layer_costs(12, 256, 50257, 128))
    assert len(ranges[-1]) < len(ranges[0])
    assert stage_ranges(6, 3, split=[1, 5]) == [range(0, 1), range(1, 5), range(5, 6)]
    with pytest.raises(ScheduleError, match="pp_split"):
        stage_ranges(6, 3, split=[5, 1])
    with pytest.raises(ScheduleError, match="layers"):
        stage_ranges(2, 3)


def test_stage_keeps_parameter_names():
    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.parallel.pp.stage import build_stage
    from shardlab.parallel.pp.testing import TINY4

    model = build_model(GPTConfig(**TINY4), seed=0)
    names = {n for n, _ in model.named_parameters()}
    parts = [build_stage(model, s, 2, r) for s, r in enumerate(stage_ranges(4, 2))]
    held = [{n for n, _ in p.named_parameters()} for p in parts]
    assert held[0] | held[1] == names
    assert held[0] & held[1] == {"wte.weight"}  # the tied embedding / head, summed between the two


# --- the engine on two ranks ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,v,m", [("gpipe", 1, 3), ("1f1b", 1, 4), ("interleaved", 2, 4), ("zb", 1, 4)])
def test_pipeline_step_equals_one_device(pool2, name, v, m):
    from shardlab.parallel.pp.testing import pipeline_grads, single_grads

    ref_loss, ref = single_grads(m)
    results = pool2.run(pipeline_grads, name, m, v)
    seen = set()
    for loss, grads in results:
        # the same sums in a different order (per stage, then across ranks): fp32 round-off only
        assert loss == pytest.approx(ref_loss, rel=1e-6)
        for n, g in grads.items():
            torch.testing.assert_close(g, ref[n], rtol=1e-5, atol=1e-6, msg=lambda s, n=n: f"{name} {n}: {s}")
            seen.add(n)
    assert seen == set(ref)


@pytest.mark.parametrize("name,v,m", [("torch-gpipe", 1, 3), ("torch-1f1b", 1, 4), ("torch-interleaved", 2, 4),
                                      ("torch-zb", 2, 4)])
def test_torch_pipeline_equals_one_device(pool2, name, v, m):
    from shardlab.parallel.pp.testing import pipeline_grads, single_grads

    ref_loss, ref = single_grads(m)
    results = pool2.run(pipeline_grads, name, m, v)
    for loss, grads in results:
        assert loss == pytest.approx(ref_loss, rel=1e-6)
        for n, g in grads.items():
            torch.testing.assert_close(g, ref[n], rtol=1e-5, atol=1e-6, msg=lambda s, n=n: f"{name} {n}: {s}")


def test_interleaved_memory_is_megatrons_figure():
    """Rank 0 holds p(1 + (p-1)/(pV)) stages' worth of activations: 11 chunks of 1/2 stage at p=4, V=2."""
    assert simulate(build("interleaved", 4, 8, 2)).peak_activations[0] == 11


def test_docs_show_the_diagrams_the_code_draws():
    import re
    from pathlib import Path

    from shardlab.parallel.pp.draw import text_diagram

    text = (Path(__file__).resolve().parents[3] / "docs" / "pipeline.md").read_text()
    found = re.findall(r"<!-- diagram (\w+) pp=(\d+) m=(\d+) v=(\d+) -->\n```\n(.*?)\n```", text, re.S)
    assert len(found) == 6
    for name, pp, m, v, shown in found:
        assert shown == text_diagram(build(name, int(pp), int(m), int(v))), f"docs/pipeline.md: {name} is stale"


@pytest.mark.parametrize("name,v,m", [("1f1b", 1, 4), ("interleaved", 2, 4), ("zb", 1, 4)])
def test_engine_posts_its_posting_plan_and_nccl_would_complete_it(pool2, name, v, m):
    """A real step's posting log (comm.log_p2p) is the plan the checker proves, post for post, and
    replayed under NCCL's rules (with the waits the engine really did) it completes."""
    from shardlab.parallel.p2p_order import Post, check_all, from_logs
    from shardlab.parallel.pp.posting import p2p_plans

    from p2p_harness import logged

    logs = dict(pool2.run(logged, "shardlab.parallel.pp.testing", "pipeline_grads", name, m, v))
    real = from_logs(logs)
    check_all(real)
    planned = p2p_plans(build(name, 2, m, v))
    for r in (0, 1):
        assert [e for e in real[r] if isinstance(e, Post)] == [e for e in planned[r] if isinstance(e, Post)]



def test_staged_comm_gives_the_same_step_bit_for_bit(pool2):
    """comm's staged mode (gloo-staged: batched point-to-point through host copies, data copied back on
    wait) computes exactly what the direct path computes."""
    from p2p_harness import staged

    from shardlab.parallel.pp.testing import pipeline_grads

    direct = pool2.run(pipeline_grads, "interleaved", 4, 2)
    via_host = pool2.run(staged, "shardlab.parallel.pp.testing", "pipeline_grads", "interleaved", 4, 2)
    for (loss_a, grads_a), (loss_b, grads_b) in zip(direct, via_host):
        assert loss_a == loss_b
        assert grads_a.keys() == grads_b.keys()
        assert all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)


# --- the V placement: two stages per rank, the tip's hand-off on the rank --------------------------------
def test_v_placement_keeps_the_tip_on_the_rank():
    """Rank r holds stages r and 2p-1-r; no message crosses p-1 -> p (the tip) and the simulator accepts
    the local hand-off only after its producer ran on the rank."""
    for pp in range(2, 9):
        for m in (1, pp, 2 * pp + 1):
            s = build("gpipe", pp, m, layout="v")
            assert s.n_stages == 2 * pp and [s.stages_of(r) for r in range(pp)][0] == [0, 2 * pp - 1]
            assert all(s.rank_of(i.peer) != r for r, instrs in enumerate(s.ranks) for i in instrs
                       if i.op.startswith(("SEND", "RECV")))
            simulate(s)
    tip = [i for i in build("gpipe", 2, 1, layout="v").ranks[1] if i.op in ("F", "B")]
    assert [str(i) for i in tip] == ["F0@s1", "F0@s2", "B0@s2", "B0@s1"]  # no RECV / SEND between them


def test_a_v_program_reading_its_tip_too_early_is_refused():
    from shardlab.parallel.pp.schedule import Instr, Schedule

    good = build("gpipe", 2, 1, layout="v")
    r1 = list(good.ranks[1])
    f1, f2 = r1.index(Instr("F", 1, 0)), r1.index(Instr("F", 2, 0))
    r1[f1], r1[f2] = r1[f2], r1[f1]
    bad = Schedule("gpipe", 2, 1, 2, (good.ranks[0], tuple(r1)), "v")
    with pytest.raises(ValueError, match="hands it over on the rank"):
        simulate(bad)


@pytest.mark.parametrize("m", [1, 3])
def test_v_placed_program_equals_one_device_in_float64(pool2, m):
    """GPipe's program on the V placement (rank 0: stages 0 and 3, with the tied embedding twice; rank 1:
    stages 1 and 2, handed over locally) gives one device's loss and gradients in float64."""
    from shardlab.parallel.pp.testing import TINY4, pipeline_grads, single_grads
    from shardlab.testing import assert_float64_equal, in_float64

    ref_loss, ref = in_float64(single_grads, m)
    results = pool2.run(in_float64, pipeline_grads, "gpipe", m, 1, TINY4, "v")
    merged = {}
    for loss, grads in results:
        assert_float64_equal([loss], [ref_loss], "V loss")
        merged.update(grads)
    assert merged.keys() == ref.keys()
    assert_float64_equal(merged, ref)


V_SCHEDULES = ("zbv", "dualpipev")


@pytest.mark.parametrize("name", V_SCHEDULES)
def test_v_schedules_are_complete_and_their_bubble_is_the_formula(name):
    """ZB-V and DualPipeV (run without DualPipe's overlap) over p = 2..8 and every valid m up to 3p: complete,
    ordered, deadlock-free, the tip local; with F = I = W per chunk the bubble is the row's closed form at every
    m: (p-1)/(6m+p-1) from m = (3p-1)/2, the unfilled warm-up's 2(2p-1-m) idle chunk-steps below."""
    runs = 0
    for pp in range(2, 9):
        for m in range(1, 3 * pp + 1):
            try:
                s = build(name, pp, m)
            except ScheduleError:
                assert name == "dualpipev" and m < 2 * pp
                continue
            assert s.layout == "v" and s.stages_of(0) == [0, 2 * pp - 1]
            t = simulate(s, f=1, b=2)
            runs += 1
            assert t.mean_bubble == pytest.approx(analytic_bubble(name, pp, m, 2), abs=1e-9)
            if m >= 2 * pp:  # every rank alike
                assert max(t.bubble) == pytest.approx(analytic_bubble(name, pp, m, 2), abs=1e-9)
                assert min(t.bubble) == pytest.approx(analytic_bubble(name, pp, m, 2), abs=1e-9)
    assert runs == {"zbv": 105, "dualpipev": 42}[name]


def test_zbv_bubble_is_under_a_third_of_1f1bs_at_p4_m8():
    zbv = simulate(build("zbv", 4, 8), f=1, b=2).mean_bubble
    one = simulate(build("1f1b", 4, 8), f=1, b=2).mean_bubble
    assert zbv <= one / 3 and zbv == pytest.approx(3 / 51)


@pytest.mark.parametrize("name,m", [("zbv", 2), ("zbv", 4), ("dualpipev", 4), ("dualpipev", 5)])
def test_v_schedules_equal_one_device_in_float64(pool2, name, m):
    from shardlab.parallel.pp.testing import pipeline_grads, single_grads
    from shardlab.testing import assert_float64_equal, in_float64

    ref_loss, ref = in_float64(single_grads, m)
    merged = {}
    for loss, grads in pool2.run(in_float64, pipeline_grads, name, m, 2):
        assert_float64_equal([loss], [ref_loss], f"{name} loss")
        merged.update(grads)
    assert merged.keys() == ref.keys()
    assert_float64_equal(merged, ref)
