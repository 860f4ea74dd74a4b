"""The fifteenth set's rows as the source's tables give them (plan/published_gpu_fifteenth_rows.py, frozen before any
planner run): structure, the tables' figures, the recipes' CUDA graph and dispatcher keys, and GPT-OSS 120B's shape
counted by hand against the tables' model FLOPs per token. Nothing here builds a planner model or plans a row."""
import pytest

from shardlab.plan.published_gpu_fifteenth_rows import GPT_OSS_SHAPES, ROWS
from shardlab.plan.published_gpu_thirteenth_rows import ROWS as THIRTEENTH_ROWS

C = "MB GPT-OSS-120B "  # case-name prefix

# case: (system, gbs, mbs, seq, pp, vp, ep, precision, tokens/s/GPU, TFLOP/s/GPU, container, commit)
TABLES = {
    C + "GB300x64 MXFP8": ("DGX-GB300", 1280, 4, 4096, 1, None, 16, "MXFP8", 33024, 1077, "26.08", "4ab94dfad"),
    C + "GB200x64 MXFP8": ("DGX-GB200", 1280, 4, 4096, 1, None, 64, "MXFP8", 28672, 934, "26.08", "4ab94dfad"),
    C + "B300x64 MXFP8": ("DGX-B300", 1280, 4, 4096, 1, None, 8, "MXFP8", 18534, 604, "26.06", "8f341b04f"),
    C + "GB300x64 BF16": ("DGX-GB300", 1280, 4, 4096, 1, None, 64, "BF16", 20635, 673, "26.06", "63b08b397"),
    C + "GB200x64 BF16": ("DGX-GB200", 1280, 4, 4096, 1, None, 64, "BF16", 17770, 580, "26.06", "63b08b397"),
    C + "H100x64 BF16": ("DGX-H100", 1280, 1, 4096, 4, None, 8, "BF16", 5860, 191, "26.06", "63b08b397"),
    C + "B300x64 BF16": ("DGX-B300", 1280, 4, 4096, 1, None, 8, "BF16", 15232, 414, "26.04.01", "17a381f95"),
    C + "B200x64 BF16": ("DGX-B200", 1280, 4, 4096, 1, None, 8, "BF16", 13568, 369, "26.04.01", "17a381f95"),
    C + "B300x64 BF16 ep64": ("DGX-B300", 1280, 4, 4096, 1, None, 64, "BF16", 8359, 228, "26.02", "c0b9a0003"),
    C + "B200x64 BF16 ep64": ("DGX-B200", 1280, 4, 4096, 1, None, 64, "BF16", 8047, 219, "26.02", "c0b9a0003"),
    C + "GB300x64 BF16 seq8192": ("DGX-GB300", 1280, 2, 8192, 1, 1, 64, "BF16", 18347, 565, "25.11", "1804c076f"),
    C + "GB200x64 BF16 seq8192": ("DGX-GB200", 1280, 1, 8192, 1, 1, 64, "BF16", 15876, 488, "25.11", "1804c076f"),
    C + "GB300x64 BF16 gbs512": ("DGX-GB300", 512, 4, 4096, 1, 1, 64, "BF16", 18618, 506, "25.11", "97ad8cc6f"),
    C + "GB200x64 BF16 gbs512": ("DGX-GB200", 512, 4, 4096, 1, 1, 64, "BF16", 15754, 428, "25.11", "97ad8cc6f"),
    C + "B200x64 BF16 gbs512": ("DGX-B200", 512, 4, 4096, 1, 1, 8, "BF16", 8213, 223, "25.11", "97ad8cc6f"),
    C + "H100x64 BF16 gbs512": ("DGX-H100", 512, 4, 4096, 4, 1, 8, "BF16", 5630, 153, "25.11", "97ad8cc6f"),
}

TE = ["attn", "moe_router", "moe_preprocess"]
# case: (cuda_graph_impl, cuda_graph_scope, dispatcher, flex backend)
GRAPHS_AND_DISPATCH = {
    C + "GB300x64 MXFP8": ("full_iteration", [], "flex", "hybridep"),
    C + "GB200x64 MXFP8": ("full_iteration", [], "flex", "hybridep"),
    C + "B300x64 MXFP8": ("transformer_engine", TE, "flex", "hybridep"),
    C + "GB300x64 BF16": ("transformer_engine", TE, "alltoall", None),
    C + "GB200x64 BF16": ("none", None, "alltoall", None),
    C + "H100x64 BF16": ("none", None, "alltoall", None),
    C + "B300x64 BF16": ("transformer_engine", TE, "flex", "hybridep"),
    C + "B200x64 BF16": ("none", None, "alltoall", None),
    C + "B300x64 BF16 ep64": ("transformer_engine", TE, "alltoall", None),
    C + "B200x64 BF16 ep64": ("none", None, "alltoall", None),
    C + "GB300x64 BF16 seq8192": ("transformer_engine", TE, "alltoall", None),
    C + "GB200x64 BF16 seq8192": (None, None, "alltoall", None),
    C + "GB300x64 BF16 gbs512": ("transformer_engine", TE, "alltoall", None),
    C + "GB200x64 BF16 gbs512": (None, None, "alltoall", None),
    C + "B200x64 BF16 gbs512": (None, None, "alltoall", None),
    C + "H100x64 BF16 gbs512": (None, None, "alltoall", None),
}


def test_sixteen_rows_with_the_thirteenth_sets_keys():
    """16 distinct (system, precision, layout) over every GPT OSS 120B table; each row has the thirteenth set's row
    keys (in order) and recipe keys, no empty or '?' strings."""
    assert len(ROWS) == 16
    assert [r["case"] for r in ROWS] == list(TABLES)
    recipe_keys = set().union(*(r["recipe"] for r in THIRTEENTH_ROWS))
    for r in ROWS:
        assert list(r) == list(THIRTEENTH_ROWS[0])
        assert set(r["recipe"]) == recipe_keys, r["case"]
        assert r["model"] in GPT_OSS_SHAPES
        assert "optimizer_dtypes" in r["recipe"]["extra"]
        for v in r["recipe"].values():
            if isinstance(v, str):
                assert v not in ("", "?")
                assert v.startswith(("not set", "not read")) or "not" not in v[:4]
        assert r["notes"]
    layouts = {(r["system"], r["precision"], r["gpus"], r["gbs"], r["mbs"], r["seq"], r["tp"], r["pp"], r["cp"],
                r["vp"] or 1, r["ep"], r["etp"], r["fsdp"]) for r in ROWS}
    assert len(layouts) == 16


def test_the_figures_and_layouts_are_the_tables():
    for r in ROWS:
        system, gbs, mbs, seq, pp, vp, ep, prec, tok, tfl, container, commit = TABLES[r["case"]]
        assert (r["system"], r["gbs"], r["mbs"], r["seq"], r["pp"], r["vp"], r["ep"], r["precision"]) == (
            system, gbs, mbs, seq, pp, vp, ep, prec), r["case"]
        assert (r["gpus"], r["tp"], r["cp"], r["etp"], r["fsdp"]) == (64, 1, 1, 1, 0)
        assert (r["tokens_per_gpu"], r["model_tflops_per_gpu"], r["container"], r["commit"]) == (
            tok, tfl, container, commit), r["case"]
        dp = r["gpus"] // (r["tp"] * r["pp"] * r["cp"])
        assert r["gbs"] % (dp * r["mbs"]) == 0
        assert dp % r["ep"] == 0 or r["ep"] % dp == 0


def test_flagged_and_earlier_figures_are_in_the_notes():
    """The 26.06.01 [^gpt-oss-note] figures stay in the notes; 26.08 republished the layouts without it."""
    notes = {r["case"]: r["notes"] for r in ROWS}
    assert "20,288 / 661" in notes[C + "GB300x64 MXFP8"]
    assert "33,166 / 1,081" in notes[C + "GB300x64 MXFP8"]
    assert "18,304 / 597" in notes[C + "GB200x64 MXFP8"]
    assert "28,947 / 943" in notes[C + "GB200x64 MXFP8"]
    for case in (C + "GB300x64 MXFP8", C + "GB200x64 MXFP8"):
        assert "gpt-oss-note" in notes[case] and "cudnn-frontend" in notes[case]
    for figure in ("19,200 / 523", "19,328 / 525", "19,275 / 524", "19,366 / 526", "19,412 / 527"):
        assert figure in notes[C + "GB300x64 BF16"]
    for figure in ("5,824 / 158", "5,810 / 158", "5,984 / 163", "5,993 / 163"):
        assert figure in notes[C + "H100x64 BF16"]


def test_cuda_graphs_and_dispatchers():
    for r in ROWS:
        rec = r["recipe"]
        impl, scope, dispatcher, backend = GRAPHS_AND_DISPATCH[r["case"]]
        if impl is None:
            assert rec["cuda_graph_impl"].startswith("not set") and rec["cuda_graph_scope"] == "not set"
        else:
            assert rec["cuda_graph_impl"] == impl, r["case"]
            if scope is not None:
                assert rec["cuda_graph_scope"] == scope, r["case"]
            else:
                assert "inert" in rec["cuda_graph_scope"]
        assert rec["moe_token_dispatcher_type"] == dispatcher, r["case"]
        assert rec["moe_flex_dispatcher_backend"] == backend, r["case"]
        assert rec["moe_hybridep_num_sms"] == (32 if backend == "hybridep" else None)
        if impl == "full_iteration":
            assert rec["moe_paged_stash"] is True and rec["moe_expert_rank_capacity_factor"] == 1.5
            assert rec["overlap_moe_expert_parallel_comm"] is True and rec["delay_wgrad_compute"] is True
        if r["precision"] == "MXFP8":
            assert rec["precision_recipe"] == "bf16_with_mxfp8_mixed" and rec["use_precision_aware_optimizer"] is False
        else:
            assert rec["precision_recipe"] == "bf16_mixed" and rec["use_precision_aware_optimizer"] is True
        assert set(rec["extra"]["optimizer_dtypes"].values()) == {"fp32"}
    alt = {r["case"]: r["recipe"]["alt_recipe"] for r in ROWS if r["recipe"]["alt_recipe"]}
    assert set(alt) == {C + "GB300x64 BF16 seq8192", C + "GB200x64 BF16 seq8192"}
    assert alt[C + "GB200x64 BF16 seq8192"]["moe_flex_dispatcher_backend"] == "hybridep"


def _params(s, active):
    """GPT-OSS 120B's parameters counted by hand: GQA attention with biases and one sink per head, two RMSNorms a
    layer, a biased router, biased GLU experts (fc1 h -> 2f, fc2 f -> h), untied embedding and output layer, final
    norm. active: top-k experts instead of all."""
    h, n, g, d = s["hidden_size"], s["num_attention_heads"], s["num_query_groups"], s["kv_channels"]
    qkv = n * d + 2 * g * d
    attn = h * qkv + qkv + n * d * h + h + n  # qkv weight + bias, proj weight + bias, sinks
    norms = 2 * h
    e, f = s["num_moe_experts"], s["moe_ffn_hidden_size"]
    router = e * h + e
    expert = h * 2 * f + 2 * f + f * h + h
    k = s["moe_router_topk"] if active else e
    layer = attn + norms + router + k * expert
    emb = s["vocab_size"] * h
    return s["num_layers"] * layer + 2 * emb + h


def test_the_shape_is_gpt_oss_120bs():
    """116.83 B total; 5.13 B active counting the output layer but not the input embedding (the model card's
    '117B / 5.1B active'); alternating sliding-window (even 0-based layers) and full attention."""
    s = GPT_OSS_SHAPES["120b"]
    assert s["vocab_size"] % s["make_vocab_size_divisible_by"] == 0
    total, active = _params(s, active=False), _params(s, active=True)
    assert total == 116_829_156_672
    assert active - s["vocab_size"] * s["hidden_size"] == 5_132_849_472
    assert total == pytest.approx(117e9, rel=0.01)
    assert active - s["vocab_size"] * s["hidden_size"] == pytest.approx(5.1e9, rel=0.01)
    L = s["num_layers"]
    windowed = [i for i in range(L) if (i + 1) % s["window_attn_skip_freq"] != 0]
    assert windowed == s["sliding_window_layers"] and len(windowed) == 18
    assert sorted(windowed + s["full_attention_layers"]) == list(range(L))
    assert s["window_size"][0] + 1 == 128 and s["window_size_up_to_c0b9a0003"] == (128, 0)


def _flops_old(s, seq):
    """Bridge flop_utils up to 26.04.01: GLU as 2 projections (activation is not silu), every layer full causal."""
    h, n, g, d, L = s["hidden_size"], s["num_attention_heads"], s["num_query_groups"], s["kv_channels"], s["num_layers"]
    q = n * d
    mlp = 12 * L * h * s["moe_ffn_hidden_size"] * s["moe_router_topk"]
    attn = 12 * L * h * h * ((1 + g / n + seq / h / 2) * (q / h))
    return mlp + attn + 6 * h * s["vocab_size"]


def _flops_new(s, seq):
    """Bridge flop_utils from 26.06 (baa0259bd): GLU 3 projections, sliding-window layers at the exact causal
    window average, full layers at seq / 2."""
    h, n, g, d, L = s["hidden_size"], s["num_attention_heads"], s["num_query_groups"], s["kv_channels"], s["num_layers"]
    q, kv = n * d, g * d
    mlp = 6 * h * s["moe_ffn_hidden_size"] * s["moe_router_topk"] * 3 * L
    proj = h * (q + 2 * kv) + q * h
    w = s["window_size"][0] + s["window_size"][1] + 1
    swa_ctx = w - w * (w - 1) / (2 * seq)
    n_swa = len(s["sliding_window_layers"])
    attn = 6 * ((L - n_swa) * (proj + q * seq) + n_swa * (proj + 2 * q * swa_ctx))
    return mlp + attn + 6 * h * s["vocab_size"]


def test_the_tables_model_flops_per_token():
    """TFLOP/s/GPU over tokens/s/GPU: 27.16 G (30.79 G at 8,192) up to 26.04.01, 32.63 G from 26.06; both hand
    counts within 0.5 % of every row."""
    s = GPT_OSS_SHAPES["120b"]
    assert _flops_old(s, 4096) == pytest.approx(27.164e9, rel=1e-4)
    assert _flops_old(s, 8192) == pytest.approx(30.788e9, rel=1e-4)
    assert _flops_new(s, 4096) == pytest.approx(32.630e9, rel=1e-4)
    for r in ROWS:
        per_token = r["model_tflops_per_gpu"] * 1e12 / r["tokens_per_gpu"]
        counted = _flops_new(s, r["seq"]) if r["container"] >= "26.06" else _flops_old(s, r["seq"])
        assert per_token == pytest.approx(counted, rel=0.005), r["case"]
    # 6 x active matmul parameters (attention, router, 4 experts, output layer) sits between the two counts
    h, L = s["hidden_size"], s["num_layers"]
    matmul = L * (h * 5120 + 4096 * h + 128 * h + 4 * 3 * h * 2880) + s["vocab_size"] * h
    assert 6 * matmul == pytest.approx(30.80e9, rel=1e-3)
