"""Sliding-window attention in the plan (ModelSpec.window, window_skip): a windowed block's fused attention does the
band's work, s w - w^2 / 2 query-key pairs a head against full causal attention's s^2 / 2."""
import pytest

from shardlab.plan.cli import main as plan_main
from shardlab.plan.model import ModelSpec
from shardlab.plan.ops import layer_ops

GPT_OSS_LIKE = dict(n_layer=36, d_model=2880, n_head=64, vocab=201088, seq=4096, arch="llama", n_kv_heads=8,
                    head_dim=64, ffn=2880)


def test_share_of_alternating_windowed_blocks():
    """Window 128 on every other block (Megatron-Core's window_attn_skip_freq 2): half the blocks full, half
    (4096 x 128 - 128^2 / 2) / (4096^2 / 2) of it."""
    m = ModelSpec("oss", **GPT_OSS_LIKE, window=128, window_skip=2)
    band = (4096 * 128 - 128 * 128 / 2) / (4096 * 4096 / 2)
    assert m.attention_share(4096) == pytest.approx((18 + 18 * band) / 36)
    assert ModelSpec("oss", **GPT_OSS_LIKE, window=128).attention_share(4096) == pytest.approx(band)
    assert m.attention_share(128) == 1.0  # a window as long as the sequence is no window
    full = ModelSpec("oss", **GPT_OSS_LIKE)
    att = lambda model: next(o for o in layer_ops(model, 1, 4096, 1, 2, True) if o.name == "attention")  # noqa: E731
    assert att(m).flops == pytest.approx(att(full).flops * m.attention_share(4096))
    # without a fused kernel the scores are computed whole and masked: no saving
    eager = lambda model: sum(o.flops for o in layer_ops(model, 1, 4096, 1, 2, False) if o.kind == "gemm")  # noqa: E731
    assert eager(m) == eager(full)


def test_bad_window_is_one_line_and_exit_2(capsys):
    assert plan_main(["model=llama-small", "window=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "window -1" in err and len(err.splitlines()) == 1
