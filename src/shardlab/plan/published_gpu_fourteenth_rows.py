"""Megatron-Bridge's Kimi-K2 pre-training rows, frozen as published inputs before the planner was run on any of
them. Pure data: nothing here is imported or evaluated by the planner yet.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and docs/performance-summary-archive.md, every
version of both on the main line in the mirror (22 commits, af6bc366d 2025-10-02 to 4ab94dfad 2026-08-11). No
25.09, 25.11 or 26.02 table has Kimi-K2; the model appears as "#### Model: Kimi_K2" (one GB300 entry, the same
layout in every container) in the per-model tables. The containers and the commits that added (or changed) their
Kimi_K2 entries:
  26.02.01  cfeddcd94 (5,072 / 1,037); 05d48ac02 ("kimi-k2 optimizer type") added the footnote "Muon optimizer was
            used for pre-training Kimi-K2." under the table (no figure changed); the section moved to the archive
            at 74695a06d
  26.04     74695a06d (5,332 / 1,090)
  26.04.01  17a381f95 (5,344 / 1,092); 21d102f5e revised it (5,328 / 1,088)
  26.06     63b08b397 (5,367 / 1,097; the tables drop the FSDP column); 8f341b04f ("perf summary b300 26.06")
            revised it (5,372 / 1,099); from 381d0b825 only in the archive
  26.06.01  381d0b825 and 26.08 4ab94dfad: no Kimi_K2 entry (the mirror's newest containers)
Commits that touched the files without changing a Kimi_K2 figure: 93ae2a0dc, e7d60aa95, e68f02203, c270efc50,
9f74f2876. 6 (container, system, precision, layout) keys over all versions (a revised figure counted again), one
distinct layout: 1 row.

Collection rule (the earlier sets'): one row per distinct (system, precision, layout) at its latest container's
figure; layout = GPUs, GBS, MBS, sequence, TP, PP, CP, VP, EP, ETP, FSDP. `commit` is the commit that first
published the row's figure (a figure revised within a container takes the revising commit: 8f341b04f). Earlier
containers' figures for the same layout are in the row's notes. The 26.06 table has no FSDP column (the earlier
ones give 0) and no table has an ETP column: fsdp=0 and etp=1 are the recipe's (use_megatron_fsdp=False,
expert_tensor_parallel_size=1). Tokens of 4,096 each, CP 1, TP 1, mock data. The tables' model FLOPs per token
(TFLOP/s/GPU over tokens/s/GPU) is 204 G in every container (1,099e12 / 5,372; 1,037e12 / 5,072): one counting.

Recipe, read at the row's commit 8f341b04f (paths in `recipe["builder"]`): scripts/performance's builder
kimi_k2_pretrain_config_gb300 (configs/kimi/kimi_llm_pretrain.py) with preset KIMI_K2_PRETRAIN_CONFIG_GB300_FP8_MX
(= KIMI_K2_PRETRAIN_CONFIG_GB300, configs/kimi/kimi_workload_base_configs.py; there is no _V1/_V2 variant, so the
scripts' default config_variant v2 falls back to the unversioned name, utils/utils.py get_workload_base_config),
the overrides (utils/overrides.py: set_workload_base_configs, set_user_overrides, set_post_overrides) over
src/megatron/bridge/recipes/kimi/kimi_k2.py kimi_k2_pretrain_config(optimizer_type="muon"), with
recipes/utils/optimizer_utils.py, training/{optim,comm_overlap,mixed_precision,flex_dispatcher_backend}.py and
the Megatron-LM submodule at d1410e15e (3rdparty/Megatron-LM@8f341b04f; megatron/core/optimizer/
{__init__,emerging_optimizers,layer_wise_optimizer,optimizer_config}.py) and Emerging-Optimizers v0.2.0
(1effa026f, uv.lock@8f341b04f; orthogonalized_optimizers/{muon,muon_utils,orthogonalized_optimizer}.py). The
scripts' defaults were followed (no CLI flags: --optimizer_type muon, --compute_dtype fp8_mx for the table's
MXFP8, --config_variant v2, --moe_flex_dispatcher_backend -1 which leaves the preset's backend). The GB300 preset
and builder are the same blobs from cfeddcd94 (the first Kimi-K2 figure) to 8f341b04f, and the same blobs are on
release branch r0.5.0 (f83545d98), whose Megatron-LM (458c8d0eca, core_r0.18.0) differs from d1410e15e in the
Muon code only in QKV-split plumbing (unused by MLA).

The optimizer (recipe["optimizer"], details in recipe["extra"]): "dist_muon" = Muon through Megatron-Core's
LayerWiseDistributedOptimizer (the "dist_" prefix: __init__.py _get_megatron_emerging_optimizer, "legacy" name),
from recipes/utils/optimizer_utils.py distributed_muon_with_cosine_annealing(max_lr 3e-4, min_lr 3e-5, warm-up
2,000, decay over train_iters; the scripts cut to 50 iterations, warm-up 10). Muon (TensorParallelMuon over
emerging_optimizers' OrthogonalizedOptimizer): momentum 0.95 as an EMA (buffer.lerp_(g, 1 - 0.95)), Nesterov on
(update = g.lerp(buffer, 0.95)), 5 Newton-Schulz steps with the "quintic" coefficient set (5 (a, b, c) triples,
one per step: (4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
(2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)) on the Frobenius-normalised matrix, transposed so the
smaller dimension is the Gram side, run in bf16 ("medium" fp32 matmul precision: X cast to bf16 and back),
update scaled by sqrt(max(rows, cols)) ("spectral") x 1.0, decoupled weight decay, tp_mode "blockwise" (TP 1 and
ETP 1 here: every matrix whole on its rank). Muon takes every 2-D parameter that is not the embedding or the
output layer (MLA's q/kv down- and up-projections and output projection, the dense layer's and the shared
expert's fc1/fc2, each routed expert's fc1/fc2, the router's 384 x 7168 weight); MLA's projections are not split
per head ("TODO(deyuf): support MLA": the QKV split applies only to linear_qkv). Adam (muon_scalar_optimizer
"adam"; betas 0.9 / 0.999, eps 1e-8, decoupled) takes the rest: the embedding, the output layer and the RMSNorm
weights. Weight decay: the optimizer's 0.1 but the scheduler's constant 0.033 (start = end), none on 1-D
parameters and biases. Sharding (layer-wise, legacy "ping-pong" path because ddp.use_distributed_optimizer is
False): each parameter whole on one data-parallel rank, parameters sorted by size and dealt over the dp_cp group
(DP 64 here) in a 0..63,63..0 order; expert parameters over the expert-DP group, which is 1 rank at PP 4 x EP 64
(every rank updates its own 6 local experts of each MoE layer). Gradients: Megatron DDP all-reduce (not a
reduce-scatter) in bf16, overlapped with the backward, averaged in the collective. After the step the updated bf16
parameters are all-gathered over dp_cp (flattened per rank; not overlapped, overlap_param_gather False). No
precision-aware optimizer: fp32 main parameters (Float16OptimizerWithFloat16Params on the local shard only), fp32
Muon momentum and Adam moments, fp32 main grads copied from the bf16 DDP buffer. MuonClip's qk-clip off
(model.qk_clip False). MXFP8 with Muon: the scripts turn fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag
off ("incompatible with Muon's LayerWiseDistributedOptimizer"), so parameters are kept and gathered in bf16.

Other settings (the row's recipe keys): HybridEP flex dispatcher with 32 SMs, force-balanced routing (the tables'
footnote: force-balanced and token-dropless), no capacity factor, grouped GEMM, permute and router fusion, router
dtype fp32, seq_aux_loss, shared-expert overlap off (the flex dispatcher turns it off), no CUDA graphs (preset
scope []; cuda_graph_impl "none"), selective recompute of mla_up_proj only, no EP all-to-all overlap (preset
moe_a2a_overlap False; no delayed wgrad), PP 4 x VP 4 with the recipe's layout "Et*4|(t*4|)*14tL" (16 virtual
stages: embedding + 4 layers first, 14 of 4 layers, 1 layer + loss last), overlap_p2p_comm on, batch_p2p_comm
off, tp_comm_overlap off, TE cross entropy, rope and bias-activation fusion, gradient-accumulation fusion,
manual_gc every 5 steps (the recipe's), te_rng_tracker off (the builder sets it, then run_script's
set_user_overrides clears it because cuda_graph_impl is "none"). "not set" means looked for and not set at that commit
(the library default applies); "not read" means not looked for.

Uncertain: (1) whether the 26.06 container ran main-line 8f341b04f's code (the release branch r0.5.0 has the same
Kimi blobs but another Megatron-LM; the table does not name a commit); (2) the earlier containers' optimizer code
(Megatron-LM 9ed8b0c4a at cfeddcd94, with Emerging-Optimizers v0.1.0, had Muon in megatron/core/optimizer/muon.py
with the same 2-D / non-embedding split, the same quintic coefficients and the layer-wise optimizer; not read past
that); (3) the HF config: every recipe builds the model with AutoBridge.from_hf_pretrained(
"moonshotai/Kimi-K2-Instruct", trust_remote_code=True) and config.json is not in the mirror; its values are those
of the provider the bridge replaced (KimiK2Provider, src/megatron/bridge/models/kimi/kimi_provider.py@217de1a2e^,
removed by 217de1a2e 2026-03-16) and of the repository's Kimi text-config fixture
(tests/unit_tests/models/kimi_vl/test_kimi_k25_vl_bridge.py@8f341b04f), which agree; num_nextn_predict_layers
(MTP) is read as 0 from the model card's config (no MTP either way: the provider had mtp_num_layers None and the
layout has no MTP stage); (4) the parameter count: the recipe says "Kimi-K2 (1T)" (kimi_k2.py@8f341b04f docstring)
and Moonshot's model card (not in the mirror) "1T total, 32B activated"; KIMI_K2_SHAPES counts 1,026.4 B total and
32.86 B active (30.51 B without the embedding and output layer): no 1.04 T figure is stated in the mirror; (5) the
bucket size: not set by the recipe and comm_overlap's DP bucket rule (128 Mi) applies only with the distributed
optimizer, so Megatron DDP's default max(40e6, 1e6 x DP) = 64e6 elements is read, not confirmed by a log.

Shapes (KIMI_K2_SHAPES): KimiK2Bridge (src/megatron/bridge/models/kimi/kimi_bridge.py@8f341b04f, provider
MLAModelProvider) over model_bridge.CONFIG_MAPPING (n_routed_experts -> num_moe_experts, qk_nope_head_dim ->
qk_head_dim, qk_rope_head_dim -> qk_pos_emb_head_dim, n_group / topk_group -> router groups, routed_scaling_factor,
num_nextn_predict_layers -> mtp_num_layers; YaRN rope_scaling -> MLA rotary_scaling_factor etc.). The bridge sets
RMSNorm, SwiGLU, no linear bias, untied embeddings, qk_layernorm, moe_layer_freq from first_k_dense_replace (1:
layer 0 dense), shared expert moe_intermediate_size x n_shared_experts, sigmoid router with expert bias,
moe_router_pre_softmax, seq_aux_loss with coefficient 1e-3, make_vocab_size_divisible_by 1280 (163,840 = 128 x
1,280: no padding; the recipe's NullTokenizer takes the model's vocabulary).

What the planner may lack (read in plan/ and optim/, nothing run): MLA attention (latent q/kv projections,
separate rope and nope head dims); a dense first layer and a shared expert beside 384 routed experts; Megatron's
layer-wise Muon (whole parameters dealt to DP ranks by size, an unsharded expert optimizer at expert-DP 1, a
non-overlapped bf16 all-gather after the step, gradients all-reduced rather than reduce-scattered, Newton-Schulz
per expert matrix and on the router weight); HybridEP's SMs; selective recompute of MLA up-projections; the uneven
pipeline layout with the embedding and the loss as stage members.
"""

from __future__ import annotations

KIMI_K2_SHAPES = {
    "k2": {
        "hf_id": "moonshotai/Kimi-K2-Instruct",
        "provider": (
            "MLAModelProvider built by KimiK2Bridge, src/megatron/bridge/models/kimi/kimi_bridge.py@8f341b04f (the "
            "same but for gradient_accumulation_fusion at cfeddcd94) through model_bridge.CONFIG_MAPPING from "
            "AutoBridge.from_hf_pretrained(hf_id, trust_remote_code=True) (recipes/kimi/kimi_k2.py@8f341b04f); "
            "HF values as KimiK2Provider, models/kimi/kimi_provider.py@217de1a2e^, and the Kimi text-config "
            "fixture tests/unit_tests/models/kimi_vl/test_kimi_k25_vl_bridge.py@8f341b04f"
        ),
        "num_layers": 61,  # HF num_hidden_layers
        "hidden_size": 7168,
        "num_attention_heads": 64,  # HF num_attention_heads (num_key_value_heads 64; MLA ignores query groups)
        "multi_latent_attention": True,  # kimi_bridge.py@8f341b04f
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_head_dim": 128,  # qk_nope_head_dim
        "qk_pos_emb_head_dim": 64,  # qk_rope_head_dim
        "v_head_dim": 128,
        "qk_layernorm": True,  # RMSNorm on the q and kv latents (kimi_bridge.py@8f341b04f)
        "ffn_hidden_size": 18432,  # HF intermediate_size: the one dense layer's SwiGLU width
        "moe_ffn_hidden_size": 2048,  # HF moe_intermediate_size: each routed expert
        "num_moe_experts": 384,  # HF n_routed_experts
        "moe_router_topk": 8,  # HF num_experts_per_tok
        "moe_shared_expert_intermediate_size": 2048,  # moe_intermediate_size x n_shared_experts (1), every MoE layer
        "moe_layer_freq": [0] * 1 + [1] * 60,  # first_k_dense_replace 1: layer 0 dense, 1-60 MoE (kimi_bridge.py)
        "first_k_dense": 1,
        "mtp_num_layers": 0,  # HF num_nextn_predict_layers 0 (config.json not in the mirror); no MTP
        "mtp_loss_scaling_factor": None,  # KimiK2Provider@217de1a2e^: None
        "vocab_size": 163840,  # = 128 x 1280 (make_vocab_size_divisible_by 1280): no padding
        "make_vocab_size_divisible_by": 1280,  # kimi_bridge.py@8f341b04f
        "share_embeddings_and_output_weights": False,  # kimi_bridge.py; HF tie_word_embeddings false
        "moe_router_score_function": "sigmoid",  # HF scoring_func
        "moe_router_enable_expert_bias": True,  # aux-loss-free balancing bias (kimi_bridge.py)
        "moe_router_num_groups": 1,  # HF n_group 1: no group-limited routing
        "moe_router_group_topk": 1,  # HF topk_group 1
        "moe_router_topk_scaling_factor": 2.827,  # HF routed_scaling_factor
        "moe_router_pre_softmax": True,  # the bridge's
        "moe_router_load_balancing_type": "seq_aux_loss",  # the bridge's
        "moe_aux_loss_coeff": 0.001,  # the bridge's (HF aux_loss_alpha 0.001)
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-06,  # HF rms_norm_eps
        "activation": "swiglu",  # gated_linear_unit True, silu
        "add_bias_linear": False,
        "position_embedding_type": "rope",  # MLA YaRN: factor 32, original_max_position_embeddings 4096
        "rotary_base": 50000.0,  # HF rope_theta
        "rotary_scaling_factor": 32,  # HF rope_scaling.factor (MLA_ROPE_SCALING_MAPPING)
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
}


ROWS = [
    dict(
        case="MB Kimi-K2 GB300x256 MXFP8", model="k2", system="DGX-GB300", gpus=256, gbs=4096, mbs=2, seq=4096,
        tp=1, pp=4, cp=1, vp=4, ep=64, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=5372,
        model_tflops_per_gpu=1099, container="26.06", commit="8f341b04f",
        recipe={
            "builder": (
                "kimi_k2_pretrain_config_gb300 "
                "(scripts/performance/configs/kimi/kimi_llm_pretrain.py@8f341b04f; set_kimi_k2_common_configs), "
                "preset KIMI_K2_PRETRAIN_CONFIG_GB300_FP8_MX = KIMI_K2_PRETRAIN_CONFIG_GB300 "
                "(scripts/performance/configs/kimi/kimi_workload_base_configs.py; no _V2 / _V1 variant: the "
                "unversioned name is taken), recipe kimi_k2_pretrain_config(optimizer_type='muon') "
                "(src/megatron/bridge/recipes/kimi/kimi_k2.py; optimizer from "
                "recipes/utils/optimizer_utils.py distributed_muon_with_cosine_annealing), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides); Megatron-LM d1410e15e (submodule), Emerging-Optimizers v0.2.0 (uv.lock)"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": False, "reuse_grad_buf_for_mxfp8_param_ag": False,
            "first_last_layers_bf16": "not set", "fp8_dot_product_attention": False,
            "fp8_output_proj": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "mtp_num_layers": 0,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"], "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": False,
            "align_param_gather": "not set (DDP default False; comm_overlap sets it only with the distributed "
                                  "optimizer)",
            "overlap_param_gather_with_optimizer_step": "not set (default False; set_post_overrides skips fp8_mx "
                                                        "and dist_muon)",
            "bucket_size": "not set (Megatron DDP default max(40e6, 1e6 x DP) = 64e6 elements at DP 64)",
            "tp_comm_overlap": False, "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False, "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tL",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": False, "use_megatron_fsdp": False, "use_precision_aware_optimizer": False,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "optimizer": (
                "dist_muon: Muon (momentum 0.95, Nesterov, 5 quintic Newton-Schulz steps in bf16, spectral scale) "
                "on the 2-D non-embedding matrices, Adam on the embedding, output layer and norms, both in "
                "Megatron-Core's LayerWiseDistributedOptimizer (whole parameters per DP rank; no distributed "
                "optimizer, no precision-aware optimizer)"
            ),
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",  # fp32 master grads copied from the bf16 DDP buffer
                    "exp_avg_dtype": "fp32",  # Adam's (and Muon's momentum buffer, zeros_like the fp32 main param)
                    "exp_avg_sq_dtype": "fp32",
                },
                "optimizer_name": "dist_muon",  # optimizer_utils.py@8f341b04f; "dist_" -> layer-wise (legacy name)
                "muon": {
                    "class": "TensorParallelMuon (megatron/core/optimizer/emerging_optimizers.py@d1410e15e) over "
                             "emerging_optimizers OrthogonalizedOptimizer (v0.2.0)",
                    "momentum": 0.95,  # EMA: buffer.lerp_(grad, 1 - momentum)
                    "nesterov": True,  # update input = grad.lerp(buffer, momentum)
                    "num_ns_steps": 5,
                    "coefficient_type": "quintic",  # OptimizerConfig default; not set by the recipe
                    "ns_coefficients": [
                        (4.0848, -6.8946, 2.9270),
                        (3.9505, -6.3029, 2.6377),
                        (3.7418, -5.5913, 2.3037),
                        (2.8769, -3.1427, 1.2046),
                        (2.8366, -3.0525, 1.2012),
                    ],  # muon_utils.py@1effa026f, one triple per step (cycled)
                    "ns_normalisation": "Frobenius (normalize p=2 over both dims); transposed when rows > cols",
                    "fp32_matmul_prec": "medium",  # Newton-Schulz run with bf16 inputs, result cast back to fp32
                    "scale_mode": "spectral",  # update x sqrt(max(rows, cols))
                    "extra_scale_factor": 1.0,
                    "tp_mode": "blockwise",  # each TP shard separately; TP 1 / ETP 1 here: whole matrices
                    "split_qkv": "True (default) but only for linear_qkv weights: MLA's projections not split",
                    "weight_decay": "decoupled; optimizer 0.1, scheduler start = end = 0.033 (constant)",
                    "params": (
                        "every 2-D parameter that is not is_embedding_or_output_parameter: MLA q_down, q_up, "
                        "kv_down, kv_up, proj; dense fc1/fc2; shared expert fc1/fc2; each routed expert's "
                        "fc1/fc2; the router weight (384 x 7168)"
                    ),
                    "qk_clip": False,  # model.qk_clip False (set_kimi_k2_common_configs): no MuonClip
                },
                "scalar_optimizer": {
                    "name": "adam",  # muon_scalar_optimizer; Megatron's Adam (AdamW: decoupled_weight_decay True)
                    "betas": (0.9, 0.999),  # OptimizerConfig defaults, not set by the recipe
                    "eps": 1e-08,
                    "params": "embedding, output layer, RMSNorm weights (input, pre-MLP, q/kv latent, final)",
                },
                "layer_wise_distributed_optimizer": {
                    "class": "LayerWiseDistributedOptimizer (megatron/core/optimizer/layer_wise_optimizer.py@"
                             "d1410e15e), legacy ping-pong shard_params path (ddp.use_distributed_optimizer False)",
                    "sharding": "whole parameters sorted by numel, dealt over dp_cp (64) in 0..63,63..0 order; "
                                "experts over expt_dp (1: unsharded)",
                    "grad_sync": "DDP all-reduce, bf16, overlapped with backward, average_in_collective",
                    "param_sync": "all_gather of each rank's flattened bf16 params over dp_cp after the step "
                                  "(not overlapped)",
                },
                "scheduler": {
                    "lr": 3e-4, "min_lr": 3e-5, "lr_decay_style": "cosine", "lr_warmup_init": 0.0,
                    "lr_warmup_iters": 10, "lr_decay_iters": 50,  # the scripts' _set_common_perf_overrides
                    "clip_grad": 1.0,
                },
                "batch_p2p_comm": False,
                "te_rng_tracker": False,  # the builder's True undone by set_user_overrides (cuda_graph_impl "none")
                "moe_router_padding_for_fp8": False,
                "gradient_accumulation_fusion": True,
                "enable_megatron_core_experimental": True,
                "data_parallel_sharding_strategy": "no_shard",
            },
            "env": "not read (perf_plugins.py@8f341b04f)",
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06 5,367 / 1,097 (63b08b397, revised by 8f341b04f within the "
            "container); 26.04.01 5,328 / 1,088 (21d102f5e; first published 5,344 / 1,092 at 17a381f95); 26.04 "
            "5,332 / 1,090 (74695a06d); 26.02.01 5,072 / 1,037 (cfeddcd94; the Muon footnote added by 05d48ac02). "
            "The GB300 preset and builder are the same blobs at every one of those commits. GA 32 (4,096 / (DP 64 x "
            "MBS 2)). Layout '[[embedding]+[decoder]*4] + [[decoder]*4]*14 + [[decoder, loss]]' "
            "(_get_kimi_k2_pipeline_layout(4, 4)): 16 virtual stages (PP 4 x VP 4), 61 layers. MXFP8 "
            "(bf16_with_mxfp8_mixed) with fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag turned off for "
            "dist_muon by set_kimi_k2_common_configs. grad_reduce_in_fp32 False (the scripts; the recipe's Muon "
            "default is True). overlap_param_gather False and use_distributed_optimizer False ('Muon needs this "
            "to be False', kimi_k2.py). HybridEP flex dispatcher (GB300 is sm_10x), 32 SMs; force-balanced "
            "routing. No CUDA graphs (preset cuda_graph_scope [], recipe cuda_graph_impl 'none'). Recompute "
            "mla_up_proj only."
        ),
    ),
]
