"""The fifteenth set: Megatron-Bridge's GPT-OSS 120B pre-training rows (published_gpu_fifteenth_rows.py, frozen
before the planner ran on any of them) as the planner's rows, mapped (this file) before the first evaluation.

GPT-OSS 120B (GPT_OSS_SHAPES): 36 MoE blocks of 128 experts of 2,880, top-4, no shared expert; 64 q heads of 64
over h = 2,880 and 8 key/value heads; every other block a 128-key sliding window (`window`, `window_skip` 2:
Megatron-Core's window_size (127, 0) and window_attn_skip_freq 2; 129 keys up to 26.02); untied 201,088-token
vocabulary. The recipe's inputs the planner has, as the twelfth to fourteenth sets map them: the precision (MXFP8 ->
`mxfp8`, BF16 -> none) in Transformer Engine's layers, the distributed optimizer (zero1) in 128 Mi-element buckets,
bf16 gradients (buckets: comm_overlap.py's 128 Mi elements, or Megatron DDP's default where no comm-overlap config is
set), the precision-aware optimizer's moment dtypes, the pipeline (1F1B, or interleaved with the row's
VP), the flex dispatcher's SMs and deduplication, the EP overlap, the CUDA graphs replayed and the dispatcher's kind
(the host's kernels: plan/host.py), selective recompute of the modules the planner knows (core_attn, moe_act, mlp).
What the planner has no input for (planned as the nearest it has): biases on every linear and the router (the
experts' fc2 bias pass is `expert_bias`, after the first evaluation), the
attention sinks (a learnable softmax offset per head), the clamped quick-GELU GLU (planned as SwiGLU's kernels and
bytes; its eager clamp is `glu_clamp`, after the sixteenth set), YaRN rope, the router without a load-balancing loss (the host's count keeps the aux loss's kernels), the
`layernorm` recompute module (its norms' outputs: not freed, not rerun), the full-iteration rows' paged stash and
per-rank token budget, TE's op fuser, and the parameter all-gather's overlap. FP8 attention (`fp8_attention`) and the
window's measured band rate came after the first evaluation (docs/planner.md, "The attention kernel's shape").
"""
from __future__ import annotations

from .layout import RECOMPUTE_MODULES
from .published_gpu_eighth import PASSES, SOURCE
from .published_gpu_heldout import MEGATRON_INTERLEAVED, _row, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)
from .published_gpu_fifteenth_rows import GPT_OSS_SHAPES, ROWS
from .published_gpu_thirteenth import PRECISION, _moments, _modules
from .published_gpu_twelfth import cuda_graphs, dispatcher


def shape_of(q: dict, container: str) -> dict:
    """GPT-OSS as its provider states it (Megatron-Core's config keys) in the planner's keys; the window as the row's
    container ran it (window_size (128, 0) up to 26.02, (127, 0) after: a query sees window_size[0] + 1 keys)."""
    w = q["window_size_up_to_c0b9a0003" if container <= "26.02" else "window_size"][0] + 1
    return {"n_layer": q["num_layers"], "d_model": q["hidden_size"], "n_head": q["num_attention_heads"],
            "vocab": q["vocab_size"], "arch": "llama", "n_kv_heads": q["num_query_groups"],
            "head_dim": q["kv_channels"], "ffn": q["ffn_hidden_size"], "tied": False,
            "moe_experts": q["num_moe_experts"], "moe_top_k": q["moe_router_topk"], "moe_ffn": q["moe_ffn_hidden_size"],
            "window": w, "window_skip": q["window_attn_skip_freq"], "expert_bias": q["add_bias_linear"],
            "glu_clamp": q["activation_func_clamp_value"] or 0.0}


def _known_modules(recipe: dict) -> str:
    """The recipe's recompute modules (the thirteenth set's reading: selective granularity only) that the planner
    models: `layernorm` left out."""
    return ",".join(m for m in _modules(recipe).split(",") if m in RECOMPUTE_MODULES)


def _bucket_mib(recipe: dict, dp: int) -> float:
    """The gradient buckets: comm_overlap.py's DP rule (128 Mi elements) where the builder sets a comm-overlap
    config, else Megatron DDP's default max(40e6, 1e6 x DP) elements; of bf16."""
    if str(recipe.get("bucket_size")).startswith("not set"):
        return max(40e6, 1e6 * dp) * 2 / 2**20
    return 256.0


def planner_row(r: dict) -> dict:
    """One frozen row as the planner's row (plan/published_gpu_heldout.py's form)."""
    rec, tp, pp, cp, vp = r["recipe"], r["tp"], r["pp"], r["cp"], r["vp"] or 1
    flex = rec.get("moe_token_dispatcher_type") == "flex"
    lay = {"dp": r["gpus"] // (tp * pp * cp), "tp": tp, "pp": pp, "cp": cp, "ep": r["ep"], "sp": tp > 1,
           "strategy": "zero1", "overlap_grad_reduce": True,
           "zero_bucket_mb": _bucket_mib(rec, r["gpus"] // (tp * pp * cp)),
           "ep_overlap": rec.get("overlap_moe_expert_parallel_comm") is True,
           "ep_sms": (rec.get("moe_hybridep_num_sms") or 0) if flex else 0, "ep_dedup": flex,
           "ep_dispatcher": dispatcher(rec), "recompute_modules": _known_modules(rec),
           **({"schedule": MEGATRON_INTERLEAVED, "v": vp, "overlap_p2p_comm": rec.get("overlap_p2p_comm") is True}
              if vp > 1 else {})}
    cluster = r["system"].removeprefix("DGX-").replace("H100", "H100-SXM")
    return _row(r["case"], shape_of(GPT_OSS_SHAPES[r["model"]], r["container"]), cluster, r["gpus"], r["seq"],
                r["mbs"], r["gbs"], lay, r["tokens_per_gpu"],
                f"{SOURCE}, {r['container']} container (first published in {r['commit']})", None, comm_dtype="bf16",
                precision="bf16-mixed", fp8=PRECISION[r["precision"]], dropout=False, fused_loss=True,
                optimizer_passes=PASSES, llama_impl="te", optim_dtype=_moments(rec), cuda_graphs=cuda_graphs(rec),
                fp8_attention=rec.get("fp8_dot_product_attention") is True,
                cluster_fields={"attention": "cudnn"},
                notes=r["notes"], seen="")


FIFTEENTH = [planner_row(r) for r in ROWS]
