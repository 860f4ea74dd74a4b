"""The twelfth set: Megatron-Bridge's Qwen3 MoE pre-training rows (published_gpu_twelfth_rows.py, frozen in b8a06a6
before the planner ran on any of them) as the planner's rows: the first set of mixture-of-experts runs.

Each row's model is its Qwen3 shape (QWEN3_SHAPES: every block an MoE block of E = 128 experts of width
moe_ffn_hidden_size, top-8, q of 32 or 64 heads of 128, 4 key/value heads, untied 151,936-token vocabulary), its
layout the table's (expert parallelism `ep` over the tp x dp ranks of a stage, experts whole: ETP 1) and its recipe
the inputs the planner has for what the row's recipe sets:
- the precision: MXFP8 -> the float8 layer's `mxfp8`, FP8-CS -> `tensorwise`, BF16 -> none; Transformer Engine's
  layers (`llama_impl=te`: its saved tensors, FP8 weights cast once a step);
- the distributed optimizer (zero1) in 128 Mi-element buckets (256 MiB of bf16 gradients), gradients in bf16;
- the pipeline: interleaved with the row's VP (and `overlap_p2p_comm` where the recipe sets it), else 1F1B; the
  235B recipes count the embedding and the loss as a layer each (`pp_split=ends-as-blocks`);
- sequence parallelism and TE's userbuffers where the recipe sets them (the TP 2 rows);
- the EP all-to-all overlap with delayed weight gradients (`overlap_moe_expert_parallel_comm`): `ep_overlap`;
- whole-iteration CUDA graphs: no launch gaps (the cluster's `kernel_gap_s` 0 at first; `cuda_graphs` full later);
- (after the twelfth and thirteenth sets' evaluations) the graphs each recipe replays and its dispatcher's kind,
  for the kernels the host issues (`cuda_graphs`, `ep_dispatcher`: plan/host.py), and Qwen3's q/k norms (`qk_norm`);
- (after the fifteenth set) FP8 attention where the recipe sets fp8_dot_product_attention (`fp8_attention`).
What the recipes set that the planner has no input for (planned as Megatron-Core's defaults would run): the flex
dispatcher with HybridEP (planned as NCCL's all-to-all on the same links), the full-iteration rows' paged stash,
per-rank token budget and fused grouped MLP, QK layernorm's two small norms, and the parameter all-gather's overlap
(planned after the step, as every set plans it).
"""
from __future__ import annotations

from .published_gpu_eighth import PASSES, SOURCE
from .published_gpu_heldout import MEGATRON_INTERLEAVED, _row, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)
from .published_gpu_twelfth_rows import QWEN3_SHAPES, ROWS

PRECISION = {"MXFP8": "mxfp8", "FP8-CS": "tensorwise", "BF16": "none"}


def _shape(name: str) -> dict:
    return shape_of(QWEN3_SHAPES[name])


def shape_of(q: dict) -> dict:
    """A Qwen3 MoE model as its provider states it (Megatron-Core's config keys) in the planner's keys."""
    return {"n_layer": q["num_layers"], "d_model": q["hidden_size"], "n_head": q["num_attention_heads"],
            "vocab": q["vocab_size"], "arch": "llama", "n_kv_heads": q["num_query_groups"],
            "qk_norm": q.get("qk_layernorm") is True,
            "head_dim": q["kv_channels"], "ffn": q["moe_ffn_hidden_size"], "tied": False,
            "moe_experts": q["num_moe_experts"], "moe_top_k": q["moe_router_topk"]}


def _on(recipe: dict, key: str) -> bool:
    return recipe.get(key) is True


def cuda_graphs(recipe: dict) -> str:
    """(after the twelfth and thirteenth sets' evaluations) the CUDA graphs the recipe replays, for the host's count
    (TrainSpec.cuda_graphs): full_iteration -> "full"; Transformer Engine's graphs of Megatron-Core's module scopes
    -> those scopes (none listed: the whole layer, "full"); the 25.09 yamls' cuda_graphs (enable_cuda_graph: each
    layer one graph, token-dropping rows) -> "full"; otherwise eager ("none")."""
    impl = str(recipe.get("cuda_graph_impl"))
    if impl == "full_iteration" or impl.startswith("yaml cuda_graphs true"):
        return "full"
    if impl == "transformer_engine":
        return ",".join(recipe.get("cuda_graph_scope") or []) or "full"
    return "none"


def dispatcher(recipe: dict) -> str:
    """(after the same evaluations) the token dispatcher's kind (Layout.ep_dispatcher): flex (DeepEP, HybridEP)."""
    return "flex" if recipe.get("moe_token_dispatcher_type") == "flex" else "alltoall"


def planner_row(r: dict) -> dict:
    """One frozen row as the planner's row (plan/published_gpu_heldout.py's form)."""
    rec, tp, pp, cp, vp = r["recipe"], r["tp"], r["pp"], r["cp"], r["vp"] or 1
    lay = {"dp": r["gpus"] // (tp * pp * cp), "tp": tp, "pp": pp, "cp": cp, "ep": r["ep"], "sp": tp > 1,
           "tp_comm_overlap": tp > 1 and _on(rec, "tp_comm_overlap"), "strategy": "zero1",
           "overlap_grad_reduce": True, "zero_bucket_mb": 256.0, "ep_overlap": _on(rec, "overlap_moe_expert_parallel_comm"),
           # (after the first evaluation) the SMs HybridEP's kernels hold, where the flex dispatcher runs it
           "ep_sms": rec.get("moe_hybridep_num_sms", 0) if rec.get("moe_token_dispatcher_type") == "flex" else 0,
           # (after the thirteenth set) HybridEP's hierarchical dispatch: one RDMA copy a token per remote NVLink
           # domain, forwarded over NVLink (DeepEP's Hybrid-EP_Implementation.md: its RDMA token buffer holds
           # tokens x (nodes - 1)); only a row whose EP group spans nodes moves
           "ep_dedup": rec.get("moe_token_dispatcher_type") == "flex", "ep_dispatcher": dispatcher(rec),
           **({"schedule": MEGATRON_INTERLEAVED, "v": vp, "overlap_p2p_comm": _on(rec, "overlap_p2p_comm")}
              if vp > 1 else {}),
           **({"pp_split": "ends-as-blocks"} if pp > 1 and _on(rec, "account_for_embedding_in_pipeline_split")
              else {})}
    cluster = r["system"].removeprefix("DGX-").replace("H100", "H100-SXM")
    return _row(r["case"], _shape(r["model"]), cluster, r["gpus"], r["seq"], r["mbs"], r["gbs"], lay,
                r["tokens_per_gpu"], f"{SOURCE}, {r['container']} container (first published in {r['commit']})",
                None, comm_dtype="bf16", precision="bf16-mixed", fp8=PRECISION[r["precision"]], dropout=False,
                fused_loss=True, optimizer_passes=PASSES, llama_impl="te", cuda_graphs=cuda_graphs(rec),
                fp8_attention=rec.get("fp8_dot_product_attention") is True,
                cluster_fields={"attention": "cudnn"},
                notes=r["notes"], seen="")


TWELFTH = [planner_row(r) for r in ROWS]
