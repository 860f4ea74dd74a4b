"""The thirteenth set: Megatron-Bridge's DeepSeek-V3 pre-training rows (published_gpu_thirteenth_rows.py, frozen in
93cde33 before the planner ran on any of them) as the planner's rows: the first set of latent-attention models.

Each row's model is DeepSeek-V3 as its provider states it (DEEPSEEK_V3_SHAPES): 61 blocks of multi-head latent
attention (ModelSpec.mla_*: q and kv latents of 1,536 and 512, 128 heads of 128 + 64 rotated / 128), the first 3
dense (SwiGLU 18,432), 58 MoE blocks of 256 experts 2,048 wide, top-8, and one shared expert (moe_ffn,
moe_shared_ffn, moe_first_dense), an untied 129,280-token vocabulary, and the row's multi-token-prediction depths
(`mtp_num_layers`: 1 unless the row runs without). Its layout is the table's (expert parallelism `ep` over the tp x
dp ranks of a stage, experts whole: ETP 1) and its recipe the inputs the planner has for what the row's recipe
sets, as the twelfth set takes them:
- the precision: MXFP8 -> the float8 layer's `mxfp8`, FP8-CS -> `tensorwise`, BF16 -> none; Transformer Engine's
  layers (`llama_impl=te`);
- the distributed optimizer (zero1) in 128 Mi-element buckets (256 MiB of bf16 gradients), gradients in bf16;
- the pipeline: interleaved with the row's VP (and `overlap_p2p_comm` where the recipe sets it), else 1F1B;
- sequence parallelism on the TP 2 row, TE's userbuffers where the recipe sets them (none does);
- the EP all-to-all overlap (`ep_overlap`) and the SMs HybridEP holds (`ep_sms`) where the flex dispatcher runs it;
- whole-iteration CUDA graphs: no launch gaps (the cluster's `kernel_gap_s` 0 at first; `cuda_graphs` full later).
What the recipes set that the planner has no input for (planned as Megatron-Core's defaults would run): the custom
pipeline layouts (`pipeline_model_parallel_layout`, e.g. the embedding with 4 blocks first and 1 block with the MTP
depth and the loss last: planned with the planner's own split, the busiest rank's blocks plus the costlier end,
the MTP depth with the head), the recompute modules (mla_up_proj, moe_act, mlp: planned as no recomputation), the
precision-aware optimizer's bf16 moments (these three taken after the first evaluation: `pp_layout`,
`recompute_modules`, `optim_dtype`; docs/planner.md), token dropping (the 25.09 rows: planned dropless), DeepEP, group-limited
routing (each token to at most 4 of 8 expert groups), the FP8 output projection (FP8 attention is `fp8_attention`,
after the fifteenth set), paged stash and the
per-rank token budget, TE's op fuser, the parameter all-gather's overlap (planned after the step, as every set).
"""
from __future__ import annotations

from .published_gpu_eighth import PASSES, SOURCE
from .published_gpu_heldout import MEGATRON_INTERLEAVED, _row, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)
from .published_gpu_thirteenth_rows import DEEPSEEK_V3_SHAPES, ROWS
from .published_gpu_twelfth import cuda_graphs, dispatcher

PRECISION = {"MXFP8": "mxfp8", "FP8-CS": "tensorwise", "BF16": "none"}


def _shape(name: str, mtp: int) -> dict:
    return shape_of(DEEPSEEK_V3_SHAPES[name], mtp)


def shape_of(q: dict, mtp: int) -> dict:
    """A DeepSeek-style model as a provider states it (Megatron-Core's config keys) in the planner's keys."""
    return {"n_layer": q["num_layers"], "d_model": q["hidden_size"], "n_head": q["num_attention_heads"],
            "vocab": q["vocab_size"], "arch": "llama", "head_dim": q["qk_head_dim"], "ffn": q["ffn_hidden_size"],
            "tied": False, "moe_experts": q["num_moe_experts"], "moe_top_k": q["moe_router_topk"],
            "moe_ffn": q["moe_ffn_hidden_size"], "moe_shared_ffn": q["moe_shared_expert_intermediate_size"],
            "moe_first_dense": q["first_k_dense"], "mla_kv_rank": q["kv_lora_rank"], "mla_q_rank": q["q_lora_rank"],
            "mla_rope_dim": q["qk_pos_emb_head_dim"], "mla_v_dim": q["v_head_dim"], "mtp_layers": mtp,
            # (after the first evaluation) node-limited routing: what DeepEP's deduplication sends (ep_dedup)
            "moe_groups": q["moe_router_num_groups"], "moe_group_topk": q["moe_router_group_topk"]}


_NAMES = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


def _layout(recipe: dict, pp: int, v: int) -> str:
    """(after the first evaluation) The recipe's pipeline_model_parallel_layout in Megatron-Core's string form
    (a list-of-lists form, ['embedding'] + ['decoder'] * 4 ..., evaluated as list arithmetic and spelled out), ""
    where the row has none, or none that is known (the rows whose notes say "uncertain") or whose stage count is not
    the row's pp x vp (the planner's own split then)."""
    import ast
    text = recipe.get("pipeline_model_parallel_layout")
    if not isinstance(text, str) or not text or text.startswith(("uncertain", "not set", "None")):
        return ""
    if text.startswith("["):
        def ev(node):  # list literals, string constants, + and * only
            if isinstance(node, ast.List):
                return [ev(x) for x in node.elts]
            if isinstance(node, ast.Constant):
                return node.value
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
                a, b = ev(node.left), ev(node.right)
                return a + b if isinstance(node.op, ast.Add) else a * b
            raise ValueError(f"not a layout list: {text!r}")
        text = "|".join("".join(_NAMES[x] for x in stage) for stage in ev(ast.parse(text, mode="eval").body))
    from .layout import pp_layout_stages
    return text if len(pp_layout_stages(text)) == pp * v else ""


def _modules(recipe: dict) -> str:
    """(after the first evaluation) The recipe's selective recompute by module (Layout.recompute_modules): its list,
    Megatron-Core's default ["core_attn"] where granularity "selective" lists none (the 25.09 B200 yaml)."""
    if recipe.get("recompute_granularity") != "selective":  # the modules apply under selective granularity only
        return ""
    mods = recipe.get("recompute_modules")
    return ",".join(["core_attn"] if mods is None else mods)


def _moments(recipe: dict) -> str:
    """(after the first evaluation) Adam's moments as the precision-aware optimizer keeps them (TrainSpec.optim_dtype:
    the recipes' exp_avg_dtype and exp_avg_sq_dtype, bf16 on every row; fp32 where a recipe does not say)."""
    dtypes = (recipe.get("extra") or {}).get("optimizer_dtypes") or {}
    got = {dtypes.get("exp_avg_dtype"), dtypes.get("exp_avg_sq_dtype")}
    return "bf16" if recipe.get("use_precision_aware_optimizer") is True and got == {"bf16"} else "fp32"


def _on(recipe: dict, key: str) -> bool:
    return recipe.get(key) is True


def planner_row(r: dict) -> dict:
    """One frozen row as the planner's row (plan/published_gpu_heldout.py's form)."""
    rec, tp, pp, cp, vp = r["recipe"], r["tp"], r["pp"], r["cp"], r["vp"] or 1
    mtp = rec.get("mtp_num_layers")
    mtp = mtp if isinstance(mtp, int) else DEEPSEEK_V3_SHAPES[r["model"]]["mtp_num_layers"]
    hybridep = rec.get("moe_token_dispatcher_type") == "flex" and rec.get("moe_flex_dispatcher_backend") == "hybridep"
    deepep = rec.get("moe_token_dispatcher_type") == "flex" and str(rec.get("moe_flex_dispatcher_backend")).startswith(
        "deepep")
    lay = {"dp": r["gpus"] // (tp * pp * cp), "tp": tp, "pp": pp, "cp": cp, "ep": r["ep"], "sp": tp > 1,
           "tp_comm_overlap": tp > 1 and _on(rec, "tp_comm_overlap"), "strategy": "zero1",
           "overlap_grad_reduce": True, "zero_bucket_mb": 256.0, "ep_overlap": _on(rec, "overlap_moe_expert_parallel_comm"),
           "ep_sms": (rec.get("moe_hybridep_num_sms") or 0) if hybridep else 0,
           # (after the first evaluation) DeepEP's internode kernels send a token once a node; (after the fourteenth
           # set) HybridEP's hierarchical dispatch too (no row here has a HybridEP group across nodes)
           "ep_dedup": deepep or hybridep, "ep_dispatcher": dispatcher(rec),
           "pp_layout": _layout(rec, pp, vp),
           "recompute_modules": _modules(rec),  # (after the first evaluation) what the recipe recomputes
           **({"schedule": MEGATRON_INTERLEAVED, "v": vp, "overlap_p2p_comm": _on(rec, "overlap_p2p_comm")}
              if vp > 1 else {})}
    cluster = r["system"].removeprefix("DGX-").replace("H100", "H100-SXM")
    return _row(r["case"], _shape(r["model"], mtp), cluster, r["gpus"], r["seq"], r["mbs"], r["gbs"], lay,
                r["tokens_per_gpu"], f"{SOURCE}, {r['container']} container (first published in {r['commit']})",
                None, comm_dtype="bf16", precision="bf16-mixed", fp8=PRECISION[r["precision"]], dropout=False,
                fused_loss=True, optimizer_passes=PASSES, llama_impl="te", optim_dtype=_moments(rec),
                cuda_graphs=cuda_graphs(rec),
                fp8_attention=rec.get("fp8_dot_product_attention") is True,
                cluster_fields={"attention": "cudnn"},
                notes=r["notes"], seen="")


def runs(r: dict) -> bool:
    """Whether the table's layout can run: expert parallelism takes its ranks from one stage's tp x cp x dp. Two
    rows' tables give EP 64 with PP 8 on 256 GPUs (32 ranks a stage; their GA 64 at GBS 2048 says DP 32 too): the
    25.11 GB300 GBS 2048 row (its preset has PP 4 VP 4) and the 25.09 GB200 MXFP8 tokendrop row (its yaml PP 4 VP 8).
    Left out, not replanned with another layout (found when the planner refused them, before it planned any row)."""
    stage = r["gpus"] // r["pp"]
    return stage % r["ep"] == 0


THIRTEENTH = [planner_row(r) for r in ROWS if runs(r)]
