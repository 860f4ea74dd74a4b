"""The sixteenth set: Megatron-Bridge's model verification cards' 16 pre-training measurements
(published_gpu_sixteenth_rows.py, frozen before the planner ran on any of them) as the planner's rows, mapped (this
file) before the first evaluation with the earlier sets' readings: each model's shape as its family's set maps it
(Qwen3 as the twelfth, DeepSeek-V3 and Moonlight as the thirteenth, GPT-OSS as the fifteenth; Qwen3-8B, dense, as
the twelfth's without experts), and each recipe's inputs as those sets read them: the precision, the distributed
optimizer in the recipe's buckets (the fifteenth's rule), the gradients reduced in bf16 or, where the recipe says
grad_reduce_in_fp32, in fp32, the gradient reduce overlapped or not, the precision-aware optimizer's moments, the
pipeline (1F1B, or interleaved with the row's VP; the recipe's layout string), the dispatcher, its SMs and
deduplication, the EP overlap, the CUDA graphs replayed, selective recompute of the modules the planner knows, FP8
attention, the run's own vocabulary (the library rows' tokenizer: `extra.vocab_size_in_run`, padded as the run
padded it), and the loss fused (Megatron's native fusion or TE's).
What the planner has no input for (planned as the nearest it has): the library rows' natural routing (their
auxiliary losses; planned balanced, as every set), the `layernorm` recompute module, the full-iteration rows' paged
stash and per-rank token budget, TE's op fuser beyond the expert bias it takes in, and the parameter all-gather's
overlap.
"""
from __future__ import annotations

from .published_gpu_eighth import PASSES
from .published_gpu_fifteenth import _bucket_mib, _known_modules
from .published_gpu_fifteenth import shape_of as gpt_oss_shape
from .published_gpu_heldout import MEGATRON_INTERLEAVED, _row, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)
from .published_gpu_sixteenth_rows import MV_SHAPES, ROWS
from .published_gpu_thirteenth import PRECISION, _layout, _moments
from .published_gpu_thirteenth import shape_of as deepseek_shape
from .published_gpu_twelfth import cuda_graphs, dispatcher
from .published_gpu_twelfth import shape_of as qwen_shape

SOURCE = "Megatron-Bridge model verification cards (examples/model_verification_cards/*/card.yaml)"
# A memory figure for one row, read after the first evaluation from another page of the same repository: the
# MoE hardware-configs skill (skills/nemo-mbridge-perf-moe-hardware-configs/card.yaml, qwen3_30b_h100_16,
# rank0_peak_allocated_gib) records the card's Qwen3-30B-A3B H100 benchmark run (the same 20,147.290 ms step and
# 299.352 TFLOP/s in both): torch's peak allocated memory on rank 0, GiB (the planner's "allocated")
MEMORY = {"MV Qwen3-30B-A3B H100x16 BF16 pretrain_performance": 62.166}


def shape(r: dict) -> dict:
    """The row's model in the planner's keys, as its family's set maps it, with the run's own vocabulary."""
    q, rec = MV_SHAPES[r["model"]], r["recipe"]
    if r["model"].startswith("gpt-oss"):
        out = gpt_oss_shape(q, r["container"].rpartition(":")[2])
    elif q.get("multi_latent_attention"):
        mtp = rec.get("mtp_num_layers")
        out = deepseek_shape({**q, "q_lora_rank": q["q_lora_rank"] or 0}, mtp if isinstance(mtp, int) else 0)
    elif q.get("num_moe_experts"):
        out = qwen_shape(q)
    else:  # Qwen3-8B: the twelfth's keys without the experts, the dense MLP's width
        out = {k: v for k, v in qwen_shape({**q, "num_moe_experts": 0, "moe_router_topk": 0,
                                            "moe_ffn_hidden_size": q["ffn_hidden_size"]}).items()
               if not k.startswith("moe_")}
        out["tied"] = q["share_embeddings_and_output_weights"] is True
    vocab = (rec.get("extra") or {}).get("padded_vocab_size_in_run")
    return {**out, "vocab": vocab or out["vocab"]}


def _on(recipe: dict, key: str) -> bool:
    return recipe.get(key) is True


def planner_row(r: dict) -> dict:
    """One frozen row as the planner's row (plan/published_gpu_heldout.py's form)."""
    rec, tp, pp, cp, vp = r["recipe"], r["tp"], r["pp"], r["cp"], r["vp"] or 1
    flex = rec.get("moe_token_dispatcher_type") == "flex"
    dp = r["gpus"] // (tp * pp * cp)
    lay = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": r["ep"], "sp": tp > 1,
           "tp_comm_overlap": tp > 1 and _on(rec, "tp_comm_overlap"), "strategy": "zero1",
           "overlap_grad_reduce": rec.get("overlap_grad_reduce") is not False,
           "zero_bucket_mb": _bucket_mib(rec, dp), "ep_overlap": _on(rec, "overlap_moe_expert_parallel_comm"),
           "ep_sms": (rec.get("moe_hybridep_num_sms") or 0) if flex else 0, "ep_dedup": flex,
           "ep_dispatcher": dispatcher(rec), "pp_layout": _layout(rec, pp, vp),
           "recompute_modules": _known_modules(rec),
           **({"schedule": MEGATRON_INTERLEAVED, "v": vp, "overlap_p2p_comm": _on(rec, "overlap_p2p_comm")}
              if vp > 1 else {}),
           **({"pp_split": "ends-as-blocks"} if pp > 1 and _on(rec, "account_for_embedding_in_pipeline_split")
              else {})}
    cluster = r["system"].removeprefix("DGX-").replace("H100", "H100-SXM")
    return _row(r["case"], shape(r), cluster, r["gpus"], r["seq"], r["mbs"], r["gbs"], lay, r["tokens_per_gpu"],
                f"{SOURCE}, {r['item']} ({r['container']}, Megatron-Bridge {r['commit'][:9]})", MEMORY.get(r["case"]),
                comm_dtype="fp32" if _on(rec, "grad_reduce_in_fp32") else "bf16", precision="bf16-mixed",
                # Megatron-Core's gradient buffer takes the reduce's dtype (param_and_grad_buffer.py: grad_dtype
                # torch.float if grad_reduce_in_fp32): 4 B a parameter there (a mapping fix after the first evaluation)
                fp32_grad_accum=_on(rec, "grad_reduce_in_fp32"),
                fp8=PRECISION[r["precision"]], dropout=False, fused_loss=_on(rec, "cross_entropy_loss_fusion"),
                optimizer_passes=PASSES, llama_impl="te", optim_dtype=_moments(rec), cuda_graphs=cuda_graphs(rec),
                fp8_attention=_on(rec, "fp8_dot_product_attention"), cluster_fields={"attention": "cudnn"},
                notes=r["notes"], seen="")


SIXTEENTH = [planner_row(r) for r in ROWS]
