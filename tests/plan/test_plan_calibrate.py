"""`shardlab plan calibrate`: fits, and a real 2-process gloo measurement (quick)."""
import math

import pytest

from shardlab.plan.calibrate import _fit_gemm, fit_alpha_beta


def test_alpha_beta_fit_recovers_synthetic_line():
    alpha, bw = 1e-3, 5e8
    pts = [(s, alpha + 2 * 0.5 * s / bw) for s in (4, 4096, 2**20, 2**24)]  # all_reduce at world 2
    a, b = fit_alpha_beta(pts, wire_factor=1.0)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(bw, rel=1e-6)


def test_alpha_beta_fit_weighs_small_calls_like_large_ones():
    """A 30% slow spell on the largest call must not swallow the latency: the fit is in relative
    error, so the 8-byte calls still pin alpha (a plain least squares gives a negative one here)."""
    alpha, bw = 3e-4, 1e9
    pts = [(s, alpha + s / bw) for s in (8, 1024, 4096, 2**16, 2**20, 2**22)] + [(2**24, 1.3 * (alpha + 2**24 / bw))]
    a, b = fit_alpha_beta(pts, wire_factor=1.0)
    assert a == pytest.approx(alpha, rel=0.1) and b == pytest.approx(bw, rel=0.3)


def test_miniature_keeps_the_tensors():
    """The trainer-overhead miniature has the model's parameter tensors (so its hooks, optimizer
    loop and ZeRO units), at almost no arithmetic."""
    from shardlab.plan.presets import PRESETS
    for m in PRESETS.values():
        mini = m.miniature()
        assert len(mini.param_shapes()) == len(m.param_shapes()) and mini.n_layer == m.n_layer
        assert mini.d_model == mini.n_head and mini.seq == 8


def test_gemm_saturation_fit():
    peak, half = 1e11, 1e6
    table = {f"mm:{n},{n},{n}": peak * (2 * n**3) / (2 * n**3 + half) for n in (8, 32, 128, 512)}
    p, h = _fit_gemm(table)
    assert p == pytest.approx(peak, rel=1e-6) and h == pytest.approx(half, rel=1e-6)


@pytest.mark.timeout(120)
def test_calibrate_writes_a_usable_profile(tmp_path):
    pytest.importorskip("torch")
    from shardlab.plan.calibrate import calibrate
    from shardlab.plan.cli import main
    from shardlab.plan.hardware import read_profile
    from shardlab.plan.presets import PRESETS
    path = calibrate([PRESETS["tiny"]], micro_batches=(1,), out=tmp_path / "this.toml", quick=True, trainer=False)
    c = read_profile(path)
    # Only what the arithmetic guarantees is asserted: every figure here is measured or fitted from
    # timings, which a loaded machine can push anywhere (a least-squares slope clamped at zero comes out
    # 0.0 under load). The fits themselves are checked on synthetic timings above; the figures' values
    # belong to `shardlab bench` and `shardlab plan calibrate`'s own report.
    def finite_nonneg(x):
        return math.isfinite(x) and x >= 0

    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        alpha, bw = c.collectives[op]
        assert finite_nonneg(alpha) and bw > 0  # a latency clamped at zero, a bandwidth (bytes / a duration)
    assert all(finite_nonneg(x) for x in (*c.gemm_fit, c.op_overhead_s, c.adam_s_per_param))
    # every GEMM of the model was timed in situ, under the key the compute model reads
    from shardlab.plan.ops import gemm_shapes
    for kind, m_, n_, k_ in gemm_shapes(PRESETS["tiny"], 1, PRESETS["tiny"].seq):
        assert c.gemm_table[f"{kind}:{m_},{n_},{k_}"] > 0
    assert main(["model=tiny", f"cluster={path}", "dp=2", "strategy=ddp", "precision=fp32"]) == 0


def test_in_situ_keys_are_the_ones_the_compute_model_looks_up():
    """Every GEMM, SDPA, LayerNorm and GELU timed inside the real model lands on the table key that
    compute.py reads for that op, and dX / dW GEMMs are told apart (same FLOPs, different layouts)."""
    pytest.importorskip("torch")
    from shardlab.plan.calibrate_insitu import measure_in_situ
    from shardlab.plan.ops import gemm_shapes
    from shardlab.plan.presets import PRESETS
    m, b = PRESETS["tiny"], 2
    table, (tensors, params, t_opt) = measure_in_situ(m, b, steps=1)
    want = {f"{kind}:{x},{y},{z}" for kind, x, y, z in gemm_shapes(m, b, m.seq)}
    got = {k for k in table if k.split(":")[0] in ("linear", "linear_nobias", "mm", "mm_ta")}
    assert got == want
    T, h = b * m.seq, m.d_model
    for key in (f"ewt:ln:{2 * T * h * 4}", f"ewt_bwd:ln:{2 * T * h * 4}", f"ewt:gelu:{8 * T * h * 4}",
                f"ewt_bwd:gelu:{8 * T * h * 4}", f"sdpa:{b * m.n_head}x{m.seq},{h // m.n_head}",
                f"sdpa_bwd:{b * m.n_head}x{m.seq},{h // m.n_head}"):
        assert table[key] > 0, key
    assert tensors == len(m.param_shapes()) and params == sum(n for _, n in m.param_shapes()) and t_opt > 0


def test_in_situ_remainder_makes_the_whole_pass():
    """At the calibrated model and micro batch the planner's forward is the keyed ops plus the
    measured remainder, the backward the same plus the doctor's gradient hooks when the layout has
    the health check, and no other framework estimate is added."""
    pytest.importorskip("torch")
    from shardlab.plan.calibrate_insitu import measure_in_situ
    from shardlab.plan.compute import keyed_time, micro_batch_time, rest_key
    from shardlab.plan.hardware import Cluster
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.presets import PRESETS
    m, b = PRESETS["tiny"], 2
    table, _ = measure_in_situ(m, b, steps=2, min_time=0.5)  # averaged: the remainder is a difference
    rk = rest_key(m, b, m.seq)
    rest_f, rest_b, hooks = table["rest_fwd:" + rk], table["rest_bwd:" + rk], table["hooks:" + rk]
    assert rest_f >= 0 and rest_b >= 0 and hooks >= 0  # differences of timings, clamped at zero
    kf, kb = keyed_time(m, b, table)
    c = Cluster("t", 2, 2, 1e9, 1e9, 1e9, 1e9, 1e9, 1e-6, 1e9, 1e-6, gemm_table=table,
                overhead={"layer_fwd": 1.0, "layer_bwd": 1.0, "fixed_fwd": 1.0, "fixed_bwd": 1.0})
    train = TrainSpec(global_batch=b, micro_batch=b, precision="fp32", flash_attention=True)
    plain = micro_batch_time(m, train, Layout(dp=1), c)
    checked = micro_batch_time(m, train, Layout(dp=1, health_check=True), c)
    assert plain.fwd == pytest.approx(kf + rest_f) and plain.bwd == pytest.approx(kb + rest_b)
    assert checked.bwd == pytest.approx(kb + rest_b + hooks)
    assert keyed_time(m, 4, table) is None  # another micro batch: not calibrated in situ
    unfused = TrainSpec(global_batch=b, micro_batch=b, precision="fp32", flash_attention=False)
    assert plain.in_situ and not micro_batch_time(m, unfused, Layout(dp=1), c).in_situ  # not what was measured
