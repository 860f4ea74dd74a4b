"""compile=true|false (train.compile): Inductor's fusion of a block's elementwise ops and float8 casts
(plan/fusion.py), counted by hand on a tiny block; off by default and on calibrated profiles."""
from dataclasses import replace

import pytest

from shardlab.fp8.cost import cast_bytes as eager_cast_bytes
from shardlab.plan import fusion
from shardlab.plan.cli import _parse_kv, build
from shardlab.plan.compute import block_kernels, micro_batch_time
from shardlab.plan.ops import Op, layer_ops
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.model import ModelSpec
from shardlab.plan.presets import PRESETS
from shardlab.plan.published_gpu import COMPILED, GIVEN, predict
from shardlab.plan.step import evaluate

# T = b*s = 4 tokens, h = 8, 2 heads of 4, one key/value head (g = 4), ffn 16, bf16 (e = 2)
TINY = ModelSpec("tiny-llama", 1, 8, 2, 16, 4, arch="llama", n_kv_heads=1, ffn=16)
H100 = load_cluster("H100-SXM", 8)


def _elem(ops, backward=False):
    return {o.name: (2 * o.bytes if o.bwd_bytes is None else o.bwd_bytes) if backward else o.bytes
            for o in ops if o.kind == "elem"}


def test_the_knob_parses_in_both_spellings():
    assert _parse_kv(["compile=true"]) == {"compile": True}
    assert _parse_kv(["train.compile=false"]) == {"compile": False}
    with pytest.raises(ValueError):
        _parse_kv(["compile=maybe"])
    _, train, _, _ = build(_parse_kv(["model=llama3-8b", "gpus=8", "compile=true"]))
    assert train.compile
    _, train, _, _ = build(_parse_kv(["model=llama3-8b", "gpus=8"]))
    assert not train.compile  # the default: eager, today's numbers


def test_default_is_eager_and_unchanged():
    train = TrainSpec(global_batch=16, micro_batch=2, seq=8192, flash_attention=True, eager_norm=True)
    lay = Layout(dp=8, strategy="zero3", recompute="selective-op")
    c = load_cluster("H100-SXM-500W", 8)
    assert evaluate(PRESETS["llama3-8b"], train, lay, c).step_time == \
        evaluate(PRESETS["llama3-8b"], replace(train, compile=False), lay, c).step_time
    on = evaluate(PRESETS["llama3-8b"], replace(train, compile=True), lay, c)
    assert on.step_time < evaluate(PRESETS["llama3-8b"], train, lay, c).step_time
    assert "torch.compile per block" in on.explain["forward"]


def test_fusion_bytes_hand_counted():
    """Forward, per element pass of T*h*e = 64 B: eager (Meta's fp32 RMSNorm, 36 B per element = 1152 B each),
    rope 6 x (q 64 + k 32), merge copy 128, residual 192, swiglu 5 x T*ffn*e = 640; compiled: each norm 128,
    rope 2 x 96 = 192, residual + ln_2 = 192 + 128 - 64 (the norm no longer reads x' back), swiglu 3 x 128."""
    eager = layer_ops(TINY, 1, 4, 1, 2, True, eager_norm=True)
    comp = fusion.compiled_block(eager, TINY, 1, 4, 1, 2)
    assert _elem(eager) == {"ln_1": 1152, "rope": 576, "merge_heads": 128, "residual": 192, "ln_2": 1152,
                            "swiglu": 640}
    assert _elem(comp) == {"ln_1": 128, "rope": 192, "merge_heads": 128, "residual": 192,
                           "residual+ln_2": 256, "swiglu": 384}
    assert sum(o.bytes for o in eager if o.kind == "elem") == 4032
    assert sum(o.bytes for o in comp if o.kind == "elem") == 1280
    # backward: eager norms 76 B per element (2432), rope and swiglu 2x; compiled: norm 2x (256), rope 192
    # (a rotation back), residual + ln_2 = 192 + 256 - 2 x 64, swiglu: gate, up, dy read, two gradients = 640
    assert _elem(comp, True) == {"ln_1": 256, "rope": 192, "merge_heads": 256, "residual": 192,
                                 "residual+ln_2": 320, "swiglu": 640}
    def total(ops):
        return sum(2 * o.bytes if o.bwd_bytes is None else o.bwd_bytes for o in ops if o.kind == "elem")
    assert total(eager) == 2432 + 1152 + 256 + 192 + 2432 + 1280 + 192 == 7936
    assert total(comp) == 256 + 192 + 256 + 320 + 640 + 192 == 1856
    # the GEMMs and the attention are untouched, and one kernel fewer each way (residual + ln_2)
    assert [o for o in eager if o.kind == "gemm"] == [o for o in comp if o.kind == "gemm"]
    assert block_kernels(comp) == (block_kernels(eager)[0] - 1, block_kernels(eager)[1] - 1)
    # a fused norm already counts one kernel's bytes: compile leaves it, fuses only the residual into ln_2
    fused = layer_ops(TINY, 1, 4, 1, 2, True, eager_norm=False)
    assert _elem(fusion.compiled_block(fused, TINY, 1, 4, 1, 2)) == _elem(comp)


def test_fp8_cast_bytes_under_compile():
    """torchao's float8 roofline, tensorwise: x's amax fused into its producer, one cast read (2 B) writing both
    layouts (1 + 1); W (bf16: w = 2) amax 2 + a cast per pass (3 each); g like x, in the backward. proj's input
    is SDPA's output: its amax is a pass of its own (+2 B)."""
    m, n, k = 16, 8, 4
    q = Op("q", "gemm", 2 * m * n * k, shape=(m, n, k))
    fwd = fusion.cast_bytes(q, "tensorwise", True, a=2, w=2, gathered=False, backward=False)
    bwd = fusion.cast_bytes(q, "tensorwise", True, a=2, w=2, gathered=False, backward=True)
    assert fwd == m * k * 4 + n * k * 5 and bwd == n * k * 3 + m * n * 4
    proj = replace(q, name="proj")
    assert fusion.cast_bytes(proj, "tensorwise", True, 2, 2, False, False) == m * k * 6 + n * k * 5
    down = replace(q, name="down")  # its output gradient comes from the next block's graph
    assert fusion.cast_bytes(down, "tensorwise", True, 2, 2, False, True) == n * k * 3 + m * n * 6
    # weights gathered in float8: no weight casts
    assert fusion.cast_bytes(q, "tensorwise", True, 2, 2, True, False) == m * k * 4
    # fewer bytes than eager's cast per GEMM operand (x 3 + 3, g 3 + 3) at activation-heavy shapes
    eager = eager_cast_bytes(4096, 1024, 1024, "both")
    big = Op("q", "gemm", shape=(4096, 1024, 1024))
    assert sum(fusion.cast_bytes(big, "tensorwise", True, 2, 4, False, bw) for bw in (False, True)) < eager


def test_fp8_casts_cheaper_compiled():
    train = TrainSpec(global_batch=64, micro_batch=4, seq=2048, precision="bf16-mixed", flash_attention=True,
                      fp8="tensorwise")
    lay = Layout(dp=8, strategy="ddp")
    eager, comp = (micro_batch_time(PRESETS["llama3-8b"], replace(train, compile=x), lay, H100) for x in (0, 1))
    assert comp.fwd < eager.fwd and comp.bwd < eager.bwd


def test_calibrated_profiles_do_not_move():
    """A profile that measured its ops (cluster=this): compile changes nothing there."""
    cpu = replace(H100, gemm_table={"ew:ln": 1e10}, kernel_gap_s=0.0)
    train = TrainSpec(global_batch=8, micro_batch=1, seq=256, precision="fp32", flash_attention=True)
    lay = Layout(dp=2, strategy="zero3")
    model = PRESETS["gpt2"] if "gpt2" in PRESETS else TINY
    assert not fusion.applies(replace(train, compile=True), cpu)
    assert micro_batch_time(model, train, lay, cpu) == micro_batch_time(model, replace(train, compile=True), lay, cpu)


def test_compiled_rows_are_torchtitans_compiled_runs():
    """Tables 1 and 3 of torchtitan's end-2024 page: the eager 8B rows of GIVEN, compiled."""
    assert [r["tokens_per_gpu"] for r in COMPILED] == [6667, 6514]
    assert all(r["compile"] for r in COMPILED) and not any(r.get("compile") for r in GIVEN)
    eager, comp = predict(GIVEN[2]), predict(COMPILED[0])
    assert comp["tokens_per_gpu"] > eager["tokens_per_gpu"]
    assert comp["mem_gib"] == eager["mem_gib"]  # memory: not modelled under compile


def test_a_run_config_plans_with_its_compile():
    """`explain RUN` and every plan of a run read train.compile through from_config."""
    from shardlab import config
    from shardlab.plan.from_config import from_config
    for flag in ("true", "false"):
        cfg = config.validate(config.load(None, ["model.preset=llama-tiny", "train.seq_len=32",
                                                 f"train.compile={flag}"]), 1)
        assert from_config(cfg, 1)[1].compile == (flag == "true")
