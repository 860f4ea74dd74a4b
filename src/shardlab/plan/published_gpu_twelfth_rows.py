"""Megatron-Bridge's Qwen3 MoE pre-training rows (Qwen3_30B_a3B, Qwen3_235B_a22B), frozen as published inputs before
the planner was run on any of them. Pure data: nothing here is imported or evaluated by the planner yet.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and docs/performance-summary-archive.md, every
version of both in the mirror (22 commits, af6bc366d 2025-10-02 to 4ab94dfad 2026-08-11). The containers and the
commits that added (or changed) their Qwen3 rows:
  25.09     ea2990630 (labelled "(tokendrop)" at fa0315ae2; dropped at 97ad8cc6f, re-added at 2b8806b94)
  25.11     97ad8cc6f; 1804c076f replaced the 64-GPU 235B FP8-MX rows on GB300/GB200 by 256-GPU BF16 rows;
            5776a6d90 fixed the malformed H100 235B row (same figure)
  26.02     c0b9a0003          26.02.01  cfeddcd94          26.04  74695a06d
  26.04.01  17a381f95; 21d102f5e revised 7 of its 10 Qwen3 entries (some in TFLOP/s only)
  26.06     63b08b397; c270efc50 revised the H100 30B figure; 8f341b04f revised GB300 235B, added B300 30B
  26.06.01  381d0b825          26.08     4ab94dfad (the mirror's newest container)
68 (container, system, layout) entries in all versions (6 of them 25.09) give 23 rows.

Collection rule (the earlier sets'): one row per distinct (system, model, precision, layout) at its latest
container's figure; layout = GPUs, GBS, MBS, sequence, TP, PP, CP, VP, EP, ETP, FSDP. `commit` is the commit that
first published the row's figure (a figure revised within a container takes the revising commit). Earlier
containers' figures for the same layout, and superseded figures, are in each row's notes. Read as equal: 25.11
"FP8-MX" and 26.x "MXFP8" (precision "MXFP8"); 26.x "FP8" and 25.11 "FP8-CS" (precision "FP8-CS": the scripts build
it with get_precision_config("fp8_cs"), TE Float8 current scaling); VP "1" (25.11) and "n/a" (no interleaving; vp
keeps the row's own cell: 1 or None). The 26.06+ tables have no FSDP column and no table has an ETP column: fsdp=0
and etp=1 are the recipes' (use_megatron_fsdp=False, expert_tensor_parallel_size=1 in every preset and recipe read).
Rows removed within a container are kept, as in the tenth set (the two 25.11 64-GPU 235B FP8-MX rows). All rows:
4,096 tokens a sequence, CP 1, mock data (the scripts' default --data).

Not made rows: the 25.09 entries. Their tables are per system with no precision column, label every Qwen3 model
"(tokendrop)" (capacity-factor runs, not the dropless runs of 25.11 on), and give some figures a second value in
parentheses described as "a different quantization granularity". Each 25.09 layout reappears in 25.11 and is noted
in that row: GB200 30B "22775 (23723)", B200 30B 18066, H100 30B 10494, GB200 235B "4452 (4416)", B200 235B "4104
(4275)", H100 235B 1204 tokens/s/GPU. The unparenthesised GB200 and B200 figures may be a precision (FP8-CS?) no
later row has; the 25.09 yaml (scripts/performance/configs/qwen3/*.yaml@ea2990630) lists bf16, fp8_cs and fp8_mx for
those systems and the table does not say which ran, so they are left out for a reviewer to settle.

Recipes, read at each row's commit (paths in `recipe["builder"]`): up to 26.06, scripts/performance's presets
(configs/qwen/qwen3_workload_base_configs.py), builders (configs/qwen/qwen3_llm_pretrain.py), overrides
(utils/overrides.py: set_workload_base_configs, set_post_overrides) over src/megatron/bridge/recipes/qwen/
qwen3_moe.py; at 26.08 the flat recipes src/megatron/bridge/perf_recipes/qwen/{gb300,gb200}/qwen3_moe.py over
recipes/qwen/h100/qwen3_moe.py; with training/comm_overlap.py, mixed_precision.py and flex_dispatcher_backend.py at
the same commit. The scripts' defaults were followed (no CLI flags; from 26.02 config variant v2, else v1). Every
row: force-balanced routing (moe_router_force_load_balancing=True, "required for token dropless"), no capacity
factor (the scripts' --use_tokendrop defaults to None), grouped GEMM, permute and router fusion, router dtype not
set, aux-loss balancing, no shared experts, no recompute, no activation offload, ETP 1, the distributed optimizer
(no Megatron FSDP) with overlapped reduce-scatter (and all-gather, but for one row) in 128 Mi-element buckets (DP >
1 everywhere), gradients reduced in bf16, manual GC every 100 steps, TE cross entropy, rope and bias-activation
fusion, no custom pipeline layout; the 235B recipes count the embedding and the loss as pipeline layers (96 slots).
MXFP8 is bf16_with_mxfp8_mixed with fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag; FP8-CS is
bf16_with_fp8_current_scaling_mixed with fp8_param_gather and first_last_layers_bf16=False. "not set" in a recipe
means the setting was looked for and not set at that commit (the library default applies).

What differs between rows (recipe keys): the dispatcher (alltoall; flex with HybridEP, 32 SMs; DeepEP only ever set
with the alltoall type, so unused), CUDA graphs (none; TE graphs of moe_router + moe_preprocess, or attn +
moe_router + moe_preprocess; whole-iteration graphs, which bring paged stash, a 1.5 per-rank HybridEP token budget,
FP8 dot-product attention and TE's op fuser with the cuteDSL fused grouped MLP), the EP all-to-all overlap with
delayed weight gradients (overlap_moe_expert_parallel_comm, delay_wgrad_compute), tp_comm_overlap (TP 2 rows),
overlap_param_gather_with_optimizer_step. Where the table's layout and the preset at the publishing commit disagree
(11 rows, `recipe["table_vs_recipe"]`), the table's layout is taken, the commit's other settings are recorded, the
layout-driven ones (sequence_parallel, tp_comm_overlap, overlap_p2p_comm, align_param_gather,
overlap_param_gather_with_optimizer_step) follow the code's rules applied to the table's layout, and a preset of
another commit whose layout matches is in `recipe["alt_recipe"]` where one exists. Uncertain which recipe ran: the
25.11 rows other than H100 235B (no preset at 97ad8cc6f/1804c076f or tag v0.2.0 has their MBS/VP/TP/EP), the
26.02.01 235B rows (presets moved to 26.04's at cfeddcd94; the 26.02 presets at c0b9a0003 match the table; for B300
that decides the EP overlap) and the 26.02.01 H100 30B row (no preset of 26.02/26.02.01 has PP 2 VP 12 EP 8).

Shapes (QWEN3_SHAPES): Qwen3MoEModelProvider30B_A3B / 235B_A22B in src/megatron/bridge/models/qwen/
qwen_provider.py@cfeddcd94 (the same at ea2990630, 97ad8cc6f, c0b9a0003; the classes were removed at 4da8a6d93,
2026-03-25). Every recipe read builds the model with AutoBridge.from_hf_pretrained(<hf_id>): the run's shape is the
HF config.json's, mapped by qwen3_moe_bridge.py and model_bridge.CONFIG_MAPPING, which the mirror does not hold; the
provider classes are the repository's own statement of it. The tables' model FLOPs per token are one figure per
model in every container (22.8-23.2 G for 30B, 147.7-148.6 G for 235B: the tables' rounding). moe_layer_freq is set
by neither provider nor bridge: Megatron-Core's default 1 (transformer_config.py, read at the Megatron-LM mirror's
HEAD), every layer MoE; the bridge's export to HF writes decoder_sparse_step=1, "All layers are MoE in Qwen3 MoE"
(from 90739306b). From 4ab94dfad the bridge sets moe_router_pre_softmax = not norm_topk_prob (HF), the provider's
False before.

What the planner may lack (read in plan/, nothing run): an expert width apart from the dense `ffn` (all Qwen3 layers
are MoE, so ffn = moe_ffn_hidden_size describes them) and QK layernorm; the flex dispatchers (HybridEP, DeepEP) and
the SMs HybridEP holds (plan/comm.py plans Megatron-Core's all-to-all on the critical path); the EP all-to-all
overlap and delayed wgrad; CUDA graphs by scope (the earlier sets planned whole-iteration graphs as kernel_gap_s 0),
paged stash and the per-rank token budget; FP8 attention; TE's op fuser / cuteDSL grouped MLP; the MXFP8/FP8
parameter all-gather under the distributed optimizer and overlap_param_gather_with_optimizer_step; the 26.08
recipes' process environment (`recipe["env"]`).
"""
from __future__ import annotations

QWEN3_SHAPES = {
    "30b_a3b": {
        "hf_id": "Qwen/Qwen3-30B-A3B",
        "provider": "Qwen3MoEModelProvider30B_A3B(Qwen3MoEModelProvider), qwen_provider.py@cfeddcd94",
        "num_layers": 48,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_query_groups": 4,
        "kv_channels": 128,  # head dim: q is 32 x 128 = 4096 wide, twice the hidden size
        "ffn_hidden_size": 6144,  # the dense MLP width; unused, every layer is MoE
        "moe_ffn_hidden_size": 768,
        "num_moe_experts": 128,
        "moe_router_topk": 8,
        "vocab_size": 151936,  # 1187 x 128; should_pad_vocab False: not padded
        "share_embeddings_and_output_weights": False,
        "qk_layernorm": True,
        "moe_layer_freq": 1,  # not set by provider or bridge: Megatron-Core's default 1, every layer MoE
        "all_layers_moe": True,
        "shared_experts": None,  # no moe_shared_expert_intermediate_size (Qwen3-Next's provider sets one)
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-06,
        "activation": "swiglu",  # activation_func silu, gated_linear_unit True
        "add_bias_linear": False,
        "add_qkv_bias": False,
        "position_embedding_type": "rope",
        "rotary_base": 1000000.0,
        "moe_router_load_balancing_type": "aux_loss",
        "moe_aux_loss_coeff": 0.001,
        "moe_router_pre_softmax": False,
    },
    "235b_a22b": {
        "hf_id": "Qwen/Qwen3-235B-A22B",
        "provider": "Qwen3MoEModelProvider235B_A22B(Qwen3MoEModelProvider), qwen_provider.py@cfeddcd94",
        "num_layers": 94,
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "num_query_groups": 4,
        "kv_channels": 128,  # head dim: q is 64 x 128 = 8192 wide, twice the hidden size
        "ffn_hidden_size": 12288,  # the dense MLP width; unused, every layer is MoE
        "moe_ffn_hidden_size": 1536,
        "num_moe_experts": 128,
        "moe_router_topk": 8,
        "vocab_size": 151936,
        "share_embeddings_and_output_weights": False,
        "qk_layernorm": True,
        "moe_layer_freq": 1,
        "all_layers_moe": True,
        "shared_experts": None,
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-06,
        "activation": "swiglu",
        "add_bias_linear": False,
        "add_qkv_bias": False,
        "position_embedding_type": "rope",
        "rotary_base": 1000000.0,
        "moe_router_load_balancing_type": "aux_loss",
        "moe_aux_loss_coeff": 0.001,
        "moe_router_pre_softmax": False,
    },
}

ROWS = [
    dict(
        case="MB Qwen3-30B-A3B GB300x8 MXFP8", model="30b_a3b", system="DGX-GB300", gpus=8, gbs=512, mbs=8, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=44544,
        model_tflops_per_gpu=1029, container="26.08", commit="4ab94dfad",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/qwen/gb300/qwen3_moe.py@4ab94dfad; base "
                "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config, src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py; "
                "_benchmark_common, src/megatron/bridge/perf_recipes/_common.py; "
                "_enable_hybridep_full_iteration_mxfp8, src/megatron/bridge/perf_recipes/qwen/common.py)"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True, "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": 1.5, "moe_paged_stash": True, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": "not set",
            "account_for_loss_in_pipeline_split": "not set", "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": False, "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": True,
            "extra": {
                "high_priority_a2a_comm_stream": True, "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32, "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2, "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "offload_modules": [], "te_rng_tracker": True,
            },
            "env": {
                "CUDA_DEVICE_MAX_CONNECTIONS": 32, "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0, "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8, "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72, "USE_MNNVL": 1, "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20, "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20, "TORCH_NCCL_HIGH_PRIORITY": 1,
            },
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06.01 44,544 / 1,029 (381d0b825, identical); 26.06 45,275 / 1,041 "
            "(63b08b397); 26.04.01 31,744 / 729 (21d102f5e; first 31,232 / 723 at 17a381f95); 26.04 31,470 / 724 "
            "(74695a06d); 26.02.01 30,411 / 700 (cfeddcd94); 26.02 30,376 / 699 (c0b9a0003). The 26.06 preset "
            "(QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1 @63b08b397) already had the full-iteration graph, EP "
            "A2A overlap, cuteDSL grouped MLP and FP8 attention; up to 26.04.01 it was TE graphs of moe_router + "
            "moe_preprocess without EP overlap. tp_comm_overlap is requested by "
            "CommOverlapConfig(tp_comm_overlap=True) but TP 1 disables it (comm_overlap.py). The 1.5 per-rank "
            "budget (moe_expert_rank_capacity_factor) is HybridEP's static receive buffer for the graph; routing is "
            "force-balanced, the table calls the runs dropless."
        ),
    ),
    dict(
        case="MB Qwen3-30B-A3B GB300x8 MXFP8 mbs4", model="30b_a3b", system="DGX-GB300", gpus=8, gbs=512, mbs=4,
        seq=4096, tp=1, pp=1, cp=1, vp=1, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=28934,
        model_tflops_per_gpu=666, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_config_gb300 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@97ad8cc6f), preset "
                "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_BASE_CONFIG (= _FP8_CS_; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_30b_a3b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": "not set",
            "account_for_loss_in_pipeline_split": "not set", "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": "not set", "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set",
            "extra": {}, "env": "not read (perf_plugins.py)",
            "table_vs_recipe": "table MBS 4; the preset at 97ad8cc6f (and v0.2.0) has micro_batch_size=8",
            "alt_recipe": None,
        },
        notes=(
            "25.11 table label FP8-MX, VP '1' (no interleaving), GA 16 (= 512 / (8 x 4)). Only container with this "
            "layout; 26.02 on publish the preset's MBS 8 (row 'MB Qwen3-30B-A3B GB300x8 MXFP8'). hybridep via "
            "apply_flex_dispatcher_backend in the recipe (flex_dispatcher_backend.py@97ad8cc6f), "
            "moe_hybridep_num_sms 32 (_set_common_perf_overrides)."
        ),
    ),
    dict(
        case="MB Qwen3-30B-A3B GB200x8 MXFP8", model="30b_a3b", system="DGX-GB200", gpus=8, gbs=512, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=39936,
        model_tflops_per_gpu=923, container="26.08", commit="4ab94dfad",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/qwen/gb200/qwen3_moe.py@4ab94dfad; base "
                "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config, src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py; "
                "_benchmark_common, src/megatron/bridge/perf_recipes/_common.py; "
                "_enable_hybridep_full_iteration_mxfp8, src/megatron/bridge/perf_recipes/qwen/common.py)"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True, "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": 1.5, "moe_paged_stash": True, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": "not set",
            "account_for_loss_in_pipeline_split": "not set", "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": False, "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": True,
            "extra": {
                "high_priority_a2a_comm_stream": True, "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32, "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2, "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "offload_modules": [], "te_rng_tracker": True,
            },
            "env": {
                "CUDA_DEVICE_MAX_CONNECTIONS": 32, "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0, "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8, "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72, "USE_MNNVL": 1, "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20, "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20, "TORCH_NCCL_HIGH_PRIORITY": 1,
            },
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06.01 40,960 / 937 (381d0b825); 26.06 40,706 / 936 (63b08b397); "
            "26.04.01 26,112 / 599 (21d102f5e; 26,112 / 601 at 17a381f95); 26.04 26,032 / 599 (74695a06d); 26.02.01 "
            "26,373 / 607 (cfeddcd94); 26.02 26,084 / 600 (c0b9a0003); 25.11 23,766 / 547 (97ad8cc6f, 'FP8-MX', VP "
            "'1', GA 16; preset then: TE graphs of moe_router + moe_preprocess, hybridep, no EP overlap); 25.09 "
            "'22775 (23723)' / '524 (546)' (ea2990630, 'Qwen3_30B_a3B (tokendrop)', no precision column, the "
            "parenthesised figure being 'a different quantization granularity'; token-drop, not dropless). The "
            "26.06 preset (63b08b397) already had the full-iteration graph and EP overlap. tp_comm_overlap "
            "requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-30B-A3B B300x8 MXFP8", model="30b_a3b", system="DGX-B300", gpus=8, gbs=512, mbs=8, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=40769,
        model_tflops_per_gpu=938, container="26.06", commit="8f341b04f",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_config_b300 + set_full_iter_cg_configs "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@8f341b04f), preset "
                "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1 "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_30b_a3b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs: cutedsl_fused_grouped_mlp, "
                "apply_flex_dispatcher_backend)"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True, "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": 1.5, "moe_paged_stash": True, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": "not set",
            "account_for_loss_in_pipeline_split": "not set", "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": False, "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": True,
            "extra": {
                "high_priority_a2a_comm_stream": True, "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32, "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2, "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "offload_modules": [], "te_rng_tracker": True,
            },
            "env": {
                "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1, "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "+graph_capture_record_stream_reuse:True",
                "others": "not read (perf_plugins.py@8f341b04f)",
            },
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.04.01 30,720 / 704 (17a381f95); 26.04 30,553 / 703 (74695a06d); "
            "26.02.01 29,454 / 678 (cfeddcd94); 26.02 29,521 / 679 (c0b9a0003). HybridEP on a DGX-B300 (EP 8 inside "
            "one node): the preset's moe_flex_dispatcher_backend='hybridep', applied by set_workload_base_configs. "
            "Earlier presets (to 26.04.01): TE graphs of moe_router + moe_preprocess, no EP overlap. "
            "tp_comm_overlap requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-30B-A3B B200x8 MXFP8", model="30b_a3b", system="DGX-B200", gpus=8, gbs=512, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=27136,
        model_tflops_per_gpu=619, container="26.04.01", commit="17a381f95",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_config_b200 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@17a381f95), preset "
                "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1 (= _B200_BF16_V1; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_30b_a3b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": "not set",
            "account_for_loss_in_pipeline_split": "not set", "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": False, "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set",
            "extra": {}, "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.04 26,859 / 618 (74695a06d); 26.02.01 26,695 / 614 (cfeddcd94). Kept "
            "unchanged by the 26.04.01 revision (21d102f5e); no later container has B200 rows. HybridEP on DGX-B200 "
            "(EP 8 in one node): set_workload_base_configs@17a381f95 calls "
            "apply_flex_dispatcher_backend('hybridep'). tp_comm_overlap requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-30B-A3B B200x8 MXFP8 mbs1", model="30b_a3b", system="DGX-B200", gpus=8, gbs=512, mbs=1,
        seq=4096, tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=9691,
        model_tflops_per_gpu=223, container="26.02", commit="c0b9a0003",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_config_b200 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@c0b9a0003), preset "
                "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1 (= _FP8_CS_V1; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_30b_a3b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": "deepep (set, unused: alltoall)", "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True, "moe_permute_fusion": True, "moe_router_fusion": True,
            "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": "not set",
            "account_for_loss_in_pipeline_split": "not set", "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": False, "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set",
            "extra": {}, "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 25.11 9,299 / 214 (97ad8cc6f, 'FP8-MX', VP '1', GA 64); 25.09 18,066 / "
            "416 (ea2990630, 'tokendrop', no precision column, no parenthesised figure). The builder sets "
            "moe_token_dispatcher_type='alltoall' after the recipe's apply_flex_dispatcher_backend('deepep'), and "
            "set_workload_base_configs@c0b9a0003 does not re-apply a backend: the all-to-all dispatcher runs. "
            "Replaced from 26.02.01 by micro batch 4 (row 'MB Qwen3-30B-A3B B200x8 MXFP8')."
        ),
    ),
    dict(
        case="MB Qwen3-30B-A3B H100x16 FP8-CS", model="30b_a3b", system="DGX-H100", gpus=16, gbs=1024, mbs=1, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=16, etp=1, fsdp=0, precision="FP8-CS", tokens_per_gpu=8826,
        model_tflops_per_gpu=203, container="26.06", commit="c270efc50",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_config_h100 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@c270efc50), preset "
                "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_30b_a3b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py, precision scripts/performance/utils/precision.py"
            ),
            "precision_recipe": "bf16_with_fp8_current_scaling_mixed", "fp8_recipe": "tensorwise",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": "not set", "first_last_layers_bf16": False,
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": "not set",
            "account_for_loss_in_pipeline_split": "not set", "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": False, "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set",
            "extra": {}, "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Table label 'FP8': current scaling (get_precision_config('fp8_cs'): Float8 tensorwise, "
            "first_last_layers_bf16=False, fp8_param_gather=True). Figure revised: 8,467 / 195 at 63b08b397, 8,826 "
            "/ 203 at c270efc50. Same layout, earlier figures: 26.04.01 8,960 / 206 (21d102f5e; 8,960 / 204 at "
            "17a381f95); 26.04 8,901 / 205 (74695a06d). HybridEP on H100 (flex_dispatcher_backend.py accepts major "
            "8-10), EP 16 over two nodes. No CUDA graphs in the FP8_CS preset (the BF16 one has TE graphs)."
        ),
    ),
    dict(
        case="MB Qwen3-30B-A3B H100x16 FP8-CS pp2 vp12", model="30b_a3b", system="DGX-H100", gpus=16, gbs=1024, mbs=1,
        seq=4096, tp=1, pp=2, cp=1, vp=12, ep=8, etp=1, fsdp=0, precision="FP8-CS", tokens_per_gpu=9058,
        model_tflops_per_gpu=208, container="26.02.01", commit="cfeddcd94",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_config_h100 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@cfeddcd94), preset "
                "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_30b_a3b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_fp8_current_scaling_mixed", "fp8_recipe": "tensorwise",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": "not set", "first_last_layers_bf16": False,
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": "not set",
            "account_for_loss_in_pipeline_split": "not set", "use_distributed_optimizer": True,
            "use_megatron_fsdp": False, "use_precision_aware_optimizer": False, "manual_gc": True,
            "manual_gc_interval": 100, "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True, "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set",
            "extra": {}, "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table PP 2 VP 12 EP 8; the preset at cfeddcd94 (and c0b9a0003) is PP 1 EP 16 with HybridEP, no VP: "
                "no preset at 26.02/26.02.01 has this layout"
            ),
            "alt_recipe": {
                "source": "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_BASE_CONFIG @97ad8cc6f (25.11)", "pp": 2,
                "vp": 12, "ep": 8, "gbs": 512, "moe_token_dispatcher_type": "alltoall", "cuda_graph_impl": "not set",
                "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            },
        },
        notes=(
            "Table label 'FP8' (current scaling). Earlier figure, same layout: 26.02 5,113 / 118 (c0b9a0003). "
            "Dispatcher, graphs and EP overlap above are the cfeddcd94 preset's (set for its PP 1 EP 16 layout); "
            "the last preset with PP 2 VP 12 EP 8 is 25.11's (alt_recipe). overlap_p2p_comm / align_param_gather / "
            "overlap_param_gather_with_optimizer_step are the code's rules (comm_overlap.py, set_post_overrides) "
            "applied to the table's PP 2 VP 12, DP 8."
        ),
    ),
    dict(
        case="MB Qwen3-30B-A3B H100x16 FP8-CS gbs512", model="30b_a3b", system="DGX-H100", gpus=16, gbs=512, mbs=2,
        seq=4096, tp=1, pp=2, cp=1, vp=24, ep=8, etp=1, fsdp=0, precision="FP8-CS", tokens_per_gpu=5275,
        model_tflops_per_gpu=121, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_config_h100 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@97ad8cc6f), preset "
                "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_BASE_CONFIG "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_30b_a3b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_fp8_current_scaling_mixed", "fp8_recipe": "tensorwise",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": "not set", "first_last_layers_bf16": False,
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "not set (Megatron-Core default 'none')",
            "cuda_graph_scope": [], "recompute_granularity": None, "recompute_modules": None,
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": True,
            "align_param_gather": True, "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728,
            "tp_comm_overlap": False, "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True, "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": "not set", "account_for_loss_in_pipeline_split": "not set",
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": "not set",
            "manual_gc": True, "manual_gc_interval": 100, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set", "extra": {}, "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table MBS 2 VP 24; the preset at 97ad8cc6f (and v0.2.0) has MBS 1 (default) VP 12; the 25.09 yaml "
                "(scripts/performance/configs/qwen3/qwen3_30b_a3b_llm_pretrain.yaml@ea2990630) has fp8_cs mbs 2, vp "
                "24"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.11 label FP8-CS, GA 32 (= 512 / (8 x 2)). Earlier figure, same layout: 25.09 10,494 / 241 "
            "(ea2990630, 'tokendrop', no precision column; its yaml gives mbs 2 only to fp8_cs). EP A2A overlap "
            "from the preset's moe_a2a_overlap=True (_set_moe_a2a_overlap_overrides: "
            "overlap_moe_expert_parallel_comm, delay_wgrad_compute, moe_shared_expert_overlap False). VP 24 with PP "
            "2 is one layer per virtual stage (48 layers)."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B GB300x256 MXFP8", model="235b_a22b", system="DGX-GB300", gpus=256, gbs=8192, mbs=2,
        seq=4096, tp=1, pp=4, cp=1, vp=12, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=8816,
        model_tflops_per_gpu=1306, container="26.08", commit="4ab94dfad",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_256gpu_gb300_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/qwen/gb300/qwen3_moe.py@4ab94dfad; base "
                "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py; _benchmark_common, "
                "src/megatron/bridge/perf_recipes/_common.py; _enable_hybridep_full_iteration_mxfp8, "
                "src/megatron/bridge/perf_recipes/qwen/common.py)"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True, "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": 1.5, "moe_paged_stash": True, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": True,
            "extra": {
                "high_priority_a2a_comm_stream": True, "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32, "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2, "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "offload_modules": [], "te_rng_tracker": True,
            },
            "env": {
                "CUDA_DEVICE_MAX_CONNECTIONS": 32, "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0, "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 32, "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72, "USE_MNNVL": 1, "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20, "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20, "TORCH_NCCL_HIGH_PRIORITY": 1,
            },
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06.01 9,008 / 1,333 (381d0b825); 26.06 9,015 / 1,335 (8f341b04f; "
            "first 9,033 / 1,337 at 63b08b397); 26.04.01 6,944 / 1,029 (21d102f5e; 6,992 / 1,035 at 17a381f95); "
            "26.04 6,994 / 1,035 (74695a06d). The 26.06 preset (QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 "
            "@63b08b397) already had the full-iteration graph and EP overlap; 26.04.x: TE graphs of attn + "
            "moe_router + moe_preprocess, no EP overlap. 94 layers + embedding + loss counted as layers = 96 = PP 4 "
            "x VP 12 x 2. The flat recipe does not set overlap_param_gather_with_optimizer_step. tp_comm_overlap "
            "requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B GB300x256 MXFP8 novp", model="235b_a22b", system="DGX-GB300", gpus=256, gbs=8192,
        mbs=2, seq=4096, tp=1, pp=4, cp=1, vp=None, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=6583,
        model_tflops_per_gpu=974, container="26.02.01", commit="cfeddcd94",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_gb300 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@cfeddcd94), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table VP n/a; the preset at cfeddcd94 adds virtual_pipeline_model_parallel_size=12; the preset at "
                "c0b9a0003 (26.02, same figure) has no VP and matches"
            ),
            "alt_recipe": {
                "source": "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 @c0b9a0003", "vp": None,
                "other settings": "as recorded",
            },
        },
        notes=(
            "The same figure 6,583 / 974 was first published for 26.02 at c0b9a0003 and repeated for 26.02.01 at "
            "cfeddcd94. PP 4 without VP: batch_p2p_comm (no overlapped sends); 96 layer slots (94 + embedding + "
            "loss) / 4. overlap_param_gather_with_optimizer_step is not set for fp8_mx "
            "(set_post_overrides@cfeddcd94). tp_comm_overlap requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B GB300x256 BF16", model="235b_a22b", system="DGX-GB300", gpus=256, gbs=8192, mbs=2,
        seq=4096, tp=1, pp=4, cp=1, vp=12, ep=16, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=6131,
        model_tflops_per_gpu=907, container="25.11", commit="1804c076f",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_gb300 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@1804c076f), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_BF16_BASE_CONFIG "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_mixed", "fp8_recipe": None, "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set", "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": True, "overlap_param_gather_with_optimizer_step": True,
            "bucket_size": 134217728, "tp_comm_overlap": False, "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table 256 GPUs PP 4 VP 12 EP 16 GBS 8192; the preset at 1804c076f is 64 GPUs TP 1 EP 64 GBS 1024 "
                "MBS 2; the table's layout is the GB300_BF16_V2 preset added at c0b9a0003 (same graphs and "
                "dispatcher)"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.11 label BF16, GA 32 as published, but GBS / (MBS x DP) = 8192 / (2 x 64) = 64 (DP = 256 / PP 4): "
            "the GA cell and the layout disagree. Added at 1804c076f, replacing the 64-GPU FP8-MX row (row 'MB "
            "Qwen3-235B-A22B GB300x64 MXFP8'). use_precision_aware_optimizer=True for bf16 (set_post_overrides); "
            "overlap_param_gather_with_optimizer_step by set_post_overrides@1804c076f's rule (DP > 1, PP > 1, VP > "
            "1) on the table's layout."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B GB300x64 MXFP8", model="235b_a22b", system="DGX-GB300", gpus=64, gbs=1024, mbs=1,
        seq=4096, tp=2, pp=1, cp=1, vp=1, ep=64, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=5350,
        model_tflops_per_gpu=792, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_gb300 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@97ad8cc6f), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_BASE_CONFIG (= _FP8_CS_; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": True, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": True,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": "not set", "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": "table MBS 1 (GA 32); the preset at 97ad8cc6f (and v0.2.0) has micro_batch_size=4",
            "alt_recipe": None,
        },
        notes=(
            "25.11 label FP8-MX, VP '1', GA 32 (= 1024 / (32 x 1), DP 32). Published at 97ad8cc6f and removed from "
            "the 25.11 table at 1804c076f (replaced by the 256-GPU BF16 row); no other container has it. TP 2 with "
            "sequence parallelism and TE userbuffers (CommOverlapConfig(tp_comm_overlap=True), TP 2 + SP keep it "
            "on); experts not TP-split (ETP 1), EP 64 over TP x DP."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B GB200x256 MXFP8", model="235b_a22b", system="DGX-GB200", gpus=256, gbs=8192, mbs=1,
        seq=4096, tp=1, pp=8, cp=1, vp=3, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=7280,
        model_tflops_per_gpu=1077, container="26.08", commit="4ab94dfad",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/qwen/gb200/qwen3_moe.py@4ab94dfad; base "
                "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py; _benchmark_common, "
                "src/megatron/bridge/perf_recipes/_common.py; _enable_hybridep_full_iteration_mxfp8, "
                "src/megatron/bridge/perf_recipes/qwen/common.py)"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True, "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": 1.5, "moe_paged_stash": True, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": True,
            "extra": {
                "high_priority_a2a_comm_stream": True, "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32, "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2, "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "offload_modules": [], "te_rng_tracker": True,
            },
            "env": {
                "CUDA_DEVICE_MAX_CONNECTIONS": 32, "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0, "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 32, "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72, "USE_MNNVL": 1, "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20, "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20, "TORCH_NCCL_HIGH_PRIORITY": 1,
            },
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06.01 7,360 / 1,089 (381d0b825); 26.06 7,376 / 1,092 (63b08b397); "
            "26.04.01 5,680 / 840 (21d102f5e; 5,696 / 843 at 17a381f95); 26.04 5,672 / 840 (74695a06d). The 26.06 "
            "preset (63b08b397) already had the full-iteration graph and EP overlap; 26.04.x: TE graphs of attn + "
            "moe_router + moe_preprocess, no EP overlap. 96 layer slots / (PP 8 x VP 3) = 4 per virtual stage. The "
            "flat recipe does not set overlap_param_gather_with_optimizer_step. tp_comm_overlap requested, off at "
            "TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B GB200x256 MXFP8 novp", model="235b_a22b", system="DGX-GB200", gpus=256, gbs=8192,
        mbs=1, seq=4096, tp=1, pp=8, cp=1, vp=None, ep=32, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=5530,
        model_tflops_per_gpu=819, container="26.02.01", commit="cfeddcd94",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_gb200 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@cfeddcd94), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table VP n/a; the preset at cfeddcd94 adds virtual_pipeline_model_parallel_size=3; the preset at "
                "c0b9a0003 (26.02) has no VP and matches"
            ),
            "alt_recipe": {
                "source": "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 @c0b9a0003", "vp": None,
                "other settings": "as recorded",
            },
        },
        notes=(
            "Same layout, earlier figure: 26.02 5,448 / 806 (c0b9a0003). PP 8 without VP: batch_p2p_comm; 96 layer "
            "slots / 8 = 12 per stage. tp_comm_overlap requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B GB200x256 BF16", model="235b_a22b", system="DGX-GB200", gpus=256, gbs=8192, mbs=1,
        seq=4096, tp=1, pp=8, cp=1, vp=3, ep=32, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=4916,
        model_tflops_per_gpu=728, container="25.11", commit="1804c076f",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_gb200 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@1804c076f), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_BF16_BASE_CONFIG "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_mixed", "fp8_recipe": None, "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set", "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": True, "overlap_param_gather_with_optimizer_step": True,
            "bucket_size": 134217728, "tp_comm_overlap": False, "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table 256 GPUs PP 8 VP 3 EP 32 GBS 8192; the preset at 1804c076f is 64 GPUs PP 8 EP 8 GBS 1024 (no "
                "VP); no BF16 preset read has VP 3 EP 32 (c0b9a0003's GB200_BF16_V2: 256 GPUs PP 8 EP 8; VP 3 EP 32 "
                "is the MXFP8 V2 preset from cfeddcd94)"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.11 label BF16, GA 256 (= 8192 / (32 x 1)). Added at 1804c076f, replacing the 64-GPU FP8-MX row. "
            "use_precision_aware_optimizer=True for bf16 (set_post_overrides); "
            "overlap_param_gather_with_optimizer_step by set_post_overrides@1804c076f's rule on the table's layout."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B GB200x64 MXFP8", model="235b_a22b", system="DGX-GB200", gpus=64, gbs=1024, mbs=1,
        seq=4096, tp=2, pp=1, cp=1, vp=1, ep=64, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=4366,
        model_tflops_per_gpu=646, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_gb200 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@97ad8cc6f), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_BASE_CONFIG (= _FP8_CS_; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": True, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"], "recompute_granularity": None,
            "recompute_modules": None, "activation_offload": None, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": True,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": "not set", "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table TP 2 PP 1 EP 64; the preset at 97ad8cc6f (and v0.2.0) is TP 1 PP 8 EP 8; the 25.09 yaml "
                "(scripts/performance/configs/qwen3/qwen3_235b_a22b_llm_pretrain.yaml@ea2990630) gb200 64-GPU entry "
                "is tp 2 pp 1 ep 64 mbs 1 gbs 1024 cuda_graphs true"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.11 label FP8-MX, VP '1', GA 32 (DP 32). Published at 97ad8cc6f, removed from the 25.11 table at "
            "1804c076f (replaced by the 256-GPU BF16 row). Earlier figure, same layout: 25.09 '4452 (4416)' / '659 "
            "(654)' (ea2990630, 'tokendrop', no precision column). Graph scope and dispatcher are the preset's; "
            "sequence_parallel and tp_comm_overlap follow the table's TP 2 (the builder requests "
            "tp_comm_overlap=True; set_user_overrides sets SP for -tp > 1)."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B B300x256 MXFP8", model="235b_a22b", system="DGX-B300", gpus=256, gbs=8192, mbs=2,
        seq=4096, tp=1, pp=8, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=5936,
        model_tflops_per_gpu=878, container="26.04.01", commit="21d102f5e",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_b300 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@21d102f5e), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2 (= _FP8_CS_V2; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Figure revised: 5,984 / 885 at 17a381f95, 5,936 / 878 at 21d102f5e (the Qwen presets and builders are "
            "identical at both commits). Same layout, earlier figure: 26.04 4,865 / 720 (74695a06d). HybridEP on "
            "DGX-B300 with EP 8: set_workload_base_configs applies the preset's 'hybridep'. No CUDA graphs, PP 8 "
            "without VP (batch_p2p_comm). tp_comm_overlap requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B B300x256 MXFP8 mbs1", model="235b_a22b", system="DGX-B300", gpus=256, gbs=8192, mbs=1,
        seq=4096, tp=1, pp=8, cp=1, vp=4, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=2644,
        model_tflops_per_gpu=391, container="26.02.01", commit="cfeddcd94",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_b300 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@cfeddcd94), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2 (= _FP8_CS_V2; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": "deepep (set, unused: alltoall)", "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True, "moe_permute_fusion": True, "moe_router_fusion": True,
            "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)",
            "table_vs_recipe": (
                "table VP 4; the preset at cfeddcd94 drops VP and sets moe_a2a_overlap=False; the preset at "
                "c0b9a0003 (26.02) has VP 4 and moe_a2a_overlap=True and matches the layout"
            ),
            "alt_recipe": {
                "source": "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2 @c0b9a0003", "vp": 4,
                "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
                "moe_token_dispatcher_type": "alltoall",
            },
        },
        notes=(
            "Same layout, earlier figure: 26.02 2,691 / 399 (c0b9a0003). EP overlap is False in the cfeddcd94 "
            "preset but True in the c0b9a0003 one whose layout the table shows (alt_recipe): uncertain which ran. "
            "overlap_p2p_comm / align_param_gather follow the table's VP 4; "
            "overlap_param_gather_with_optimizer_step not set for fp8_mx. tp_comm_overlap requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B B200x256 MXFP8", model="235b_a22b", system="DGX-B200", gpus=256, gbs=8192, mbs=1,
        seq=4096, tp=1, pp=8, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=3776,
        model_tflops_per_gpu=560, container="26.04.01", commit="17a381f95",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_b200 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@17a381f95), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2 (= _FP8_CS_V2; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": False, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figure: 26.02 3,805 / 563 (c0b9a0003); absent from 26.02.01 and 26.04; no later "
            "container has B200 rows. No backend in the preset: set_workload_base_configs@17a381f95 sets the "
            "all-to-all dispatcher. No CUDA graphs, no EP overlap, PP 8 without VP (batch_p2p_comm). "
            "tp_comm_overlap requested, off at TP 1."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B B200x64 MXFP8", model="235b_a22b", system="DGX-B200", gpus=64, gbs=1024, mbs=1,
        seq=4096, tp=1, pp=8, cp=1, vp=2, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=3269,
        model_tflops_per_gpu=484, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_b200 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@97ad8cc6f), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_BASE_CONFIG (= _FP8_CS_; "
                "scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_mxfp8_mixed", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True, "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": False, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "not set (Megatron-Core default 'none')",
            "cuda_graph_scope": [], "recompute_granularity": None, "recompute_modules": None,
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": False,
            "align_param_gather": True, "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728,
            "tp_comm_overlap": False, "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True, "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": "not set",
            "manual_gc": True, "manual_gc_interval": 100, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set", "extra": {}, "env": "not read (perf_plugins.py)",
            "table_vs_recipe": "table VP 2; the preset at 97ad8cc6f (and v0.2.0) has VP 4", "alt_recipe": None,
        },
        notes=(
            "25.11 label FP8-MX, GA 128 (DP 8). Earlier figure, same layout: 25.09 '4104 (4275)' / '607 (633)' "
            "(ea2990630, 'tokendrop', no precision column). The builder turns overlap_param_gather off for fp8_mx "
            "('keeping this enabled causes NaN grad norm': ddp, optimizer and comm_overlap); "
            "set_post_overrides@97ad8cc6f still sets overlap_param_gather_with_optimizer_step (DP 8, PP 8, VP > 1). "
            "EP A2A overlap from moe_a2a_overlap=True; 96 layer slots / (PP 8 x VP 2) = 6."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B H100x256 FP8-CS", model="235b_a22b", system="DGX-H100", gpus=256, gbs=8192, mbs=1,
        seq=4096, tp=2, pp=8, cp=1, vp=4, ep=32, etp=1, fsdp=0, precision="FP8-CS", tokens_per_gpu=1712,
        model_tflops_per_gpu=253, container="26.04.01", commit="21d102f5e",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_h100 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@21d102f5e), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2 "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_fp8_current_scaling_mixed", "fp8_recipe": "tensorwise",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": "not set", "first_last_layers_bf16": False,
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": True, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "none", "cuda_graph_scope": [],
            "recompute_granularity": None, "recompute_modules": None, "activation_offload": None,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728, "tp_comm_overlap": False,
            "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True, "use_distributed_optimizer": True, "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False, "manual_gc": True, "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True,
            "bias_activation_fusion": True, "use_transformer_engine_op_fuser": "not set", "extra": {},
            "env": "not read (perf_plugins.py)", "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "Table label 'FP8' (current scaling). Figure revised: 1,696 / 252 at 17a381f95, 1,712 / 253 at "
            "21d102f5e. Same layout, earlier figures: 26.04 1,686 / 250 (74695a06d); 26.02.01 1,611 / 238 "
            "(cfeddcd94); 26.02 1,633 / 242 (c0b9a0003). TP 2 with sequence parallelism but "
            "CommOverlapConfig(tp_comm_overlap=False) for H100: no userbuffers. EP A2A overlap from "
            "moe_a2a_overlap=True. 96 layer slots / (PP 8 x VP 4) = 3."
        ),
    ),
    dict(
        case="MB Qwen3-235B-A22B H100x256 FP8-CS gbs2048", model="235b_a22b", system="DGX-H100", gpus=256, gbs=2048,
        mbs=1, seq=4096, tp=2, pp=8, cp=1, vp=4, ep=32, etp=1, fsdp=0, precision="FP8-CS", tokens_per_gpu=1575,
        model_tflops_per_gpu=233, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_config_h100 "
                "(scripts/performance/configs/qwen/qwen3_llm_pretrain.py@97ad8cc6f), preset "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_BASE_CONFIG "
                "(scripts/performance/configs/qwen/qwen3_workload_base_configs.py), recipe "
                "qwen3_235b_a22b_pretrain_config (src/megatron/bridge/recipes/qwen/qwen3_moe.py), overrides "
                "scripts/performance/utils/overrides.py"
            ),
            "precision_recipe": "bf16_with_fp8_current_scaling_mixed", "fp8_recipe": "tensorwise",
            "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": "not set", "first_last_layers_bf16": False,
            "fp8_dot_product_attention": "not set", "grad_reduce_in_fp32": False, "expert_tensor_parallel_size": 1,
            "sequence_parallel": True, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None, "moe_grouped_gemm": True, "moe_permute_fusion": True,
            "moe_router_fusion": True, "moe_router_dtype": "not set", "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True, "moe_expert_capacity_factor": None,
            "moe_expert_rank_capacity_factor": None, "moe_paged_stash": False, "shared_experts": None,
            "moe_shared_expert_overlap": False, "cuda_graph_impl": "not set (Megatron-Core default 'none')",
            "cuda_graph_scope": [], "recompute_granularity": None, "recompute_modules": None,
            "activation_offload": None, "overlap_grad_reduce": True, "overlap_param_gather": True,
            "align_param_gather": True, "overlap_param_gather_with_optimizer_step": True, "bucket_size": 134217728,
            "tp_comm_overlap": False, "overlap_p2p_comm": True, "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True, "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True,
            "use_distributed_optimizer": True, "use_megatron_fsdp": False, "use_precision_aware_optimizer": "not set",
            "manual_gc": True, "manual_gc_interval": 100, "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te", "apply_rope_fusion": True, "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set", "extra": {}, "env": "not read (perf_plugins.py)",
            "table_vs_recipe": "matches", "alt_recipe": None,
        },
        notes=(
            "25.11 label FP8-CS, GA 128. First published at 97ad8cc6f in a malformed row (the GBS cell missing, "
            "1575 in the GA cell); the row was corrected at 5776a6d90 (GBS 2048, GA 128) with the same 1,575 / 233. "
            "Earlier figure, same layout: 25.09 1,204 / 178 (ea2990630, 'tokendrop', no precision column). TP 2 + "
            "SP, no userbuffers (tp_comm_overlap=False for H100); EP A2A overlap from moe_a2a_overlap=True."
        ),
    ),
]
