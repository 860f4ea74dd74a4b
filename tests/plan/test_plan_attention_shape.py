"""The fused attention's shape terms (plan/attention.py): a sliding window's band and FP8 attention at the rates
cuDNN's own training benchmark measured for those shapes, on the parts it measured (and their dies' siblings)."""
from dataclasses import replace

import pytest

from shardlab.plan import attention
from shardlab.plan.hardware import PRESETS
from shardlab.plan.published_gpu_fifteenth import FIFTEENTH
from shardlab.plan.published_gpu_fifteenth_rows import ROWS
from shardlab.plan.published_gpu_heldout import plan_row
from shardlab.plan.train_spec import TrainSpec


def _cudnn(part):
    """The preset with cuDNN's fused attention (Transformer Engine's, as the published rows run it)."""
    return replace(PRESETS[part], attention="cudnn")


def _band_flops(b=2, heads=128, d=64, s=4096, w=128):
    """The benchmark's forward FLOPs of a w-key band (its count: w(w + 1)/2 + (s - w) w pairs a head)."""
    return 2 * b * heads * (w * (w + 1) // 2 + (s - w) * w) * 2 * d


@pytest.mark.parametrize("part,fwd_ms,bwd_ms", [("GB200", 0.210, 0.465), ("GB300", 0.202, 0.442)])
def test_a_windowed_block_takes_the_benchmarks_measured_time(part, fwd_ms, bwd_ms):
    """GPT-OSS's band as the benchmark ran it (batch 2 x 128 heads of 64, 4k, a 128-key window; its times in ms
    rounded to 3 places, so within 1%), planned at the burst clock the benchmark ran at: the measured times."""
    c = _cudnn(part)
    burst = c.clock_factor * c.attention_sustained  # the planner's sustained clock against the benchmark's burst
    for backward, ms in ((False, fwd_ms), (True, bwd_ms)):
        t = attention.kernel_time(2 * _band_flops(), c, backward, seq=4096, window=(128, 64, 1.0))
        assert t * burst == pytest.approx(ms * 1e-3, rel=0.01)


def test_the_band_term_is_the_measured_shape_on_blackwell_only():
    """A 129-key band (Megatron-Core's (128, 0) window) spans the same key tiles; a 256-key band, another head dim,
    or Hopper (no band measured) keep the full kernel's rate; the B200 takes its die's (the GB200's) ratio."""
    gb200, h100, b200 = _cudnn("GB200"), _cudnn("H100-SXM"), _cudnn("B200")
    full = attention.kernel_time(1e12, gb200, False, seq=4096)
    assert attention.kernel_time(1e12, gb200, False, seq=4096, window=(129, 64, 1.0)) == pytest.approx(
        attention.kernel_time(1e12, gb200, False, seq=4096, window=(128, 64, 1.0)))
    for w in ((256, 64, 1.0), (128, 128, 1.0)):
        assert attention.kernel_time(1e12, gb200, False, seq=4096, window=w) == full
    assert attention.kernel_time(1e12, h100, True, seq=4096, window=(128, 64, 1.0)) == \
        attention.kernel_time(1e12, h100, True, seq=4096)
    slow = attention.window_slowdown("cudnn", "GB200", 4096)
    assert slow[0] == pytest.approx(1408 / 161) and slow[1] == pytest.approx(1148 / 182)
    assert attention.kernel_time(1e12, b200, True, seq=4096, window=(128, 64, 0.5)) == pytest.approx(
        attention.kernel_time(1e12, b200, True, seq=4096) * (0.5 + 0.5 * slow[1]))


def test_fp8_attention_runs_at_the_measured_format_and_shape():
    """MXFP8 against BF16 on a GB300 at 4k: Llama's head dim 128 (forward 2,272 against 1,703 TFLOP/s), DeepSeek-V3's
    192; the 128-key band's FP8 backward (1.87 against 0.44 ms: it runs the whole triangle); unmeasured shapes
    (head dim 64 full causal) and parts (the H100) at the BF16 rate."""
    gb300, h100 = _cudnn("GB300"), _cudnn("H100-SXM")
    bf16 = attention.kernel_time(1e12, gb300, False, seq=4096)
    assert attention.kernel_time(1e12, gb300, False, seq=4096, fp8="mxfp8", head_dim=128) == pytest.approx(
        bf16 * 1703 / 2272)
    assert attention.kernel_time(1e12, gb300, False, seq=4096, fp8="tensorwise", head_dim=192) == pytest.approx(
        bf16 * 1590 / 2788)
    band = attention.kernel_time(1e12, gb300, True, seq=4096, window=(128, 64, 1.0))
    assert attention.kernel_time(1e12, gb300, True, seq=4096, window=(128, 64, 1.0), fp8="mxfp8",
                                 head_dim=64) == pytest.approx(band * 191 / 45)
    assert attention.kernel_time(1e12, gb300, False, seq=4096, fp8="mxfp8", head_dim=64) == bf16
    assert attention.kernel_time(1e12, h100, False, seq=4096, fp8="mxfp8", head_dim=128) == \
        attention.kernel_time(1e12, h100, False, seq=4096)
    with pytest.raises(ValueError, match="fp8_attention"):
        TrainSpec(global_batch=8, fp8_attention=True).check()


def test_the_gpt_oss_rows_carry_both_terms():
    """The rows whose recipe sets fp8_dot_product_attention plan FP8 attention; a windowed Blackwell row says its
    band's rate in --explain, an H100 row says it has none."""
    for r, src in zip(FIFTEENTH, ROWS):
        assert r.get("fp8_attention", False) is (src["recipe"].get("fp8_dot_product_attention") is True)
    gb300 = next(r for r in FIFTEENTH if r.get("fp8_attention") and "GB300" in r["case"])
    words = plan_row(gb300).explain["forward"]
    assert "128-key sliding window's attention" in words and "FP8 attention (mxfp8)" in words
    h100 = next(r for r in FIFTEENTH if "H100" in r["case"])
    assert "no cuDNN attention rate is published" in plan_row(h100).explain["forward"]
