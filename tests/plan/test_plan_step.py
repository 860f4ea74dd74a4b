"""Planner step time: pipeline bubble, overlap, FLOPs, MFU."""
import pytest

from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS
from shardlab.plan.step import evaluate

M = PRESETS["gpt3-6.7b"]
H100 = load_cluster("H100-SXM", 64)


def _mb_time(p):
    return (p.times["compute"] + p.times["tp_pp_comm"]) / p.m


@pytest.mark.parametrize("pp,m,v", [(4, 8, 1), (4, 16, 1), (8, 32, 1), (4, 8, 2), (8, 16, 4)])
def test_pipeline_bubble_fraction(pp, m, v):
    sched = "interleaved" if v > 1 else "1f1b"
    p = evaluate(M, TrainSpec(global_batch=m, micro_batch=1), Layout(pp=pp, schedule=sched, v=v), H100)
    assert p.m == m
    assert p.times["bubble"] / (m * _mb_time(p)) == pytest.approx((pp - 1) / (v * m))


def test_gpipe_and_1f1b_same_bubble_different_memory():
    tr = TrainSpec(global_batch=16, micro_batch=1)
    g = evaluate(M, tr, Layout(pp=4, schedule="gpipe"), H100)
    f = evaluate(M, tr, Layout(pp=4, schedule="1f1b"), H100)
    assert g.times["bubble"] == pytest.approx(f.times["bubble"])
    assert g.mem_total > f.mem_total


def test_model_flops_6psi_plus_attention():
    m, T = M, 2048
    nonemb = m.n_layer * m.params_per_layer
    expected = 6 * nonemb * T + 12 * m.n_layer * m.seq * m.d_model * T + 6 * m.vocab * m.d_model * T
    # biases and LayerNorms are not GEMM FLOPs: agree within 0.1%
    assert m.model_flops(T) == pytest.approx(expected, rel=1e-3)


def test_recompute_costs_time_saves_memory():
    tr = TrainSpec(global_batch=32, micro_batch=4)
    plans = {r: evaluate(M, tr, Layout(dp=8, strategy="zero3", recompute=r), H100)
             for r in ("none", "selective", "full")}
    assert plans["none"].step_time < plans["selective"].step_time < plans["full"].step_time
    assert plans["none"].mem_total > plans["selective"].mem_total > plans["full"].mem_total
    # full recomputation = one extra forward: about 4/3 of the compute
    ratio = plans["full"].times["compute"] / plans["none"].times["compute"]
    assert 1.2 < ratio < 1.34


def test_single_bucket_cannot_overlap_many_buckets_can():
    tr = TrainSpec(global_batch=8, micro_batch=1)
    one = evaluate(M, tr, Layout(dp=8, strategy="ddp", bucket_mb=1e6, first_bucket_mb=1e6, last_bucket_mb=0), H100)
    many = evaluate(M, tr, Layout(dp=8, strategy="ddp", bucket_mb=25), H100)
    ar1 = [c for c in one.comm if c.c.op == "all_reduce"][0]
    assert ar1.c.calls == 1 and ar1.exposed == pytest.approx(ar1.time)
    arn = [c for c in many.comm if c.c.op == "all_reduce"][0]
    assert arn.exposed < 0.1 * arn.time


def test_mfu_definition_and_memory_verdict():
    tr = TrainSpec(global_batch=64, micro_batch=1)
    p = evaluate(M, tr, Layout(dp=64, strategy="zero3"), H100)
    flops = M.model_flops(64 * M.seq)
    assert p.mfu == pytest.approx(flops / (p.step_time * 64 * 989e12))
    assert 0 < p.mfu < 0.75  # never above the GEMM efficiency assumption
    assert p.fits
    ddp = evaluate(M, tr, Layout(dp=64, strategy="ddp"), H100)
    assert not ddp.fits and "memory" in ddp.bound()  # 16 B x 6.7B > 80 GB


def test_invalid_layouts_raise_clear_errors():
    tr = TrainSpec(global_batch=8)
    with pytest.raises(ValueError, match="tp 3"):
        evaluate(M, tr, Layout(tp=3), H100)
    with pytest.raises(ValueError, match="not divisible"):
        evaluate(M, TrainSpec(global_batch=7), Layout(dp=2), H100)
    with pytest.raises(ValueError, match="GPUs"):
        evaluate(M, TrainSpec(global_batch=128), Layout(dp=128), H100)


def test_published_figures_within_stated_error():
    """The tables in docs/planner.md: ZeRO's memory figures are formula identities (equal up to the
    paper's rounding to 3 significant digits); the Megatron MFU/throughput measurements within 10%
    with no per-case factor."""
    from shardlab.plan.published import evaluate_published
    rows = evaluate_published()
    assert {r["kind"] for r in rows} == {"identity", "measured"}
    for r in rows:
        if r["kind"] == "identity":
            assert r["unit"] == "GB" and float(f"{r['planner']:.3g}") == pytest.approx(r["published"], abs=0.051), r
        else:
            assert abs(r["err"]) < 0.10, r


def test_validation_compare_and_report(tmp_path):
    """The bench's bookkeeping on a synthetic run summary (the real runs are `shardlab bench planner`)."""
    from shardlab.plan.hardware import load_cluster
    from shardlab.plan.validate import _report, compare, predict
    pred = predict("small", "zero2", 8, 2, load_cluster("H100-SXM", 2))
    psi = PRESETS["small"].params
    summary = {"step_time_s": pred.step_time * 1.05,
               "state_bytes": {"params": 4 * psi, "grads": 2 * psi, "optimizer": 4 * psi},
               "comm": {"bytes_per_step": {"reduce_scatter": 4 * psi, "all_gather": 4 * psi + 128 + 40,
                                           "all_reduce": 4},
                        "bytes_by_tag": {"doctor check": 128, "doctor checksum": 40}}}
    row = compare(pred, summary)
    assert row["time_err"] == pytest.approx(0.05 / 1.05)
    assert row["mem_err"] == 0 and row["comm_exact"]
    row.update(config="small-zero2-mb8-w2", load_avg_1m=1.0, held_out=["strategy"], signed_err=0.05)
    figs = {"planner_time_err_mean": 0.05, "planner_time_err_max": 0.05, "planner_time_bias": 0.05,
            "planner_heldout_configs": 1, "planner_insitu_err_mean": None, "planner_insitu_err_max": None,
            "planner_insitu_configs": 0}
    text = _report({"figures": figs, "rows": [row], "published": []}, load_cluster("H100-SXM"))
    assert "small-zero2-mb8-w2 | strategy |" in text and "| exact |" in text and "mean error **5.0%**" in text


def test_calibration_set_and_held_out_set_do_not_meet():
    """Every held-out configuration differs from the calibration set on at least one axis (model
    shape, micro batch, world size, strategy); every in-sample one on none; and the held-out set
    covers each axis, in --quick too."""
    from shardlab.plan.validate import HELD_OUT, HELD_OUT_QUICK, IN_SAMPLE, IN_SAMPLE_QUICK, held_out_axes
    assert set(IN_SAMPLE_QUICK) <= set(IN_SAMPLE) and set(HELD_OUT_QUICK) <= set(HELD_OUT)
    assert all(held_out_axes(*c) == [] for c in IN_SAMPLE)
    assert all(held_out_axes(*c) for c in HELD_OUT)
    for group in (HELD_OUT, HELD_OUT_QUICK):
        assert {a for c in group for a in held_out_axes(*c)} == {"model", "micro batch", "world", "strategy"}


def test_figure_of_record_is_the_held_out_error(tmp_path, monkeypatch):
    """`bench planner` calibrates once and splits its rows: planner_time_err_* over the held-out
    configurations only, planner_insitu_err_* over the in-sample ones (synthetic runs: the
    calibration and `shardlab train` are replaced, the bookkeeping is the bench's own)."""
    from shardlab.plan import validate
    from shardlab.plan.hardware import load_cluster, write_profile
    calls = []

    def fake_calibrate(models, micro_batches, out, quick, world):
        calls.append((tuple(m.name for m in models), tuple(micro_batches), world))
        write_profile(load_cluster("H100-SXM", 8), out)
        return out

    def fake_trial(out_dir, cluster, model, strategy, b, world, steps, rnd):
        err = 0.3 if validate.held_out_axes(model, strategy, b, world) else 0.01
        return {"pred_step_s": 1 + err, "meas_step_s": 1.0, "time_err": err, "signed_err": err,
                "pred_step_s_before": 1 + err, "time_err_before": err,
                "pred_times_ms": {}, "trainer_overhead_s": 0.0, "cpu_share": 1.0, "load_avg_1m": 0.0,
                "mem_err": 0.0, "comm_exact": True}
    monkeypatch.setattr(validate, "calibrate", fake_calibrate)
    monkeypatch.setattr(validate, "_trial", fake_trial)
    monkeypatch.setattr(validate, "_report", lambda result, cluster: "")
    f = validate.run(tmp_path, quick=True)["figures"]
    assert calls == [(validate.CALIBRATION["models"], validate.CALIBRATION["micro_batches"], 2)]  # once
    assert f["planner_heldout_configs"] == len(validate.HELD_OUT_QUICK)
    assert f["planner_insitu_configs"] == len(validate.IN_SAMPLE_QUICK)
    assert f["planner_time_err_mean"] == pytest.approx(0.3) and f["planner_time_err_max"] == pytest.approx(0.3)
    assert f["planner_insitu_err_mean"] == pytest.approx(0.01) and f["planner_insitu_err_max"] == pytest.approx(0.01)


def test_compute_at_shapes_never_calibrated_comes_from_the_calibrated_ones():
    """Another micro batch of a calibrated model: the in-situ passes interpolated (linear in b);
    another model: the per-op estimate times the calibrated models' measured / estimated ratio."""
    from shardlab.plan.compute import _exact, _roofline, in_situ_pass, keyed_time, rest_key
    from shardlab.plan.hardware import Cluster
    from shardlab.plan.model import ModelSpec
    small = PRESETS["small"]
    c = Cluster("t", 2, 2, 1e9, 1e9, 1e9, 1e9, 1e9, 1e-6, 1e9, 1e-6, gemm_fit=(2e9, 1e5), elementwise_bw=5e9)
    for b, (rf, rb) in ((2, (0.010, 0.020)), (8, (0.025, 0.050))):
        rk = rest_key(small, b, small.seq)
        c.gemm_table.update({"rest_fwd:" + rk: rf, "rest_bwd:" + rk: rb, "hooks:" + rk: 0.0})
    f2, f8 = _exact(small, 2, 128, c, False), _exact(small, 8, 128, c, False)
    (f4, b4), how = in_situ_pass(small, 4, 128, c, False)
    assert how == "interpolated"
    assert f4 == pytest.approx(f2[0] + (f8[0] - f2[0]) / 3) and b4 == pytest.approx(f2[1] + (f8[1] - f2[1]) / 3)
    mid = ModelSpec("mid", n_layer=3, d_model=192, n_head=6, vocab=256, seq=128)
    (fm, bm), how = in_situ_pass(mid, 4, 128, c, False)
    ratios = [(_exact(small, b, 128, c, False)[i] / _roofline(small, b, 128, c)[i]) for b in (2, 8) for i in (0,)]
    assert how == "scaled" and fm == pytest.approx(_roofline(mid, 4, 128, c)[0] * (ratios[0] * ratios[1]) ** 0.5)
    assert in_situ_pass(mid, 4, 128, Cluster("t", 2, 2, 1e9, 1e9, 1e9, 1e9, 1e9, 1e-6, 1e9, 1e-6), False) is None
