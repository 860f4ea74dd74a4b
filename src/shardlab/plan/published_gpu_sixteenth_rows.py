"""Megatron-Bridge model-verification cards' GPU pre-training rows (16), frozen as published inputs before the
planner was run on any of them. Pure data: nothing here is imported or evaluated by the planner yet.

Source: NVIDIA-NeMo/Megatron-Bridge examples/model_verification_cards/<model>/card.yaml at the mirror's newest
commit 067f987df (2026-08-22), seven cards: gpt-oss-20b, gpt-oss-120b, qwen3-30b-a3b, qwen3-235b-a22b, qwen3-8b,
deepseek-v3, moonlight-16b-a3b. A card's training items are nested by system; each has a `command:`
(scripts/training/train.sh --nodes N --gpus-per-node G --recipe <name> [flags, key=value overrides]),
`last_verified`, `metrics:` (last_10_steps_step_time_ms_avg, last_10_steps_model_tflops_per_gpu_avg,
last_10_steps_tokens_per_second_per_gpu_avg: averages over the run's last ten steps), an expected_result text and
sometimes an item-level `bridge_commit`; the card has verification_environment {base_container, bridge_commit}.

Collection rule: one row per `pretrain` or `pretrain_performance` item per system with non-null tokens/s (sft, peft,
sft_export_inference, sft_long_context, checkpoint_resume and qwen3-30b-a3b's pretrain_weak_scaling points are left
out; qwen3-235b-a22b's H100 pretrain and deepseek-v3's GB300 pretrain are unverified with null metrics): 16 rows.
Figures are the card's, unrounded: tokens_per_gpu, model_tflops_per_gpu, step_time_ms (for every row, step_time_ms
x tokens/s x GPUs = GBS x seq). `container` is the card's base_container; `commit` the item's bridge_commit, else
the card's. Every commit exists in the mirror (no by-date fallback was needed); seven are PR heads, not on main:
  6799f099712c961f15cf92d6bd88998f029d672d  main       gpt-oss-20b pretrain/H100 (card)
  a8038f6d99d8ade33e1b715ba79bc9185b073e59  pull/5397  gpt-oss-120b pretrain/H100, pretrain_performance/GB200 (card)
  0480586879f2513958fd8634fc529693ae13e536  main       gpt-oss-120b perf/GB300, qwen3-30b-a3b perf/GB300,
                                                       qwen3-235b-a22b perf/GB200 (items)
  5b9d9cf501193277e1ca47a99b97c640b8f39f90  pull/4909  qwen3-30b-a3b pretrain/H100 (item)
  487f563983f00b190a1a8322d663f317ad8e611c  pull/5066  qwen3-30b-a3b pretrain/GB200 (item)
  3a9559f01283190bf16a7a592c1e2c35d908c496  pull/5123  qwen3-30b-a3b perf/H100 (item)
  6e1b47893e3c174e74a97fb1730c9f58387ab882  pull/5066  qwen3-30b-a3b perf/GB200 (item)
  fbb7570cf7eec94fd2e6064454d84f7fad07fbfa  main       qwen3-235b-a22b perf/GB300 (item)
  619cc20bd3c7eca1dc84e8ea0f822307dfbd5cc3  pull/4909  qwen3-8b pretrain/H100 (item)
  79308d0d99fb8c09b3f1a22baa68a4ffa4f4ce1e  main       deepseek-v3 perf/H100, /GB200, /GB300 (card)
  411c6b1dc26eef50124843fbf9b6253b7b6c43cb  pull/5021  moonlight-16b-a3b pretrain/H100 (item)
The card-level commits not used by a row: aabb29d0e (qwen3-30b-a3b), bc0941035 (qwen3-235b-a22b), 5c56eab34
(qwen3-8b), 93c693059 (moonlight-16b-a3b).

Recipes, read at each row's commit (the chain in `recipe["builder"]`). The launcher (scripts/training/run_recipe.py,
recipe_runner.py, recipe_metadata.py at the commit) loads a name exported by src/megatron/bridge/perf_recipes (the
flat benchmark recipes, ..._<N>gpu_<hw>_<precision>_config) from there; qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config
and deepseek_v3_pretrain_1024gpu_h100_bf16_config are exported by both packages and the benchmark one wins
(BENCHMARK_RECIPE_PRECEDENCE_COLLISIONS). Benchmark recipes refuse --dataset (mock data), and the launcher turns on
the precision-aware optimizer for a bf16 benchmark recipe with Adam (_apply_benchmark_runtime_defaults). Other names
are library recipes (src/megatron/bridge/recipes, through the package's exports and aliases:
gpt_oss_120b_pretrain_config = gpt_oss_120b_pretrain_64gpu_h100_bf16_config, qwen3_30b_a3b_pretrain_config =
qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config); the launchers at 5b9d9cf50 and 619cc20bd know library recipes only.
The six `pretrain` rows are library recipes run on RP2 megatron-indexed data with the SentencePiece tokenizer, 100
steps, natural routing; the ten `pretrain_performance` rows are benchmark recipes (mock data, 50 steps, forced
balanced routing). Command-line overrides were applied (--seq_length 4096 everywhere it appears equals the recipe's;
--max_steps; lr/scheduler/checkpoint/safety keys; model.moe_router_force_load_balancing=false where given); none
changes a layout or a kernel setting. "not set" means looked for and not set (the default follows when known);
"not read" means not looked for. Library defaults were read in Megatron-Core at the bridge's 3rdparty/Megatron-LM
gitlinks (2a75ac12c, d12f6c8c9, cd4afffa6, 58bf14e9e: transformer_config.py, model_parallel_config.py,
distributed/distributed_data_parallel[_config].py).

What every row shares: TP 1 or 2, CP 1, ETP 1, no Megatron FSDP, the distributed optimizer, fp32 main parameters,
grouped GEMM and permute fusion (MoE models), TE cross entropy (GPT-OSS library rows: native), seq 4096.
What differs between rows (recipe keys): the dispatcher (alltoall on the three GPT-OSS H100/GB200 rows; HybridEP flex
with 32 SMs on the other MoE rows; Qwen3-8B is dense); CUDA graphs (none; TE graphs of
moe_router + moe_preprocess on the three Qwen3-30B H100/GB200-functional rows; whole-iteration graphs with paged
stash, the 1.5 per-rank HybridEP token budget and padded experts on the seven MXFP8 performance rows, which also
bring TE's op fuser and the EP all-to-all overlap with delayed wgrad); recompute (selective layernorm + moe_act on
GPT-OSS GB200 BF16, mla_up_proj + mlp on DeepSeek H100, mla_up_proj on DeepSeek GB200, none elsewhere); the
precision-aware optimizer and its state dtypes (`extra.optimizer_dtypes`: bf16 grads and moments for DeepSeek and
Moonlight); grad reduce in fp32 only on the two GPT-OSS library rows; FP8 attention / output projection; the DP
bucket (128 MiB where a CommOverlapConfig exists at DP > 1, Megatron-Core's max(40e6, 1e6 x DP) otherwise, one
bucket on DeepSeek H100); the process environment (`recipe["env"]`).

Model FLOPs: the card's TFLOP/s over tokens/s is the FLOPs a token of Megatron-Bridge's counter
(src/megatron/bridge/training/utils/flop_utils.py, transformer_flops) with the vocabulary the run built, so it is one
figure per (model, vocabulary in the run): GPT-OSS-20B 20.00 G; GPT-OSS-120B 29.71 G on H100 and 32.63-32.64 G on
GB200/GB300; Qwen3-30B-A3B 23.01 G; Qwen3-235B-A22B 148.04 G; Qwen3-8B 49.03 G; DeepSeek-V3 260.11 G on H100 and
260.00 G on GB200/GB300; Moonlight 17.16 G. The vocabulary in the run (`extra.vocab_size_in_run`,
`padded_vocab_size_in_run`): _pretrain_common gained tokenizer.use_tokenizer_vocab_size=True between 3a9559f01
(2026-07-27) and 6799f0997 (2026-08-09), so the two GPT-OSS library rows built the RP2 SentencePiece tokenizer's
vocabulary (32,000 reproduces the card; 201,088 would give +14.6 % for 20B, +9.8 % for 120B), while the July
library rows (Qwen3, Moonlight) kept the HF vocabulary; _benchmark_common sets the flag False (at a8038f6d9 and the
later rows' commits; at 3a9559f01 / 6e1b47893 it did not exist and a preset model vocabulary was kept), so every
benchmark row kept the model's; DeepSeek's TP 2 pads 129,280 to 130,560. The test's hand count of the counter from
MV_SHAPES reproduces every row within 0.05 %.

Uncertain: the HF configs are not in the mirror: the shapes are the bridges' mappings with the values of the
deprecated provider classes (removed at 217de1a2e, 2026-03-16; read at its parent dc805f5cf) and, for DeepSeek-V3,
the repository's test fixture. Checks against the cards' exports: GPT-OSS-20B's shape gives the 20,914,757,184
parameters exactly, Qwen3-30B-A3B's the 61,064,245,248 bf16 bytes, and the Qwen3-8B (399) and Moonlight (5,344, with
its 27 rotary inv_freq buffers) tensor counts match.
Moonlight's vocabulary: 163,840 (the HF config's; also the repository's Kimi tests') is taken; the old provider said
163,842 (the SFT export's rows), padded to 165,120 it fits the card's FLOPs as well (0.05 % either side). The RP2
tokenizer's size (32,000) is inferred from the FLOPs, not read. apply_rope_fusion on the GPT-OSS performance rows:
the recipe sets True, GPTModelProvider.provide() resets it to False for yarn (recorded False). DeepSeek H100 keeps
overlap_param_gather True with overlap_grad_reduce False. Recipe resolution depends on the GPU at build time
(apply_flex_dispatcher_backend inspects device 0): the base recipes' 'deepep' backend falls back to alltoall on
GB200/GB300 before the performance recipes set HybridEP; DeepSeek's base 'hybridep' passes on H100, so that row runs
HybridEP though its performance recipe never names it. CommOverlapConfig(tp_comm_overlap=True) turns itself off at
TP 1 (Qwen3 rows). moe_a2a_overlap, set by the Qwen3 recipes, is not a Megatron-Core field (inert). The launcher's
Slurm environment (setup_experiment.py) was not read; `env` is the recipe's env_vars.
"""

from __future__ import annotations


MV_SHAPES = {
    "gpt-oss-20b": {
        "hf_id": "openai/gpt-oss-20b",
        "provider": (
            "GPTOSSBridge.provider_bridge, src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py@6799f0997 over "
            "model_bridge.CONFIG_MAPPING from the HF config of openai/gpt-oss-20b (not in the mirror); values of the "
            "deprecated GPTOSSProvider20B(GPTOSSProvider), src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py"
            "@dc805f5cf (parent of 217de1a2e, which removed the provider classes on 2026-03-16); checked against the "
            "card's 20,914,757,184 exported parameters (reproduced exactly)"
        ),
        "num_layers": 24,  # GPTOSSProvider20B (HF num_hidden_layers)
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_query_groups": 8,  # GQA, HF num_key_value_heads
        "kv_channels": 64,  # head dim (HF head_dim); q projection 64 x 64 = 4096 > hidden
        "ffn_hidden_size": 2880,  # HF intermediate_size; no dense layer: every layer is MoE
        "moe_ffn_hidden_size": 2880,  # the bridge sets it from HF intermediate_size
        "num_moe_experts": 32,  # HF num_local_experts
        "moe_router_topk": 4,  # HF num_experts_per_tok
        "moe_layer_freq": 1,  # not set: Megatron-Core default 1, every layer MoE
        "moe_shared_expert_intermediate_size": None,  # no shared expert
        "moe_router_num_groups": None,
        "moe_router_group_topk": None,
        "vocab_size": 201088,  # = 128 x 1571: no padding; the library rows ran the tokenizer's (see extra)
        "make_vocab_size_divisible_by": 128,  # model_bridge.make_vocab_size_divisible_by(201088)
        "share_embeddings_and_output_weights": False,
        "qk_layernorm": False,
        "add_bias_linear": True,  # qkv, proj, fc1, fc2, and the router (Megatron-Core router bias)
        "add_qkv_bias": False,  # the bridge's explicit False at 6799f0997; qkv has a bias through add_bias_linear
        "multi_latent_attention": False,
        "q_lora_rank": None,
        "kv_lora_rank": None,
        "qk_head_dim": None,
        "qk_pos_emb_head_dim": None,
        "v_head_dim": None,
        "mtp_num_layers": None,
        "window_size": (127, 0),  # (HF sliding_window 128 - 1, 0): 128 keys a query
        "window_attn_skip_freq": 2,  # layer_number % 2 != 0 (1-based) is windowed
        "sliding_window_layers": list(range(0, 24, 2)),  # 0-based
        "full_attention_layers": list(range(1, 24, 2)),
        "softmax_type": "learnable",  # attention sink: one learnable softmax offset per head
        "activation": "quick_gelu GLU, clamped",  # x * sigmoid(1.702 x) on the gate, (up + 1) on the linear half
        "gated_linear_unit": True,
        "activation_func": "quick_gelu",  # megatron.core.fusions.fused_bias_geglu.quick_gelu
        "quick_gelu_alpha": 1.702,
        "activation_func_clamp_value": 7.0,
        "glu_linear_offset": 1.0,
        "position_embedding_type": "yarn",
        "rotary_base": 150000,  # HF rope_theta
        "yarn_rotary_scaling_factor": 32.0,
        "yarn_original_max_position_embeddings": 4096,
        "yarn_beta_fast": 32.0,
        "yarn_beta_slow": 1.0,
        "yarn_correction_range_round_to_int": False,
        "yarn_mscale": None,
        "yarn_mscale_all_dim": None,
        "seq_length_provider": 131072,  # HF max_position_embeddings; the recipes set 4096
        "moe_router_pre_softmax": False,  # softmax over the top-k logits
        "moe_router_score_function": "softmax",  # Megatron-Core default, not set
        "moe_router_load_balancing_type": "none",
        "moe_token_dispatcher_type": "alltoall",  # the bridge's; recipes may switch to flex
        "moe_grouped_gemm": True,
        "moe_permute_fusion": True,
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-05,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "bias_activation_fusion": True,
        "bias_dropout_fusion": False,
        "params_dtype": "bf16",
    },
    "gpt-oss-120b": {
        "hf_id": "openai/gpt-oss-120b",
        "provider": (
            "GPTOSSBridge.provider_bridge, src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py@a8038f6d9 (the same "
            "blob at 048058687) over model_bridge.CONFIG_MAPPING from the HF config of openai/gpt-oss-120b (not in "
            "the mirror); values of the deprecated GPTOSSProvider120B(GPTOSSProvider), "
            "src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py@dc805f5cf"
        ),
        "num_layers": 36,  # GPTOSSProvider120B (HF num_hidden_layers)
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_query_groups": 8,
        "kv_channels": 64,
        "ffn_hidden_size": 2880,  # no dense layer: every layer is MoE
        "moe_ffn_hidden_size": 2880,
        "num_moe_experts": 128,
        "moe_router_topk": 4,
        "moe_layer_freq": 1,
        "moe_shared_expert_intermediate_size": None,
        "moe_router_num_groups": None,
        "moe_router_group_topk": None,
        "vocab_size": 201088,  # the H100 library row ran the tokenizer's vocabulary instead (see its extra)
        "make_vocab_size_divisible_by": 128,
        "share_embeddings_and_output_weights": False,
        "qk_layernorm": False,
        "add_bias_linear": True,
        "add_qkv_bias": True,  # from a8038f6d9 the bridge maps HF attention_bias (true); same bias either way
        "multi_latent_attention": False,
        "q_lora_rank": None,
        "kv_lora_rank": None,
        "qk_head_dim": None,
        "qk_pos_emb_head_dim": None,
        "v_head_dim": None,
        "mtp_num_layers": None,
        "window_size": (127, 0),
        "window_attn_skip_freq": 2,
        "sliding_window_layers": list(range(0, 36, 2)),  # 0-based
        "full_attention_layers": list(range(1, 36, 2)),
        "softmax_type": "learnable",
        "activation": "quick_gelu GLU, clamped",
        "gated_linear_unit": True,
        "activation_func": "quick_gelu",
        "quick_gelu_alpha": 1.702,
        "activation_func_clamp_value": 7.0,
        "glu_linear_offset": 1.0,
        "position_embedding_type": "yarn",
        "rotary_base": 150000,
        "yarn_rotary_scaling_factor": 32.0,
        "yarn_original_max_position_embeddings": 4096,
        "yarn_beta_fast": 32.0,
        "yarn_beta_slow": 1.0,
        "yarn_correction_range_round_to_int": False,
        "yarn_mscale": None,
        "yarn_mscale_all_dim": None,
        "seq_length_provider": 131072,
        "moe_router_pre_softmax": False,
        "moe_router_score_function": "softmax",
        "moe_router_load_balancing_type": "none",
        "moe_token_dispatcher_type": "alltoall",
        "moe_grouped_gemm": True,
        "moe_permute_fusion": True,
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-05,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "bias_activation_fusion": True,
        "bias_dropout_fusion": False,
        "params_dtype": "bf16",
    },
    "qwen3-30b-a3b": {
        "hf_id": "Qwen/Qwen3-30B-A3B",
        "provider": (
            "Qwen3MoEBridge.provider_bridge, src/megatron/bridge/models/qwen/qwen3_moe_bridge.py (blob a6476f4f4 "
            "from 487f56398, 23666f66f at 5b9d9cf50: a copyright line apart, the same) over "
            "model_bridge.CONFIG_MAPPING from the HF config (revision ad44e777b, not in the mirror); values of the "
            "deprecated Qwen3MoEModelProvider30B_A3B(Qwen3MoEModelProvider), "
            "src/megatron/bridge/models/qwen/qwen_provider.py@dc805f5cf"
        ),
        "num_layers": 48,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_query_groups": 4,
        "kv_channels": 128,  # head dim: q is 32 x 128 = 4096 wide, twice the hidden size
        "ffn_hidden_size": 6144,  # the dense MLP width; unused, every layer is MoE
        "moe_ffn_hidden_size": 768,
        "num_moe_experts": 128,
        "moe_router_topk": 8,
        "moe_layer_freq": 1,  # not set by provider or bridge: Megatron-Core default 1, every layer MoE
        "all_layers_moe": True,
        "shared_experts": None,
        "moe_shared_expert_intermediate_size": None,
        "moe_router_num_groups": None,
        "moe_router_group_topk": None,
        "vocab_size": 151936,  # = 1187 x 128: no padding
        "make_vocab_size_divisible_by": 128,
        "share_embeddings_and_output_weights": False,
        "qk_layernorm": True,
        "add_bias_linear": False,
        "add_qkv_bias": False,
        "multi_latent_attention": False,
        "q_lora_rank": None,
        "kv_lora_rank": None,
        "qk_head_dim": None,
        "qk_pos_emb_head_dim": None,
        "v_head_dim": None,
        "mtp_num_layers": None,
        "window_size": None,
        "window_attn_skip_freq": None,
        "softmax_type": "vanilla",  # Megatron-Core default
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-06,
        "activation": "swiglu",  # activation_func silu, gated_linear_unit True
        "gated_linear_unit": True,
        "position_embedding_type": "rope",
        "rotary_base": 1000000.0,
        "moe_router_load_balancing_type": "aux_loss",
        "moe_aux_loss_coeff": 0.001,
        "moe_router_pre_softmax": False,  # the bridge's: not HF norm_topk_prob (true)
        "moe_router_score_function": "softmax",  # Megatron-Core default, not set
    },
    "qwen3-235b-a22b": {
        "hf_id": "Qwen/Qwen3-235B-A22B",
        "provider": (
            "Qwen3MoEBridge.provider_bridge, src/megatron/bridge/models/qwen/qwen3_moe_bridge.py@fbb7570cf (the "
            "same blob at 048058687) over model_bridge.CONFIG_MAPPING from the HF config (not in the mirror); "
            "values of the deprecated Qwen3MoEModelProvider235B_A22B(Qwen3MoEModelProvider), "
            "src/megatron/bridge/models/qwen/qwen_provider.py@dc805f5cf"
        ),
        "num_layers": 94,
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "num_query_groups": 4,
        "kv_channels": 128,  # head dim: q is 64 x 128 = 8192 wide, twice the hidden size
        "ffn_hidden_size": 12288,  # the dense MLP width; unused, every layer is MoE
        "moe_ffn_hidden_size": 1536,
        "num_moe_experts": 128,
        "moe_router_topk": 8,
        "moe_layer_freq": 1,
        "all_layers_moe": True,
        "shared_experts": None,
        "moe_shared_expert_intermediate_size": None,
        "moe_router_num_groups": None,
        "moe_router_group_topk": None,
        "vocab_size": 151936,
        "make_vocab_size_divisible_by": 128,
        "share_embeddings_and_output_weights": False,
        "qk_layernorm": True,
        "add_bias_linear": False,
        "add_qkv_bias": False,
        "multi_latent_attention": False,
        "q_lora_rank": None,
        "kv_lora_rank": None,
        "qk_head_dim": None,
        "qk_pos_emb_head_dim": None,
        "v_head_dim": None,
        "mtp_num_layers": None,
        "window_size": None,
        "window_attn_skip_freq": None,
        "softmax_type": "vanilla",
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-06,
        "activation": "swiglu",
        "gated_linear_unit": True,
        "position_embedding_type": "rope",
        "rotary_base": 1000000.0,
        "moe_router_load_balancing_type": "aux_loss",
        "moe_aux_loss_coeff": 0.001,
        "moe_router_pre_softmax": False,
        "moe_router_score_function": "softmax",
    },
    "qwen3-8b": {
        "hf_id": "Qwen/Qwen3-8B",
        "provider": (
            "Qwen3Bridge.provider_bridge, src/megatron/bridge/models/qwen/qwen3_bridge.py@619cc20bd over "
            "model_bridge.CONFIG_MAPPING from the HF config (revision b968826d9, not in the mirror); values of the "
            "deprecated Qwen3ModelProvider8B(Qwen3ModelProvider), "
            "src/megatron/bridge/models/qwen/qwen_provider.py@dc805f5cf"
        ),
        "num_layers": 36,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_query_groups": 8,
        "kv_channels": 128,
        "ffn_hidden_size": 12288,  # dense SwiGLU
        "moe_ffn_hidden_size": None,
        "num_moe_experts": None,  # dense model
        "moe_router_topk": None,
        "moe_layer_freq": None,
        "all_layers_moe": False,
        "shared_experts": None,
        "moe_shared_expert_intermediate_size": None,
        "moe_router_num_groups": None,
        "moe_router_group_topk": None,
        "vocab_size": 151936,
        "make_vocab_size_divisible_by": 128,
        "share_embeddings_and_output_weights": False,  # HF tie_word_embeddings false for 8B
        "qk_layernorm": True,
        "add_bias_linear": False,
        "add_qkv_bias": False,
        "multi_latent_attention": False,
        "q_lora_rank": None,
        "kv_lora_rank": None,
        "qk_head_dim": None,
        "qk_pos_emb_head_dim": None,
        "v_head_dim": None,
        "mtp_num_layers": None,
        "window_size": None,
        "window_attn_skip_freq": None,
        "softmax_type": "vanilla",
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-06,
        "activation": "swiglu",
        "gated_linear_unit": True,
        "position_embedding_type": "rope",
        "rotary_base": 1000000.0,
        "moe_router_load_balancing_type": None,
        "moe_aux_loss_coeff": None,
        "moe_router_pre_softmax": None,
        "moe_router_score_function": None,
    },
    "deepseek-v3": {
        "hf_id": "deepseek-ai/DeepSeek-V3",
        "provider": (
            "DeepSeekV3Bridge.provider_bridge (MLAModelProvider), "
            "src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py@79308d0d9 over model_bridge.CONFIG_MAPPING "
            "from the HF config (revision e815299b0, not in the mirror); values of the repository's fixture of it, "
            "tests/unit_tests/models/deepseek/test_deepseek_bridges.py@79308d0d9, and of the deprecated "
            "DeepSeekV3ModelProvider, src/megatron/bridge/models/deepseek/deepseek_provider.py@dc805f5cf"
        ),
        "num_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_query_groups": 128,  # HF num_key_value_heads; unused by MLA
        "kv_channels": None,  # not set; MLA uses the head dims below
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
        "mtp_num_layers": 1,  # HF num_nextn_predict_layers 1 (the bridge); the recipes set 1
        "mtp_loss_scaling_factor": 0.1,  # the recipe's
        "vocab_size": 129280,  # = 101 x 1280: no padding at TP 1; 130,560 at TP 2 (the H100 row)
        "make_vocab_size_divisible_by": 1280,  # the bridge's
        "share_embeddings_and_output_weights": False,
        "add_bias_linear": False,
        "add_qkv_bias": False,
        "window_size": None,
        "window_attn_skip_freq": None,
        "softmax_type": "vanilla",
        "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "moe_router_num_groups": 8,  # n_group
        "moe_router_group_topk": 4,  # topk_group
        "moe_router_topk_scaling_factor": 2.5,
        "moe_router_pre_softmax": True,  # the bridge's
        "moe_router_load_balancing_type": "seq_aux_loss",
        "moe_aux_loss_coeff": 0.0001,  # the bridge's getattr(hf, "aux_loss_alpha", 1e-4) at 79308d0d9
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-06,
        "activation": "swiglu",
        "gated_linear_unit": True,
        "position_embedding_type": "rope",  # MLA rope_type yarn: factor 40, original_max_position_embeddings 4096
        "rotary_base": 10000.0,
        "rotary_scaling_factor": 40,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "moonlight-16b-a3b": {
        "hf_id": "moonshotai/Moonlight-16B-A3B",
        "provider": (
            "DeepSeekV3Bridge.provider_bridge (MLAModelProvider; Moonlight is DeepseekV3ForCausalLM), "
            "src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py@411c6b1dc over model_bridge.CONFIG_MAPPING "
            "from the HF config (revision 476b36a47, not in the mirror); values of the deprecated "
            "MoonlightModelProvider16B(MLAModelProvider), src/megatron/bridge/models/deepseek/deepseek_provider.py"
            "@dc805f5cf, with Megatron-Core MLATransformerConfig defaults for the MLA dims it leaves unset"
        ),
        "num_layers": 27,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_query_groups": 16,  # HF num_key_value_heads (provider default = heads); unused by MLA
        "kv_channels": None,  # MLA uses the head dims below
        "multi_latent_attention": True,
        "q_lora_rank": None,  # no q compression: q projected straight from the hidden state
        "kv_lora_rank": 512,
        "qk_head_dim": 128,
        "qk_pos_emb_head_dim": 64,
        "v_head_dim": 128,
        "qk_layernorm": True,  # the bridge's (kv latent RMSNorm)
        "ffn_hidden_size": 11264,  # the first (dense) layer's SwiGLU width
        "moe_ffn_hidden_size": 1408,
        "num_moe_experts": 64,
        "moe_router_topk": 6,
        "moe_shared_expert_intermediate_size": 2816,  # 2 shared experts x 1408
        "moe_layer_freq": [0] * 1 + [1] * 26,  # first_k_dense_replace 1: layer 0 dense
        "first_k_dense": 1,
        "mtp_num_layers": None,  # no num_nextn_predict_layers in use (the card's FLOPs count none)
        "mtp_loss_scaling_factor": None,
        "vocab_size": 163840,  # HF config (the deprecated provider said 163842, the tokenizer's rows)
        "make_vocab_size_divisible_by": 1280,  # the bridge's; 163840 = 128 x 1280: no padding
        "share_embeddings_and_output_weights": False,
        "add_bias_linear": False,
        "add_qkv_bias": False,
        "window_size": None,
        "window_attn_skip_freq": None,
        "softmax_type": "vanilla",
        "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "moe_router_num_groups": 1,
        "moe_router_group_topk": 1,
        "moe_router_topk_scaling_factor": 2.446,
        "moe_router_pre_softmax": True,
        "moe_router_load_balancing_type": "seq_aux_loss",
        "moe_aux_loss_coeff": 0.001,  # HF aux_loss_alpha through CONFIG_MAPPING
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-05,
        "activation": "swiglu",
        "gated_linear_unit": True,
        "position_embedding_type": "rope",  # MLA rope_type "yarn" kept, but unscaled (no HF rope_scaling)
        "rotary_base": 50000,
        "rotary_scaling_factor": 1.0,  # the bridge's no-scaling fill for MLA without rope_scaling
        "beta_fast": 32,  # Megatron-Core MLA default (inert at factor 1)
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
}


ROWS = [
    dict(
        case="MV GPT-OSS-20B H100x16 BF16 pretrain", model="gpt-oss-20b", system="DGX-H100", gpus=16, gbs=512, mbs=1,
        seq=4096, tp=2, pp=4, cp=1, vp=None, ep=4, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=5851.199,
        model_tflops_per_gpu=117.01, step_time_ms=22400.88, container="nvcr.io/nvidia/nemo:26.06", commit="6799f0997",
        item="pretrain/H100", last_verified="2026-08-09",
        recipe={
            "builder": (
                "gpt_oss_20b_pretrain_16gpu_h100_bf16_config "
                "(src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py@6799f0997; base _pretrain_common, "
                "src/megatron/bridge/recipes/common.py; a library recipe: scripts/training/run_recipe.py, "
                "recipe_runner.py, recipe_metadata.py at the same commit; not a perf_recipes export)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": True,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": True,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": False,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": False,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": "full (the recipe's; inert with cuda_graph_impl 'none')",
            "recompute_granularity": None,
            "recompute_method": "not set (Megatron-Core default None)",
            "recompute_num_layers": "not set (Megatron-Core default None)",
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": "not set (no CommOverlapConfig; OptimizerConfig default False)",
            "bucket_size": (
                "not set (no CommOverlapConfig: Megatron-Core DDP default max(40e6, 1e6 x DP) = 40,000,000 at DP 2)"
            ),
            "tp_comm_overlap": "not set (no CommOverlapConfig; Megatron-Core default False)",
            "overlap_p2p_comm": (
                "not set (PP 4 without virtual pipeline; Megatron-Core default False, batch_p2p_comm True)"
            ),
            "overlap_moe_expert_parallel_comm": "not set (Megatron-Core default False)",
            "delay_wgrad_compute": "not set (Megatron-Core default False)",
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "native",
            "apply_rope_fusion": "not set (Megatron-Core default False; provide() would reset it for yarn anyway)",
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set (GPTModelProvider default False)",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "vocab_size_in_run": 32000,
                "padded_vocab_size_in_run": 32000,
                "moe_router_padding_for_fp8": False,
                "calculate_per_token_loss": True,
                "average_in_collective": False,
                "cp_comm_type": "a2a",
                "inert_flex_backend_field": "deepep (moe_hybridep_num_sms 16; inert with the alltoall dispatcher)",
                "cuda_graph_warmup_steps": 3,
                "dataset": "megatron-indexed RP2 head_01 (card), SentencePiece tokenizer work/data/rp2/tokenizer.model",
            },
            "env": {
                "NCCL_GRAPH_REGISTER": 0,
                "NCCL_NVLS_ENABLE": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                "TORCH_NCCL_HIGH_PRIORITY": 1,
            },
            "table_vs_recipe": (
                "the card's text states no layout; the recipe's docstring says 'Recommended parallelism: TP=2, PP=4, "
                "EP=4' and sets it (DP 2, GA 256)"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card gpt-oss-20b, item pretrain.H100 (card-level bridge_commit 6799f099712c961f15cf92d6bd88998f029d672d, "
            "on main). Command overrides: --dataset megatron-indexed (RP2 blend, SentencePiece tokenizer), "
            "--seq_length 4096, --max_steps 100, lr 3e-4 -> 3e-5, warmup 40, decay 100 iters, checkpoints at 50 and "
            "100, NaN / large grad checks on, eval off; none touches the layout or kernels. DP 2 (16 / (TP 2 x PP 4)), "
            "GA 256 (512 / (2 x 1)), expert DP 1 (16 / (PP 4 x EP 4)). The card's performance disclaimer: this model "
            "is not performance-tuned. _pretrain_common sets tokenizer.use_tokenizer_vocab_size=True, so the model "
            "took the RP2 tokenizer's vocabulary, not GPT-OSS's 201,088: the card's TFLOP/s over tokens/s (20.00 G a "
            "token) is the FLOP counter at a 32,000 vocabulary (201,088 would give 22.91 G). Natural routing, no "
            "load-balancing loss (the bridge's 'none'). add_qkv_bias False at this commit (the bridge's explicit "
            "value; add_bias_linear gives qkv its bias). step_time_ms x tokens/s x GPUs = GBS x seq."
        ),
    ),
    dict(
        case="MV GPT-OSS-120B H100x64 BF16 pretrain", model="gpt-oss-120b", system="DGX-H100", gpus=64, gbs=512, mbs=1,
        seq=4096, tp=2, pp=4, cp=1, vp=None, ep=16, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=1966.285,
        model_tflops_per_gpu=58.42, step_time_ms=16664.93, container="nvcr.io/nvidia/nemo:26.06", commit="a8038f6d9",
        item="pretrain/H100", last_verified="2026-08-11",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_config = gpt_oss_120b_pretrain_64gpu_h100_bf16_config (alias in "
                "src/megatron/bridge/recipes/gpt_oss/gpt_oss.py@a8038f6d9; defined in recipes/gpt_oss/h100/gpt_oss.py; "
                "base _pretrain_common, recipes/common.py; a library recipe: scripts/training/run_recipe.py, "
                "recipe_runner.py at the same commit)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": True,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": True,
            "mtp_num_layers": None,
            "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": False,
            "moe_router_dtype": "not set (Megatron-Core default None)",
            "moe_router_load_balancing_type": "none",
            "moe_router_force_load_balancing": False,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": False,
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": "full (the recipe's; inert with cuda_graph_impl 'none')",
            "recompute_granularity": None,
            "recompute_method": "not set (Megatron-Core default None)",
            "recompute_num_layers": "not set (Megatron-Core default None)",
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": "not set (no CommOverlapConfig; OptimizerConfig default False)",
            "bucket_size": (
                "not set (no CommOverlapConfig: Megatron-Core DDP default max(40e6, 1e6 x DP) = 40,000,000 at DP 8)"
            ),
            "tp_comm_overlap": "not set (no CommOverlapConfig; Megatron-Core default False)",
            "overlap_p2p_comm": (
                "not set (PP 4 without virtual pipeline; Megatron-Core default False, batch_p2p_comm True)"
            ),
            "overlap_moe_expert_parallel_comm": "not set (Megatron-Core default False)",
            "delay_wgrad_compute": "not set (Megatron-Core default False)",
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": False,
            "manual_gc": True,
            "manual_gc_interval": 100,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "native",
            "apply_rope_fusion": "not set (Megatron-Core default False; provide() would reset it for yarn anyway)",
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set (GPTModelProvider default False)",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "vocab_size_in_run": 32000,
                "padded_vocab_size_in_run": 32000,
                "moe_router_padding_for_fp8": False,
                "calculate_per_token_loss": True,
                "average_in_collective": False,
                "cp_comm_type": "a2a",
                "inert_flex_backend_field": "deepep (moe_hybridep_num_sms 16; inert with the alltoall dispatcher)",
                "cuda_graph_warmup_steps": 3,
                "dataset": "megatron-indexed RP2 head_01 (card), SentencePiece tokenizer work/data/rp2/tokenizer.model",
            },
            "env": {
                "NCCL_GRAPH_REGISTER": 0,
                "NCCL_NVLS_ENABLE": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                "TORCH_NCCL_HIGH_PRIORITY": 1,
            },
            "table_vs_recipe": (
                "the card's text says 'the recipe-owned GBS/MBS, natural routing, and BF16' and states no layout; the "
                "recipe's (docstring 'TP=2, PP=4, EP=16'): DP 8, GA 64"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card gpt-oss-120b, item pretrain.H100 (card-level bridge_commit a8038f6d99d8ade33e1b715ba79bc9185b073e59, "
            "'rerun with newer commit', a PR head (pull/5397), not on main; its recipes/gpt_oss tree equals "
            "6799f0997's and 048058687's pretrain functions). Command overrides as the 20B row's plus "
            "model.moe_router_force_load_balancing=false (the recipe's value already). DP 8 (64 / (TP 2 x PP 4)), GA "
            "64, expert DP 1 (64 / (PP 4 x EP 16)), 9 layers a pipeline stage. The tokenizer's vocabulary again "
            "(use_tokenizer_vocab_size=True): 29.71 G a token = the FLOP counter at 32,000 (201,088 would give 32.63 "
            "G, the two performance rows' count). Same recipe body as the 20B one (alltoall, no recompute, no CUDA "
            "graphs, native cross entropy, router fusion off, fp32 grad reduce). Functional run, not performance-tuned "
            "(card summary: timing of functional items is a sanity check)."
        ),
    ),
    dict(
        case="MV GPT-OSS-120B GB200x64 BF16 pretrain_performance", model="gpt-oss-120b", system="DGX-GB200", gpus=64,
        gbs=1280, mbs=4, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=64, etp=1, fsdp=0, precision="BF16",
        tokens_per_gpu=16398.332, model_tflops_per_gpu=535.23, step_time_ms=4995.63,
        container="nvcr.io/nvidia/nemo:26.06", commit="a8038f6d9", item="pretrain_performance/GB200",
        last_verified="2026-08-17",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_64gpu_gb200_bf16_config "
                "(src/megatron/bridge/perf_recipes/gpt_oss/gb200/gpt_oss.py@a8038f6d9; base "
                "gpt_oss_120b_pretrain_config = gpt_oss_120b_pretrain_64gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py; _benchmark_common and _perf_precision('bf16'), "
                "perf_recipes/_common.py; launcher scripts/training/run_recipe.py (benchmark path: "
                "_apply_benchmark_runtime_defaults)"
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
            "cuda_graph_scope": [],
            "recompute_granularity": "selective",
            "recompute_method": "not set (Megatron-Core default None)",
            "recompute_num_layers": "not set (Megatron-Core default None)",
            "recompute_modules": ["layernorm", "moe_act"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": False,
            "overlap_p2p_comm": False,
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
            "apply_rope_fusion": False,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set (GPTModelProvider default False)",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "use_precision_aware_optimizer_note": (
                    "the recipe leaves the base's False; the launcher's _apply_benchmark_runtime_defaults turns it on "
                    "for a bf16 benchmark recipe with Adam"
                ),
                "apply_rope_fusion_note": (
                    "True in the recipe (_benchmark_common), reset to False when the model is built: "
                    "GPTModelProvider.provide() runs fusions.validate_rope_fusion_compatibility, which refuses "
                    "position_embedding_type 'yarn'"
                ),
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 201088,
                "padded_vocab_size_in_run": 201088,
                "use_tokenizer_vocab_size": False,
                "moe_router_padding_for_fp8": False,
                "te_rng_tracker": False,
                "calculate_per_token_loss": True,
                "inert_flex_backend_field": "deepep (moe_hybridep_num_sms 16; inert with the alltoall dispatcher)",
            },
            "env": {
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                "NCCL_NVLS_ENABLE": 0,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
            },
            "table_vs_recipe": (
                "matches: the card's 'TP1/PP1/CP1/EP64/ETP1, GBS/MBS 1280/4, forced router balancing, selective "
                "layernorm and MoE activation recompute, and expert-parallel communication overlap' is the recipe's"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card gpt-oss-120b, item pretrain_performance.GB200 (card-level bridge_commit a8038f6d9, a PR head, "
            "pull/5397). Command: --nodes 16 --gpus-per-node 4, --mode pretrain --max_steps 50 "
            "logger.log_throughput=true (no layout override; the benchmark recipe refuses --dataset: mock data, 50 "
            "steps). DP 64, GA 5 (1,280 / (64 x 4)), expert DP 1. The alltoall dispatcher (the base's; no flex "
            "dispatcher), no CUDA graphs, EP all-to-all overlap with delayed wgrad, selective recompute of layernorm "
            "and moe_act. use_tokenizer_vocab_size False in _benchmark_common: the 201,088 vocabulary (32.64 G a token "
            "on the card, the FLOP counter's 32.63 G)."
        ),
    ),
    dict(
        case="MV GPT-OSS-120B GB300x64 MXFP8 pretrain_performance", model="gpt-oss-120b", system="DGX-GB300", gpus=64,
        gbs=1280, mbs=4, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=16, etp=1, fsdp=0, precision="MXFP8",
        tokens_per_gpu=33017.081, model_tflops_per_gpu=1077.35, step_time_ms=2481.14,
        container="nvcr.io/nvidia/nemo:26.06", commit="048058687", item="pretrain_performance/GB300",
        last_verified="2026-08-19",
        recipe={
            "builder": (
                "gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/gpt_oss/gb300/gpt_oss.py@048058687; base "
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
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
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
            "recompute_method": "not set (Megatron-Core default None)",
            "recompute_num_layers": "not set (Megatron-Core default None)",
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": False,
            "overlap_p2p_comm": False,
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
            "apply_rope_fusion": False,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": True,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "apply_rope_fusion_note": (
                    "True in the recipe (_benchmark_common), reset to False when the model is built: "
                    "GPTModelProvider.provide() runs fusions.validate_rope_fusion_compatibility, which refuses "
                    "position_embedding_type 'yarn'"
                ),
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 201088,
                "padded_vocab_size_in_run": 201088,
                "use_tokenizer_vocab_size": False,
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
                "TORCH_NCCL_HIGH_PRIORITY": 1,
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
            "table_vs_recipe": "matches: the card's 'TP1/PP1/CP1/EP16/ETP1, GBS/MBS 1280/4, and sequence length 4096'",
            "alt_recipe": None,
        },
        notes=(
            "Card gpt-oss-120b, item pretrain_performance.GB300 (item-level bridge_commit "
            "0480586879f2513958fd8634fc529693ae13e536, on main, 2026-08-18; container from the card's environment, "
            "nemo:26.06). Command: --nodes 16 --gpus-per-node 4 --max_steps 50 --seq_length 4096 (the recipe's) and "
            "logger.save_config_filepath. DP 64, GA 5, expert DP 4 (64 / EP 16). Full-iteration CUDA graph with paged "
            "stash, the 1.5 per-rank HybridEP token budget and padded experts; EP all-to-all overlap with delayed "
            "wgrad; TE op fuser and the cuteDSL fused grouped MLP (env); FP8 attention and FP8 output projection. No "
            "recompute (the base's None; this recipe sets none)."
        ),
    ),
    dict(
        case="MV Qwen3-30B-A3B H100x16 BF16 pretrain", model="qwen3-30b-a3b", system="DGX-H100", gpus=16, gbs=1024,
        mbs=1, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=16, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=8654.602,
        model_tflops_per_gpu=199.12, step_time_ms=30289.55, container="nvcr.io/nvidia/nemo:26.06", commit="5b9d9cf50",
        item="pretrain/H100", last_verified="2026-07-19",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_config = qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config (alias in "
                "src/megatron/bridge/recipes/qwen/qwen3_moe.py@5b9d9cf50; defined in recipes/qwen/h100/qwen3_moe.py "
                "over qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config; _pretrain_common, recipes/common.py; "
                "apply_flex_dispatcher_backend, training/flex_dispatcher_backend.py; CommOverlapConfig, "
                "training/comm_overlap.py; launcher scripts/training/run_recipe.py@5b9d9cf50, library recipes only)"
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
            "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": False,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": "not set (Megatron-Core default None)",
            "moe_paged_stash": "not set (Megatron-Core default False)",
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": "False (CommOverlapConfig(tp_comm_overlap=True) turns itself off at TP < 2)",
            "overlap_p2p_comm": False,
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
            "use_transformer_engine_op_fuser": "not set (GPTModelProvider default False)",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 151936,
                "padded_vocab_size_in_run": 151936,
                "use_tokenizer_vocab_size": "absent at this commit (the model keeps the HF vocabulary)",
                "moe_a2a_overlap": (
                    "False (moe_a2a_overlap is not a Megatron-Core TransformerConfig field: an inert attribute)"
                ),
                "te_rng_tracker": True,
                "cuda_graph_warmup_steps": 3,
                "moe_router_padding_for_fp8": False,
                "moe_aux_loss_coeff": 0.001,
                "dataset": "megatron-indexed RP2 head_01 (card), SentencePiece tokenizer work/data/rp2/tokenizer.model",
            },
            "env": "none set by the recipe (no env_vars at 5b9d9cf50); the launcher's environment not read",
            "table_vs_recipe": (
                "matches: the card's 'TP1/PP1/CP1/EP16/ETP1, DP16, SP off, GBS/MBS 1024/1, and 64-way gradient "
                "accumulation. Natural routing, HybridEP, and Transformer Engine CUDA graphs for moe_router and "
                "moe_preprocess'"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card qwen3-30b-a3b, item pretrain.H100 (item-level bridge_commit "
            "5b9d9cf501193277e1ca47a99b97c640b8f39f90, 'perf(recipe): enable Qwen3 precision-aware optimizer', a PR "
            "head (pull/4909), not on main). Command overrides: --dataset megatron-indexed (RP2, SentencePiece "
            "tokenizer), --seq_length 4096, --max_steps 100, lr 3e-4 -> 3e-5, warmup 40, "
            "model.moe_router_force_load_balancing=false, NaN / large-grad checks, dataset.num_workers=8, "
            "dist.distributed_timeout_minutes=30. DP 16, GA 64, expert DP 1. Natural routing with the aux loss (1e-3). "
            "HybridEP flex dispatcher, 32 SMs (apply_flex_dispatcher_backend passes 'hybridep' on Hopper). "
            "Precision-aware optimizer with fp32 state. No use_tokenizer_vocab_size at this commit: the model kept "
            "151,936 (23.01 G a token on the card = the FLOP counter at 151,936). The performance disclaimer of the "
            "card: functional items are sanity checks, not tuned results."
        ),
    ),
    dict(
        case="MV Qwen3-30B-A3B GB200x8 MXFP8 pretrain", model="qwen3-30b-a3b", system="DGX-GB200", gpus=8, gbs=512,
        mbs=4, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8", tokens_per_gpu=21205.047,
        model_tflops_per_gpu=487.88, step_time_ms=12362.34, container="nvcr.io/nvidia/nemo:26.06", commit="487f56398",
        item="pretrain/GB200", last_verified="2026-07-23",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config "
                "(src/megatron/bridge/recipes/qwen/gb200/qwen3_moe.py@487f56398; base "
                "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config over qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config, "
                "recipes/qwen/h100/qwen3_moe.py; _pretrain_common; bf16_with_mxfp8_mixed, training/mixed_precision.py; "
                "a library recipe exported by megatron.bridge.recipes; launcher "
                "scripts/training/run_recipe.py@487f56398)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
            "fp8_dot_product_attention": True,
            "fp8_output_proj": "not set (Megatron-Core default False)",
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
            "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": False,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": "not set (Megatron-Core default None)",
            "moe_paged_stash": "not set (Megatron-Core default False)",
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": "False (CommOverlapConfig(tp_comm_overlap=True) turns itself off at TP < 2)",
            "overlap_p2p_comm": False,
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
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 151936,
                "padded_vocab_size_in_run": 151936,
                "use_tokenizer_vocab_size": "absent at this commit (the model keeps the HF vocabulary)",
                "moe_a2a_overlap": (
                    "False (moe_a2a_overlap is not a Megatron-Core TransformerConfig field: an inert attribute)"
                ),
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "te_rng_tracker": True,
                "cuda_graph_warmup_steps": 3,
                "moe_router_padding_for_fp8": False,
                "moe_aux_loss_coeff": 0.001,
                "check_for_nan_in_grad": True,
                "check_for_large_grads": True,
                "dataset": "megatron-indexed RP2 head_01 (card), SentencePiece tokenizer work/data/rp2/tokenizer.model",
            },
            "env": {
                "NCCL_GRAPH_REGISTER": 0,
                "NCCL_NVLS_ENABLE": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72,
                "USE_MNNVL": 1,
                "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
            },
            "table_vs_recipe": (
                "matches: the card's 'TP1/PP1/CP1/EP8/ETP1, DP8, SP off, GBS/MBS 512/4, and 16-way gradient "
                "accumulation. MXFP8 compute, natural routing, HybridEP, Transformer Engine CUDA graphs for moe_router "
                "and moe_preprocess, communication overlap, ... MXFP8 parameter all-gather'"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card qwen3-30b-a3b, item pretrain.GB200 (item-level bridge_commit "
            "487f563983f00b190a1a8322d663f317ad8e611c, 'fix(training): preserve MXFP8 pre-hook on resume', a PR head "
            "(pull/5066), not on main). Command overrides as the H100 pretrain row's (RP2, SentencePiece, 100 steps, "
            "natural routing, checkpoints) plus checkpoint.load_optim/load_rng. The functional recipe copies the flat "
            "GB200 performance recipe's topology, precision, dispatcher, overlap, kernels and environment but keeps "
            "TE-scoped graphs (not the full-iteration graph), natural routing and the safety checks. DP 8, GA 16, "
            "expert DP 1. EP all-to-all overlap with delayed wgrad; TE op fuser and the cuteDSL fused grouped MLP "
            "(env); FP8 attention; MXFP8 parameter all-gather; the precision-aware optimizer off. 23.01 G a token "
            "(151,936 vocabulary)."
        ),
    ),
    dict(
        case="MV Qwen3-30B-A3B H100x16 BF16 pretrain_performance", model="qwen3-30b-a3b", system="DGX-H100", gpus=16,
        gbs=1024, mbs=1, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=16, etp=1, fsdp=0, precision="BF16",
        tokens_per_gpu=13011.378, model_tflops_per_gpu=299.352, step_time_ms=20147.29,
        container="nvcr.io/nvidia/nemo:26.06", commit="3a9559f01", item="pretrain_performance/H100",
        last_verified="2026-07-27",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config "
                "(src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py@3a9559f01; base: the library recipe of the "
                "same name, recipes/qwen/h100/qwen3_moe.py, over qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config; "
                "_benchmark_common and _perf_precision('bf16'), perf_recipes/_common.py; the name is exported by both "
                "packages and the launcher takes the benchmark one, scripts/training/recipe_metadata.py "
                "BENCHMARK_RECIPE_PRECEDENCE_COLLISIONS)"
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
            "moe_router_load_balancing_type": "aux_loss",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": "not set (Megatron-Core default None)",
            "moe_paged_stash": "not set (Megatron-Core default False)",
            "shared_experts": None,
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"],
            "recompute_granularity": None,
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": "False (CommOverlapConfig(tp_comm_overlap=True) turns itself off at TP < 2)",
            "overlap_p2p_comm": False,
            "overlap_moe_expert_parallel_comm": True,
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
            "use_transformer_engine_op_fuser": "not set (GPTModelProvider default False)",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 151936,
                "padded_vocab_size_in_run": 151936,
                "use_tokenizer_vocab_size": "absent at this commit (the model keeps the HF vocabulary)",
                "moe_permute_fusion_into_hybridep": True,
                "moe_a2a_overlap": (
                    "False (moe_a2a_overlap is not a Megatron-Core TransformerConfig field: an inert attribute)"
                ),
                "te_rng_tracker": True,
                "cuda_graph_warmup_steps": 3,
                "moe_router_padding_for_fp8": False,
                "moe_aux_loss_coeff": 0.001,
            },
            "env": {
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 64,
                "NVLINK_DOMAIN_SIZE": 8,
                "USE_MNNVL": 0,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 10,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 10,
            },
            "table_vs_recipe": (
                "matches; the card's text gives no layout but 'HybridEP permute fusion uses 32 SMs and 64-token "
                "combine chunks, expert-parallel communication overlap is active with delayed weight-gradient compute "
                "disabled, and Transformer Engine CUDA graph capture completes for all 48 graphable layers with "
                "moe_router and moe_preprocess scopes', all the recipe's"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card qwen3-30b-a3b, item pretrain_performance.H100 (item-level bridge_commit "
            "3a9559f01283190bf16a7a592c1e2c35d908c496, 'perf(recipe): tune Qwen3 BF16 HybridEP on H100', a PR head "
            "(pull/5123), not on main). Command: --nodes 2 --gpus-per-node 8 --mode pretrain --max_steps 50 (mock "
            "data). DP 16, GA 64, expert DP 1. The library 16-GPU recipe plus: forced balanced routing, HybridEP "
            "permute fusion, EP all-to-all overlap without delayed wgrad, 50 benchmark steps; TE graphs of moe_router "
            "and moe_preprocess stay. The card's gate: at most 20.50 s a step, at least 295 TFLOP/s/GPU, peak "
            "allocated memory below 65 GiB/GPU. 23.01 G a token (151,936 vocabulary; _benchmark_common had no "
            "use_tokenizer_vocab_size yet, the HF tokenizer's vocabulary did not replace the model's)."
        ),
    ),
    dict(
        case="MV Qwen3-30B-A3B GB200x8 MXFP8 pretrain_performance", model="qwen3-30b-a3b", system="DGX-GB200", gpus=8,
        gbs=512, mbs=4, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8",
        tokens_per_gpu=40322.898, model_tflops_per_gpu=927.68, step_time_ms=6501.12,
        container="nvcr.io/nvidia/nemo:26.06", commit="6e1b47893", item="pretrain_performance/GB200",
        last_verified="2026-07-23",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/qwen/gb200/qwen3_moe.py@6e1b47893; base "
                "qwen3_30b_a3b_pretrain_config = qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py; _enable_hybridep_full_iteration_mxfp8, "
                "perf_recipes/qwen/common.py; _benchmark_common and _perf_precision('fp8_mx'), perf_recipes/_common.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
            "fp8_dot_product_attention": True,
            "fp8_output_proj": "not set (Megatron-Core default False)",
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
            "moe_router_load_balancing_type": "aux_loss",
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
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": "False (CommOverlapConfig(tp_comm_overlap=True) turns itself off at TP < 2)",
            "overlap_p2p_comm": False,
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
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 151936,
                "padded_vocab_size_in_run": 151936,
                "use_tokenizer_vocab_size": (
                    "absent at this commit; the HF tokenizer's vocabulary did not replace the model's"
                ),
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "te_rng_tracker": True,
                "offload_modules": [],
                "cuda_graph_warmup_steps": 3,
                "moe_router_padding_for_fp8": False,
                "moe_aux_loss_coeff": 0.001,
            },
            "env": {
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0,
                "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72,
                "USE_MNNVL": 1,
                "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
            },
            "table_vs_recipe": (
                "the card's text gives no layout ('forced load balancing, HybridEP, MXFP8, and full-iteration CUDA "
                "graphs', all the recipe's); layout the recipe's: TP1/PP1/CP1/EP8/ETP1, GBS/MBS 512/4"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card qwen3-30b-a3b, item pretrain_performance.GB200 (item-level bridge_commit "
            "6e1b47893e3c174e74a97fb1730c9f58387ab882, a PR head (pull/5066), not on main). Command: --nodes 2 "
            "--gpus-per-node 4 --max_steps 50 (mode inferred from the name; mock data). DP 8, GA 16, expert DP 1. The "
            "base is the library 8-GPU H100 recipe (TP 4, PP 2, EP 4, full recompute, alltoall with a 'deepep' backend "
            "that apply_flex_dispatcher_backend drops to alltoall on a GB200); the performance recipe resets the "
            "layout, turns recompute off and sets HybridEP flex, then the full-iteration graph with paged stash, the "
            "1.5 per-rank HybridEP token budget and padded experts, EP all-to-all overlap with delayed wgrad, TE op "
            "fuser, FP8 attention. The card's gate: at most 7 s a step, at least 900 TFLOP/s/GPU."
        ),
    ),
    dict(
        case="MV Qwen3-30B-A3B GB300x8 MXFP8 pretrain_performance", model="qwen3-30b-a3b", system="DGX-GB300", gpus=8,
        gbs=512, mbs=8, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="MXFP8",
        tokens_per_gpu=44773.361, model_tflops_per_gpu=1030.07, step_time_ms=5854.91,
        container="nvcr.io/nvidia/nemo:26.06", commit="048058687", item="pretrain_performance/GB300",
        last_verified="2026-08-18",
        recipe={
            "builder": (
                "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/qwen/gb300/qwen3_moe.py@048058687; base "
                "qwen3_30b_a3b_pretrain_config = qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py; _enable_hybridep_full_iteration_mxfp8, "
                "perf_recipes/qwen/common.py; _benchmark_common and _perf_precision('fp8_mx'), perf_recipes/_common.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
            "fp8_dot_product_attention": True,
            "fp8_output_proj": "not set (Megatron-Core default False)",
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
            "moe_router_load_balancing_type": "aux_loss",
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
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": "False (CommOverlapConfig(tp_comm_overlap=True) turns itself off at TP < 2)",
            "overlap_p2p_comm": False,
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
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 151936,
                "padded_vocab_size_in_run": 151936,
                "use_tokenizer_vocab_size": "False (_benchmark_common)",
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "te_rng_tracker": True,
                "offload_modules": [],
                "cuda_graph_warmup_steps": 3,
                "moe_router_padding_for_fp8": False,
                "moe_aux_loss_coeff": 0.001,
            },
            "env": {
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 0,
                "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 72,
                "USE_MNNVL": 1,
                "CUDNNFE_CLUSTER_OVERLAP_MARGIN": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
            },
            "table_vs_recipe": "matches: the card's 'TP1/PP1/CP1/EP8/ETP1, GBS/MBS 512/8, and sequence length 4096'",
            "alt_recipe": None,
        },
        notes=(
            "Card qwen3-30b-a3b, item pretrain_performance.GB300 (item-level bridge_commit "
            "0480586879f2513958fd8634fc529693ae13e536, on main). Command: --nodes 2 --gpus-per-node 4 --max_steps 50 "
            "--seq_length 4096 (the recipe's) and logger.save_config_filepath. DP 8, GA 8, expert DP 1. The same "
            "recipe body as the GB200 row (common.py unchanged between the two commits) at MBS 8. The card's "
            "pretrain_weak_scaling.GB300 points (8 to 256 GPUs, bridge_commit fbb7570cf, GBS proportional) are left "
            "out by the collection rule; its 8-GPU point measured 44,511.004 tokens/s/GPU."
        ),
    ),
    dict(
        case="MV Qwen3-235B-A22B GB300x256 MXFP8 pretrain_performance", model="qwen3-235b-a22b", system="DGX-GB300",
        gpus=256, gbs=8192, mbs=2, seq=4096, tp=1, pp=4, cp=1, vp=12, ep=32, etp=1, fsdp=0, precision="MXFP8",
        tokens_per_gpu=8784.492, model_tflops_per_gpu=1300.44, step_time_ms=14920.84,
        container="nvcr.io/nvidia/nemo:26.08", commit="fbb7570cf", item="pretrain_performance/GB300",
        last_verified="2026-08-17",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_256gpu_gb300_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/qwen/gb300/qwen3_moe.py@fbb7570cf; base "
                "qwen3_235b_a22b_pretrain_config = qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py; _enable_hybridep_full_iteration_mxfp8, "
                "perf_recipes/qwen/common.py; _benchmark_common and _perf_precision('fp8_mx'), perf_recipes/_common.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
            "fp8_dot_product_attention": True,
            "fp8_output_proj": "not set (Megatron-Core default False)",
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
            "moe_router_load_balancing_type": "aux_loss",
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
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": "False (CommOverlapConfig(tp_comm_overlap=True) turns itself off at TP < 2)",
            "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
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
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 151936,
                "padded_vocab_size_in_run": 151936,
                "use_tokenizer_vocab_size": "False (_benchmark_common)",
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "te_rng_tracker": True,
                "offload_modules": [],
                "cuda_graph_warmup_steps": 3,
                "moe_router_padding_for_fp8": False,
                "moe_aux_loss_coeff": 0.001,
                "batch_p2p_comm": False,
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
            },
            "table_vs_recipe": (
                "matches what the card states ('TP1/PP4/CP1/EP32/ETP1, GBS/MBS 8192/2, and sequence length 4096'); the "
                "text names no virtual pipeline: the recipe's VP 12"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card qwen3-235b-a22b, item pretrain_performance.GB300 (item-level bridge_commit "
            "fbb7570cf7eec94fd2e6064454d84f7fad07fbfa, on main; container from the card, nemo:26.08). Command: --nodes "
            "64 --gpus-per-node 4 --max_steps 50 --seq_length 4096. DP 64 (256 / PP 4), GA 64 (8,192 / (64 x 2)), "
            "expert DP 2 (256 / (PP 4 x EP 32)). 48 virtual stages (PP 4 x VP 12) over 94 layers + embedding + loss "
            "(account_for_embedding/loss_in_pipeline_split from the base): 2 units a stage, so the first and last "
            "stages hold one transformer layer. The base (TP 4, PP 16, CP 2, EP 8, alltoall 'deepep' dropped to "
            "alltoall on a GB300) is reset to the layout above; the full-iteration HybridEP MXFP8 settings as the 30B "
            "rows'. Interleaved schedule: overlap_p2p_comm and align_param_gather on (comm_overlap.py at PP > 1, VP > "
            "1). The card's other items (H100 functional) are unverified with null metrics."
        ),
    ),
    dict(
        case="MV Qwen3-235B-A22B GB200x256 MXFP8 pretrain_performance", model="qwen3-235b-a22b", system="DGX-GB200",
        gpus=256, gbs=8192, mbs=1, seq=4096, tp=1, pp=8, cp=1, vp=3, ep=32, etp=1, fsdp=0, precision="MXFP8",
        tokens_per_gpu=7320.274, model_tflops_per_gpu=1083.66, step_time_ms=17905.34,
        container="nvcr.io/nvidia/nemo:26.08", commit="048058687", item="pretrain_performance/GB200",
        last_verified="2026-08-19",
        recipe={
            "builder": (
                "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/qwen/gb200/qwen3_moe.py@048058687; base "
                "qwen3_235b_a22b_pretrain_config = qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py; _enable_hybridep_full_iteration_mxfp8, "
                "perf_recipes/qwen/common.py; _benchmark_common and _perf_precision('fp8_mx'), perf_recipes/_common.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
            "fp8_dot_product_attention": True,
            "fp8_output_proj": "not set (Megatron-Core default False)",
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
            "moe_router_load_balancing_type": "aux_loss",
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
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": "False (CommOverlapConfig(tp_comm_overlap=True) turns itself off at TP < 2)",
            "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
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
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 151936,
                "padded_vocab_size_in_run": 151936,
                "use_tokenizer_vocab_size": "False (_benchmark_common)",
                "high_priority_a2a_comm_stream": True,
                "moe_hybridep_num_sms_preprocessing": 32,
                "moe_mlp_glu_interleave_size": 32,
                "moe_pad_experts_for_cuda_graph_inference": True,
                "moe_paged_stash_buffer_size_factor_cuda": 1.2,
                "moe_paged_stash_buffer_size_factor_cpu": 1.0,
                "te_rng_tracker": True,
                "offload_modules": [],
                "cuda_graph_warmup_steps": 3,
                "moe_router_padding_for_fp8": False,
                "moe_aux_loss_coeff": 0.001,
                "batch_p2p_comm": False,
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
            },
            "table_vs_recipe": (
                "matches: the card's 'TP1/PP8/CP1/EP32/ETP1, VPP3, GBS/MBS 8192/1, and sequence length 4096'"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card qwen3-235b-a22b, item pretrain_performance.GB200 (item-level bridge_commit "
            "0480586879f2513958fd8634fc529693ae13e536, on main; perf_recipes/qwen and recipes/qwen unchanged from "
            "fbb7570cf). Command: --nodes 64 --gpus-per-node 4 --max_steps 50 --seq_length 4096. DP 32, GA 256, expert "
            "DP 1 (256 / (PP 8 x EP 32)). 24 virtual stages (PP 8 x VP 3) over 94 layers + embedding + loss: 4 units a "
            "stage (the first and last stages hold three transformer layers). Otherwise the GB300 row's settings."
        ),
    ),
    dict(
        case="MV Qwen3-8B H100x16 BF16 pretrain", model="qwen3-8b", system="DGX-H100", gpus=16, gbs=1024, mbs=1,
        seq=4096, tp=1, pp=1, cp=1, vp=None, ep=1, etp=1, fsdp=0, precision="BF16", tokens_per_gpu=10456.348,
        model_tflops_per_gpu=512.7, step_time_ms=25070.32, container="nvcr.io/nvidia/pytorch:26.04-py3",
        commit="619cc20bd", item="pretrain/H100", last_verified="2026-07-21",
        recipe={
            "builder": (
                "qwen3_8b_pretrain_16gpu_h100_bf16_config (src/megatron/bridge/recipes/qwen/h100/qwen3.py@619cc20bd; "
                "base qwen3_8b_pretrain_4gpu_h100_bf16_config, same file; _pretrain_common, recipes/common.py; "
                "launcher scripts/training/run_recipe.py@619cc20bd, library recipes only)"
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
            "moe_token_dispatcher_type": None,
            "moe_flex_dispatcher_backend": None,
            "moe_hybridep_num_sms": None,
            "moe_grouped_gemm": None,
            "moe_permute_fusion": None,
            "moe_router_fusion": None,
            "moe_router_dtype": None,
            "moe_router_load_balancing_type": None,
            "moe_router_force_load_balancing": None,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": None,
            "moe_expert_rank_capacity_factor": None,
            "moe_paged_stash": None,
            "shared_experts": None,
            "moe_shared_expert_overlap": None,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": "full (the recipe's; inert with cuda_graph_impl 'none')",
            "recompute_granularity": None,
            "recompute_method": "not set (Megatron-Core default None)",
            "recompute_num_layers": "not set (Megatron-Core default None)",
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": "not set (no CommOverlapConfig; DDP default False)",
            "overlap_param_gather_with_optimizer_step": "not set (no CommOverlapConfig; OptimizerConfig default False)",
            "bucket_size": (
                "not set (no CommOverlapConfig: Megatron-Core DDP default max(40e6, 1e6 x DP) = 40,000,000 at DP 16)"
            ),
            "tp_comm_overlap": "not set (no CommOverlapConfig; Megatron-Core default False)",
            "overlap_p2p_comm": "not set (PP 1)",
            "overlap_moe_expert_parallel_comm": None,
            "delay_wgrad_compute": "not set (Megatron-Core default False)",
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
            "apply_rope_fusion": "not set (Megatron-Core default False)",
            "bias_activation_fusion": "not set (Megatron-Core default False)",
            "use_transformer_engine_op_fuser": "not set (GPTModelProvider default False)",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "fp32",
                    "exp_avg_dtype": "fp32",
                    "exp_avg_sq_dtype": "fp32",
                },
                "vocab_size_in_run": 151936,
                "padded_vocab_size_in_run": 151936,
                "use_tokenizer_vocab_size": "absent at this commit (the model keeps the HF vocabulary)",
                "moe_keys": "None: a dense model (no experts)",
                "pipeline_dtype": None,
                "average_in_collective": True,
                "dataset": "megatron-indexed RP2 head_01 (card), SentencePiece tokenizer work/data/rp2/tokenizer.model",
            },
            "env": {
                "NCCL_GRAPH_REGISTER": 0,
                "NCCL_NVLS_ENABLE": 0,
                "NVTE_NORM_BWD_USE_CUDNN": 1,
                "NVTE_NORM_FWD_USE_CUDNN": 1,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                "TORCH_NCCL_HIGH_PRIORITY": 1,
            },
            "table_vs_recipe": (
                "matches: the card's 'TP1/PP1/CP1, DP16, GBS/MBS 1024/1, and 64-way gradient accumulation'"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card qwen3-8b, item pretrain.H100 (item-level bridge_commit 619cc20bd3c7eca1dc84e8ea0f822307dfbd5cc3, "
            "'fix(model): persist immutable Hugging Face revisions', a PR head (pull/4909), not on main; container "
            "nvcr.io/nvidia/pytorch:26.04-py3 from the card). Command overrides: --dataset megatron-indexed (RP2, "
            "SentencePiece), --seq_length 4096, --max_steps 100, lr 3e-4 -> 3e-5, warmup 40, NaN / large-grad checks, "
            "dist.distributed_timeout_minutes=30. DP 16, GA 64. Plain data parallel: no CommOverlapConfig, no CUDA "
            "graphs, no recompute, no fused rope or bias-SwiGLU (not set: Megatron-Core defaults False); the "
            "precision-aware optimizer with fp32 state, bf16 gradient reduction. 49.03 G a token = the FLOP counter at "
            "151,936. Not performance-tuned (card disclaimer)."
        ),
    ),
    dict(
        case="MV DeepSeek-V3 H100x1024 BF16 pretrain_performance", model="deepseek-v3", system="DGX-H100", gpus=1024,
        gbs=16384, mbs=1, seq=4096, tp=2, pp=8, cp=1, vp=4, ep=64, etp=1, fsdp=0, precision="BF16",
        tokens_per_gpu=1061.206, model_tflops_per_gpu=276.03, step_time_ms=61756.13,
        container="nvcr.io/nvidia/nemo:26.08.rc5", commit="79308d0d9", item="pretrain_performance/H100",
        last_verified="2026-08-15",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_1024gpu_h100_bf16_config "
                "(src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py@79308d0d9; base "
                "deepseek_v3_pretrain_config = the library deepseek_v3_pretrain_1024gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py (with apply_flex_dispatcher_backend, "
                "training/flex_dispatcher_backend.py); _deepseek_v3_common, perf_recipes/deepseek/common.py; "
                "_benchmark_common, _perf_precision('bf16') and _enable_overlap_param_gather_with_optimizer_step, "
                "perf_recipes/_common.py; the name is exported by both packages and the launcher takes the benchmark "
                "one, scripts/training/recipe_metadata.py BENCHMARK_RECIPE_PRECEDENCE_COLLISIONS)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_mixed",
            "fp8_recipe": None,
            "fp8_param_gather": False,
            "reuse_grad_buf_for_mxfp8_param_ag": "not set",
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
            "fp8_dot_product_attention": "not set",
            "fp8_output_proj": "not set",
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": True,
            "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "fp32",
            "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": "not set (Megatron-Core default None)",
            "moe_paged_stash": "not set (Megatron-Core default False)",
            "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": [],
            "recompute_granularity": "selective",
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": ["mla_up_proj", "mlp"],
            "activation_offload": None,
            "overlap_grad_reduce": False,
            "overlap_param_gather": True,
            "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": True,
            "bucket_size": (
                "None: overlap_grad_reduce False, so Megatron-Core DDP drops comm_overlap.py's 128 MiB and keeps one "
                "bucket"
            ),
            "tp_comm_overlap": False,
            "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": False,
            "delay_wgrad_compute": False,
            "pipeline_model_parallel_layout": "Et|(tt|)*30mL",
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
            "use_transformer_engine_op_fuser": "not set (GPTModelProvider default False)",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "vocab_size_in_run": 129280,
                "padded_vocab_size_in_run": 130560,
                "use_tokenizer_vocab_size": "False (_benchmark_common)",
                "mtp_loss_scaling_factor": 0.1,
                "moe_aux_loss_coeff": 0.0001,
                "moe_router_padding_for_fp8": False,
                "enable_megatron_core_experimental": True,
                "batch_p2p_comm": False,
                "te_rng_tracker": False,
                "dispatcher_note": (
                    "the perf recipe never names the dispatcher: the base's apply_flex_dispatcher_backend('hybridep') "
                    "sets flex on Hopper, _benchmark_common sets 32 SMs (the base's 16)"
                ),
                "overlap_note": (
                    "overlap_param_gather True (comm_overlap default at DP > 1) while overlap_grad_reduce False"
                ),
            },
            "env": {
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 1,
                "NCCL_GRAPH_REGISTER": 0,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                "NCCL_NVLS_ENABLE": 0,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 8,
                "USE_MNNVL": 0,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_ALLOW_NONDETERMINISTIC_ALGO": 0,
            },
            "table_vs_recipe": "matches: the card's 'TP2/PP8/VP4/CP1/EP64/ETP1 and GBS/MBS 16384/1'",
            "alt_recipe": None,
        },
        notes=(
            "Card deepseek-v3, item pretrain_performance.H100 (card-level bridge_commit "
            "79308d0d99fb8c09b3f1a22baa68a4ffa4f4ce1e, on main, 2026-08-14; container nemo:26.08.rc5). Command: "
            "--nodes 128 --gpus-per-node 8 --max_steps 50 --seq_length 4096 (the recipe's) and "
            "logger.save_config_filepath. DP 64 (1,024 / (TP 2 x PP 8)), GA 256, expert DP 2 (1,024 / (PP 8 x EP 64)). "
            "Layout 'Et|(tt|)*30mL': 32 virtual stages (PP 8 x VP 4), embedding + 1 layer first, 30 stages of 2 "
            "layers, MTP + loss last. Selective recompute of mla_up_proj and mlp; no CUDA graphs; no EP overlap; "
            "gradients reduced without overlap (one bucket) while the parameter all-gather overlaps the optimizer "
            "step. Precision-aware optimizer with bf16 main grads and moments (the base recipe's). TP 2 pads the "
            "vocabulary to 130,560 (1,280 x 2 multiple): 260.11 G a token on the card = the FLOP counter with MTP at "
            "130,560. The card's gate: at most 62,000 ms, at least 275 TFLOP/s/GPU; mock data, forced balancing."
        ),
    ),
    dict(
        case="MV DeepSeek-V3 GB200x256 MXFP8 pretrain_performance", model="deepseek-v3", system="DGX-GB200", gpus=256,
        gbs=4096, mbs=1, seq=4096, tp=1, pp=4, cp=1, vp=4, ep=64, etp=1, fsdp=0, precision="MXFP8",
        tokens_per_gpu=4734.856, model_tflops_per_gpu=1231.04, step_time_ms=13841.18,
        container="nvcr.io/nvidia/nemo:26.08.rc5", commit="79308d0d9", item="pretrain_performance/GB200",
        last_verified="2026-08-14",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/deepseek/gb200/deepseek_v3.py@79308d0d9; base "
                "deepseek_v3_pretrain_config = the library deepseek_v3_pretrain_1024gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py (with apply_flex_dispatcher_backend, "
                "training/flex_dispatcher_backend.py); _deepseek_v3_common and "
                "_enable_deepseek_full_iteration_mxfp8(fp8_output_proj=True), perf_recipes/deepseek/common.py; "
                "_benchmark_common and _perf_precision('fp8_mx'), perf_recipes/_common.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
            "fp8_dot_product_attention": False,
            "fp8_output_proj": True,
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "fp32",
            "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": 1.5,
            "moe_paged_stash": True,
            "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "full_iteration",
            "cuda_graph_scope": [],
            "recompute_granularity": "selective",
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": ["mla_up_proj"],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": False,
            "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
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
            "use_transformer_engine_op_fuser": True,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "vocab_size_in_run": 129280,
                "padded_vocab_size_in_run": 129280,
                "use_tokenizer_vocab_size": "False (_benchmark_common)",
                "mtp_loss_scaling_factor": 0.1,
                "moe_aux_loss_coeff": 0.0001,
                "moe_router_padding_for_fp8": False,
                "enable_megatron_core_experimental": True,
                "batch_p2p_comm": False,
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "layout_note": (
                    "set_deepseek_v3_pipeline_model_parallel_layout(cfg.model) without a layout: the (PP 4, VP 4) "
                    "entry of _get_deepseek_v3_pipeline_layout, [embedding + 4 decoder] + 14 x [4 decoder] + [decoder, "
                    "mtp, loss], written here in the string form"
                ),
                "graph_note": (
                    "the recipe first sets TE graphs (attn, moe_router, moe_preprocess); the full-iteration helper "
                    "then replaces them"
                ),
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
            "table_vs_recipe": "matches: the card's 'TP1/PP4/VP4/CP1/EP64/ETP1 and GBS/MBS 4096/1'",
            "alt_recipe": None,
        },
        notes=(
            "Card deepseek-v3, item pretrain_performance.GB200 (card-level bridge_commit 79308d0d9). Command: --nodes "
            "64 --gpus-per-node 4 --max_steps 50 --seq_length 4096. DP 64 (256 / PP 4), GA 64, expert DP 1 (256 / (PP "
            "4 x EP 64)). 16 virtual stages (PP 4 x VP 4): embedding + 4 layers first, 1 layer + MTP + loss last. "
            "Full-iteration graph with paged stash and the 1.5 per-rank HybridEP token budget; EP all-to-all overlap "
            "with delayed wgrad; TE op fuser, cuteDSL fused grouped MLP (env); FP8 output projection, not FP8 "
            "attention; selective recompute of mla_up_proj. Precision-aware optimizer with bf16 main grads and "
            "moments. 260.00 G a token (129,280 vocabulary at TP 1). The card's gate: at most 14,000 ms, at least "
            "1,200 TFLOP/s/GPU."
        ),
    ),
    dict(
        case="MV DeepSeek-V3 GB300x256 MXFP8 pretrain_performance", model="deepseek-v3", system="DGX-GB300", gpus=256,
        gbs=4096, mbs=1, seq=4096, tp=1, pp=2, cp=1, vp=8, ep=32, etp=1, fsdp=0, precision="MXFP8",
        tokens_per_gpu=6143.635, model_tflops_per_gpu=1597.31, step_time_ms=10667.3,
        container="nvcr.io/nvidia/nemo:26.08.rc5", commit="79308d0d9", item="pretrain_performance/GB300",
        last_verified="2026-08-14",
        recipe={
            "builder": (
                "deepseek_v3_pretrain_256gpu_gb300_fp8mx_config "
                "(src/megatron/bridge/perf_recipes/deepseek/gb300/deepseek_v3.py@79308d0d9; base "
                "deepseek_v3_pretrain_config = the library deepseek_v3_pretrain_1024gpu_h100_bf16_config, "
                "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py (with apply_flex_dispatcher_backend, "
                "training/flex_dispatcher_backend.py); _deepseek_v3_common and "
                "_enable_deepseek_full_iteration_mxfp8(fp8_dot_product_attention=True, fp8_output_proj=True), "
                "perf_recipes/deepseek/common.py; _benchmark_common and _perf_precision('fp8_mx'), "
                "perf_recipes/_common.py)"
            ),
            "table_label": None,
            "precision_recipe": "bf16_with_mxfp8_mixed",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            "reuse_grad_buf_for_mxfp8_param_ag": True,
            "first_last_layers_bf16": "not set (MixedPrecisionConfig default False)",
            "fp8_dot_product_attention": True,
            "fp8_output_proj": True,
            "grad_reduce_in_fp32": False,
            "expert_tensor_parallel_size": 1,
            "sequence_parallel": False,
            "mtp_num_layers": 1,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_hybridep_num_sms": 32,
            "moe_grouped_gemm": True,
            "moe_permute_fusion": True,
            "moe_router_fusion": True,
            "moe_router_dtype": "fp32",
            "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": True,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": 1.5,
            "moe_paged_stash": True,
            "shared_experts": "1 x 2048 (always active)",
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "full_iteration",
            "cuda_graph_scope": [],
            "recompute_granularity": "selective",
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": [],
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": True,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": False,
            "overlap_p2p_comm": True,
            "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
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
            "use_transformer_engine_op_fuser": True,
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "vocab_size_in_run": 129280,
                "padded_vocab_size_in_run": 129280,
                "use_tokenizer_vocab_size": "False (_benchmark_common)",
                "mtp_loss_scaling_factor": 0.1,
                "moe_aux_loss_coeff": 0.0001,
                "moe_router_padding_for_fp8": False,
                "enable_megatron_core_experimental": True,
                "batch_p2p_comm": False,
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
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
            "table_vs_recipe": "matches: the card's 'TP1/PP2/VP8/CP1/EP32/ETP1 and GBS/MBS 4096/1'",
            "alt_recipe": None,
        },
        notes=(
            "Card deepseek-v3, item pretrain_performance.GB300 (card-level bridge_commit 79308d0d9). Command: --nodes "
            "64 --gpus-per-node 4 --max_steps 50 --seq_length 4096. DP 128 (256 / PP 2), GA 32, expert DP 4 (256 / (PP "
            "2 x EP 32)). Layout 'Et*4|(t*4|)*14tmL': 16 virtual stages (PP 2 x VP 8). recompute_granularity "
            "'selective' with recompute_modules [] (nothing recomputed). Full-iteration graph, paged stash, 1.5 "
            "per-rank token budget, EP all-to-all overlap with delayed wgrad, TE op fuser, cuteDSL grouped MLP, FP8 "
            "attention and FP8 output projection. The recipe code equals 4ab94dfad's (no change in "
            "perf_recipes/deepseek for V3, recipes/deepseek/h100 or the V3 bridge's shape between the two). 260.00 G a "
            "token. The card's gate: at most 11,000 ms, at least 1,550 TFLOP/s/GPU."
        ),
    ),
    dict(
        case="MV Moonlight-16B-A3B H100x16 BF16 pretrain", model="moonlight-16b-a3b", system="DGX-H100", gpus=16,
        gbs=1024, mbs=2, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=8, etp=1, fsdp=0, precision="BF16",
        tokens_per_gpu=22528.026, model_tflops_per_gpu=386.59, step_time_ms=11636.35,
        container="nvcr.io/nvidia/pytorch:26.04-py3", commit="411c6b1dc", item="pretrain/H100",
        last_verified="2026-07-22",
        recipe={
            "builder": (
                "moonlight_16b_pretrain_16gpu_h100_bf16_config "
                "(src/megatron/bridge/recipes/moonlight/h100/moonlight_16b.py@411c6b1dc; base "
                "moonlight_16b_pretrain_8gpu_h100_bf16_config, same file, model from _moonlight_16b_model_provider "
                "(AutoBridge -> DeepSeekV3Bridge); _pretrain_common, recipes/common.py; launcher "
                "scripts/training/run_recipe.py@411c6b1dc: a library recipe, no perf_recipes family for it)"
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
            "moe_router_dtype": "fp32",
            "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_force_load_balancing": False,
            "moe_expert_capacity_factor": None,
            "moe_pad_expert_input_to_capacity": False,
            "moe_expert_rank_capacity_factor": "not set (Megatron-Core default None)",
            "moe_paged_stash": "not set (Megatron-Core default False)",
            "shared_experts": "2 x 1408 = 2816 (always active)",
            "moe_shared_expert_overlap": False,
            "cuda_graph_impl": "none",
            "cuda_graph_scope": "full (the recipe's; inert with cuda_graph_impl 'none')",
            "recompute_granularity": None,
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": None,
            "activation_offload": None,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "align_param_gather": False,
            "overlap_param_gather_with_optimizer_step": False,
            "bucket_size": 134217728,
            "tp_comm_overlap": False,
            "overlap_p2p_comm": False,
            "overlap_moe_expert_parallel_comm": True,
            "delay_wgrad_compute": True,
            "pipeline_model_parallel_layout": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
            "use_distributed_optimizer": True,
            "use_megatron_fsdp": False,
            "use_precision_aware_optimizer": True,
            "manual_gc": True,
            "manual_gc_interval": 5,
            "cross_entropy_loss_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "apply_rope_fusion": False,
            "bias_activation_fusion": True,
            "use_transformer_engine_op_fuser": "not set (GPTModelProvider default False)",
            "extra": {
                "optimizer_dtypes": {
                    "main_params_dtype": "fp32",
                    "main_grads_dtype": "bf16",
                    "exp_avg_dtype": "bf16",
                    "exp_avg_sq_dtype": "bf16",
                },
                "bucket_size_note": (
                    "128 MiB of parameters: training/comm_overlap.py _get_optimizer_overlap_cfgs with a "
                    "CommOverlapConfig at DP > 1"
                ),
                "vocab_size_in_run": 163840,
                "padded_vocab_size_in_run": 163840,
                "use_tokenizer_vocab_size": "absent at this commit (the model keeps the HF vocabulary)",
                "precision_config": (
                    "a MixedPrecisionConfig written out in the recipe: bf16, params and pipeline bf16, no autocast, "
                    "grad_reduce_in_fp32 False (bf16_mixed's values but the reduce dtype)"
                ),
                "moe_flex_dispatcher_num_sms": 32,
                "moe_hybridep_num_sms_field": None,
                "moe_deepep_num_sms": None,
                "high_priority_a2a_comm_stream": True,
                "moe_router_enable_expert_bias": True,
                "moe_aux_loss_coeff": 0.001,
                "moe_router_padding_for_fp8": False,
                "average_in_collective": True,
                "manual_gc_eval": 5,
                "dataset": "megatron-indexed RP2 head_01 (card), SentencePiece tokenizer work/data/rp2/tokenizer.model",
            },
            "env": {
                "NCCL_GRAPH_REGISTER": 0,
                "NCCL_NVLS_ENABLE": 0,
                "NVTE_NORM_BWD_USE_CUDNN": 1,
                "NVTE_NORM_FWD_USE_CUDNN": 1,
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                "TORCH_NCCL_HIGH_PRIORITY": 1,
                "CUDA_DEVICE_MAX_CONNECTIONS": 32,
                "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8,
                "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": 128,
                "NVLINK_DOMAIN_SIZE": 8,
                "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                "NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
                "USE_MNNVL": 0,
            },
            "table_vs_recipe": (
                "matches: the card's 'TP1/PP1/CP1/EP8/ETP1, DP16, GBS/MBS 1024/2, and 32-way gradient accumulation "
                "with natural MoE routing and the HybridEP flex dispatcher'"
            ),
            "alt_recipe": None,
        },
        notes=(
            "Card moonlight-16b-a3b, item pretrain.H100 (item-level bridge_commit "
            "411c6b1dc26eef50124843fbf9b6253b7b6c43cb, 'perf(recipe): tune Moonlight MoE topology', a PR head "
            "(pull/5021), not on main; container nvcr.io/nvidia/pytorch:26.04-py3 from the card). Command overrides: "
            "--dataset megatron-indexed (RP2, SentencePiece), --seq_length 4096, --max_steps 100, lr 3e-4 -> 3e-5, "
            "warmup 40, NaN / large-grad checks, dist.distributed_timeout_minutes=30. DP 16, GA 32, expert DP 2 (EP 8 "
            "inside one 8-GPU node, two expert-data replicas). HybridEP flex dispatcher with 32 SMs set through "
            "Megatron-Core's moe_flex_dispatcher_num_sms (the per-backend moe_hybridep_num_sms None); EP all-to-all "
            "overlap with delayed wgrad; no recompute, no CUDA graphs; rope fusion off (the bridge's). Sigmoid router "
            "with expert bias, 2 shared experts, first layer dense. Precision-aware optimizer with bf16 main grads and "
            "moments. manual_gc every 5 steps (the 8-GPU base's). 17.16 G a token on the card = the FLOP counter at "
            "163,840 within 0.05 % (163,842 padded to 165,120 is as close: see the module docstring)."
        ),
    ),
]
