"""The planner knows FP8 (train.fp8): the converted linears' GEMMs at the cluster's FP8 dense peak plus their
casts, the zero3 float8 all-gather's bytes (fp8/cost.py's formula), the scales' memory."""
from dataclasses import replace

import pytest

from shardlab.fp8.cost import all_gather_bytes, scale_bytes
from shardlab.plan.compute import micro_batch_time
from shardlab.plan.fp8 import converted_shapes
from shardlab.plan.hardware import PRESETS, load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS as MODELS, model_from_args
from shardlab.plan.step import evaluate

GPT2 = model_from_args("gpt2")
BIG = MODELS["gpt3-6.7b"]
H100 = load_cluster("H100-SXM", 8)


def train(fp8="none"):
    return TrainSpec(global_batch=64, micro_batch=4, seq=1024, precision="bf16-autocast", flash_attention=True,
                     fp8=fp8)


def test_fp8_peaks_of_the_profiles():
    """NVIDIA's datasheets: H100 SXM and H200 SXM, FP8 tensor core 3,958 TFLOP/s with sparsity = 1,979 dense,
    twice bf16's 1,979 sparse (the 989 preset: 989.5 rounded); the A100 has no FP8."""
    for name in ("H100-SXM", "H200"):
        assert PRESETS[name].peak_flops_fp8 == 1979e12
        assert PRESETS[name].peak_flops_fp8 / PRESETS[name].peak_flops == pytest.approx(2, rel=1e-3)
    assert PRESETS["A100-80G"].peak_flops_fp8 == 0


def test_converted_gemms_at_the_fp8_peak():
    """At 6.7B (width 4096) the FP8 GEMMs save more than the casts cost; at gpt2's width 768 they do not (the
    casts, memory-bound, cost about what the faster GEMMs save: torchao reports the same for small shapes)."""
    lay = Layout(dp=8, strategy="ddp")
    bf16, f8 = micro_batch_time(BIG, train(), lay, H100), micro_batch_time(BIG, train("tensorwise"), lay, H100)
    assert f8.fwd < bf16.fwd and f8.bwd < bf16.bwd
    no_fp8 = replace(H100, peak_flops_fp8=0.0)  # no FP8 peak: the casts only cost
    slow = micro_batch_time(BIG, train("tensorwise"), lay, no_fp8)
    assert slow.fwd > bf16.fwd and slow.bwd > bf16.bwd
    # attention, the head and the elementwise ops stay: the micro batch gains less than 2x
    ratio = (f8.fwd + f8.bwd) / (bf16.fwd + bf16.bwd)
    assert 0.5 < ratio < 0.9, ratio
    print(f"6.7B micro batch fp8/bf16 = {ratio:.3f}")
    assert f8.gemm_flops == bf16.gemm_flops  # the same work, faster


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_zero3_all_gather_bytes(recipe):
    lay = Layout(dp=8, strategy="zero3")
    base, f8 = evaluate(GPT2, train(), lay, H100), evaluate(GPT2, train(recipe), lay, H100)
    ag = lambda p: p.bytes_per_step()["all_gather"]  # noqa: E731
    if recipe != "tensorwise":  # rowwise gathers the weights as they are
        assert ag(f8) == ag(base)
        return
    shapes = converted_shapes(GPT2)
    fp8_bytes, _ = all_gather_bytes(shapes, "tensorwise", 4)
    saved_once = 4 * sum(r * c for r, c in shapes) - fp8_bytes  # fp32 master gathered under autocast
    assert ag(base) - ag(f8) == pytest.approx(2 * base.m * saved_once)  # before forward and backward


def test_scale_memory_line():
    lay = Layout(dp=1)
    lines = {ln.name: ln.bytes for ln in evaluate(GPT2, train("rowwise"), lay, H100).memory}
    assert lines["fp8 scales"] == scale_bytes(converted_shapes(GPT2), 4 * 1024, "rowwise")
    assert "fp8 scales" not in {ln.name for ln in evaluate(GPT2, train(), lay, H100).memory}


def test_summary_fp8_peak():
    """summary.json's mfu divides by the bf16 dense peak; with train.fp8 `mfu_fp8_peak` divides by the FP8 one
    (null on a CPU: its float8 GEMMs are emulated)."""
    from shardlab.plan.peak import fp8_peak

    assert fp8_peak("NVIDIA H100 80GB HBM3") == (1979e12, "spec H100-SXM (fp8 dense)")
    assert fp8_peak(None)[0] is None and fp8_peak("NVIDIA A100-SXM4-80GB")[0] is None


def test_fp8_gemms_at_their_sustained_rate():
    """Hopper presets run FP8 GEMMs at the FP8 MSMF's fraction of the FP8 peak (1,288.7 of 1,979 TFLOP/s on an
    H200, 0.651; ml-engineering's MAMF & MSMF table), not at the BF16 one's (0.706): 1.84x the BF16 rate, not 2x.
    Without the field (profile files, the A100) the FP8 GEMMs keep the 16-bit fraction."""
    from shardlab.plan.fp8 import sustained_fp8_peak

    for name in ("H100-SXM", "H100-SXM-500W", "H200"):
        c = PRESETS[name]
        assert c.gemm_efficiency_fp8 == pytest.approx(1288.7 / 1979, abs=5e-4)
        assert sustained_fp8_peak(c) * c.gemm_efficiency / (c.peak_flops * c.gemm_efficiency) \
            == pytest.approx(1288.7 / 1979 * 1979 / (0.706 * 989), rel=1e-3)
    assert PRESETS["A100-80G"].gemm_efficiency_fp8 == 0.0
    assert sustained_fp8_peak(replace(H100, gemm_efficiency_fp8=0.0)) == H100.peak_flops_fp8
    lay = Layout(dp=8, strategy="ddp")
    at_2x = micro_batch_time(BIG, train("tensorwise"), lay, replace(H100, gemm_efficiency_fp8=0.0))
    sustained = micro_batch_time(BIG, train("tensorwise"), lay, H100)
    bf16 = micro_batch_time(BIG, train(), lay, H100)
    assert at_2x.fwd < sustained.fwd < bf16.fwd and at_2x.bwd < sustained.bwd < bf16.bwd


def test_explain_names_the_fp8_rate():
    lay = Layout(dp=8, strategy="ddp")
    fwd = evaluate(BIG, train("tensorwise"), lay, H100).explain["forward"]
    assert "FP8 GEMMs (tensorwise) at 0.651 of the 1,979 TF FP8 peak (sustained, FP8 MSMF)" in fwd
    assert "FP8 GEMMs" not in evaluate(BIG, train(), lay, H100).explain["forward"]


def test_fp8_is_a_plan_key():
    """`fp8` (training's train.fp8) plans the block linears' GEMMs at the FP8 rate; an unknown recipe is one line."""
    from shardlab.plan.cli import _parse_kv, build
    kv = _parse_kv(["model=llama3-8b", "cluster=B200", "gpus=16", "strategy=zero1", "precision=bf16-mixed",
                    "global_batch=64", "train.seq_len=8192"])
    plain = evaluate(*build(kv))
    fp8 = evaluate(*build({**kv, **_parse_kv(["train.fp8=tensorwise"])}))
    assert fp8.train.fp8 == "tensorwise" and fp8.step_time < 0.9 * plain.step_time  # attention and the head stay 16-bit
    with pytest.raises(ValueError, match="fp8 must be one of none, tensorwise, rowwise, mxfp8"):
        evaluate(*build({**kv, **_parse_kv(["fp8=fp4"])}))


def test_mxfp8_gemms_at_the_block_scaled_kernels_rate():
    """MXFP8's GEMMs at 0.951 of tensorwise FP8's on Blackwell (Transformer Engine's GEMM profile on a B300, operands
    quantized beforehand: 6.812 against 7.161 ms a layer); only the converted linears' GEMMs slow down; --explain says
    so. On Hopper MXFP8 is emulated, slower than bf16."""
    from shardlab.plan.fp8 import MXFP8_KERNEL
    assert MXFP8_KERNEL == round(6.812 / 7.161, 3) == 0.951
    lay, b200 = Layout(dp=8, strategy="zero1"), load_cluster("B200", 8)
    train = lambda r: TrainSpec(64, 1, 8192, precision="bf16-mixed", flash_attention=True, fp8=r)  # noqa: E731
    tw, mx = (evaluate(MODELS["llama3-8b"], train(r), lay, b200) for r in ("tensorwise", "mxfp8"))
    assert 1.0 < mx.times["forward"] / tw.times["forward"] < 1 / MXFP8_KERNEL
    assert "x 0.951 (MXFP8's block-scaled kernels" in mx.explain["forward"]
    assert "MXFP8" not in tw.explain["forward"]
    # before Blackwell there are no block-scaled tensor cores: emulated, 16-bit GEMMs plus the casts
    h100 = load_cluster("H100-SXM", 8)
    bf16, tw, mx = (evaluate(MODELS["llama3-8b"], train(r), lay, h100) for r in ("none", "tensorwise", "mxfp8"))
    assert tw.times["forward"] < bf16.times["forward"] < mx.times["forward"]
    assert "MXFP8 emulated (quantize-dequantize, 16-bit GEMMs)" in mx.explain["forward"]


def test_transformer_engine_casts_weights_once_a_step():
    """Under Transformer Engine's layers (llama_impl=te) a micro batch casts its activations and gradients, not its
    weights: Megatron-Core marks each step's first micro batch and TE caches the weights' FP8 copies until the next
    step. So the forward is the float8 layer's less exactly its weight casts, and more micro batches do not add weight
    casts; MXFP8's casts run at TE's measured 0.781 of current scaling's. --explain says which."""
    from shardlab.plan.fp8 import TE_MXFP8_CAST, converted_shapes

    assert TE_MXFP8_CAST == round(1.823 / 2.335, 3) == 0.781
    # launch gaps off: TE's layer launches its own count of kernels (plan/host.py), not the op list's
    lay, b200 = Layout(dp=8, strategy="zero1"), replace(load_cluster("B200", 8), kernel_gap_s=0.0)
    model = MODELS["llama3-8b"]

    def train(impl, recipe="tensorwise"):
        return TrainSpec(64, 1, 8192, precision="bf16-mixed", flash_attention=True, fp8=recipe, llama_impl=impl)
    own, te = (evaluate(model, train(i), lay, b200) for i in ("own", "te"))
    assert te.times["forward"] < own.times["forward"] and te.times["backward"] < own.times["backward"]
    # the forward's gap is a micro batch's weight casts (fp32 read, float8 written: 5 B an element) at the HBM rate
    # the planner gives kernels that size (30-100% of the datasheet's), once per micro batch
    w_bytes = 5 * sum(r * c for r, c in converted_shapes(model))
    gap = (own.times["forward"] - te.times["forward"]) / own.m
    assert w_bytes / b200.hbm_bw * (1 - 1e-9) < gap < w_bytes / (0.3 * b200.hbm_bw)  # at most the full HBM rate
    assert "weights once a step (Transformer Engine's FP8 weight cache" in te.explain["forward"]
    assert "weights once a step" not in own.explain["forward"]
    mx_own, mx_te = (evaluate(model, train(i, "mxfp8"), lay, b200) for i in ("own", "te"))
    assert mx_te.times["forward"] < mx_own.times["forward"]
    assert "MXFP8's at 0.781 of current scaling's" in mx_te.explain["forward"]
