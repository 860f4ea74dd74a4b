"""The host's side of an eager step (plan/host.py): the kernels a block issues times the host's seconds per kernel,
against the device's time for them; the waits it costs; CUDA graphs; bad input."""
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from shardlab.plan import explain, host
from shardlab.plan.cli import main as plan_main
from shardlab.plan.hardware import GRACE_HOST, HOST_KERNEL_S, PRESETS, Cluster, load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.model import ModelSpec
from shardlab.plan.step import evaluate
from shardlab.plan.train_spec import TrainSpec

# Qwen3-30B-A3B's block (the twelfth set's): 128 experts of 768, top-8, q/k norms
QWEN = ModelSpec("qwen3-30b-a3b", n_layer=48, d_model=2048, n_head=32, vocab=151936, seq=4096, arch="llama",
                 n_kv_heads=4, head_dim=128, ffn=6144, tied=False, moe_experts=128, moe_top_k=8, moe_ffn=768,
                 qk_norm=True)
ROOT = Path(__file__).resolve().parents[2]


def te(fp8="tensorwise", graphs="none", **kw):
    return TrainSpec(global_batch=256, micro_batch=1, seq=4096, fp8=fp8, llama_impl="te", flash_attention=True,
                     cuda_graphs=graphs, **kw)


def test_te_layer_count_matches_the_code_reading():
    """Megatron-Core's TE layer, FP8 current scaling, 16 local experts, the all-to-all dispatcher: 217 forward and
    246 backward kernels (the count read in its code: ~52 + 10n and ~55-62 + 12n); MXFP8 quantizes in one kernel
    (115, 144); HybridEP's fused dispatch issues fewer than the all-to-all's counts, permutations and padding."""
    lay = Layout(dp=8, ep=8)
    m = QWEN.expert_view(8)
    assert host.te_kernels(m, te(), lay) == (217, 246)
    assert host.te_kernels(m, te("mxfp8"), lay) == (115, 144)
    assert host.te_kernels(m, te(), replace(lay, ep_dispatcher="flex")) == (201, 240)
    # per local expert: fc1 and fc2, each a quantization and a GEMM forward, a quantization and two GEMMs backward
    f16, b16 = host.te_kernels(m, te(), lay)
    f8, b8 = host.te_kernels(QWEN.expert_view(16), te(), replace(lay, dp=16, ep=16))
    assert (f16 - f8, b16 - b8) == (8 * 10, 8 * 12)


def test_graph_scopes_replace_their_kernels_by_one_launch():
    lay = Layout(dp=8, ep=8)
    m = QWEN.expert_view(8)
    eager = host.te_kernels(m, te(), lay)
    router = host.te_kernels(m, te(graphs="moe_router"), lay)
    pre = host.te_kernels(m, te(graphs="moe_router,moe_preprocess"), lay)
    attn = host.te_kernels(m, te(graphs="attn,moe_router,moe_preprocess"), lay)
    assert eager[0] - router[0] == 12 - 1 and eager[1] - router[1] == 14 - 1  # pre-MLP norm + router
    assert router[0] - pre[0] == 11 and router[1] - pre[1] == 1  # counts + permutation join the router's graph
    assert pre[0] - attn[0] == (9 + 2 * 4 + 3) - 1  # the attention part, q/k norms included
    assert host.block_seconds(te(graphs="full"), lay, HOST_KERNEL_S, eager) == (0.0, 0.0)


def test_host_seconds_per_kernel_is_the_published_step_over_its_counted_kernels():
    """48.8 ms (ml-engineering's eager Llama 3.2 1B step on a B200) over the 2,378 kernel-launching ops that step
    issues, counted again here by the script the constant cites (transformers' LlamaForCausalLM, dispatch counter)."""
    spec = importlib.util.spec_from_file_location("count_host_ops", ROOT / "scripts" / "count_host_ops.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    got = mod.count()
    assert got["forward+backward"][1] == 2378 and got["forward"][1] == 662
    assert HOST_KERNEL_S == pytest.approx(20.5e-6, rel=0.01)
    # every GPU preset; Grace hosts (the NVL72 parts) 2.75x slower: TE's Grace report's torch Linear, GB200 vs DGX H100
    assert GRACE_HOST == pytest.approx(37.08 / 13.48)
    for name, c in PRESETS.items():
        assert c.host_kernel_s == pytest.approx(HOST_KERNEL_S * (GRACE_HOST if name in ("GB200", "GB300") else 1))
    assert Cluster.__dataclass_fields__["host_kernel_s"].default == 0.0  # CPU profiles time the framework in situ


def test_waits_sync_per_moe_block_and_pool_otherwise():
    """A dropless MoE block's forward waits for the device (its token counts on the host): the forward's and the
    backward's shortfalls count apart; a dense block's host runs ahead over the whole pass; the EP overlap issues
    one micro batch's forward with another's backward."""
    lay, dense = Layout(dp=8, ep=8), replace(QWEN, moe_experts=0)
    h, d = (4e-3, 1e-3), (1e-3, 6e-3)  # the host slower forward, the device slower backward
    moe_wait, _ = host.waits(QWEN, te(), lay, h, d, 10, 0.0, HOST_KERNEL_S)
    assert moe_wait == pytest.approx((10 * 3e-3, 0.0))  # the forward's wait, told to the forward
    dense_wait, _ = host.waits(dense, te(), Layout(dp=8), h, d, 10, 0.0, HOST_KERNEL_S)
    assert dense_wait == (0.0, 0.0)  # 5 ms of host against 7 ms of device
    overlap, words = host.waits(QWEN, te(), replace(lay, ep_overlap=True), h, d, 10, 0.0, HOST_KERNEL_S)
    assert overlap == (0.0, 0.0) and "EP overlap" in words
    comm, _ = host.waits(QWEN, te(), lay, h, d, 10, 2e-3, HOST_KERNEL_S)  # the block's all-to-alls keep it busy
    assert comm == pytest.approx((10 * 2e-3, 0.0))
    # pooled, both passes host-bound: the wait told to each by its own shortfall (2 ms and 1 ms a block)
    both, _ = host.waits(dense, te(), Layout(dp=8), (4e-3, 3e-3), (2e-3, 2e-3), 10, 0.0, HOST_KERNEL_S)
    assert both == pytest.approx((10 * 2e-3, 10 * 1e-3))


def test_launch_bound_plan_waits_on_the_host_and_graphs_remove_it():
    """Qwen3-30B-A3B at micro batch 1 on 16 H100s (the twelfth set's layout, PP 2): the host's ~9 ms of kernels
    a block outlast the device's; the step holds the wait and says so; whole-iteration graphs take it away."""
    c = replace(load_cluster("H100-SXM", 16), kernel_gap_s=0.0)  # graphs also close the launch gaps: none here
    lay = Layout(dp=8, pp=2, ep=8, strategy="zero1")
    eager = evaluate(QWEN, te(), lay, c)
    graphed = evaluate(QWEN, te(graphs="full"), lay, c)
    assert eager.times["host_wait"] > 0.2 * eager.step_time
    assert graphed.times["host_wait"] == 0.0
    # the wait is part of t_mb: the pipeline's bubble (units x t_mb) grows with it
    assert eager.step_time - graphed.step_time == pytest.approx(
        eager.times["host_wait"] + eager.times["bubble"] - graphed.times["bubble"], rel=1e-3)
    assert "kernels a block" in eager.explain["host_wait"] and "CUDA graphs" in graphed.explain["host_wait"]
    assert eager.bound().startswith(("compute", "the host"))
    # explain holds a run's spans against the passes with their waits: the device idles inside them
    assert sum(eager.host_waits) == pytest.approx(eager.times["host_wait"], rel=1e-12)
    pred = explain.predicted(eager)
    assert pred["forward"] + pred["backward"] == pytest.approx(
        eager.times["forward"] + eager.times["backward"] + eager.times["host_wait"], rel=1e-12)


@pytest.mark.parametrize("args, words", [
    (["cuda_graphs=bogus"], "cuda_graphs must be one of"),
    (["cuda_graphs=attn", "llama_impl=own"], "llama_impl=te"),
    (["cuda_graphs=moe_preprocess"], "needs moe_router"),
    (["ep_dispatcher=deepep"], "ep_dispatcher must be one of"),
])
def test_bad_graphs_or_dispatcher_is_one_line_and_exit_2(capsys, args, words):
    assert plan_main(["model=llama-small", "llama_impl=te", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_own_moe_runs_its_experts_one_after_another():
    """shardlab's MoE (model/moe.py run_experts) launches each held expert's MLP in turn: 5 kernels forward and 10
    backward an expert (llama) where the op list counts the batched linears once; the host and the launch gaps
    count them all."""
    from shardlab.plan.compute import block_kernels, micro_batch_time
    from shardlab.plan.ops import layer_ops
    m = ModelSpec("moe", n_layer=4, d_model=512, n_head=8, vocab=1024, seq=512, arch="llama", n_kv_heads=4, ffn=1024,
                  moe_experts=16, moe_top_k=2).expert_view(2)
    assert host.own_expert_loop(m) == (8 * 5 + 1 - 4, 8 * 10 - 7)
    train = TrainSpec(global_batch=8, micro_batch=1, seq=512, flash_attention=True, dropout=False)
    mt = micro_batch_time(m, train, Layout(dp=2, ep=2), load_cluster("H100-SXM", 2))
    listed = block_kernels(layer_ops(m, 1, 512, 1, 4, True))
    assert mt.kernels == (listed[0] + 37, listed[1] + 73)
    assert mt.host == pytest.approx((mt.kernels[0] * HOST_KERNEL_S, mt.kernels[1] * HOST_KERNEL_S))
