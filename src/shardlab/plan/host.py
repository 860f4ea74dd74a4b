"""The host's side of an eager step: the framework issues every kernel from Python, one after another, and the
device runs them as they arrive. Where a block's kernels take the device less time than the host takes to issue
them, the device waits on the host (launch-bound: small per-rank shapes, many small kernels, as a fine-grained MoE
block's per-expert GEMMs and casts at micro batch 1). A dropless MoE block's forward also waits once for the
device: the tokens each expert receives are read on the host (the all-to-all's splits, the grouped GEMM's
m_splits), so the host's lead is gone at every MoE block and what it issues next runs no earlier than it is issued.

Per micro batch on the slowest rank, per block, with H the host's seconds and D the device's (the block's kernels
+ its share of the critical-path collectives):
  dropless MoE blocks:  max(0, H_f - D_f) + max(0, H_b - D_b)   (the forward waits at each block; with the EP
                        overlap a forward and a backward run together: max(0, H_f + H_b - D_f - D_b))
  otherwise:            max(0, H_f + H_b - D_f - D_b)           (the host runs ahead through the whole pass)
CUDA graphs replay a captured region with one launch: `TrainSpec.cuda_graphs` "full" (the whole iteration: no
host time), or Megatron-Core's module scopes ("attn", "moe_router", "moe_preprocess"; what each captures:
transformer_layer.py's scope table), each region one launch a pass. Compiled blocks are not counted here (no
per-kernel host cost of Inductor's launcher is published); CPU profiles measure their framework time in situ.
"""
from __future__ import annotations

from . import moe as moe_mod
from .layout import Layout
from .model import ModelSpec
from .train_spec import TrainSpec

# Kernels a quantization launches in Transformer Engine: current scaling (tensorwise) zeroes the amax, reduces
# it, computes the scale and casts (common/recipe/current_scaling.cu; csrc/quantizer.cpp); MXFP8 one kernel
QUANTIZE_KERNELS = {"none": 0, "tensorwise": 4, "mxfp8": 1}
# Megatron-Core's TE transformer layer, kernels (forward, backward) by part, read in its code and Transformer
# Engine's (megatron/core/transformer/{transformer_layer,attention}.py, moe/{router,token_dispatcher,experts,
# moe_utils}.py; TE module/{layernorm_linear,linear,grouped_linear}.py, permutation.py, router.py), steady state
# (the weights' casts cached after the first micro batch); q = QUANTIZE_KERNELS, n = local experts:
TE_KERNELS = {
    # input norm, qkv GEMM, the q reshape's copy, fused RoPE on q and k, cuDNN attention, output GEMM, residual
    # add; backward: dgrad + wgrad per GEMM, the norm's two kernels and its main_grad add, the split's cat, the
    # attention's preprocess / main / dq kernels; + q per linear each way (its input, its output gradient)
    "attn": ((9, 14), 2),
    "qk_norm": (3, 6),  # q and k RMSNorms (k's contiguous copy first): Qwen3's
    # latent attention (MLA): q_down, q_up, kv_down, kv_up in place of one qkv GEMM, their two norms, the
    # rotated part's split and cat (estimated from the attention's count: 3 more linears, 2 more norms)
    "mla": ((9, 16), 3),
    # pre-MLP norm, SwiGLU, fc1 / fc2 GEMMs, residual; backward: norm, its main_grad add, the residual's grad add,
    # two GEMMs per linear, SwiGLU's backward
    "mlp": ((5, 9), 2),
    # MoE block without its experts: pre-MLP norm, the router's GEMM, force-balanced scores (clone, normal_), the
    # fused top-k + softmax, the aux loss's kernels, the probability-weighted SwiGLU, residual; backward likewise
    "moe": (14, 16),
    "router": (12, 14),  # of "moe": the pre-MLP norm and the router (what the moe_router scope captures)
    # each local expert: fc1 and fc2 GEMMs (forward), dgrad + wgrad each (backward), + q per linear each way
    "expert": ((2, 4), 2),
    # Megatron's all-to-all dispatcher: token counts (sums, the all-gather), the fused permutation (row map + permute),
    # token and probability all-to-alls, sort-chunks, FP8 padding, unsort, combine all-to-all, un-permutation
    "alltoall": (23, 10),
    "alltoall_preprocess": (11, 1),  # of "alltoall": counts + permutation (what the moe_preprocess scope captures)
    # the flex dispatcher (DeepEP, HybridEP): its routing-map gather, metadata, dispatch with permute, combine
    "flex": (7, 4),
    "shared": ((3, 5), 2),  # a shared expert: fc1, SwiGLU, fc2 (TE's fused linears)
}

# shardlab's own MoE runs its held experts one after another (model/moe.py run_experts: split, each expert's MLP,
# cat), where the op list counts each expert linear once (a batched GEMM): per expert the gate, up, silu, product
# and down kernels forward, two GEMMs a linear, silu's and the product's gradients and the input's two-branch sum
# backward (GPT-2's expert: fc, gelu, proj; two GEMMs and a bias sum a linear, gelu's gradient); (per expert, listed)
OWN_EXPERT = {"llama": ((5, 10), (4, 7)), "gpt2": ((3, 7), (3, 5))}


def own_expert_loop(model: ModelSpec) -> tuple[int, int]:
    """(forward, backward) kernels shardlab's own MoE block launches beyond the op list's count: its expert loop
    (one launch per expert and linear) and the concatenation of the experts' outputs."""
    if not model.moe_experts:
        return 0, 0
    (f, b), (lf, lb) = OWN_EXPERT[model.arch]
    n = model.experts_held
    return n * f + 1 - lf, n * b - lb


def _part(name: str, q: int) -> tuple[int, int]:
    v = TE_KERNELS[name]
    if isinstance(v[0], tuple):
        (f, b), nq = v
        return f + nq * q, b + nq * q
    return v


def te_kernels(model: ModelSpec, train: TrainSpec, lay: Layout) -> tuple[int, int]:
    """(forward, backward) kernels one of `model`'s blocks launches as Megatron-Core's TE layer runs it (a uniform
    model: every block MoE or every block dense), its CUDA-graph scopes counted one launch each."""
    q = QUANTIZE_KERNELS.get(train.fp8, 1)
    scopes = set(train.graph_scopes)
    parts = ["mla" if model.mla else "attn"] + (["qk_norm"] if model.qk_norm else [])
    att = [sum(x) for x in zip(*(_part(p, q) for p in parts))]
    if "attn" in scopes:
        att = [1, 1]
    if not model.moe_experts:
        mlp = _part("mlp", q)
        return att[0] + mlp[0], att[1] + mlp[1]
    n = model.experts_held
    ex = _part("expert", q)
    disp = "flex" if lay.ep_dispatcher == "flex" else "alltoall"
    f, b = (TE_KERNELS["moe"][i] + n * ex[i] + TE_KERNELS[disp][i] for i in (0, 1))
    if model.moe_shared_ffn:
        sh = _part("shared", q)
        f, b = f + sh[0], b + sh[1]
    if moe_mod.uses_eager_clamp(model, train):  # the GLU's eager clamp (moe.clamp_ops)
        f, b = f + moe_mod.CLAMP_KERNELS[0], b + moe_mod.CLAMP_KERNELS[1]
    if "moe_router" in scopes:  # the norm and router (and, with moe_preprocess, the counts and permutation) in one
        pre = TE_KERNELS["router"]
        if "moe_preprocess" in scopes and disp == "alltoall":
            pre = tuple(x + y for x, y in zip(pre, TE_KERNELS["alltoall_preprocess"]))
        f, b = f - pre[0] + 1, b - pre[1] + 1
    return att[0] + f, att[1] + b


def launch_gap(train: TrainSpec, kernel_gap_s: float) -> float:
    """Device seconds between two kernels of a stream: the cluster's gap, none where the whole iteration replays as
    a CUDA graph (its kernels follow each other without a launch each)."""
    return 0.0 if train.cuda_graphs == "full" else kernel_gap_s


def block_seconds(train: TrainSpec, lay: Layout, host_kernel_s: float, kernels: tuple[int, int]) -> tuple[float, float]:
    """(forward, backward) host seconds one block's `kernels` take to issue (Megatron-Core's TE layer: `te_kernels`;
    other eager blocks: the op list's, compute.block_kernels); 0 under whole-iteration CUDA graphs, for compiled
    blocks, and off GPU presets (host_kernel_s 0)."""
    if not host_kernel_s or train.cuda_graphs == "full" or train.compile:
        return 0.0, 0.0
    f, b = kernels
    if lay.recompute == "full":  # the backward issues the forward's kernels again
        b += f
    return f * host_kernel_s, b * host_kernel_s


def waits(model: ModelSpec, train: TrainSpec, lay: Layout, host: tuple[float, float], device: tuple[float, float],
          blocks: int, comm_per_block: float, host_kernel_s: float) -> tuple[tuple[float, float], str]:
    """((forward, backward) seconds per micro batch the device waits on the host, the words): `host` and `device`
    one block's (forward, backward) seconds, `comm_per_block` a block's critical-path collectives (forward +
    backward). A pooled wait is told to the pass whose host outlasts its device (both: by their shares): a measured
    run shows it inside that pass's span."""
    (hf, hb), (df, db) = host, device
    if not (hf or hb):
        return (0.0, 0.0), ""
    df, db = df + comm_per_block / 2, db + comm_per_block / 2
    sync = bool(model.moe_experts) and not lay.ep_overlap
    per = max(0.0, hf - df) + max(0.0, hb - db) if sync else max(0.0, hf + hb - df - db)
    how = ("a dropless MoE block's forward waits on the device for its token counts: per block max(0, H_f - D_f) + "
           "max(0, H_b - D_b)" if sync else "per block max(0, H_f + H_b - D_f - D_b)" + (
            " (the EP overlap's forward and backward issued together)" if model.moe_experts else ""))
    kinds = "Megatron-Core's TE layer as counted in its code" if train.llama_impl == "te" else "the planner's ops"
    words = (f"{blocks} blocks x {per * 1e3:.3f} ms: the host issues {hf / host_kernel_s:.0f} forward and "
             f"{hb / host_kernel_s:.0f} backward kernels a block ({kinds}) at {host_kernel_s * 1e6:.1f} us each "
             f"(Cluster.host_kernel_s): H_f {hf * 1e3:.3f}, H_b {hb * 1e3:.3f} ms against the device's D_f "
             f"{df * 1e3:.3f}, D_b {db * 1e3:.3f} ms with its collectives; {how}"
             + (f"; CUDA graphs of {', '.join(train.graph_scopes)}: one launch each" if train.graph_scopes else ""))
    ef, eb = max(0.0, hf - df), max(0.0, hb - db)
    f = per * ef / (ef + eb) if ef + eb else 0.0
    return (blocks * f, blocks * (per - f)), words
