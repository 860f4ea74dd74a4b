"""`shardlab plan calibrate`: fits, and a real 2-process gloo measurement (quick)."""
import pytest

from shardlab.plan.calibrate import _fit_gemm, fit_alpha_beta


def test_alpha_beta_fit_recovers_synthetic_line():
    alpha, bw = 1e-3, 5e8
    pts = [(s, alpha + 2 * 0.5 * s / bw) for s in (4, 4096, 2**20, 2**24)]  # all_reduce at world 2
    a, b = fit_alpha_beta(pts, wire_factor=1.0)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(bw, rel=1e-6)


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
    from shardlab.plan.model import PRESETS
    path = calibrate([PRESETS["tiny"]], micro_batches=(1,), out=tmp_path / "this.toml", quick=True, trainer=False)
    c = read_profile(path)
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        alpha, bw = c.collectives[op]
        assert 0 < alpha < 0.1 and bw > 1e6  # loopback gloo: sub-100 ms latency, > 1 MB/s
    assert c.gemm_fit[0] > 1e8 and c.op_overhead_s > 0 and c.adam_s_per_param > 0
    assert main(["model=tiny", f"cluster={path}", "dp=2", "strategy=ddp", "precision=fp32"]) == 0


def test_in_situ_keys_are_the_ones_the_compute_model_looks_up():
    """Every GEMM, SDPA, LayerNorm and GELU timed inside the real model lands on the table key that
    compute.py reads for that op, and dX / dW GEMMs are told apart (same FLOPs, different layouts)."""
    pytest.importorskip("torch")
    from shardlab.plan.calibrate_insitu import measure_in_situ
    from shardlab.plan.compute import gemm_shapes
    from shardlab.plan.model import PRESETS
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
