"""The fourteenth set's rows as the source's tables give them (plan/published_gpu_fourteenth_rows.py, frozen before
any planner run): structure, the tables' figures, the recipe's optimizer and Kimi-K2's shape counted by hand. Nothing
here builds a planner model or plans a row."""
import re

import pytest

from shardlab.plan.published_gpu_fourteenth_rows import KIMI_K2_SHAPES, ROWS
from shardlab.plan.published_gpu_thirteenth_rows import DEEPSEEK_V3_SHAPES
from shardlab.plan.published_gpu_thirteenth_rows import ROWS as THIRTEENTH_ROWS


def test_one_row_with_the_thirteenth_sets_keys():
    """One distinct (system, precision, layout) in every Kimi_K2 table (26.02.01 to 26.06): one row, with the
    thirteenth set's row keys and recipe keys, plus the recipe's optimizer."""
    assert len(ROWS) == 1
    assert [list(r) for r in ROWS] == [list(THIRTEENTH_ROWS[0])]
    recipe_keys = set().union(*(r["recipe"] for r in THIRTEENTH_ROWS)) | {"optimizer"}
    for r in ROWS:
        assert set(r["recipe"]) == recipe_keys
        assert r["model"] in KIMI_K2_SHAPES
        assert "optimizer_dtypes" in r["recipe"]["extra"]
        for v in r["recipe"].values():
            if isinstance(v, str):
                assert v not in ("", "?")


def test_the_figures_and_layout_are_the_tables():
    """The 26.06 table as revised by 8f341b04f; the earlier containers' figures in the notes."""
    (r,) = ROWS
    assert r["case"] == "MB Kimi-K2 GB300x256 MXFP8"
    assert (r["system"], r["gpus"], r["precision"], r["gbs"], r["mbs"], r["seq"]) == (
        "DGX-GB300", 256, "MXFP8", 4096, 2, 4096)
    assert (r["tp"], r["pp"], r["cp"], r["vp"], r["ep"], r["etp"], r["fsdp"]) == (1, 4, 1, 4, 64, 1, 0)
    assert (r["tokens_per_gpu"], r["model_tflops_per_gpu"]) == (5372, 1099)
    assert (r["container"], r["commit"]) == ("26.06", "8f341b04f")
    for figure in ("5,367 / 1,097", "5,328 / 1,088", "5,344 / 1,092", "5,332 / 1,090", "5,072 / 1,037"):
        assert figure in r["notes"]
    assert r["recipe"]["table_vs_recipe"] == "matches"


def test_the_pipeline_layout_holds_the_model():
    """'Et*4|(t*4|)*14tL' expanded by hand: PP x VP stages, every one of the 61 layers once, embedding first and
    loss last, no MTP stage."""
    (r,) = ROWS
    lay = r["recipe"]["pipeline_model_parallel_layout"]
    m = re.fullmatch(r"Et\*(\d+)\|\(t\*(\d+)\|\)\*(\d+)tL", lay)
    assert m
    first, mid, n_mid = map(int, m.groups())
    stages = 1 + n_mid + 1
    layers = first + mid * n_mid + 1
    assert stages == r["pp"] * r["vp"] == 16
    assert layers == KIMI_K2_SHAPES["k2"]["num_layers"] == 61
    assert "m" not in lay and r["recipe"]["mtp_num_layers"] == KIMI_K2_SHAPES["k2"]["mtp_num_layers"] == 0


def test_the_optimizer_is_layer_wise_muon():
    """dist_muon: Muon on the matrices, Adam on the rest, in Megatron's layer-wise optimizer (no distributed or
    precision-aware optimizer, no MXFP8 param gather)."""
    (r,) = ROWS
    rec = r["recipe"]
    muon = rec["extra"]["muon"]
    assert rec["optimizer"].startswith("dist_muon") and rec["extra"]["optimizer_name"] == "dist_muon"
    assert (muon["momentum"], muon["nesterov"], muon["num_ns_steps"], muon["coefficient_type"]) == (
        0.95, True, 5, "quintic")
    assert len(muon["ns_coefficients"]) == muon["num_ns_steps"]
    assert muon["ns_coefficients"][0] == (4.0848, -6.8946, 2.9270)
    assert (muon["scale_mode"], muon["fp32_matmul_prec"], muon["tp_mode"]) == ("spectral", "medium", "blockwise")
    assert rec["extra"]["scalar_optimizer"]["name"] == "adam"
    assert rec["use_distributed_optimizer"] is False and rec["use_precision_aware_optimizer"] is False
    assert rec["overlap_param_gather"] is False
    assert rec["fp8_param_gather"] is False and rec["reuse_grad_buf_for_mxfp8_param_ag"] is False
    assert set(rec["extra"]["optimizer_dtypes"].values()) == {"fp32"}


def _params(s, active):
    """Kimi-K2's parameters counted by hand from the shape (MLA, one dense layer, shared + routed experts)."""
    h, heads = s["hidden_size"], s["num_attention_heads"]
    attn = (h * s["q_lora_rank"] + s["q_lora_rank"]  # q down-projection + its RMSNorm
            + s["q_lora_rank"] * heads * (s["qk_head_dim"] + s["qk_pos_emb_head_dim"])  # q up-projection
            + h * (s["kv_lora_rank"] + s["qk_pos_emb_head_dim"]) + s["kv_lora_rank"]  # kv down + its RMSNorm
            + s["kv_lora_rank"] * heads * (s["qk_head_dim"] + s["v_head_dim"])  # kv up-projection
            + heads * s["v_head_dim"] * h)  # output projection
    expert = 3 * h * s["moe_ffn_hidden_size"]  # SwiGLU: gate, up, down
    routed = s["moe_router_topk"] if active else s["num_moe_experts"]
    moe = routed * expert + 3 * h * s["moe_shared_expert_intermediate_size"] + s["num_moe_experts"] * h  # + router
    dense = 3 * h * s["ffn_hidden_size"]
    n_dense = s["moe_layer_freq"].count(0)
    per_layer_norms = 2 * h
    emb = s["vocab_size"] * h * (1 if s["share_embeddings_and_output_weights"] else 2)
    return (s["num_layers"] * (attn + per_layer_norms) + n_dense * dense + (s["num_layers"] - n_dense) * moe
            + emb + h)


def test_the_shape_is_kimi_k2s():
    """1,026.4 B parameters (the recipe's 'Kimi-K2 (1T)'), 32.86 B active per token with the embedding and output
    layer (Moonshot's '32B activated'), counted by hand; 163,840 needs no padding to 1,280."""
    s = KIMI_K2_SHAPES["k2"]
    assert len(s["moe_layer_freq"]) == s["num_layers"] and s["first_k_dense"] == s["moe_layer_freq"].count(0) == 1
    assert s["vocab_size"] % s["make_vocab_size_divisible_by"] == 0
    total, active = _params(s, active=False), _params(s, active=True)
    assert total == 1_026_408_209_408
    assert active == 32_861_477_888
    assert total == pytest.approx(1.0e12, rel=0.03)
    assert active == pytest.approx(32e9, rel=0.03)
    assert list(s) == list(DEEPSEEK_V3_SHAPES["v3"])  # the thirteenth set's shape keys, in its order
