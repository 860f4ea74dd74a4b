"""Megatron-Bridge's DeepSeek-V3 pre-training rows, frozen as published inputs before the planner was run on any of
them. Pure data: nothing here is imported or evaluated by the planner yet.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and docs/performance-summary-archive.md, every
version of both on the main line in the mirror (22 commits, af6bc366d 2025-10-02 to 4ab94dfad 2026-08-11). Up to
5776a6d90 the tables are per system with a Model column; from c0b9a0003 (26.02 section; every section from
cfeddcd94) per model ("#### Model: DeepSeekV3") with a System column. The containers and the commits that added (or
changed) their DeepSeek-V3 entries:
  25.09     ea2990630 (labelled "(tokendrop)" on GB200/B200 and "(dropless)" on H100 at fa0315ae2)
  25.11     97ad8cc6f (GB300, GB200 at GBS 2048; B200); 1804c076f replaced the GB300/GB200 entries by "(w/o MTP)"
            BF16 and FP8-MX entries at GBS 4096 and labelled B200 "(w/ MTP)" (same figure)
  26.02     c0b9a0003          26.02.01  cfeddcd94          26.04  74695a06d
  26.04.01  17a381f95; 21d102f5e revised GB300, GB200 (TFLOP/s only) and B300
  26.06     63b08b397 (GB300 at GBS 4096 and 15360, GB200); 8f341b04f added B300
  26.06.01  381d0b825          26.08     4ab94dfad (GB300, GB200; the mirror's newest container)
38 (container, system, label, precision, layout) keys in all versions (25.09 counted unlabelled and labelled;
its parenthesised figures inside its keys) give 20 rows. "DeepSeekV4 Flash" (26.08)
is another model and is not here.

Collection rule (the earlier sets'): one row per distinct (system, model variant, precision, layout) at its latest
container's figure; layout = GPUs, GBS, MBS, sequence, TP, PP, CP, VP, EP, ETP, FSDP. `commit` is the commit that
first published the row's figure (a figure revised within a container takes the revising commit). The tables'
labelled variants ("w/o MTP", "w/ MTP", "tokendrop", "dropless") are separate variants: recorded in
`recipe["table_label"]` and the case name; the 26.x tables label nothing (their recipes run MTP, 1 layer). Earlier
containers' figures for the same layout are in each row's notes. Read as equal: 25.11 "FP8-MX" and 26.x "MXFP8"
(precision "MXFP8"); VP "1" and "n/a" (vp keeps the cell: 1 or None). The 26.06+ tables have no FSDP column and no
table has an ETP column: fsdp=0 and etp=1 are the recipes' (use_megatron_fsdp=False, expert_tensor_parallel_size=1
everywhere read). Rows removed within a container are kept, as in the tenth and twelfth sets (the two 25.11 GBS 2048
entries of 97ad8cc6f). All rows: 4,096 tokens a sequence, CP 1, TP 1 but H100 (TP 2), mock data.

The 25.09 entries ARE made rows here (unlike the twelfth set), because the brief asks for the labelled tokendrop /
dropless variants and they exist only in 25.09; but their table has no precision column. Its footnote: "the
numbers in parentheses indicate the use of different quantization granularities: in case of GB200 and B200
systems, 32x32 for both weights and activations; for H100, 128x128 for weights and 1x128 for activations". The
unparenthesised figures are read as per-tensor FP8 current scaling ("FP8-CS", the 25.09 yaml's fp8_cs) and the
GB200/B200 parenthesised ones as "MXFP8" (the yaml's fp8_mx): both uncertain (the scripts' default --fp8_recipe was
"ds", delayed scaling; MXFP8 blocks are 1x32, not 32x32). The GB200 parenthesised entry has its own layout (PP 8,
VP 2, GA 64). The H100 parenthesised value is TFLOP/s only (330, blockwise FP8) and is in that row's notes.

Recipes, read at each row's commit (paths in `recipe["builder"]`): 25.09, scripts/performance/run_script.py and
configs/deepseek/deepseek_v3_llm_pretrain.yaml; 25.11 to 26.06, scripts/performance's presets
(configs/deepseek/deepseek_workload_base_configs.py), builders (configs/deepseek/deepseek_llm_pretrain.py),
overrides (utils/overrides.py: set_workload_base_configs, set_post_overrides) over
src/megatron/bridge/recipes/deepseek/deepseek_v3.py; at 26.08 the flat recipes
src/megatron/bridge/perf_recipes/deepseek/{gb300,gb200}/deepseek_v3.py over recipes/deepseek/h100/deepseek_v3.py;
with training/comm_overlap.py, mixed_precision.py and flex_dispatcher_backend.py at the same commit. The scripts'
defaults were followed (no CLI flags; from 26.02 config variant v2). Every row but 25.09: force-balanced routing
(moe_router_force_load_balancing=True), no capacity factor, grouped GEMM, permute and router fusion, router dtype
fp32 and seq_aux_loss with the sigmoid / expert-bias / group-limited router (the bridge's), one always-active
shared expert, selective recompute of the listed modules, ETP 1, the distributed optimizer (no Megatron FSDP) with
the precision-aware optimizer (fp32 main params, bf16 main grads and Adam moments: the recipe's), DP > 1 everywhere
so overlapped grad reduce-scatter and param all-gather in 128 Mi-element buckets (comm_overlap.py), gradients
reduced in bf16, TE cross entropy, rope (MLA YaRN) and bias-activation fusion, tp_comm_overlap off. The recipes'
pipeline layout puts the embedding, the MTP layer and the loss in the pipeline
(account_for_*_in_pipeline_split False; `pipeline_model_parallel_layout` records it). manual_gc every 5 steps
(the recipe's; the scripts do not change it) up to 26.06, every 100 in the 26.08 flat recipes. MXFP8 is
bf16_with_mxfp8_mixed (fp8_param_gather, reuse_grad_buf_for_mxfp8_param_ag); FP8-CS is
bf16_with_fp8_current_scaling_mixed with first_last_layers_bf16=False. "not set" means looked for and not set at
that commit (the library default applies); "not read" means not looked for.

What differs between rows (recipe keys): the dispatcher (HybridEP flex with 32 SMs on GB200/GB300 and from 26.02 on
B200/B300 with EP 8; DeepEP flex on the 26.04.01 B200 EP 32 row and the 25.09 H100 row; the all-to-all dispatcher
on the 25.11 B200 row and the 25.09 token-drop rows); token drop (25.09 GB200/B200: capacity factor 1.0 padded to
capacity, no forced balancing); MTP (off in the "w/o MTP" rows); CUDA graphs (none; TE graphs of moe_router +
moe_preprocess, or attn + those; whole-iteration graphs from 26.06 on GB300/GB200 MXFP8, which bring paged stash, a
1.5 per-rank HybridEP token budget, padded experts, TE's op fuser with the cuteDSL fused grouped MLP, fp8_output_proj
and, on GB300, FP8 dot-product attention); recompute modules (mla_up_proj, mlp, moe_act, none); the EP all-to-all
overlap with delayed weight gradients; overlap_param_gather (off for the 25.11 MXFP8 GB rows: "NaN grad norm") and
overlap_param_gather_with_optimizer_step (on for 25.11 with VP > 1; excluded for fp8_mx from c0b9a0003). Where the
table's layout and the preset at the publishing commit disagree (`recipe["table_vs_recipe"]`: the 25.11 GB300
GBS 2048 row, the four "w/o MTP" rows, the 26.06 GBS 15360 row, and the 25.09 rows), the table's layout is taken,
the commit's other settings are recorded, the layout-driven ones (sequence_parallel, overlap_p2p_comm,
align_param_gather, overlap_param_gather_with_optimizer_step) follow the code's rules applied to the table's layout,
and a preset of another commit or branch whose layout matches is in `recipe["alt_recipe"]` where one was found.

Uncertain: the four 25.11 "w/o MTP" rows (no main-line preset has their layouts or MTP off; the test branch
gaod/r0.2.0_test, d19cb73c8 / 4fabba48d 2025-12-05, has GB300 PP 2 VP 4 EP 32 and GB200 PP 4 VP 4 EP 64 at GBS 4096
with mtp_num_layers=None and layout "Et*3|(t*4|)*14ttL"; nothing found for GB200 PP 8 VP 4 EP 32); the 25.09 rows'
precision and pipeline layout (the yaml's layout "Et|(tt|)*30mL" has 32 virtual stages, which fits only the H100
PP 8 x VP 4; the B200 yaml has TP 2 where the table has TP 1); the 25.11 GB300 GBS 2048 row (preset PP 4 VP 4, table
PP 8 VP 2); the GBS 15360 row (its preset variant exists only on a release branch, 3d297102f).

Shapes (DEEPSEEK_V3_SHAPES): DeepSeekV3ModelProvider in src/megatron/bridge/models/deepseek/deepseek_provider.py
(c0b9a0003; the same at 97ad8cc6f) and the bridge deepseek_v3_bridge.py (moe_layer_freq from first_k_dense_replace,
shared-expert width moe_intermediate_size x n_shared_experts, RMSNorm, SwiGLU, untied embeddings, sigmoid router
with expert bias, moe_router_pre_softmax, seq_aux_loss). Every recipe builds the model with
AutoBridge.from_hf_pretrained("deepseek-ai/DeepSeek-V3"): the HF config.json is not in the mirror; its values
(128 heads, MLA ranks and head dims, n_group 8, topk_group 4, num_nextn_predict_layers 1) are those of the
repository's own fixture tests/unit_tests/models/deepseek/test_deepseek_bridges.py@c0b9a0003, mapped by
model_bridge.CONFIG_MAPPING (qk_nope_head_dim -> qk_head_dim, qk_rope_head_dim -> qk_pos_emb_head_dim). The bridge
itself leaves mtp_num_layers None ("TODO: mtp"); the recipes set 1. Vocabulary 129,280 is a multiple of 1,280, so
no padding; the model keeps the HF vocabulary over the recipes' NullTokenizer (setup._validate_and_set_vocab_size;
26.08: use_tokenizer_vocab_size=False). The tables' model FLOPs per token are one figure in every container
(1635e12 / 6288 = 260 G, 1670 / 6422 = 260 G, 961 / 3848 = 250 G for the w/o MTP BF16 row: the MTP layer's share
shows).

What the planner may lack (read in plan/, nothing run): MLA attention (latent q/kv projections, separate rope and
nope head dims) and its FLOPs; dense layers before the MoE ones (moe_layer_freq) and a shared expert beside the
routed ones; the MTP layer (a 62nd transformer layer plus its own output head) and uneven pipeline layouts that
place the embedding, MTP and loss as stages ("Et*4|(t*4|)*14tmL"); group-limited routing; token-drop capacity;
the flex dispatchers (HybridEP's SMs, DeepEP); the EP all-to-all overlap with delayed wgrad; CUDA graphs by scope,
paged stash and the per-rank token budget; FP8 attention; TE's op fuser; selective recompute of MLA up-projections,
MLPs, MoE activations; the precision-aware optimizer's bf16 moments; the 26.08 recipes' process environment
(`recipe["env"]`).
"""

from __future__ import annotations

DEEPSEEK_V3_SHAPES = {
    "v3": {
        "hf_id": "deepseek-ai/DeepSeek-V3",
        "provider": (
            "DeepSeekV3ModelProvider(MLAModelProvider), src/megatron/bridge/models/deepseek/deepseek_provider.py@"
            "c0b9a0003 (same at 97ad8cc6f); every recipe read builds AutoBridge.from_hf_pretrained(hf_id) through "
            "deepseek_v3_bridge.py and model_bridge.CONFIG_MAPPING"
        ),
        "num_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 128,  # HF config (the repo's test fixture of it); the provider class leaves it unset
        "multi_latent_attention": True,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_head_dim": 128,  # qk_nope_head_dim
        "qk_pos_emb_head_dim": 64,  # qk_rope_head_dim
        "v_head_dim": 128,
        "qk_layernorm": True,  # RMSNorm on the q and kv latents
        "ffn_hidden_size": 18432,  # the 3 dense layers' SwiGLU width
        "moe_ffn_hidden_size": 2048,  # each routed expert
        "num_moe_experts": 256,
        "moe_router_topk": 8,
        "moe_shared_expert_intermediate_size": 2048,  # 1 shared expert x 2048, in every MoE layer
        "moe_layer_freq": [0] * 3 + [1] * 58,  # first_k_dense_replace 3: layers 0-2 dense, 3-60 MoE
        "first_k_dense": 3,
        "mtp_num_layers": 1,  # HF num_nextn_predict_layers 1; the recipes set 1 (0 in the 'w/o MTP' rows)
        "mtp_loss_scaling_factor": 0.1,
        "vocab_size": 129280,  # = 101 x 1280 (make_vocab_size_divisible_by 1280): no padding
        "make_vocab_size_divisible_by": 1280,
        "share_embeddings_and_output_weights": False,
        "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,  # aux-loss-free balancing bias (HF e_score_correction_bias)
        "moe_router_num_groups": 8,  # n_group
        "moe_router_group_topk": 4,  # topk_group (node-limited / group routing)
        "moe_router_topk_scaling_factor": 2.5,
        "moe_router_pre_softmax": True,  # the bridge's
        "moe_router_load_balancing_type": "seq_aux_loss",
        "moe_aux_loss_coeff": 0.0001,
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-06,
        "activation": "swiglu",
        "add_bias_linear": False,
        "position_embedding_type": "rope",  # YaRN: factor 40, original_max_position_embeddings 4096
        "rotary_base": 10000.0,
        "rotary_scaling_factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
}


ROWS = [
    dict(
        case="MB DeepSeek-V3 GB300x256 MXFP8", model="v3", system="DGX-GB300", gpus=256, gbs=4096, mbs=1, seq=4096,
        tp=1, pp=2, cp=1, vp=8, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=6288,
        model_tflops_per_gpu=1635, container="26.08", commit="4ab94dfad",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_256gpu_gb300_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/deepseek/gb300/deepseek_v3.py@4ab94dfad; base "
                "deepseek_v3_pretrain_config = deepseek_v3_pretrain_1024gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py; _deepseek_v3_common and "
                "_enable_deepseek_full_iteration_mxfp8, perf_recipes/deepseek/common.py; _benchmark_common, "
                "perf_recipes/_common.py)"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True, "fp8_output_proj": True, "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": 1.5,
            "moe_paged_stash": True, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": [], "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL", "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False, "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": True, "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": True,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "te_rng_tracker": True,
            },
            "env": {
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0,
                "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 32,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72,
                "USE_MNNVL": 1,
                "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_NORM_BWD_USE_CUDNN": 1,
                "NVTE_NORM_FWD_USE_CUDNN": 1,
                "NVTE_ALLOW_NONDETERMINISTIC_ALGO": 0,
            },
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06.01 6,304 / 1,640 (381d0b825); 26.06 6,338 / 1,648 (63b08b397; "
            "preset DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2@63b08b397 already MBS 1, full-iteration graph, EP "
            "A2A overlap, cuteDSL grouped MLP, FP8 attention, no recompute). recompute_granularity 'selective' "
            "with recompute_modules [] (nothing recomputed). The full-iteration graph brings the 1.5 per-rank "
            "HybridEP token budget and paged stash; routing is force-balanced (dropless per the table's footnote). "
            "overlap_param_gather_with_optimizer_step not enabled for MXFP8 (not called in the fp8mx recipe; "
            "excluded for fp8_mx in the scripts' set_post_overrides since c0b9a0003). Layout 'Et*4|(t*4|)*14tmL': "
            "16 virtual stages (PP 2 x VP 8), embedding + 4 layers first, 1 layer + MTP + loss last. Optimizer: "
            "precision-aware, bf16 main grads and moments (the recipe's)."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB300x256 MXFP8 gbs15360", model="v3", system="DGX-GB300", gpus=256, gbs=15360, mbs=1,
        seq=4096, tp=1, pp=2, cp=1, vp=8, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=6422,
        model_tflops_per_gpu=1670, container="26.06", commit="63b08b397",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_gb300 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@63b08b397), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2 "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py (+ set_full_iter_cg_configs; set_workload_base_configs: "
                "cutedsl_fused_grouped_mlp, fp8_dot_product_attention)"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True, "fp8_output_proj": True, "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": 1.5,
            "moe_paged_stash": True, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": [], "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL", "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False, "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": True, "manual_gc": True,
            "manual_gc_interval": 5, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": True,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "te_rng_tracker": True,
            },
            "env": "not read (perf_plugins.py@63b08b397)",
            "table_vs_recipe": "table GBS 15360; the preset at 63b08b397 (FP8_MX_V2) has global_batch_size=4096",
            "alt_recipe": {
                "source": (
                    "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_GBS15360 @3d297102f (release-branch commit, "
                    "2026-06-12, not an ancestor of 63b08b397): replace(..._GB300_FP8_MX_V2, "
                    "global_batch_size=15360)"
                ),
                "gbs": 15360,
            },
        },
        notes=(
            "Only container with this layout (26.06; kept in the 26.06 archive tables). GA 60 (15,360 / (128 DP x "
            "MBS 1)). Everything but the GBS is the 26.06 GB300 MXFP8 preset (row 'MB DeepSeek-V3 GB300x256 MXFP8' "
            "at 26.06: 6,338 / 1,648). fp8_output_proj set by the gb300 builder for mxfp8 (63b08b397). "
            "manual_gc_interval 5 (the recipe's; the scripts do not change it). "
            "overlap_param_gather_with_optimizer_step excluded for fp8_mx (set_post_overrides)."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB300x256 MXFP8 mbs2", model="v3", system="DGX-GB300", gpus=256, gbs=4096, mbs=2,
        seq=4096, tp=1, pp=2, cp=1, vp=8, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=4992,
        model_tflops_per_gpu=1298, container="26.04.01", commit="21d102f5e",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_gb300 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@21d102f5e), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2 (= _GB300_V2 = _GB300_V1 with GBS 4096) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none (preset sets cuda_graph_scope=[] and no impl; the recipe's 'none')",
            "cuda_graph_scope": [], "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"],
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": True,
            "align_param_gather": True, "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728,
            "tp_comm_overlap": False, "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False, "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": False,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
            },
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Figure revised within 26.04.01: 4,976 / 1,294 at 17a381f95, 4,992 / 1,298 at 21d102f5e. Same layout, "
            "earlier figures: 26.04 4,965 / 1,290 (74695a06d); 26.02.01 4,691 / 1,219 (cfeddcd94); 26.02 4,612 / "
            "1,199 (c0b9a0003); the GB300 preset's MBS 2 / PP 2 / VP 8 / EP 32 / layout 'Et*4|(t*4|)*14tmL' is the "
            "same at all four commits. No CUDA graphs, no EP overlap, recompute mla_up_proj, HybridEP (32 SMs). "
            "overlap_param_gather_with_optimizer_step excluded for fp8_mx. 26.06 moved GB300 to MBS 1 with "
            "full-iteration graphs (row 'MB DeepSeek-V3 GB300x256 MXFP8')."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB300x256 MXFP8 gbs2048", model="v3", system="DGX-GB300", gpus=256, gbs=2048, mbs=1,
        seq=4096, tp=1, pp=8, cp=1, vp=2, ep=64, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=3943,
        model_tflops_per_gpu=1026, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_gb300 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@97ad8cc6f), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_BASE_CONFIG (= GB300_BASE_CONFIG) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": "selective",
            "recompute_modules": ["moe_act"], "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": False, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": (
                "[['embedding'] + ['decoder'] * 4] + [['decoder'] * 4] * 14 + [['decoder', 'mtp', 'loss']]"
            ),
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "te_rng_tracker": True,
            },
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table PP 8 VP 2; the preset at 97ad8cc6f (and v0.2.0) has PP 4 VP 4 (EP 64, GBS 2048 as the "
                "table)"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.11 label 'FP8-MX', GA 64, unlabelled (neither 'w/ MTP' nor 'w/o MTP'): the recipe keeps "
            "mtp_num_layers=1. Published at 97ad8cc6f, removed at 1804c076f (replaced by the 'w/o MTP' GBS 4096 "
            "rows); kept as the twelfth set kept rows removed within a container. Layout: the recipe's (8, 2) "
            "entry, 16 virtual stages of 4 layers (embedding with the first, MTP + loss after the 61st). The "
            "builder turns overlap_param_gather off for fp8_mx ('keeping this enabled causes NaN grad norm'); "
            "set_post_overrides@97ad8cc6f sets overlap_param_gather_with_optimizer_step (DP 32, PP 8, VP 2, no "
            "fp8_mx exclusion yet). HybridEP (flex_dispatcher_backend.py@97ad8cc6f: GB200/GB300 only), 32 SMs."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB300x256 BF16 w/o MTP", model="v3", system="DGX-GB300", gpus=256, gbs=4096, mbs=1,
        seq=4096, tp=1, pp=2, cp=1, vp=4, ep=32, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=3848,
        model_tflops_per_gpu=961, container="25.11", commit="1804c076f",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_gb300 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@1804c076f), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BF16_BASE_CONFIG (= GB300_BASE_CONFIG) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": "w/o MTP", "precision_recipe": "bf16_mixed", "fp8_recipe": None,
            "fp8_param_gather": False, "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set", "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "mtp_num_layers": 0, "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep", "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True,
            "moe_permute_fusion": True, "moe_router_fusion": True, "moe_router_dtype": "fp32",
            "moe_router_load_balancing_type": "seq_aux_loss", "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None, "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False,
            "shared_experts": "1 x 2048 (always active)", "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
            "recompute_granularity": "selective", "recompute_modules": ["moe_act"], "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "uncertain (no (2, 4) entry in the recipe's map)",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "te_rng_tracker": True,
            },
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table GBS 4096 PP 2 VP 4 EP 32, 'w/o MTP'; the preset at 1804c076f (unchanged since 97ad8cc6f) "
                "has GBS 2048 PP 4 VP 4 EP 64 and the recipe mtp_num_layers=1"
            ),
            "alt_recipe": {
                "source": (
                    "DEEPSEEK_V3_GB300_BASE_CONFIG on branch gaod/r0.2.0_test (d19cb73c8 'gb300 changes' / "
                    "4fabba48d 'gb200changes', 2025-12-05; tip 6b296ac10), "
                    "scripts/performance/configs/deepseek/{workload_base_configs,deepseek_llm_pretrain}.py"
                ),
                "gbs": 4096,
                "pp": 2,
                "vp": 4,
                "ep": 32,
                "mtp_num_layers": 0,
                "pipeline_model_parallel_layout": "Et*3|(t*4|)*14ttL",
                "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
                "recompute_modules": [],
                "note": (
                    "at the branch tip (5df97522b 'test no att cg') GB300 has cuda_graph_scope ['moe_router', "
                    "'moe_preprocess'] and recompute_modules ['mlp', 'moe_act']; the layout's 16 virtual stages do "
                    "not fit PP 2 x VP 4 = 8"
                ),
            },
        },
        notes=(
            "25.11 label 'DeepSeekV3 (w/o MTP)', BF16, GA 32. Published at 1804c076f, unchanged to the newest "
            "archive. Recipe uncertain: no main-line preset has this layout; the test branch gaod/r0.2.0_test has "
            "it with MTP off (mtp_num_layers=None) and layout 'Et*3|(t*4|)*14ttL' (alt_recipe). Settings recorded "
            "are the main-line preset's other settings at 1804c076f; overlap_param_gather_with_optimizer_step from "
            "set_post_overrides (DP 128, PP 2, VP 4); BF16: use_precision_aware_optimizer forced True by "
            "set_post_overrides."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB300x256 MXFP8 w/o MTP", model="v3", system="DGX-GB300", gpus=256, gbs=4096, mbs=1,
        seq=4096, tp=1, pp=2, cp=1, vp=4, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=4357,
        model_tflops_per_gpu=1088, container="25.11", commit="1804c076f",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_gb300 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@1804c076f), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_BASE_CONFIG (= GB300_BASE_CONFIG) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": "w/o MTP", "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 0,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": "selective",
            "recompute_modules": ["moe_act"], "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": False, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "uncertain (no (2, 4) entry in the recipe's map)",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "te_rng_tracker": True,
            },
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table GBS 4096 PP 2 VP 4 EP 32, 'w/o MTP'; the preset at 1804c076f has GBS 2048 PP 4 VP 4 EP 64 "
                "and the recipe mtp_num_layers=1"
            ),
            "alt_recipe": {
                "source": (
                    "DEEPSEEK_V3_GB300_BASE_CONFIG on branch gaod/r0.2.0_test (d19cb73c8 'gb300 changes' / "
                    "4fabba48d 'gb200changes', 2025-12-05; tip 6b296ac10), "
                    "scripts/performance/configs/deepseek/{workload_base_configs,deepseek_llm_pretrain}.py"
                ),
                "gbs": 4096,
                "pp": 2,
                "vp": 4,
                "ep": 32,
                "mtp_num_layers": 0,
                "pipeline_model_parallel_layout": "Et*3|(t*4|)*14ttL",
                "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
                "recompute_modules": [],
                "note": (
                    "at the branch tip (5df97522b 'test no att cg') GB300 has cuda_graph_scope ['moe_router', "
                    "'moe_preprocess'] and recompute_modules ['mlp', 'moe_act']; the layout's 16 virtual stages do "
                    "not fit PP 2 x VP 4 = 8"
                ),
            },
        },
        notes=(
            "25.11 label 'DeepSeekV3 (w/o MTP)', 'FP8-MX', GA 32. Published at 1804c076f. Recipe uncertain as for "
            "the BF16 row (alt_recipe: gaod/r0.2.0_test). The builder turns overlap_param_gather off for fp8_mx; "
            "overlap_param_gather_with_optimizer_step from set_post_overrides@1804c076f (no fp8_mx exclusion yet)."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB200x256 MXFP8", model="v3", system="DGX-GB200", gpus=256, gbs=4096, mbs=1, seq=4096,
        tp=1, pp=4, cp=1, vp=4, ep=64, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=4912,
        model_tflops_per_gpu=1276, container="26.08", commit="4ab94dfad",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/deepseek/gb200/deepseek_v3.py@4ab94dfad; base "
                "deepseek_v3_pretrain_config, src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py; "
                "_deepseek_v3_common, _enable_deepseek_full_iteration_mxfp8, perf_recipes/deepseek/common.py; "
                "_benchmark_common, perf_recipes/_common.py)"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": False, "fp8_output_proj": True, "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": 1.5,
            "moe_paged_stash": True, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"], "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": (
                "[['embedding'] + ['decoder'] * 4] + [['decoder'] * 4] * 14 + [['decoder', 'mtp', 'loss']]"
            ),
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 100, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": True,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "te_rng_tracker": True,
            },
            "env": {
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0,
                "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 64,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72,
                "USE_MNNVL": 1,
                "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_NORM_BWD_USE_CUDNN": 1,
                "NVTE_NORM_FWD_USE_CUDNN": 1,
                "NVTE_ALLOW_NONDETERMINISTIC_ALGO": 0,
            },
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06.01 4,928 / 1,280 (381d0b825); 26.06 4,969 / 1,292 (63b08b397; "
            "preset GB200_FP8_MX_V2 already full-iteration graphs + EP overlap + cuteDSL grouped MLP); 26.04.01 "
            "4,256 / 1,106 (21d102f5e; 4,256 / 1,105 at 17a381f95); 26.04 4,193 / 1,090 (74695a06d); 26.02.01 "
            "4,021 / 1,046 (cfeddcd94); 26.02 3,955 / 1,028 (c0b9a0003). Up to 26.04.01 the preset was TE graphs "
            "of attn + moe_router + moe_preprocess without EP overlap (recompute mla_up_proj; 'mlp' from "
            "74695a06d). The 26.08 recipe sets TE graphs and then _enable_deepseek_full_iteration_mxfp8 replaces "
            "them by the full-iteration graph (scope []). FP8 attention off (fp8_dot_product_attention=False). "
            "Layout: the recipe's (4, 4) entry, 16 virtual stages of 4 layers."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB200x256 MXFP8 gbs2048", model="v3", system="DGX-GB200", gpus=256, gbs=2048, mbs=1,
        seq=4096, tp=1, pp=4, cp=1, vp=4, ep=64, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=3653,
        model_tflops_per_gpu=949, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_gb200 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@97ad8cc6f), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_BASE_CONFIG (= GB200_BASE_CONFIG) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"], "recompute_granularity": "selective",
            "recompute_modules": ["mla_up_proj"], "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": False, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": (
                "[['embedding'] + ['decoder'] * 4] + [['decoder'] * 4] * 14 + [['decoder', 'mtp', 'loss']]"
            ),
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "te_rng_tracker": True,
            },
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "25.11 label 'FP8-MX', unlabelled (MTP on: recipe mtp_num_layers=1), GA cell malformed ('32 64'; 2048 "
            "/ (64 DP x MBS 1) = 32). Published at 97ad8cc6f, removed at 1804c076f. Earlier figure, near layout: "
            "25.09 '3454 (2835)' / '899 (738)' (tokendrop rows). The builder turns overlap_param_gather off for "
            "fp8_mx; set_post_overrides sets overlap_param_gather_with_optimizer_step (DP 64, PP 4, VP 4). "
            "HybridEP, 32 SMs."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB200x256 BF16 w/o MTP", model="v3", system="DGX-GB200", gpus=256, gbs=4096, mbs=1,
        seq=4096, tp=1, pp=4, cp=1, vp=4, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=3139,
        model_tflops_per_gpu=782, container="25.11", commit="1804c076f",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_gb200 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@1804c076f), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_BF16_BASE_CONFIG (= GB200_BASE_CONFIG) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": "w/o MTP", "precision_recipe": "bf16_mixed", "fp8_recipe": None,
            "fp8_param_gather": False, "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set", "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "mtp_num_layers": 0, "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep", "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True,
            "moe_permute_fusion": True, "moe_router_fusion": True, "moe_router_dtype": "fp32",
            "moe_router_load_balancing_type": "seq_aux_loss", "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None, "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False,
            "shared_experts": "1 x 2048 (always active)", "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["moe_router", "moe_preprocess"],
            "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"], "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "uncertain ('Et*3|(t*4|)*14ttL' in alt_recipe)",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "te_rng_tracker": True,
            },
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table GBS 4096, 'w/o MTP'; the preset at 1804c076f has GBS 2048 and the recipe mtp_num_layers=1 "
                "(PP 4 VP 4 EP 64 as the table)"
            ),
            "alt_recipe": {
                "source": (
                    "DEEPSEEK_V3_GB200_BASE_CONFIG on branch gaod/r0.2.0_test (d19cb73c8 'gb300 changes' / "
                    "4fabba48d 'gb200changes', 2025-12-05; tip 6b296ac10), "
                    "scripts/performance/configs/deepseek/{workload_base_configs,deepseek_llm_pretrain}.py"
                ),
                "gbs": 4096,
                "pp": 4,
                "vp": 4,
                "ep": 64,
                "mtp_num_layers": 0,
                "pipeline_model_parallel_layout": "Et*3|(t*4|)*14ttL",
                "cuda_graph_scope": ["moe_router", "moe_preprocess"],
                "recompute_modules": ["mla_up_proj"],
            },
        },
        notes=(
            "25.11 label 'DeepSeekV3 (w/o MTP)', BF16, GA 64. Published at 1804c076f. The test branch "
            "gaod/r0.2.0_test (4fabba48d) has exactly this layout with MTP off and layout 'Et*3|(t*4|)*14ttL' (16 "
            "stages = PP 4 x VP 4; 3 layers + embedding first, 2 layers + loss last): taken as the likely recipe, "
            "uncertain. BF16: precision-aware optimizer (set_post_overrides)."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB200x256 MXFP8 w/o MTP", model="v3", system="DGX-GB200", gpus=256, gbs=4096, mbs=1,
        seq=4096, tp=1, pp=8, cp=1, vp=4, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=4018,
        model_tflops_per_gpu=1003, container="25.11", commit="1804c076f",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_gb200 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@1804c076f), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_BASE_CONFIG (= GB200_BASE_CONFIG) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": "w/o MTP", "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 0,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"], "recompute_granularity": "selective",
            "recompute_modules": ["mla_up_proj"], "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": False, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "uncertain (PP 8 x VP 4 = 32 virtual stages; no map entry, no preset)",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "te_rng_tracker": True,
            },
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table GBS 4096 PP 8 VP 4 EP 32, 'w/o MTP'; the preset at 1804c076f has GBS 2048 PP 4 VP 4 EP 64 "
                "and mtp_num_layers=1; no preset found anywhere with PP 8 VP 4 EP 32"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.11 label 'DeepSeekV3 (w/o MTP)', 'FP8-MX', GA 128. Published at 1804c076f. Recipe uncertain: only "
            "the precision handling (overlap_param_gather off for fp8_mx; overlap_param_gather_with_optimizer_step "
            "from set_post_overrides, DP 32) and the GB200 preset's other settings at 1804c076f are recorded."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB200x256 FP8-CS tokendrop", model="v3", system="DGX-GB200", gpus=256, gbs=2048, mbs=1,
        seq=4096, tp=1, pp=4, cp=1, vp=4, ep=64, etp=1, fsdp=0, precision="FP8-CS", tokens_per_gpu=3454,
        model_tflops_per_gpu=899, container="25.09", commit="ea2990630",
        recipe={
            "builder": (
                "scripts/performance/run_script.py@ea2990630 (deepseek branch: deepseek_v3_pretrain_config(pp=4, "
                "vp=8, layout='Et|(tt|)*30mL'), apply_moe_token_drop), "
                "configs/deepseek/deepseek_v3_llm_pretrain.yaml perf_matrix.gb200.num_gpus_256, utils/helpers.py"
            ),
            "table_label": "tokendrop", "precision_recipe": "bf16_with_fp8_current_scaling_mixed",
            "fp8_recipe": "tensorwise", "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": False, "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1, "sequence_parallel": False,
            "mtp_num_layers": 1, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": "not set (recipe default False)", "moe_expert_capacity_factor": 1.0,
            "moe_pad_expert_input_to_capacity": True, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": True, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj", "mlp", "moe_act"],
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": True,
            "align_param_gather": True, "overlap_param_gather_with_optimizer_step": "not set",
            "bucket_size": 134217728, "tp_comm_overlap": False, "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "uncertain (yaml 'Et|(tt|)*30mL' has 32 stages)",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": "not read", "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
            },
            "env": "not read",
            "table_vs_recipe": (
                "table PP 4 VP 4; the yaml at ea2990630 has pp 4 vp 8 and layout 'Et|(tt|)*30mL' (32 virtual "
                "stages); precision not in the table"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.09 label 'DeepSeekV3 (tokendrop)' (added at fa0315ae2; unlabelled at ea2990630), GA 32, no "
            "precision column. The unparenthesised figure; the footnote says the parenthesised one uses finer "
            "quantization (32x32 on GB200/B200), so this one is read as per-tensor FP8: the yaml's fp8_cs "
            "(helpers.get_precision_config: current scaling, first_last_layers_bf16 False). Uncertain: precision "
            "(fp8_cs or the scripts' default fp8_recipe 'ds'), layout (the yaml's 32-stage layout cannot fit PP 4 "
            "x VP 4). Token drop: capacity factor 1.0 with padding to capacity (run_script: use_tokendrop for "
            "b200/gb200), so no DeepEP, alltoall dispatcher, shared-expert overlap on, no EP A2A overlap, "
            "overlap_grad_reduce on, no CUDA graphs (yaml cuda_graphs false). GB200 4 GPUs a node."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 GB200x256 MXFP8 tokendrop", model="v3", system="DGX-GB200", gpus=256, gbs=2048, mbs=1,
        seq=4096, tp=1, pp=8, cp=1, vp=2, ep=64, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=2835,
        model_tflops_per_gpu=738, container="25.09", commit="ea2990630",
        recipe={
            "builder": (
                "scripts/performance/run_script.py@ea2990630 (deepseek branch, apply_moe_token_drop), "
                "configs/deepseek/deepseek_v3_llm_pretrain.yaml perf_matrix.gb200.num_gpus_256 (fp8_mx), "
                "utils/helpers.py"
            ),
            "table_label": "tokendrop", "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": "not set (recipe default False)", "moe_expert_capacity_factor": 1.0,
            "moe_pad_expert_input_to_capacity": True, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": True, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj", "mlp", "moe_act"],
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": True,
            "align_param_gather": True, "overlap_param_gather_with_optimizer_step": "not set",
            "bucket_size": 134217728, "tp_comm_overlap": False, "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "uncertain (yaml 'Et|(tt|)*30mL' has 32 stages)",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": "not read", "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": False,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
            },
            "env": "not read",
            "table_vs_recipe": (
                "table PP 8 VP 2 GA 64 (the parenthesised cells); the yaml at ea2990630 has pp 4 vp 8; precision "
                "not in the table"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.09 'DeepSeekV3 (tokendrop)', the parenthesised cells 'PP 4 (8)', 'VP 4 (2)', 'GA 32 (64)', '3454 "
            "(2835)', '899 (738)': the footnote's finer quantization ('32x32 for both weights and activations' on "
            "GB200/B200), read as MXFP8 (the yaml's fp8_mx; MXFP8 blocks are 1x32): uncertain. Token drop as the "
            "FP8-CS row; run_script turns the TE op fuser off for mx."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 B300x256 MXFP8 mbs2", model="v3", system="DGX-B300", gpus=256, gbs=4096, mbs=2,
        seq=4096, tp=1, pp=8, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=3541,
        model_tflops_per_gpu=920, container="26.06", commit="8f341b04f",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_b300 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@8f341b04f), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2 (= _B300_BF16_V2 = _B300_V2) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": "selective",
            "recompute_modules": ["mla_up_proj"], "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": (
                "[['embedding'] + ['decoder'] * 8] + [['decoder'] * 8] * 6 + [['decoder'] * 5 + ['mtp', 'loss']]"
            ),
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": False,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "te_rng_tracker": True,
                "batch_p2p_comm": True,
            },
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.04.01 3,456 / 898 (21d102f5e; 3,440 / 895 at 17a381f95, the preset's "
            "first MBS 2 / PP 8 / TE graphs). No later container has B300 rows. HybridEP on DGX-B300 (EP 8 inside "
            "one node; flex_dispatcher_backend allows hybridep on major 10), 32 SMs, no EP overlap, recompute "
            "mla_up_proj. PP 8 without VP: the recipe's (8, 1) layout (embedding + 8 layers first, 5 layers + MTP "
            "+ loss last), batch_p2p_comm. overlap_param_gather_with_optimizer_step needs VP > 1 (and is excluded "
            "for fp8_mx)."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 B300x256 MXFP8", model="v3", system="DGX-B300", gpus=256, gbs=4096, mbs=1, seq=4096,
        tp=1, pp=16, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=3131,
        model_tflops_per_gpu=814, container="26.04", commit="74695a06d",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_b300 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@74695a06d), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2 (= _B300_FP8_CS_V2 = _B300_V2) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"], "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": (
                "[['embedding'] + ['decoder'] * 4] + [['decoder'] * 4] * 14 + [['decoder', 'mtp', 'loss']]"
            ),
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": False,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "batch_p2p_comm": True,
            },
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Table VP 'n/a'. Same layout, earlier figures: 26.02.01 3,099 / 806 (cfeddcd94); 26.02 2,983 / 776 "
            "(c0b9a0003). No CUDA graphs, no EP overlap, recompute mla_up_proj, HybridEP 32 SMs (EP 8 in one "
            "node). Layout: the recipe's (16, 1) entry (4 layers a stage, embedding first, 1 layer + MTP + loss "
            "last). DP 16."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 B200x256 MXFP8 pp8", model="v3", system="DGX-B200", gpus=256, gbs=4096, mbs=1, seq=4096,
        tp=1, pp=8, cp=1, vp=2, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=3328,
        model_tflops_per_gpu=864, container="26.04.01", commit="17a381f95",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_b200 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@17a381f95), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep",
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": "selective",
            "recompute_modules": ["mla_up_proj", "mlp"], "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL", "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False, "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": True, "manual_gc": True,
            "manual_gc_interval": 5, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": False,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "te_rng_tracker": True,
            },
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Only container with this layout (26.04.01; unchanged by the 21d102f5e revision). No later container "
            "has B200 rows. DeepEP (flex) on DGX-B200 (flex_dispatcher_backend.py@17a381f95 allows deepep for "
            "names starting 'NVIDIA B200'), EP 32 across 4 nodes, EP A2A overlap with delayed wgrad "
            "(moe_a2a_overlap=True), TE graphs, recompute mla_up_proj + mlp, layout 'Et*4|(t*4|)*14tmL' (16 stages "
            "= PP 8 x VP 2). overlap_param_gather_with_optimizer_step excluded for fp8_mx."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 B200x256 MXFP8", model="v3", system="DGX-B200", gpus=256, gbs=4096, mbs=1, seq=4096,
        tp=1, pp=16, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=2815,
        model_tflops_per_gpu=732, container="26.04", commit="74695a06d",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_b200 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@74695a06d), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (= _B200_FP8_CS_V2 = _B200_V2) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": None, "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"], "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": (
                "[['embedding'] + ['decoder'] * 4] + [['decoder'] * 4] * 14 + [['decoder', 'mtp', 'loss']]"
            ),
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": False,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "batch_p2p_comm": True,
            },
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Table VP 'n/a'. Same layout, earlier figures: 26.02.01 2,790 / 725 (cfeddcd94); 26.02 2,689 / 699 "
            "(c0b9a0003). HybridEP (EP 8 in one node) 32 SMs, no CUDA graphs, no EP overlap, recompute "
            "mla_up_proj, the recipe's (16, 1) layout."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 B200x256 MXFP8 w/ MTP gbs2048", model="v3", system="DGX-B200", gpus=256, gbs=2048,
        mbs=1, seq=4096, tp=1, pp=16, cp=1, vp=1, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=2139,
        model_tflops_per_gpu=557, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_config_b200 "
                "(scripts/performance/configs/deepseek/deepseek_llm_pretrain.py@97ad8cc6f), preset "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_BASE_CONFIG (= _FP8_CS_ = B200_BASE_CONFIG) "
                "(scripts/performance/configs/deepseek/deepseek_workload_base_configs.py), recipe "
                "deepseek_v3_pretrain_config (src/megatron/bridge/recipes/deepseek/deepseek_v3.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "table_label": "w/ MTP", "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": True, "cuda_graph_impl": "not set (Megatron-Core default 'none')",
            "cuda_graph_scope": [], "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"],
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": True,
            "align_param_gather": False, "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728,
            "tp_comm_overlap": False, "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": (
                "[['embedding'] + ['decoder'] * 4] + [['decoder'] * 4] * 14 + [['decoder', 'mtp', 'loss']]"
            ),
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": 5, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "batch_p2p_comm": True,
            },
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "25.11 'FP8-MX', VP '1', GA 128; published unlabelled at 97ad8cc6f, labelled 'DeepSeekV3 (w/ MTP)' at "
            "1804c076f with the same figure. mtp_num_layers=1 (the recipe's). The preset sets no flex backend, so "
            "the all-to-all dispatcher with the shared-expert overlap (bridge default True). No CUDA graphs, no EP "
            "overlap, recompute mla_up_proj; the builder keeps overlap_param_gather for B200. Earlier figure, same "
            "layout: 25.09 '2265 (2159)' / '589 (562)' (tokendrop, own rows)."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 B200x256 FP8-CS tokendrop", model="v3", system="DGX-B200", gpus=256, gbs=2048, mbs=1,
        seq=4096, tp=1, pp=16, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="FP8-CS", tokens_per_gpu=2265,
        model_tflops_per_gpu=589, container="25.09", commit="ea2990630",
        recipe={
            "builder": (
                "scripts/performance/run_script.py@ea2990630 (deepseek branch, apply_moe_token_drop), "
                "configs/deepseek/deepseek_v3_llm_pretrain.yaml perf_matrix.b200.num_gpus_256, utils/helpers.py"
            ),
            "table_label": "tokendrop", "precision_recipe": "bf16_with_fp8_current_scaling_mixed",
            "fp8_recipe": "tensorwise", "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": False, "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1, "sequence_parallel": False,
            "mtp_num_layers": 1, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": "not set (recipe default False)", "moe_expert_capacity_factor": 1.0,
            "moe_pad_expert_input_to_capacity": True, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": True,
            "cuda_graph_impl": "yaml cuda_graphs true for fp8_cs (enable_cuda_graph, TE rng tracker)",
            "cuda_graph_scope": "not set", "recompute_granularity": "selective", "recompute_modules": None,
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": True,
            "align_param_gather": False, "overlap_param_gather_with_optimizer_step": "not set",
            "bucket_size": 134217728, "tp_comm_overlap": False, "overlap_p2p_comm": False,
            "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "uncertain (yaml 'Et|(tt|)*30mL' has 32 stages)",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": "not read", "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "batch_p2p_comm": True,
            },
            "env": "not read",
            "table_vs_recipe": (
                "table TP 1 (yaml tp 2, sequence parallel); PP 16 VP 1 EP 8 GBS 2048 as the yaml; precision not in "
                "the table"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.09 'DeepSeekV3 (tokendrop)' (label from fa0315ae2), GA 128, the unparenthesised figure, read as "
            "per-tensor FP8 current scaling (yaml fp8_cs; uncertain, see the GB200 FP8-CS row). Token drop "
            "(capacity 1.0, padded), alltoall, no EP overlap, shared-expert overlap on, no recompute modules set "
            "for B200 in run_script. Uncertain layout (yaml layout does not fit PP 16)."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 B200x256 MXFP8 tokendrop", model="v3", system="DGX-B200", gpus=256, gbs=2048, mbs=1,
        seq=4096, tp=1, pp=16, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=2159,
        model_tflops_per_gpu=562, container="25.09", commit="ea2990630",
        recipe={
            "builder": (
                "scripts/performance/run_script.py@ea2990630 (deepseek branch, apply_moe_token_drop), "
                "configs/deepseek/deepseek_v3_llm_pretrain.yaml perf_matrix.b200.num_gpus_256 (fp8_mx), "
                "utils/helpers.py"
            ),
            "table_label": "tokendrop", "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set", "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1, "sequence_parallel": False, "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": "not set (recipe default False)", "moe_expert_capacity_factor": 1.0,
            "moe_pad_expert_input_to_capacity": True, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": True,
            "cuda_graph_impl": "yaml cuda_graphs true for fp8_mx (enable_cuda_graph, TE rng tracker)",
            "cuda_graph_scope": "not set", "recompute_granularity": "selective", "recompute_modules": None,
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": True,
            "align_param_gather": False, "overlap_param_gather_with_optimizer_step": "not set",
            "bucket_size": 134217728, "tp_comm_overlap": False, "overlap_p2p_comm": False,
            "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "uncertain (yaml 'Et|(tt|)*30mL' has 32 stages)",
            "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": True,
            "manual_gc": True, "manual_gc_interval": "not read", "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": False,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "batch_p2p_comm": True,
            },
            "env": "not read", "table_vs_recipe": "table TP 1 (yaml tp 2); precision not in the table",
            "alt_recipe": None,
        },
        notes=(
            "25.09 'DeepSeekV3 (tokendrop)', the parenthesised figure '(2159)' / '(562)' ('32x32' quantization on "
            "B200), read as MXFP8 (yaml fp8_mx): uncertain. Otherwise as the B200 FP8-CS tokendrop row."
        ),
    ),
    dict(
        case="MB DeepSeek-V3 H100x1024 FP8-CS dropless", model="v3", system="DGX-H100", gpus=1024, gbs=8192, mbs=1,
        seq=4096, tp=2, pp=8, cp=1, vp=4, ep=64, etp=1, fsdp=0, precision="FP8-CS", tokens_per_gpu=1297,
        model_tflops_per_gpu=338, container="25.09", commit="ea2990630",
        recipe={
            "builder": (
                "scripts/performance/run_script.py@ea2990630 (deepseek branch: deepseek_v3_pretrain_config(pp=8, "
                "vp=4, enable_deepep=True, layout='Et|(tt|)*30mL')), "
                "configs/deepseek/deepseek_v3_llm_pretrain.yaml perf_matrix.h100.num_gpus_1024, utils/helpers.py"
            ),
            "table_label": "dropless", "precision_recipe": "bf16_with_fp8_current_scaling_mixed",
            "fp8_recipe": "tensorwise", "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": False, "fp8_dot_product_attention": "not set", "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1, "sequence_parallel": True,
            "mtp_num_layers": 1, "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "deepep (moe_enable_deepep)", "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True, "moe_permute_fusion": True, "moe_router_fusion": True,
            "moe_router_dtype": "fp32", "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False, "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False, "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj", "mlp"],
            "activation_offload": None, "overlap_grad_reduce": False,
            "overlap_param_gather": "not set (recipe DDP True)", "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": "not set", "bucket_size": 134217728,
            "tp_comm_overlap": "not set (recipe CommOverlapConfig default; no userbuffer map for deepseek)",
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": "Et|(tt|)*30mL", "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False, "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": True, "manual_gc": True,
            "manual_gc_interval": "not read", "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
            },
            "env": "not read", "table_vs_recipe": "matches (precision not in the table)", "alt_recipe": None,
        },
        notes=(
            "25.09 label 'DeepSeekV3 (dropless)' (from fa0315ae2), GA 128, no precision column; the only H100 "
            "DeepSeek-V3 figure in any table. Tokens/s 1,297 (no parenthesised value); TFLOP/s '338 (330)', the "
            "parenthesised 330 being the footnote's DeepSeek-style blockwise FP8 (128x128 weights, 1x128 "
            "activations; the yaml's fp8_ss): not made a row, no tokens/s published for it. 1,297 / 338 read as "
            "per-tensor current scaling (yaml fp8_cs): uncertain. DeepEP with force-balanced routing, EP A2A 1F1B "
            "overlap with delayed wgrad, recompute mla_up_proj + mlp, overlap_grad_reduce off, no CUDA graphs, "
            "layout 'Et|(tt|)*30mL' (32 stages = PP 8 x VP 4: embedding + 1 layer first, 30 stages of 2 layers, "
            "MTP + loss last)."
        ),
    ),
]
