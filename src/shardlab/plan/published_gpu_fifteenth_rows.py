"""Megatron-Bridge's GPT-OSS 120B pre-training rows, frozen as published inputs before the planner was run on any of
them. Pure data: nothing here is imported or evaluated by the planner yet.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and docs/performance-summary-archive.md, every
version of both on the main line in the mirror (22 commits, af6bc366d 2025-10-02 to 4ab94dfad 2026-08-11). No 25.09
table has GPT-OSS. 25.11 tables are per system ("#### System: DGX-GB300", a Model column, FSDP and GA columns); from
cfeddcd94 per model ("#### Model: GPT OSS 120B", a System column; the 26.02 section so from cfeddcd94, per system at
c0b9a0003); the 26.06+ tables drop the FSDP column. Every entry: 64 GPUs, TP 1, CP 1, mock data. The containers and
the commits that added (or changed) their GPT OSS 120B entries:
  25.11     97ad8cc6f (GB300, GB200, B200, H100 at GBS 512, MBS 4, 4,096); 1804c076f replaced GB300 and GB200 by
            GBS 1,280 entries at sequence 8,192 (MBS 2 and 1)
  26.02     c0b9a0003 (GB300, GB200, B300, B200 at GBS 1,280 MBS 4 EP 64; H100 MBS 1 PP 4 EP 8)
  26.02.01  cfeddcd94 (B300, B200 moved to EP 8)        26.04  74695a06d
  26.04.01  17a381f95; 21d102f5e revised GB300 (figures), GB200 and H100 (TFLOP/s only)
  26.06     63b08b397 (BF16 GB300, GB200, H100); c270efc50 replaced them by MXFP8 GB300 (EP 16) and GB200 (EP 64);
            8f341b04f added MXFP8 B300 (EP 8)
  26.06.01  381d0b825 (GB300, GB200 MXFP8, both flagged [^gpt-oss-note]: "Performance regression in GPT-OSS 120B
            pre-training is a known issue (cudnn-frontend issue 256). It will be resolved with the next container
            release.")
  26.08     4ab94dfad (GB300, GB200 MXFP8, same layouts, no footnote; the mirror's newest container)
Commits that touched the files without changing a GPT OSS figure: 2b8806b94, 5776a6d90, 05d48ac02, 93ae2a0dc,
e7d60aa95, e68f02203, 9f74f2876 (af6bc366d, ea2990630 and fa0315ae2 have no GPT OSS entry). 38 (container, system,
precision, layout, figure) keys over all versions (a revised figure counted again) give 16 distinct (system,
precision, layout): 16 rows. Every entry has all the layout columns; none was left out.

Collection rule (the earlier sets'): one row per distinct (system, precision, layout) at its latest container's
figure; layout = GPUs, GBS, MBS, sequence, TP, PP, CP, VP, EP, ETP, FSDP. `commit` is the commit that first
published the row's figure. Earlier containers' figures for the same layout are in each row's notes. A figure
flagged with the known-regression footnote keeps its figure in the notes; 26.08 republished both flagged layouts
without the footnote, so the 26.08 figures are the rows'. Rows removed within a container are kept (as the tenth,
twelfth and thirteenth sets did): the two 25.11 GBS 512 GB300 / GB200 entries (97ad8cc6f, replaced at 1804c076f)
and the three 26.06 BF16 entries (63b08b397, replaced at c270efc50). Read as equal: VP "1" (25.11) and "n/a"
(vp keeps the cell: 1 or None). No table has an ETP column and the 26.06+ tables no FSDP column: etp=1 and fsdp=0
are the recipes' (expert_tensor_parallel_size=1, use_megatron_fsdp=False everywhere read).

Recipes, read at each row's commit (paths in `recipe["builder"]`): up to 26.06, scripts/performance's builders
(configs/gpt_oss/gpt_oss_llm_pretrain.py), presets (configs/gpt_oss/gpt_oss_workload_base_configs.py; from 26.02 the
scripts' default --config_variant v2, GBS 1,280) and overrides (utils/overrides.py: set_workload_base_configs,
set_user_overrides, set_post_overrides; utils/precision.py) over src/megatron/bridge/recipes/gpt_oss/gpt_oss.py, with
training/flex_dispatcher_backend.py at the same commit; at 26.08 the flat recipes
src/megatron/bridge/perf_recipes/gpt_oss/{gb300,gb200}/gpt_oss.py over recipes/gpt_oss/h100/gpt_oss.py with
perf_recipes/gpt_oss/common.py and perf_recipes/_common.py. The scripts' defaults were followed (no CLI flags; from
17a381f95 --moe_flex_dispatcher_backend -1 leaves the preset's backend). What every row shares: the distributed
optimizer (no Megatron FSDP), fp32 main parameters, main grads and Adam moments (the recipe sets them fp32 from
c0b9a0003; OptimizerConfig defaults at 25.11), the precision-aware optimizer on for BF16 (set_post_overrides) and
off for MXFP8, gradients reduced in bf16, overlapped grad reduce-scatter and param all-gather, force-balanced
routing (the tables' footnote: token-dropless), no load-balancing loss (the bridge's "none"), grouped GEMM, permute
and router fusion, no shared expert, TE cross entropy, rope and bias-activation fusion, manual_gc every 100 steps,
no pipeline layout (PP 1, or PP 4 split evenly on H100), no TP communication overlap. "not set" means looked for and
not set at that commit (the library default applies); "not read" means not looked for.

What differs between rows (recipe keys): the dispatcher (all-to-all everywhere but HybridEP flex with 32 SMs on the
26.04.01 BF16 and 26.06 MXFP8 B300 rows and on the 26.08 MXFP8 GB300 / GB200 rows; the recipe's
moe_flex_dispatcher_backend "deepep" field is inert without the flex dispatcher); CUDA graphs (TE graphs of attn +
moe_router + moe_preprocess on GB300 BF16 and B300; whole-iteration graphs on the 26.08 MXFP8 rows, which bring
paged stash, a 1.5 per-rank HybridEP token budget, padded experts, TE's op fuser, FP8 attention and output
projection, and the EP all-to-all overlap with delayed wgrad; none elsewhere); recompute (selective layernorm +
moe_act on GB200 BF16, B200 and H100; at 25.11 the modules are set without a selective granularity, so inert); the
EP overlap on the 26.06 GB200 BF16 row. Where the table's layout and the preset at the publishing commit disagree
(`recipe["table_vs_recipe"]`: the two 25.11 sequence-8,192 rows, the 25.11 B200 (EP) and H100 (MBS) rows), the
table's layout is taken, the commit's other settings are recorded, and a preset of another branch whose layout
matches is in `recipe["alt_recipe"]` (gaod/r0.2.0_test 4a82e1651, 2025-12-06, for the sequence-8,192 rows).

Model FLOPs: the tables' TFLOP/s over tokens/s is one of two counts (Megatron-Bridge
src/megatron/bridge/training/utils/flop_utils.py): up to 26.04.01, 27.16 G a token at 4,096 (30.79 G at 8,192):
the GLU counted as 2 projections because the activation is quick_gelu not silu, every layer full causal attention
(12 L h^2 (1 + g/n + s/(2h)) q/h), 4 routed experts of 2 x h x f, logits 6 h V; from 26.06 (fix baa0259bd,
2026-05-28) 32.63 G: GLU 3 projections, and 18 sliding-window layers at the exact causal window average
(W - W (W - 1) / (2 s), W = 128) beside 18 full causal layers. Neither counts the router GEMM or the attention
sinks. The hand count in the test reproduces both; 6 x active matmul parameters (with the output layer) alone is
30.80 G.

Uncertain: the two 25.11 sequence-8,192 rows (no main-line preset has their layout; the test branch's does, and
gives GB200 the HybridEP flex dispatcher where the main line gives all-to-all: recorded as the main line's, the
branch's in alt_recipe); the 25.11 H100 row (table MBS 4 and GA 2, preset MBS 1; MBS 4 at DP 16 gives GA 8); the
25.11 B200 EP (table 8, preset 64); whether the 25.11 recompute modules took effect; the 25.11 launcher's sequence
(the scripts' mock dataset defaults to 8,192 when --seq_length is not given while the recipe's model has 4,096);
the bucket size and align_param_gather where a CommOverlapConfig is set (not read); the 26.06.01 cudnn-frontend
regression (not a row figure). The sliding window: (128, 0) in the provider/bridge up to c0b9a0003 (129 keys a
query), (sliding_window - 1, 0) = (127, 0) from 5fcab34f8 (2026-03-10; 128 keys, as HF): the 26.02 and 25.11 rows
ran the 129-key window.

Shapes (GPT_OSS_SHAPES): GPTOSSProvider / GPTOSSProvider120B, src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py
@97ad8cc6f (the same at c0b9a0003), and from 17a381f95 the bridge gpt_oss_bridge.py (provider_bridge over
model_bridge.CONFIG_MAPPING from the HF config of openai/gpt-oss-120b, which is not in the mirror; the 120B values
are the provider's GPTOSSProvider120B: 36 layers, 128 experts; the rest are GPTOSSProvider's defaults, which the
bridge's CONFIG_MAPPING fields replace with the HF config's same values). Megatron-Core at the rows' submodule
commits (3rdparty/Megatron-LM 92c8482e6 / 002255075 / 24bad8e67): window attention on layer_number % 2 != 0
(1-based), so 0-based layers 0, 2, ..., 34 are sliding-window and 1, 3, ..., 35 full (transformer/utils.py
is_layer_window_attention); the router has a bias when add_bias_linear (moe/router.py); the learnable softmax offset
(attention sink) is one parameter per head (dot_product_attention.py). Vocabulary 201,088 = 128 x 1,571
(make_vocab_size_divisible_by 128, GPTModelProvider default): no padding.

What the planner may lack (read in docs/planner.md and docs/moe.md only, nothing run): sliding-window attention
("Other blocks are not modelled (multi-latent or sliding-window attention, ...)", planner.md "Limits, honestly"),
here every other layer with a 128-token window, and its FLOPs; attention sinks (a learnable softmax offset per
head); GPT-OSS's block as a whole: the dense blocks are GPT-2's (LayerNorm, GELU MLP with biases) or Llama's
(RMSNorm, SwiGLU, no biases), while GPT-OSS is RMSNorm + GQA with biases on every linear layer and a clamped,
offset quick-GELU GLU (alpha 1.702, limit 7, +1 on the linear half); a router with a bias (moe.md: the router is a
linear layer without bias); YaRN rope (not mentioned); the tables' two flop counts (TFLOP/s changed by ~20 % at
26.06 from the counter alone); paged stash and HybridEP's 1.5 per-rank token budget of the whole-iteration rows
(planner.md: "Not modelled: paged stash ... HybridEP's 1.5 per-rank token budget"); selective recompute of
`layernorm` (planner.md names mla_up_proj and moe_act); TE's op fuser and the cuteDSL fused grouped MLP (not
mentioned); the choice of dispatcher (plan search "does not choose ep_overlap or a dispatcher"). The planner's docs
do describe CUDA graphs by Megatron-Core scope and whole-iteration graphs, HybridEP's 32 SMs (`Layout.ep_sms`), the
EP all-to-all overlap (`ep_overlap`) and FP8 attention as inputs.
"""

from __future__ import annotations

GPT_OSS_SHAPES = {
    "120b": {
        "hf_id": "openai/gpt-oss-120b",
        "provider": (
            "GPTOSSProvider120B(GPTOSSProvider), src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py@97ad8cc6f "
            "(same at c0b9a0003); from 17a381f95 GPTOSSBridge.provider_bridge, "
            "src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py (same blob at 63b08b397, 8f341b04f, 4ab94dfad) "
            "over model_bridge.CONFIG_MAPPING from AutoBridge.from_hf_pretrained(hf_id)"
        ),
        "num_layers": 36,  # GPTOSSProvider120B (HF num_hidden_layers)
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_query_groups": 8,  # GQA, HF num_key_value_heads
        "kv_channels": 64,  # head dim (HF head_dim); q projection 64 x 64 = 4096 > hidden
        "ffn_hidden_size": 2880,  # no dense layer: every layer is MoE
        "moe_ffn_hidden_size": 2880,  # HF intermediate_size (the bridge sets moe_ffn_hidden_size from it)
        "num_moe_experts": 128,  # HF num_local_experts
        "moe_router_topk": 4,  # HF num_experts_per_tok
        "moe_layer_freq": 1,  # every layer MoE
        "moe_shared_expert_intermediate_size": None,  # no shared expert
        "vocab_size": 201088,  # = 128 x 1571: no padding
        "make_vocab_size_divisible_by": 128,  # GPTModelProvider default, not set by provider or bridge
        "share_embeddings_and_output_weights": False,
        "add_bias_linear": True,  # qkv, proj, fc1, fc2, and the router (Megatron-Core router bias with add_bias_linear)
        "add_qkv_bias": False,  # the bridge's explicit False (from 17a381f95); qkv has a bias through add_bias_linear
        "window_size": (127, 0),  # (sliding_window - 1, 0) from 5fcab34f8; (128, 0) up to c0b9a0003
        "window_size_up_to_c0b9a0003": (128, 0),
        "window_attn_skip_freq": 2,  # layer_number % 2 != 0 (1-based) is windowed
        "sliding_window_layers": list(range(0, 36, 2)),  # 0-based
        "full_attention_layers": list(range(1, 36, 2)),
        "softmax_type": "learnable",  # attention sink: one learnable softmax offset per head
        "activation": "quick_gelu GLU, clamped",  # x * sigmoid(1.702 x) on the gate, (up + 1) on the linear half
        "gated_linear_unit": True,
        "activation_func": "quick_gelu",  # megatron.core.fusions.fused_bias_geglu.quick_gelu: x * sigmoid(1.702 x)
        "quick_gelu_alpha": 1.702,
        "activation_func_clamp_value": 7.0,  # swiglu limit 7
        "glu_linear_offset": 1.0,
        "position_embedding_type": "yarn",
        "rotary_base": 150000,  # HF rope_theta (GPTOSSProvider default)
        "yarn_rotary_scaling_factor": 32.0,
        "yarn_original_max_position_embeddings": 4096,
        "yarn_beta_fast": 32.0,
        "yarn_beta_slow": 1.0,
        "yarn_correction_range_round_to_int": False,
        "yarn_mscale": None,
        "yarn_mscale_all_dim": None,
        "seq_length_provider": 131072,  # provider default; the recipes set 4096
        "moe_router_pre_softmax": False,  # softmax over the top-k logits
        "moe_router_score_function": "softmax",  # Megatron-Core default, not set
        "moe_router_load_balancing_type": "none",
        "moe_token_dispatcher_type": "alltoall",  # the bridge's; perf presets may switch to flex
        "moe_grouped_gemm": True,
        "moe_permute_fusion": True,
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-05,  # HF rms_norm_eps; GPTModelProvider default 1e-5
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "bias_activation_fusion": True,
        "bias_dropout_fusion": False,
        "params_dtype": "bf16",
        "mtp_num_layers": None,
    },
}


ROWS = [
    dict(
        case="MB GPT-OSS-120B GB300x64 MXFP8", model="120b", system="DGX-GB300", gpus=64, gbs=1280, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=16, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=33024,
        model_tflops_per_gpu=1077, container="26.08", commit="4ab94dfad",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/gpt_oss/gb300/gpt_oss.py@4ab94dfad; base "
                "gpt_oss_120b_pretrain_config = gpt_oss_120b_pretrain_64gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py; _apply_gpt_oss_120b_full_iter_fp8mx_configs, "
                "perf_recipes/gpt_oss/common.py; _benchmark_common and _perf_precision('fp8_mx'), "
                "perf_recipes/_common.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True,
            "fp8_output_proj": True,
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": 1.5,
            "moe_paged_stash": True,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "full_iteration",
            "cuda_graph_scope": [],
            "recompute_granularity": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not read (CommOverlapConfig(tp_comm_overlap=False) set; PP 1)",
            "overlap_param_gather_with_optimizer_step": (
                "not set (the GPT-OSS perf recipes do not call _enable_overlap_param_gather_with_optimizer_step)"
            ),
            "bucket_size": "not read (CommOverlapConfig set: training/comm_overlap.py's DP bucket rule applies)",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": True,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "cuda_graph_warmup_steps": 2,
                "te_rng_tracker": True,
                "offload_modules": [],
            },
            "env": {
                "COMMON_PERF_ENV_VARS": "not read (perf_recipes/environment.py)",
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0,
                "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 16,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72,
                "USE_MNNVL": 1,
                "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
            },
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06.01 20,288 / 661 (381d0b825; flagged [^gpt-oss-note]: 'Performance "
            "regression in GPT-OSS 120B pre-training is a known issue (cudnn-frontend issue 256). It will be "
            "resolved with the next container release.'; kept in the 26.08 archive with the footnote); 26.06 33,166 "
            "/ 1,081 (c270efc50; preset GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2@c270efc50/8f341b04f: EP 16, "
            "full-iteration graph, HybridEP, moe_a2a_overlap, cutedsl_fused_grouped_mlp, "
            "fp8_dot_product_attention). 26.08 republished the layout without the footnote, so its figure is the "
            "row's. GA 5 (1,280 / (64 DP x MBS 4)). Full-iteration CUDA graph with the 1.5 per-rank HybridEP token "
            "budget, padded experts and paged stash; EP all-to-all overlap with delayed wgrad; TE op fuser and the "
            "cuteDSL fused grouped MLP (env); FP8 attention and FP8 output projection. No recompute (the base "
            "recipe's recompute_granularity None). Force-balanced routing (dropless per the tables' footnote)."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B GB200x64 MXFP8", model="120b", system="DGX-GB200", gpus=64, gbs=1280, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=64, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=28672,
        model_tflops_per_gpu=934, container="26.08", commit="4ab94dfad",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/gpt_oss/gb200/gpt_oss.py@4ab94dfad; base "
                "gpt_oss_120b_pretrain_config = gpt_oss_120b_pretrain_64gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py; _apply_gpt_oss_120b_full_iter_fp8mx_configs, "
                "perf_recipes/gpt_oss/common.py; _benchmark_common and _perf_precision('fp8_mx'), "
                "perf_recipes/_common.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": True,
            "fp8_output_proj": True,
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": 1.5,
            "moe_paged_stash": True,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "full_iteration",
            "cuda_graph_scope": [],
            "recompute_granularity": "selective",
            "recompute_modules": [],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not read (CommOverlapConfig(tp_comm_overlap=False) set; PP 1)",
            "overlap_param_gather_with_optimizer_step": (
                "not set (the GPT-OSS perf recipes do not call _enable_overlap_param_gather_with_optimizer_step)"
            ),
            "bucket_size": "not read (CommOverlapConfig set: training/comm_overlap.py's DP bucket rule applies)",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": True,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "cuda_graph_warmup_steps": 2,
                "te_rng_tracker": True,
                "offload_modules": [],
            },
            "env": "not read (COMMON_PERF_ENV_VARS only, perf_recipes/environment.py@4ab94dfad)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Same layout, earlier figures: 26.06.01 18,304 / 597 (381d0b825; flagged [^gpt-oss-note], the "
            "cudnn-frontend regression); 26.06 28,947 / 943 (c270efc50; preset "
            "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: EP 64, full-iteration graph, HybridEP, moe_a2a_overlap, "
            "cutedsl_fused_grouped_mlp, fp8_dot_product_attention, recompute_modules []). 26.08 republished without "
            "the footnote: its figure is the row's. GA 5. The perf recipe sets recompute ['layernorm', 'moe_act'] "
            "and then, after the full-iteration settings, granularity 'selective' with modules [] (nothing "
            "recomputed)."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B B300x64 MXFP8", model="120b", system="DGX-B300", gpus=64, gbs=1280, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=18534,
        model_tflops_per_gpu=604, container="26.06", commit="8f341b04f",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_b300 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@8f341b04f), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_B300_FP8_MX_V2 (= _B300_BF16_V2 = _B300_BF16_V1 with GBS 1280, EP 8, "
                "HybridEP) (scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
                "te_rng_tracker": True,
            },
            "env": "not read (scripts/performance/perf_plugins.py@8f341b04f)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Only container with this entry (added by 8f341b04f 'perf summary b300 26.06'; kept in the 26.06 "
            "archive). GA 5. The MXFP8 preset is the BF16 V2 preset: TE CUDA graphs of attn + moe_router + "
            "moe_preprocess, HybridEP (32 SMs, _set_common_perf_overrides), no recompute, no EP overlap. The B300 "
            "builder sets no fp8_output_proj (only the GB300 builder does). use_precision_aware_optimizer False "
            "(set_post_overrides sets it only for bf16)."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B GB300x64 BF16", model="120b", system="DGX-GB300", gpus=64, gbs=1280, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=20635,
        model_tflops_per_gpu=673, container="26.06", commit="63b08b397",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_gb300 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@63b08b397), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_V2 (= _V1 with GBS 1280) "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
                "te_rng_tracker": True,
            },
            "env": "not read (scripts/performance/perf_plugins.py@63b08b397)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Published at 63b08b397 and replaced within 26.06 by the MXFP8 entries at c270efc50 (kept, as the "
            "earlier sets kept rows removed within a container). Same layout, earlier figures: 26.04.01 19,200 / "
            "523 (21d102f5e; first 19,328 / 525 at 17a381f95); 26.04 19,275 / 524 (74695a06d); 26.02.01 19,366 / "
            "526 (cfeddcd94); 26.02 19,412 / 527 (c0b9a0003); the V2 preset is the same at all those commits. The "
            "26.06 TFLOP/s count differs from the earlier ones (flop_utils fix baa0259bd: 32.6 G a token, not 27.1 "
            "G), so the earlier TFLOP/s are not comparable. GA 5. All-to-all dispatcher (no flex backend in the "
            "preset: set_workload_base_configs sets 'alltoall'), TE graphs of attn + moe_router + moe_preprocess, "
            "no recompute."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B GB200x64 BF16", model="120b", system="DGX-GB200", gpus=64, gbs=1280, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=17770,
        model_tflops_per_gpu=580, container="26.06", commit="63b08b397",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_gb200 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@63b08b397), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2 (= _V1 with GBS 1280, moe_a2a_overlap) "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides); the builder sets CommOverlapConfig(tp_comm_overlap=False)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": "full (the recipe's; inert with cuda_graph_impl 'none')",
            "recompute_granularity": "selective",
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not read (CommOverlapConfig set; PP 1)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not read (CommOverlapConfig set: training/comm_overlap.py's DP bucket rule applies)",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
            },
            "env": "not read (scripts/performance/perf_plugins.py@63b08b397)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Published at 63b08b397, replaced within 26.06 by the MXFP8 entry at c270efc50 (kept). Same layout, "
            "earlier figures: 26.04.01 16,640 / 452 (21d102f5e; 16,640 / 451 at 17a381f95); 26.04 15,938 / 433 "
            "(74695a06d); 26.02.01 15,754 / 428 (cfeddcd94); 26.02 15,784 / 428 (c0b9a0003; the c0b9a0003 V2 preset "
            "had no moe_a2a_overlap). 26.06 TFLOP/s on the corrected count (32.6 G a token). GA 5. All-to-all "
            "dispatcher ('switch GPT-OSS GB200 V2 dispatcher default to alltoall', 7345f5a35), EP all-to-all "
            "overlap with delayed wgrad, selective recompute of layernorm and moe_act, no CUDA graphs."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B H100x64 BF16", model="120b", system="DGX-H100", gpus=64, gbs=1280, mbs=1, seq=4096,
        tp=1, pp=4, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=5860,
        model_tflops_per_gpu=191, container="26.06", commit="63b08b397",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_h100 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@63b08b397), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2 (= _V1 with GBS 1280) "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": "full (the recipe's; inert with cuda_graph_impl 'none')",
            "recompute_granularity": "selective",
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (PP 4 without virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
            },
            "env": "not read (scripts/performance/perf_plugins.py@63b08b397)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Published at 63b08b397, dropped within 26.06 at c270efc50 (kept). Same layout, earlier figures: "
            "26.04.01 5,824 / 158 (21d102f5e; 5,824 / 159 at 17a381f95); 26.04 5,810 / 158 (74695a06d); 26.02.01 "
            "5,984 / 163 (cfeddcd94); 26.02 5,993 / 163 (c0b9a0003). 26.06 TFLOP/s on the corrected count. PP 4, DP "
            "16, GA 80; pipeline split by the default rule (36 layers / 4 = 9 a stage; no layout; embedding and "
            "loss not counted as layers). All-to-all, no CUDA graphs, selective recompute of layernorm and moe_act."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B B300x64 BF16", model="120b", system="DGX-B300", gpus=64, gbs=1280, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=15232,
        model_tflops_per_gpu=414, container="26.04.01", commit="17a381f95",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_b300 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@17a381f95), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2 (= _V1 with GBS 1280, EP 8, HybridEP) "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
                "te_rng_tracker": True,
            },
            "env": "not read (scripts/performance/perf_plugins.py@17a381f95)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Same figure at 21d102f5e (unchanged within 26.04.01). Same layout, earlier figures: 26.04 15,114 / 410 "
            "(74695a06d); 26.02.01 15,031 / 412 (cfeddcd94). No 26.06 BF16 B300 entry. GA 5. HybridEP flex "
            "dispatcher (32 SMs) with TE CUDA graphs of attn + moe_router + moe_preprocess (V1's), no recompute."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B B200x64 BF16", model="120b", system="DGX-B200", gpus=64, gbs=1280, mbs=4, seq=4096,
        tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=13568,
        model_tflops_per_gpu=369, container="26.04.01", commit="17a381f95",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_b200 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@17a381f95), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 (= _V1 with GBS 1280, EP 8) "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": "full (the recipe's; inert with cuda_graph_impl 'none')",
            "recompute_granularity": "selective",
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
            },
            "env": "not read (scripts/performance/perf_plugins.py@17a381f95)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Same figure at 21d102f5e. Same layout, earlier figures: 26.04 13,045 / 355 (74695a06d); 26.02.01 "
            "13,722 / 373 (cfeddcd94). B200 leaves the tables after 26.04.01. GA 5. All-to-all ('switch GPT-OSS "
            "B200 V2 dispatcher default to alltoall', a2168c87c), no CUDA graphs, selective recompute of layernorm "
            "and moe_act."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B B300x64 BF16 ep64", model="120b", system="DGX-B300", gpus=64, gbs=1280, mbs=4,
        seq=4096, tp=1, pp=1, cp=1, vp=None, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=8359,
        model_tflops_per_gpu=228, container="26.02", commit="c0b9a0003",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_b300 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@c0b9a0003), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2 (= _V1 with GBS 1280) "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
                "te_rng_tracker": True,
            },
            "env": "not read (scripts/performance/perf_plugins.py@c0b9a0003)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Only container with EP 64 on B300 (26.02; 26.02.01 moved B300 to EP 8). GA 5. Recipe dispatcher "
            "'alltoall' (its moe_flex_dispatcher_backend 'deepep' field is unused without the flex dispatcher), TE "
            "CUDA graphs of attn + moe_router + moe_preprocess, no recompute."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B B200x64 BF16 ep64", model="120b", system="DGX-B200", gpus=64, gbs=1280, mbs=4,
        seq=4096, tp=1, pp=1, cp=1, vp=None, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=8047,
        model_tflops_per_gpu=219, container="26.02", commit="c0b9a0003",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_b200 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@c0b9a0003), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 (= _V1 with GBS 1280) "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py), overrides "
                "scripts/performance/utils/overrides.py (set_workload_base_configs, set_user_overrides, "
                "set_post_overrides)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": "full (the recipe's; inert with cuda_graph_impl 'none')",
            "recompute_granularity": "selective",
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "moe_router_padding_for_fp8": False,
            },
            "env": "not read (scripts/performance/perf_plugins.py@c0b9a0003)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "Only container with EP 64 on B200 at GBS 1,280 (26.02). GA 5. All-to-all, no CUDA graphs, selective "
            "recompute of layernorm and moe_act."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B GB300x64 BF16 seq8192", model="120b", system="DGX-GB300", gpus=64, gbs=1280, mbs=2,
        seq=8192, tp=1, pp=1, cp=1, vp=1, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=18347,
        model_tflops_per_gpu=565, container="25.11", commit="1804c076f",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_gb300 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@1804c076f), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_BASE_CONFIG "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py _gpt_oss_common: TP 2 "
                "PP 4 EP 16 SP, overridden by the preset), overrides scripts/performance/utils/overrides.py; model "
                "GPTOSSProvider (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "optimizer_dtypes_note": "not set by the recipe: OptimizerConfig defaults (fp32)",
                "te_rng_tracker": True,
            },
            "env": "not read (scripts/performance/perf_plugins.py@1804c076f)",
            "table_vs_recipe": (
                "table GBS 1280, MBS 2, sequence 8192; the main-line preset at 1804c076f (same blob as 97ad8cc6f) "
                "has GBS 512, MBS 4 and the recipe's 4096"
            ),
            "alt_recipe": {
                "source": (
                    "GPT_OSS_120B_GB300_BF16_BASE_CONFIG @4a82e1651 (branch gaod/r0.2.0_test, 2025-12-06, not on "
                    "the main line): GBS 1280, MBS 2, EP 64, TE graphs attn + moe_router + moe_preprocess; "
                    "set_gpt_oss_common_configs sets model and dataset sequence 8192; no flex backend (all-to-all)"
                ),
                "gbs": 1280,
                "mbs": 2,
                "seq": 8192,
                "moe_token_dispatcher_type": "alltoall",
                "cuda_graph_impl": "transformer_engine",
                "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
            },
        },
        notes=(
            "25.11, replacing the GBS 512 / 4,096 entry at 1804c076f; the only container with this layout (kept in "
            "the archives). Table GA 10 (= 1,280 / (64 x 2)). The main-line preset does not have this layout; the "
            "test branch's does and agrees with the main line on CUDA graphs (TE, attn + moe_router + "
            "moe_preprocess) and the all-to-all dispatcher. TFLOP/s on the pre-26.06 count (30.8 G a token at "
            "8,192)."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B GB200x64 BF16 seq8192", model="120b", system="DGX-GB200", gpus=64, gbs=1280, mbs=1,
        seq=8192, tp=1, pp=1, cp=1, vp=1, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=15876,
        model_tflops_per_gpu=488, container="25.11", commit="1804c076f",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_gb200 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@1804c076f), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_BASE_CONFIG "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py _gpt_oss_common: TP 2 "
                "PP 4 EP 16 SP, overridden by the preset), overrides scripts/performance/utils/overrides.py; model "
                "GPTOSSProvider (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "not set (Megatron-Core default 'none')",
            "cuda_graph_scope": "not set",
            "recompute_granularity": (
                "not set (None: the 25.11 _set_recompute_overrides sets modules only, so they are inert)"
            ),
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "optimizer_dtypes_note": "not set by the recipe: OptimizerConfig defaults (fp32)",
            },
            "env": "not read (scripts/performance/perf_plugins.py@1804c076f)",
            "table_vs_recipe": (
                "table GBS 1280, MBS 1, sequence 8192; the main-line preset at 1804c076f has GBS 512, MBS 4, "
                "sequence 4096 and no flex backend"
            ),
            "alt_recipe": {
                "source": (
                    "GPT_OSS_120B_GB200_BF16_BASE_CONFIG @4a82e1651 (branch gaod/r0.2.0_test, 2025-12-06): GBS "
                    "1280, MBS 1, EP 64, moe_flex_dispatcher_backend 'hybridep' (applied in the recipe; 32 SMs by "
                    "_set_common_perf_overrides), recompute_modules ['layernorm', 'moe_act'], no CUDA graphs; "
                    "sequence 8192"
                ),
                "gbs": 1280,
                "mbs": 1,
                "seq": 8192,
                "moe_token_dispatcher_type": "flex",
                "moe_flex_dispatcher_backend": "hybridep",
                "moe_hybridep_num_sms": 32,
                "cuda_graph_impl": "not set (none)",
                "cuda_graph_scope": "not set",
            },
        },
        notes=(
            "25.11, replacing the GBS 512 entry at 1804c076f; only container with this layout. Table GA 20. "
            "Dispatcher uncertain: the main-line code at 1804c076f gives all-to-all (recorded), the test branch "
            "preset with the table's layout gives HybridEP flex (alt_recipe); the GB200 HybridEP commits on that "
            "branch ('gb200 gptosss', 'add hybridep', 'fix the dispatcher', 2025-12-06) are dated days before the "
            "table entry. No CUDA graphs either way. TFLOP/s on the pre-26.06 count."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B GB300x64 BF16 gbs512", model="120b", system="DGX-GB300", gpus=64, gbs=512, mbs=4,
        seq=4096, tp=1, pp=1, cp=1, vp=1, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=18618,
        model_tflops_per_gpu=506, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_gb300 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@97ad8cc6f), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_BASE_CONFIG "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py _gpt_oss_common: TP 2 "
                "PP 4 EP 16 SP, overridden by the preset), overrides scripts/performance/utils/overrides.py; model "
                "GPTOSSProvider (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "optimizer_dtypes_note": "not set by the recipe: OptimizerConfig defaults (fp32)",
                "te_rng_tracker": True,
            },
            "env": "not read (scripts/performance/perf_plugins.py@97ad8cc6f)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "25.11 at 97ad8cc6f, replaced within the container by the GBS 1,280 / 8,192 entry at 1804c076f (kept). "
            "GA 2. TE CUDA graphs of attn + moe_router + moe_preprocess, all-to-all (the provider's), no recompute. "
            "The scripts pass no --seq_length here; the mock dataset would default to 8,192 against the model's "
            "4,096 (utils/overrides.py set_user_overrides), so the launcher must have passed 4,096 (not read)."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B GB200x64 BF16 gbs512", model="120b", system="DGX-GB200", gpus=64, gbs=512, mbs=4,
        seq=4096, tp=1, pp=1, cp=1, vp=1, ep=64, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=15754,
        model_tflops_per_gpu=428, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_gb200 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@97ad8cc6f), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_BASE_CONFIG "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py _gpt_oss_common: TP 2 "
                "PP 4 EP 16 SP, overridden by the preset), overrides scripts/performance/utils/overrides.py; model "
                "GPTOSSProvider (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "not set (Megatron-Core default 'none')",
            "cuda_graph_scope": "not set",
            "recompute_granularity": (
                "not set (None: the 25.11 _set_recompute_overrides sets modules only, so they are inert)"
            ),
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "optimizer_dtypes_note": "not set by the recipe: OptimizerConfig defaults (fp32)",
            },
            "env": "not read (scripts/performance/perf_plugins.py@97ad8cc6f)",
            "table_vs_recipe": "matches",
            "alt_recipe": None,
        },
        notes=(
            "25.11 at 97ad8cc6f, replaced within the container at 1804c076f (kept). GA 2. All-to-all, no CUDA "
            "graphs; the preset's recompute_modules are set without a selective granularity (uncertain whether "
            "anything was recomputed)."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B B200x64 BF16 gbs512", model="120b", system="DGX-B200", gpus=64, gbs=512, mbs=4,
        seq=4096, tp=1, pp=1, cp=1, vp=1, ep=8, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=8213,
        model_tflops_per_gpu=223, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_b200 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@97ad8cc6f), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_BASE_CONFIG "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py _gpt_oss_common: TP 2 "
                "PP 4 EP 16 SP, overridden by the preset), overrides scripts/performance/utils/overrides.py; model "
                "GPTOSSProvider (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "not set (Megatron-Core default 'none')",
            "cuda_graph_scope": "not set",
            "recompute_granularity": (
                "not set (None: the 25.11 _set_recompute_overrides sets modules only, so they are inert)"
            ),
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (no virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "optimizer_dtypes_note": "not set by the recipe: OptimizerConfig defaults (fp32)",
            },
            "env": "not read (scripts/performance/perf_plugins.py@97ad8cc6f)",
            "table_vs_recipe": (
                "table EP 8; the preset at 97ad8cc6f (and 1804c076f) has EP 64 (MBS 4, GBS 512 as the table)"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.11 (unchanged at 1804c076f and in every archive). Table GA 2 (64 DP x MBS 4 x 2 = 512). Table EP 8 "
            "against the preset's EP 64: the table's EP taken. All-to-all, no CUDA graphs."
        ),
    ),
    dict(
        case="MB GPT-OSS-120B H100x64 BF16 gbs512", model="120b", system="DGX-H100", gpus=64, gbs=512, mbs=4,
        seq=4096, tp=1, pp=4, cp=1, vp=1, ep=8, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=5630,
        model_tflops_per_gpu=153, container="25.11", commit="97ad8cc6f",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config_h100 "
                "(scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py@97ad8cc6f), preset "
                "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_BASE_CONFIG "
                "(scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py), recipe "
                "gpt_oss_120b_pretrain_config (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py _gpt_oss_common: TP 2 "
                "PP 4 EP 16 SP, overridden by the preset), overrides scripts/performance/utils/overrides.py; model "
                "GPTOSSProvider (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "not set (Megatron-Core default 'none')",
            "cuda_graph_scope": "not set",
            "recompute_granularity": (
                "not set (None: the 25.11 _set_recompute_overrides sets modules only, so they are inert)"
            ),
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": "not set (no CommOverlapConfig: Megatron DDP default max(40e6, 1e6 x DP))",
            "tp_comm_overlap": False,
            "overlap_p2p_comm": "not set (PP 4 without virtual pipeline)",
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": True,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "optimizer_dtypes_note": "not set by the recipe: OptimizerConfig defaults (fp32)",
            },
            "env": "not read (scripts/performance/perf_plugins.py@97ad8cc6f)",
            "table_vs_recipe": (
                "table MBS 4 and GA 2; the preset at 97ad8cc6f has MBS 1 (PP 4, EP 8, GBS 512 as the table); at DP "
                "16 and GBS 512 MBS 4 gives GA 8, not the table's 2"
            ),
            "alt_recipe": None,
        },
        notes=(
            "25.11 (unchanged at 1804c076f and in every archive). The table's MBS 4 is taken; its GA 2 does not fit "
            "(DP 16: 512 / (16 x 4) = 8) and the preset has MBS 1: uncertain. All-to-all, no CUDA graphs, PP 4 by "
            "the default split."
        ),
    ),
]
