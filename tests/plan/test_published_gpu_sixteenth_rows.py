"""Self-consistency of the frozen sixteenth set (model-verification cards' pre-training rows).

Checks the data against itself only: layouts, the cards' throughput identity, the model-shape dicts, and the cards'
FLOP counts against a hand count of Megatron-Bridge's counter from the shapes. Nothing from the planner is used.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
from collections import defaultdict
from pathlib import Path

import pytest

# Loaded by path so that no package __init__ (and nothing of the planner) runs.
SRC = Path(__file__).resolve().parents[2] / "src" / "shardlab" / "plan" / "published_gpu_sixteenth_rows.py"
_SPEC = importlib.util.spec_from_file_location("published_gpu_sixteenth_rows", SRC)
mod = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mod)

ROWS = mod.ROWS
SHAPES = mod.MV_SHAPES

TOP_KEYS = {
    "case", "model", "system", "gpus", "gbs", "mbs", "seq", "tp", "pp", "cp", "vp", "ep", "etp", "fsdp",
    "precision", "tokens_per_gpu", "model_tflops_per_gpu", "step_time_ms", "container", "commit", "item",
    "last_verified", "recipe", "notes",
}
RECIPE_KEYS = {
    "builder", "precision_recipe", "fp8_recipe", "fp8_param_gather", "fp8_dot_product_attention", "fp8_output_proj",
    "grad_reduce_in_fp32", "sequence_parallel", "mtp_num_layers", "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend", "moe_hybridep_num_sms", "moe_grouped_gemm", "moe_permute_fusion",
    "moe_router_fusion", "moe_router_dtype", "moe_router_load_balancing_type", "moe_router_force_load_balancing",
    "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity", "moe_expert_rank_capacity_factor",
    "moe_paged_stash", "moe_shared_expert_overlap", "cuda_graph_impl", "cuda_graph_scope", "recompute_granularity",
    "recompute_method", "recompute_num_layers", "recompute_modules", "activation_offload", "overlap_grad_reduce",
    "overlap_param_gather", "bucket_size", "tp_comm_overlap", "overlap_p2p_comm", "overlap_moe_expert_parallel_comm",
    "delay_wgrad_compute", "pipeline_model_parallel_layout", "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "use_distributed_optimizer", "use_megatron_fsdp",
    "use_precision_aware_optimizer", "manual_gc", "cross_entropy_loss_fusion", "cross_entropy_fusion_impl",
    "apply_rope_fusion", "bias_activation_fusion", "use_transformer_engine_op_fuser", "extra", "env", "builder",
    "table_vs_recipe", "alt_recipe",
}
SHAPE_KEYS = {
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "vocab_size", "make_vocab_size_divisible_by", "share_embeddings_and_output_weights", "qk_layernorm",
    "add_bias_linear", "add_qkv_bias", "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size", "moe_layer_freq", "moe_router_num_groups", "moe_router_group_topk",
    "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
    "mtp_num_layers", "window_size", "window_attn_skip_freq", "softmax_type", "position_embedding_type",
    "rotary_base", "gated_linear_unit", "activation",
}


def _dp(row):
    return row["gpus"] // (row["tp"] * row["pp"] * row["cp"])


def _ids(rows):
    return [r["case"] for r in rows]


def test_sixteen_rows_with_unique_cases_and_full_keys():
    assert len(ROWS) == 16
    assert len({r["case"] for r in ROWS}) == 16
    for row in ROWS:
        assert set(row) == TOP_KEYS, row["case"]
        assert RECIPE_KEYS <= set(row["recipe"]), (row["case"], RECIPE_KEYS - set(row["recipe"]))
        assert set(row["recipe"]["extra"]["optimizer_dtypes"]) == {
            "main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"
        }
        assert row["item"].split("/")[0] in ("pretrain", "pretrain_performance")
        assert row["item"].split("/")[1] == row["system"].split("-")[1]
        assert row["system"] in ("DGX-H100", "DGX-GB200", "DGX-GB300")
        assert re.fullmatch(r"[0-9a-f]{9}", row["commit"])
        assert re.fullmatch(r"2026-0[78]-\d\d", row["last_verified"])
        assert row["notes"]


@pytest.mark.parametrize("row", ROWS, ids=_ids(ROWS))
def test_layout_divides_the_gpus_and_the_batch(row):
    model_parallel = row["tp"] * row["pp"] * row["cp"]
    assert row["gpus"] % model_parallel == 0
    dp = _dp(row)
    assert row["gbs"] % (row["mbs"] * dp) == 0
    assert row["fsdp"] == 0 and row["etp"] == 1
    shape = SHAPES[row["model"]]
    if shape["num_moe_experts"]:
        # expert parallel groups tile the TP x CP x DP ranks of a pipeline stage
        assert (row["gpus"] // row["pp"]) % (row["ep"] * row["etp"]) == 0
        assert shape["num_moe_experts"] % row["ep"] == 0
    else:
        assert row["ep"] == 1
    if row["tp"] == 1:
        assert row["recipe"]["sequence_parallel"] is False
    stages = row["pp"] * (row["vp"] or 1)
    units = shape["num_layers"]
    recipe = row["recipe"]
    if recipe["account_for_embedding_in_pipeline_split"] is True:
        units += 1
    if recipe["account_for_loss_in_pipeline_split"] is True:
        units += 1
    if recipe["pipeline_model_parallel_layout"] is None:
        assert units % stages == 0, (units, stages)
    else:
        layout = recipe["pipeline_model_parallel_layout"]
        assert layout.count("|") + 1 + sum(
            (int(n) - 1) for n in re.findall(r"\)\*(\d+)", layout)
        ) == stages


@pytest.mark.parametrize("row", ROWS, ids=_ids(ROWS))
def test_card_throughput_identity(row):
    assert row["tokens_per_gpu"] > 0 and row["model_tflops_per_gpu"] > 0 and row["step_time_ms"] > 0
    tokens_a_step = row["tokens_per_gpu"] * row["step_time_ms"] / 1000.0 * row["gpus"]
    assert tokens_a_step == pytest.approx(row["gbs"] * row["seq"], rel=1e-3)


def test_models_are_in_the_shapes_with_the_shared_key_names():
    assert {r["model"] for r in ROWS} == set(SHAPES)
    for name, shape in SHAPES.items():
        assert SHAPE_KEYS <= set(shape), (name, SHAPE_KEYS - set(shape))
        assert shape["num_attention_heads"] % (shape["num_query_groups"] or 1) == 0
        freq = shape["moe_layer_freq"]
        if isinstance(freq, list):
            assert len(freq) == shape["num_layers"]
        if shape["window_size"] is not None:
            assert len(shape["sliding_window_layers"]) + len(shape["full_attention_layers"]) == shape["num_layers"]


def _padded(vocab, divisor, tp):
    multiple = divisor * tp
    return int(math.ceil(vocab / multiple) * multiple)


def test_padded_vocabulary_in_run_follows_the_tp_padding():
    for row in ROWS:
        extra = row["recipe"]["extra"]
        divisor = SHAPES[row["model"]]["make_vocab_size_divisible_by"]
        if extra["vocab_size_in_run"] == SHAPES[row["model"]]["vocab_size"]:
            assert extra["padded_vocab_size_in_run"] == _padded(extra["vocab_size_in_run"], divisor, row["tp"])
        else:  # the tokenizer's vocabulary: padded by 128 x TP (should_pad_vocab)
            assert extra["padded_vocab_size_in_run"] == _padded(extra["vocab_size_in_run"], 128, row["tp"])


def _flops_per_token(row):
    """Megatron-Bridge's transformer_flops, per token, for one row (fwd + bwd = 3 x 2 x MACs)."""
    s = SHAPES[row["model"]]
    seq = row["seq"]
    h = s["hidden_size"]
    mtp = row["recipe"]["mtp_num_layers"] or 0
    layers = s["num_layers"] + mtp
    glu = 3 if s["gated_linear_unit"] else 2
    if s["num_moe_experts"]:
        freq = s["moe_layer_freq"]
        pattern = freq if isinstance(freq, list) else [1 if i % freq == 0 else 0 for i in range(s["num_layers"])]
        moe, dense = sum(pattern), s["num_layers"] - sum(pattern)
        moe += pattern[-1] * mtp
        dense += (1 - pattern[-1]) * mtp
        topk, moe_ffn = s["moe_router_topk"], s["moe_ffn_hidden_size"]
        shared = s["moe_shared_expert_intermediate_size"] or 0
    else:
        moe, dense, topk, moe_ffn, shared = 0, s["num_layers"] + mtp, 0, 0, 0
    mlp = 6 * h * (s["ffn_hidden_size"] * glu * dense + moe_ffn * topk * glu * moe + shared * glu * moe)
    heads = s["num_attention_heads"]
    if s["multi_latent_attention"]:
        qk, pe, v = s["qk_head_dim"], s["qk_pos_emb_head_dim"], s["v_head_dim"]
        if s["q_lora_rank"] is None:
            q_term = h * heads * (qk + pe)
        else:
            q_term = s["q_lora_rank"] * (h + heads * (qk + pe) + 1)
        kv_term = s["kv_lora_rank"] * (h + heads * (qk + v) + 1) + h * pe
        core = seq * heads * (qk + pe) / 2 + seq * heads * v / 2
        attn = 6 * layers * (q_term + kv_term + heads * v * h + core)
    else:
        q = s["kv_channels"] * heads
        kv = s["kv_channels"] * s["num_query_groups"]
        proj = h * (q + 2 * kv) + q * h
        full_core = q * seq
        if s["window_size"] is None:
            attn = 6 * layers * (proj + full_core)
        else:
            window = s["window_size"][0] + s["window_size"][1] + 1
            swa_core = 2 * q * (window - window * (window - 1) / (2 * seq))
            skip = s["window_attn_skip_freq"]
            n_swa = sum(0 if (i + 1) % skip == 0 else 1 for i in range(layers))
            attn = 6 * ((layers - n_swa) * (proj + full_core) + n_swa * (proj + swa_core))
    mtp_proj = 6 * mtp * (3 * h + 2 * h * h)
    logits = 6 * h * row["recipe"]["extra"]["padded_vocab_size_in_run"] * (mtp + 1)
    return mlp + attn + mtp_proj + logits


@pytest.mark.parametrize("row", ROWS, ids=_ids(ROWS))
def test_card_flops_a_token_match_a_hand_count_from_the_shapes(row):
    card = row["model_tflops_per_gpu"] * 1e12 / row["tokens_per_gpu"]
    assert card == pytest.approx(_flops_per_token(row), rel=1e-3)


def test_flops_a_token_agree_within_a_model_and_counter():
    groups = defaultdict(list)
    for row in ROWS:
        key = (
            row["model"], row["seq"], row["recipe"]["extra"]["padded_vocab_size_in_run"],
            row["recipe"]["mtp_num_layers"],
        )
        groups[key].append(row["model_tflops_per_gpu"] * 1e12 / row["tokens_per_gpu"])
    assert len(groups) == 9  # GPT-OSS-120B and DeepSeek-V3 have two vocabularies in the runs
    for key, ratios in groups.items():
        assert max(ratios) / min(ratios) < 1.01, key
    # the GPT-OSS library rows ran the tokenizer's vocabulary: a different counter from the benchmark rows
    oss = {k[2] for k in groups if k[0] == "gpt-oss-120b"}
    assert oss == {32000, 201088}


def test_gpt_oss_20b_shape_gives_the_cards_exported_parameter_count():
    s = SHAPES["gpt-oss-20b"]
    h, heads, groups, kv = s["hidden_size"], s["num_attention_heads"], s["num_query_groups"], s["kv_channels"]
    q, k = heads * kv, groups * kv
    attn = h * (q + 2 * k) + (q + 2 * k) + q * h + h + heads  # qkv + bias, proj + bias, sinks
    experts = s["num_moe_experts"] * (h * 2 * s["moe_ffn_hidden_size"] + 2 * s["moe_ffn_hidden_size"]
                                      + s["moe_ffn_hidden_size"] * h + h)
    router = h * s["num_moe_experts"] + s["num_moe_experts"]
    layer = attn + 2 * h + router + experts
    total = 2 * s["vocab_size"] * h + s["num_layers"] * layer + h
    assert total == 20_914_757_184


def test_module_is_pure_data():
    text = SRC.read_text()
    tree = ast.parse(text)
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in imports)
    assert "shardlab" not in text
    assert max(len(line) for line in text.splitlines()) <= 120
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


def test_qwen3_30b_shape_gives_the_cards_export_size():
    s = SHAPES["qwen3-30b-a3b"]
    h, q, kv = s["hidden_size"], s["num_attention_heads"] * s["kv_channels"], s["num_query_groups"] * s["kv_channels"]
    experts = s["num_moe_experts"] * 3 * h * s["moe_ffn_hidden_size"]
    layer = h * (q + 2 * kv) + q * h + 2 * s["kv_channels"] + 2 * h + h * s["num_moe_experts"] + experts
    params = 2 * s["vocab_size"] * h + s["num_layers"] * layer + h
    assert 2 * params == 61_064_245_248  # the card's SFT export total_size, bf16


def test_hf_tensor_counts_of_the_cards_exports():
    dense = SHAPES["qwen3-8b"]
    # q, k, v, o, q_norm, k_norm, gate, up, down, two layernorms a layer; embedding, final norm, untied head
    assert dense["num_layers"] * 11 + 3 == 399
    moon = SHAPES["moonlight-16b-a3b"]
    assert moon["q_lora_rank"] is None and moon["moe_layer_freq"][0] == 0
    attention = 5 + 1  # q, kv_a, kv_a_layernorm, kv_b, o; the rotary inv_freq buffer the bridge keeps
    dense_layer = attention + 3 + 2
    moe_layer = attention + 2 + 2 + 3 * moon["num_moe_experts"] + 3  # norms, gate + bias, experts, shared
    n_dense = moon["first_k_dense"]
    total = n_dense * dense_layer + (moon["num_layers"] - n_dense) * moe_layer + 3
    assert total == 5344
