"""Planner memory model: exact parameter counts, ZeRO's 2+2+K formulas, Korthikanti activations."""
import pytest

from shardlab.plan.comm import padded, units
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.memory import in_flight, model_state_bytes, state_bytes
from shardlab.plan.activations import activation_bytes_extra, activation_bytes_per_layer
from shardlab.plan.model import ModelSpec
from shardlab.plan.presets import PRESETS

GB = 1e9


@pytest.mark.parametrize("name,expected", [("tiny", 120_576), ("small", 3_257_856), ("gpt2", 124_439_808)])
def test_param_count_exact_for_shardlab_presets(name, expected):
    m = PRESETS[name]
    L, d, v, s = m.n_layer, m.d_model, m.vocab, m.seq
    assert m.params == expected == 12 * L * d * d + 13 * L * d + v * d + s * d + 2 * d
    assert sum(n for _, n in m.param_shapes()) == expected


def test_param_shapes_match_shardlab_model():
    torch = pytest.importorskip("torch")
    from shardlab.model.gpt import GPTConfig, build_model
    m = PRESETS["tiny"]
    net = build_model(GPTConfig(n_layer=m.n_layer, n_head=m.n_head, d_model=m.d_model,
                                vocab_size=m.vocab, max_seq_len=m.seq), seed=0)
    assert [(n, p.numel()) for n, p in net.named_parameters()] == m.param_shapes()
    assert torch.is_tensor(next(net.parameters()))


def test_untied_head_and_mlp_ratio():
    m = ModelSpec("x", n_layer=2, d_model=8, n_head=2, vocab=10, seq=4, mlp_ratio=2, tied=False)
    # per layer (4+2r)h^2 + (9+r)h, embeddings 2vh + sh, final LN 2h
    assert m.params == 2 * (8 * 64 + 11 * 8) + 2 * 10 * 8 + 4 * 8 + 16 == sum(n for _, n in m.param_shapes())


def test_zero_paper_figure_1_7p5b_on_64_gpus():
    """Rajbhandari et al. 2020, Fig. 1: Psi = 7.5B, N_d = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB."""
    psi, n = 7.5e9, 64
    tot = {z: sum(model_state_bytes(psi, n, z).values()) / GB for z in ("ddp", "zero1", "zero2", "zero3")}
    assert tot["ddp"] == pytest.approx(120.0)
    assert tot["zero1"] == pytest.approx(31.4, abs=0.05)
    assert tot["zero2"] == pytest.approx(16.6, abs=0.05)
    assert tot["zero3"] == pytest.approx(1.875)


@pytest.mark.parametrize("strategy,coef", [("ddp", lambda n: 16), ("zero1", lambda n: 4 + 12 / n),
                                           ("zero2", lambda n: 2 + 14 / n), ("zero3", lambda n: 16 / n)])
def test_mixed_adam_state_bytes_are_2_2_12_divided_by_stage(strategy, coef):
    m = PRESETS["gpt2"]
    for n in (1, 2, 8):
        lay = Layout(dp=n, strategy=strategy, padding="none")
        got = sum(state_bytes(m, TrainSpec(global_batch=n), lay).values())
        assert got == pytest.approx(coef(n) * m.params)


def test_fp32_and_sgd_and_fp32_grad_accumulation():
    m = PRESETS["small"]
    psi = m.params
    fp32 = state_bytes(m, TrainSpec(1, precision="fp32"), Layout())
    assert fp32 == {"params": 4 * psi, "grads": 4 * psi, "optimizer": 8 * psi}
    sgd = state_bytes(m, TrainSpec(1, precision="fp32", optimizer="sgd"), Layout())
    assert sgd["optimizer"] == 4 * psi
    acc = state_bytes(m, TrainSpec(1, fp32_grad_accum=True), Layout())
    assert acc == {"params": 2 * psi, "grads": 4 * psi, "optimizer": 12 * psi}


def test_padding_per_parameter_like_torch_chunk():
    m = PRESETS["tiny"]
    numels = [n for _, n in m.param_shapes()]
    n = 3
    # torch.chunk on dim 0: ceil(rows/n) whole rows per rank (wte is 256 x 64: 86 rows of 64)
    per_param = sum(-(-x.rows // n) * x.row for x in numels)
    assert numels[0].rows == 256 and numels[0].row == 64
    assert padded(numels, n, "per_param") == per_param * n
    assert padded(numels, n, "flat") == -(-sum(numels) // n) * n
    st = state_bytes(m, TrainSpec(3, precision="fp32"), Layout(dp=3, strategy="zero3"))
    assert st == {"params": 4 * per_param, "grads": 4 * per_param, "optimizer": 8 * per_param}
    # zero1 keeps padded full params and grads (n * shard), the optimizer on the shard
    st = state_bytes(m, TrainSpec(3, precision="fp32"), Layout(dp=3, strategy="zero1"))
    assert st == {"params": 12 * per_param, "grads": 12 * per_param, "optimizer": 8 * per_param}
    assert sum(sum(u) for u in units(m)) == m.params


def test_offload_removes_states_from_gpu():
    m = PRESETS["gpt2"]
    st = state_bytes(m, TrainSpec(8), Layout(dp=8, strategy="zero3", offload="params"))
    assert st["params"] == 0 and st["optimizer"] == 0 and st["grads"] > 0


# ---- Korthikanti et al. 2022, Table 2 and its worked numbers --------------------------------------
GPT3 = PRESETS["gpt3-175b"]  # a=96, s=2048, h=12288: the paper's 5as/h = 80
MT530 = PRESETS["mt-530b"]  # a=128, s=2048, h=20480: 5as/h = 64


def test_korthikanti_attention_term_worked_examples():
    for m, term in ((GPT3, 80), (MT530, 64)):
        assert 5 * m.n_head * m.seq / m.d_model == term
        sbh = m.seq * m.d_model
        assert activation_bytes_per_layer(m, 1, m.seq) == sbh * (34 + term)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_table_2(t):
    m, b = GPT3, 2
    s, h, a = m.seq, m.d_model, m.n_head
    sbh = s * b * h
    x = 5 * a * s / h
    assert activation_bytes_per_layer(m, b, s, t) == pytest.approx(sbh * (10 + 24 / t + x / t))
    assert activation_bytes_per_layer(m, b, s, t, sp=True) == pytest.approx(sbh * (34 / t + x / t))
    assert activation_bytes_per_layer(m, b, s, t, recompute="selective-attn") == pytest.approx(sbh * (10 + 24 / t))
    assert activation_bytes_per_layer(m, b, s, t, sp=True, recompute="selective-attn") == pytest.approx(sbh * 34 / t)
    assert activation_bytes_per_layer(m, b, s, t, recompute="full") == 2 * sbh


def test_korthikanti_sp_plus_selective_saves_5x_on_gpt3():
    """The paper's headline: TP+SP+selective needs ~5x less activation memory than TP alone
    (here (10 + 24/8 + 80/8) / (34/8) = 5.4 per layer for GPT-3 at t=8)."""
    m = GPT3
    base = activation_bytes_per_layer(m, 1, m.seq, 8)
    best = activation_bytes_per_layer(m, 1, m.seq, 8, sp=True, recompute="selective-attn")
    assert base / best == pytest.approx(23 / 4.25)


def test_shardlab_selective_is_what_its_policy_keeps():
    """`selective` is shardlab's policy: 11 sbh-sized tensors at 16 bits plus the fp32 attention
    log-sum-exp, 22sbh + 4asb; doubled for fp32 it is the measured formula of docs/memory.md, 4(11sbh + asb),
    up to the log-sum-exp counted twice (4asb of 44sbh: 4a/44h, under 1%)."""
    from shardlab.observe.activations import formula_bytes

    m, b, s = GPT3, 2, 128
    sbh, a = s * b * m.d_model, m.n_head
    got = activation_bytes_per_layer(m, b, s, recompute="selective", flash=True)
    assert got == pytest.approx(22 * sbh + 4 * a * s * b)
    assert 2 * got == pytest.approx(formula_bytes(b, s, m.d_model, a, "selective"), rel=0.01)


def test_korthikanti_extra_terms_and_pipeline_in_flight():
    m = GPT3
    s, h, v = m.seq, m.d_model, m.vocab
    sbh = s * h
    # the paper's sbh/t(1 + 4(1 + v/h)) for the hidden-size part; the logits at the loss's backward peak as
    # shardlab's vocab-parallel loss holds them, 8sbv/t (the paper's 4sbv/t counts the fp32 logits alone)
    assert activation_bytes_extra(m, 1, s, 8, sp=True, p=1) == pytest.approx(sbh / 8 * 5 + 8 * s * v / 8)
    assert activation_bytes_extra(m, 1, s, 8, sp=True, p=8, in_flight=8) == pytest.approx(sbh * 8 / 8)
    # 1F1B: the first stage holds p micro batches of L/p layers = L layers' worth
    assert in_flight(Layout(pp=8, schedule="1f1b"), m=32) == 8
    assert in_flight(Layout(pp=8, schedule="1f1b"), m=4) == 4
    assert in_flight(Layout(pp=8, schedule="gpipe"), m=32) == 32
    assert in_flight(Layout(pp=8, schedule="interleaved", v=4), m=32) == pytest.approx(8 * (1 + 7 / 32))


def test_logits_are_split_by_tp_without_sp():
    """The vocab-parallel loss keeps only this rank's vocabulary slice of the logits (parallel/tp/loss.py):
    its saved softmax and the gradient cloned from it, 8sbv/t, with or without SP; only the hidden-size part
    (4sbh) is replicated without SP. At t = 1 F.cross_entropy's three fp32 tensors: 12sbv."""
    m = PRESETS["llama3-70b"]
    s, b, t, h, v = 8192, 2, 8, m.d_model, m.vocab
    assert activation_bytes_extra(m, b, s, t, sp=False, p=1) == 4 * s * b * h + 8 * s * b * v / t
    assert activation_bytes_extra(m, b, s, t, sp=True, p=1) == pytest.approx(4 * s * b * (h + 2 * v) / t)
    assert activation_bytes_extra(m, b, s, 1, sp=False, p=1) == 4 * s * b * h + 12 * s * b * v


@pytest.mark.parametrize("arch, tie", [("gpt2", "false"), ("llama", "true"), ("llama", "auto")])
def test_the_runs_head_tying_reaches_the_planner(arch, tie):
    """A run's model.tie_embeddings (an imported untied GPT-2, Llama 3.2's tied head) is what the planner
    counts: its parameters equal the built model's."""
    pytest.importorskip("torch")
    from shardlab import config
    from shardlab.model.gpt import build_model, resolve_model_config
    from shardlab.plan.from_config import model_spec
    preset = "llama-tiny" if arch == "llama" else "tiny"
    cfg = config.load(None, [f"model.preset={preset}", f"model.tie_embeddings={tie}", "train.seq_len=32"])
    cfg = config.validate(cfg, 1)
    spec = model_spec(cfg)
    net = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), seed=0)
    assert spec.tied == (tie == "true" or (tie == "auto" and arch == "gpt2"))
    assert spec.params == sum(p.numel() for p in net.parameters()) == sum(n for _, n in spec.param_shapes())


def test_dropout_off_drops_korthikanti_masks():
    """MPT's dropout is 0 (torch returns a p = 0 dropout's input, no mask): 34sbh -> 32sbh, the figure shardlab
    measured for its own block with dropout off (docs/memory.md); the papers' setting stays the default."""
    m, b = GPT3, 2
    s, h = m.seq, m.d_model
    sbh = s * b * h
    assert activation_bytes_per_layer(m, b, s, flash=True) == pytest.approx(34 * sbh)
    assert activation_bytes_per_layer(m, b, s, flash=True, dropout=False) == pytest.approx(32 * sbh)
    assert activation_bytes_per_layer(m, b, s, 4, flash=True, dropout=False) == pytest.approx(sbh * (8 + 24 / 4))
    assert activation_bytes_per_layer(m, b, s, 4, sp=True, flash=True, dropout=False) == pytest.approx(sbh * 8)
    assert activation_bytes_extra(m, b, s, dropout=False) == activation_bytes_extra(m, b, s) - sbh


def test_fused_loss_keeps_bf16_logits_and_gradient():
    from shardlab.plan.activations import logits_bytes
    m, b, s = GPT3, 2, 2048
    assert logits_bytes(m, b, s) == 12 * s * b * m.vocab
    assert logits_bytes(m, b, s, 4) == 8 * s * b * m.vocab / 4
    assert logits_bytes(m, b, s, 4, fused_loss=True) == 4 * s * b * m.vocab / 4


def test_full_recompute_holds_one_layer_again():
    from shardlab.plan.memory import memory_lines
    m = GPT3
    train = TrainSpec(global_batch=8, micro_batch=2, flash_attention=True)
    lines = {ln.name: ln.bytes for ln in memory_lines(m, train, Layout(dp=1, recompute="full"), 4)}
    assert lines["recompute working set"] == activation_bytes_per_layer(m, 2, m.seq, flash=True)
    assert "recompute working set" not in {ln.name for ln in memory_lines(m, train, Layout(dp=1), 4)}


def test_published_runs_fit_as_they_ran():
    """Every llm-foundry row ran, so its plan must fit; torchtitan's two published peaks within 10%."""
    from shardlab.plan.published_gpu import EXAMINED, GIVEN, HELD_OUT, HELD_OUT_2, predict
    for row in GIVEN + HELD_OUT + EXAMINED + HELD_OUT_2:
        got = predict(row)
        assert got["plan"].fits, row["case"]
        if row.get("mem_gib"):
            assert abs(got["mem_gib"] / row["mem_gib"] - 1) <= 0.10, row["case"]


def test_dtensor_loss_parallel_holds_four_fp32_tensors_per_logit():
    """torch's loss_parallel (torchtitan's loss under TP): its fused nll + log-softmax backward holds the saved
    fp32 log-softmax, a zeroed fp32 gradient, exp(x) and their sum: 16sbv/t, where shardlab's holds 8sbv/t; at
    t = 1 and with a fused loss the row input changes nothing."""
    from shardlab.plan.activations import logits_bytes
    from shardlab.plan.presets import PRESETS
    m = PRESETS["llama3-8b"]
    assert logits_bytes(m, 2, 8192, 8, dtensor_loss=True) == 2 * logits_bytes(m, 2, 8192, 8)
    assert logits_bytes(m, 2, 8192, 1, dtensor_loss=True) == logits_bytes(m, 2, 8192, 1)
    assert logits_bytes(m, 2, 8192, 8, fused_loss=True, dtensor_loss=True) == logits_bytes(m, 2, 8192, 8, True)


def test_kept_16bit_grads_are_a_line_of_2_bytes_per_parameter():
    """DeepSpeed's BF16_Optimizer under its PipelineEngine keeps param.grad beside the fp32 buffer
    (lp_grads_kept): one more 2 B x Psi line, unsharded; off by default, and nothing without fp32 grads."""
    from shardlab.plan.memory import memory_lines
    m = PRESETS["gpt2"]
    lay = Layout(dp=8, strategy="zero1", pp=2)
    base = TrainSpec(global_batch=64, micro_batch=2, fp32_grad_accum=True)
    kept = TrainSpec(global_batch=64, micro_batch=2, fp32_grad_accum=True, lp_grads_kept=True)
    a, b = ({ln.name: ln.bytes for ln in memory_lines(m, t, lay, 4)} for t in (base, kept))
    psi = sum(sum(u) for u in units(m, lay.tp, lay.pp, lay.v))  # autograd's own tensors: unpadded
    assert "16-bit grads kept" not in a and b["16-bit grads kept"] == 2 * psi <= a["grads"] / 2
    assert sum(b.values()) - sum(a.values()) == b["16-bit grads kept"]
    no_fp32 = TrainSpec(global_batch=64, micro_batch=2, lp_grads_kept=True)  # 16-bit grads are the grads
    assert "16-bit grads kept" not in {ln.name for ln in memory_lines(m, no_fp32, lay, 4)}


def test_what_the_figure_measures_adds_only_the_cuda_context_for_nvidia_smi():
    from shardlab.plan.memory import memory_lines
    m, lay = PRESETS["gpt2"], Layout(dp=2)
    plain = memory_lines(m, TrainSpec(global_batch=8), lay, 4)
    reserved = memory_lines(m, TrainSpec(global_batch=8, mem_measure="reserved"), lay, 4)
    device = memory_lines(m, TrainSpec(global_batch=8, mem_measure="device", cuda_context_mib=1573), lay, 4)
    assert plain == reserved
    assert device[:-1] == plain and device[-1].name == "CUDA context" and device[-1].bytes == 1573 * 2**20
    with pytest.raises(ValueError):
        TrainSpec(global_batch=8, mem_measure="smi").check()


def test_buckets_reduced_after_the_backward_count_above_the_activations_only():
    from dataclasses import replace

    from shardlab.plan.memory import memory_lines
    m, t = PRESETS["gpt2"], TrainSpec(global_batch=64, micro_batch=8)
    lay = Layout(dp=8, strategy="zero1")
    over = {ln.name: ln.bytes for ln in memory_lines(m, t, lay, 1)}
    after = {ln.name: ln.bytes for ln in memory_lines(m, t, replace(lay, overlap_grad_reduce=False), 1)}
    assert over["comm buffers"] > 0 and after["comm buffers"] == max(0.0, over["comm buffers"] - over["activations"])
    assert {k: v for k, v in after.items() if k != "comm buffers"} == {k: v for k, v in over.items()
                                                                        if k != "comm buffers"}


def test_embedding_norm_keeps_its_input_and_statistics_per_micro_batch_in_flight():
    from shardlab.plan.memory import memory_lines
    m, lay = PRESETS["gpt2"], Layout(dp=1, pp=4, tp=2)
    t = TrainSpec(global_batch=32, micro_batch=2, embed_norm=True)
    got = {ln.name: ln.bytes for ln in memory_lines(m, t, lay, 16)}
    s, b, h = m.seq, 2, m.d_model
    assert got["embedding norm"] == (2 * s * b * h + 8 * s * b) * in_flight(lay, 16) == (2 * s * b * h + 8 * s * b) * 4
    assert "embedding norm" not in {ln.name for ln in memory_lines(m, TrainSpec(global_batch=32, micro_batch=2), lay, 16)}


def test_memory_of_the_first_rank_under_the_ends_as_blocks_split():
    """pp_split=ends-as-blocks (DeepSpeed's type:transformer|embedding): the first rank holds the embedding and
    one block fewer than a middle stage, and its memory counts those blocks (states and activations)."""
    from dataclasses import replace

    from shardlab.plan.layout import ends_as_blocks
    from shardlab.plan.memory import memory_lines
    m = ModelSpec("bloomish", n_layer=10, d_model=256, n_head=4, vocab=4096, seq=128)
    lay = Layout(dp=1, pp=4)
    t = TrainSpec(global_batch=16, micro_batch=1)
    cost, ends = ({ln.name: ln.bytes for ln in memory_lines(m, t, x, 16)}
                  for x in (lay, replace(lay, pp_split="ends-as-blocks")))
    blocks = ends_as_blocks(10, 4)[0][0]
    assert blocks == 2  # 12 weighted layers over 4 stages: the embedding and 2 blocks
    us = units(m, 1, 4, 1)
    assert ends["params"] == 2 * sum(sum(u) for u in us[:1 + blocks]) < cost["params"]
    assert ends["activations"] < cost["activations"]


def test_a_transient_larger_than_any_activation_takes_a_segment_of_its_own():
    """DeepSpeed's all-reduce of BF16_Optimizer's flat fp32 gradient casts it whole to the wire dtype
    (flat_grad_cast): 2 B x Psi in bf16, none when the wire dtype is the buffer's. Reduced after the backward it
    counts above the activations only in the allocated peak, and in full where the figure counts the caching
    allocator's segments (reserved, nvidia-smi), since no freed activation block is that large."""
    from dataclasses import replace

    from shardlab.plan.memory import first_rank_numels, largest_activation, memory_lines
    m = PRESETS["gpt2"]
    lay = Layout(dp=8, strategy="zero1", pp=2, overlap_grad_reduce=False, comm_dtype="bf16")
    t = TrainSpec(global_batch=64, micro_batch=2, fp32_grad_accum=True, flat_grad_cast=True)
    psi = sum(first_rank_numels(m, lay))

    def lines(train, layout=lay):
        return {ln.name: ln.bytes for ln in memory_lines(m, train, layout, 8)}
    alloc, seg = lines(t), lines(replace(t, mem_measure="reserved"))
    assert 2 * psi > largest_activation(m, t, lay)
    held = sum(v for k, v in alloc.items() if k in ("activations", "pipeline in-flight"))
    assert alloc["comm buffers"] == max(0.0, 2 * psi - held) < seg["comm buffers"] == 2 * psi
    assert lines(t, replace(lay, comm_dtype="fp32"))["comm buffers"] == 0  # the same dtype: no copy


def test_the_fp32_cast_of_the_largest_16bit_gradient():
    """BF16_Optimizer.update_hp_grads casts each 16-bit gradient to fp32 before the add (hp_grad_cast): 4 B x
    the stage's largest parameter, above what the finished micro batch freed (allocated), in full where the
    figure counts segments and it is larger than any activation tensor."""
    from dataclasses import replace

    from shardlab.plan.memory import first_rank_numels, largest_activation, memory_lines
    m = PRESETS["gpt2"]
    lay = Layout(dp=8, strategy="zero1", pp=2, recompute="full")
    t = TrainSpec(global_batch=64, micro_batch=1, fp32_grad_accum=True, hp_grad_cast=True)
    big = 4 * max(first_rank_numels(m, lay))
    assert big == 4 * m.vocab * m.d_model > largest_activation(m, t, lay)  # the word embedding on the first stage
    seg = {ln.name: ln.bytes for ln in memory_lines(m, replace(t, mem_measure="device", cuda_context_mib=1), lay, 8)}
    alloc = {ln.name: ln.bytes for ln in memory_lines(m, t, lay, 8)}
    assert seg["16-bit grad's fp32 cast"] == big > alloc["16-bit grad's fp32 cast"] >= 0
    off = {ln.name for ln in memory_lines(m, replace(t, hp_grad_cast=False), lay, 8)}
    assert "16-bit grad's fp32 cast" not in off


def test_transformer_engine_llama_block_keeps_less():
    """llama_impl=te: what TE's modules save (the norms' input and 1/rms, the GEMMs' inputs, FP8 ones at 1 B, q/k/v/o
    and the log-sum-exp, SwiGLU's gate and up), counted by hand for Llama 3 70B at TP 4 with SP, 8,192 tokens; the
    plan's in-flight activations follow it, and the time moves only by the weights' float8 casts, which TE makes once
    a step (test_fp8_plan.py)."""
    from shardlab.plan.hardware import load_cluster
    from shardlab.plan.activations import te_llama_activation_bytes_per_layer, llama_activation_bytes_per_layer
    from shardlab.plan.step import evaluate
    m = PRESETS["llama3-70b"]
    h, g, f, a, t = 8192, 1024, 28672, 64, 4
    bf16 = 2 * (2 * h + 4) / t + 2 * 2 * h / t + 2 * f / t + (2 * (h + 2 * g) + 2 * h + 4 * a) / t + 4 * f / t
    fp8 = 2 * (2 * h + 4) / t + 2 * h / t + h / t + f / t + (2 * (h + 2 * g) + 2 * h + 4 * a) / t + 4 * f / t
    assert te_llama_activation_bytes_per_layer(m, 1, 8192, t, True) == pytest.approx(8192 * bf16)
    assert te_llama_activation_bytes_per_layer(m, 1, 8192, t, True, fp8=True) == pytest.approx(8192 * fp8)
    assert fp8 < bf16 < llama_activation_bytes_per_layer(m, 1, 8192, t, True, "none", True) / 8192
    lay = Layout(dp=2, tp=4, sp=True, pp=8, v=5, schedule="interleaved", strategy="zero1")
    c = load_cluster("H100-SXM", 64)
    own, te = (evaluate(m, TrainSpec(128, 1, 8192, precision="bf16-mixed", flash_attention=True, fp8="tensorwise",
                                     llama_impl=impl), lay, c) for impl in ("own", "te"))
    assert te.mem_total < own.mem_total and te.step_time < own.step_time
    # without float8 TE's layers do the own block's device work; they launch their own count of kernels (plan/host.py)
    from dataclasses import replace
    quiet = replace(c, kernel_gap_s=0.0, host_kernel_s=0.0)
    bf16 = [evaluate(m, TrainSpec(128, 1, 8192, precision="bf16-mixed", flash_attention=True, llama_impl=impl), lay,
                     quiet) for impl in ("own", "te")]
    assert bf16[0].step_time == bf16[1].step_time


def test_qwen3s_q_and_k_norms_keep_their_inputs_and_pass_over_q_and_k():
    """qk_norm (Qwen3's qk_layernorm): Megatron-Core's TENorm on each head of q and k saves its input (the reshaped
    q, k's contiguous copy) and an fp32 1/rms per head, (2(a d + g) + 4(a + kv heads)) / t bytes a token, kept
    under core_attn's recompute (outside the core); its forward reads and writes q and k once, k copied first.
    Counted by hand for Qwen3-30B-A3B's attention (32 heads of 128 over h 2,048, 4 k/v heads) at TP 2."""
    from dataclasses import replace
    from shardlab.plan.activations import te_llama_activation_bytes_per_layer as te
    from shardlab.plan.ops import llama_layer_ops
    m = ModelSpec("qwen3-attn", n_layer=2, d_model=2048, n_head=32, vocab=1024, seq=4096, arch="llama", n_kv_heads=4,
                  head_dim=128, ffn=6144)
    qk, t, s = replace(m, qk_norm=True), 2, 4096
    per_token = (2 * (32 * 128 + 4 * 128) + 4 * (32 + 4)) / t
    for mods in (frozenset(), frozenset({"core_attn"})):
        assert te(qk, 1, s, t, True, modules=mods) - te(m, 1, s, t, True, modules=mods) == pytest.approx(s * per_token)
    (op,) = [o for o in llama_layer_ops(qk, 1, s, t, 2, True) if o.name == "qk_norm"]
    assert op.bytes == 2 * (s * 32 * 128 * 2 / t + s * 2 * 128 * 2) + 2 * s * 2 * 128 * 2
    assert not [o for o in llama_layer_ops(m, 1, s, t, 2, True) if o.name == "qk_norm"]
