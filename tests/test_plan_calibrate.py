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
