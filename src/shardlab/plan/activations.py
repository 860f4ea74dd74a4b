"""Activation memory: what a block keeps for its backward per micro batch (Korthikanti et al. 2022's accounting,
shardlab's own blocks as measured, Transformer Engine's as its modules save them) and what the embedding, head and
loss keep beside it. Notation as plan/model.py's (Korthikanti et al.): a heads, b micro batch, h hidden, s sequence,
t tensor-parallel degree, v vocabulary.
"""
from __future__ import annotations

from .model import ModelSpec


def activation_bytes_per_layer(m: ModelSpec, b: int, s: int, t: int = 1, sp: bool = False,
                               recompute: str = "none", flash: bool = False, dropout: bool = True,
                               impl: str = "own", fp8: bool = False, modules: frozenset = frozenset(),
                               moe_share: float | None = None) -> float:
    """Korthikanti et al. 2022, Table 2: activation bytes of one transformer layer for one micro
    batch with 16-bit activations and 1-byte dropout masks.

      no parallelism            sbh(34 + 5as/h)
      tensor parallel           sbh(10 + 24/t + 5as/(ht))
      tensor + sequence par.    sbh(34/t + 5as/(ht))
      selective-attn            drops the 5as/h term (Megatron's selective: attention core recomputed)
      full recompute            sbh*2 (only the layer input; /t with sequence parallelism)
    `flash=True`: a fused attention kernel never stores the s x s scores, like selective-attn.
    `dropout=False` (a run whose dropout probabilities are 0, as MPT's defaults: torch returns the input of a
    p = 0 dropout, no mask): the paper's two 1-byte sbh masks go (34 -> 32, 10 -> 8 under TP without SP, where
    they are replicated), and its attention core keeps the softmax output alone (5as/h -> 2as/h). 32sbh is
    what shardlab measured for its own block with dropout off (docs/memory.md: 64sbh + 4asb + 16sb at fp32).

    `selective` is shardlab's policy (parallel/recompute.py), as measured (docs/memory.md): it keeps the
    outputs of the matmuls and of attention and recomputes LayerNorm, GELU, dropout and the residual adds:
      sbh(2/t_sp + 16/t + 4) + 4asb/t   (16-bit values; the attention log-sum-exp is fp32)
    the layer input (÷t with sequence parallelism), q, k, v, attention output and the 4h MLP matmul output
    (head/column-split: ÷t), both row-parallel matmul outputs (a partial sum of full size before its
    reduction), plus the s x s scores (as²b) where attention is not fused.
    """
    if m.mixed_blocks:  # dense and MoE blocks: each kind weighted by its share of the blocks (`moe_share`: of the
        # blocks a rank holds, where a pipeline layout says which: memory.stored_per_layer; 1.0 an MoE block's)
        w = m.moe_blocks / m.n_layer if moe_share is None else moe_share
        return sum(share * activation_bytes_per_layer(m.uniform(moe), b, s, t, sp, recompute, flash, dropout, impl, fp8,
                                                      modules) for moe, share in ((True, w), (False, 1 - w)) if share)
    h, a = m.d_model, m.n_head
    sbh = s * b * h
    if te_counted(m, impl, recompute, flash):
        return te_llama_activation_bytes_per_layer(m, b, s, t, sp, fp8, modules)
    if modules:
        raise ValueError("recompute_modules (Megatron-Core's selective recompute) is counted for Transformer Engine's "
                         "llama blocks with fused attention and recompute=none: set llama_impl=te, or use recompute=")
    if m.llama and recompute != "full":
        return llama_activation_bytes_per_layer(m, b, s, t, sp, recompute, flash)
    if recompute == "full":
        return sbh * 2 / (t if sp else 1)
    if recompute in ("selective", "selective-op"):
        scores = 0.0 if flash else 2 * a * s * s * b / t
        return sbh * (2 / (t if sp else 1) + 16 / t + 4) + 4 * a * s * b / t + scores
    attn_core = 0.0 if (recompute == "selective-attn" or flash) else (5 if dropout else 2) * a * s / h
    masks = 0 if dropout else 2  # the attention output's and the MLP output's dropout masks, sbh each
    if sp:
        return sbh * ((34 - masks) / t + attn_core / t)
    return sbh * (10 - masks + 24 / t + attn_core / t)


def te_counted(m: ModelSpec, impl: str, recompute: str, flash: bool) -> bool:
    """Whether a block's activations are Transformer Engine's saved tensors (`te_llama_activation_bytes_per_layer`):
    a llama block of TE's modules with fused attention, recompute by module only (Layout.recompute_modules)."""
    return m.llama and impl == "te" and recompute == "none" and flash


def te_llama_activation_bytes_per_layer(m: ModelSpec, b: int, s: int, t: int = 1, sp: bool = False,
                                        fp8: bool = False, modules: frozenset = frozenset()) -> float:
    """What a Llama block built of Transformer Engine's modules keeps for backward (Megatron-Core's TE layer spec:
    TELayerNormColumnParallelLinear for q/k/v and fc1, TE's fused attention, TERowParallelLinear for proj and fc2,
    Megatron's fused SwiGLU), no recompute, 16-bit activations. TE's LayerNormLinear saves the norm's input, its
    fp32 1/rms and the GEMM's input, which under FP8 is the quantized one, 1 B an element, and under sequence
    parallelism the local shard, gathered again in the backward (transformer_engine/pytorch/module/
    layernorm_linear.py, `tensors_to_save_from_forward`; Linear likewise its input). Per token, ts = t with
    sequence parallelism, else 1, q = 1 under FP8, else 2:
      the two norms          2 x (2h/ts + 4/ts)              input and 1/rms (no normalised copy, no output)
      their GEMMs' inputs    2 x q h/ts                       q/k/v's and fc1's
      attention              2(h + 2g)/t + 2h/t + 4a/t        q, k, v, the output, the fp32 log-sum-exp
      proj's input           h/t under FP8                    (16-bit: the attention output itself)
      SwiGLU                 2 x 2f/t                         gate and up (fused: no silu or product kept)
      fc2's input            q f/t
      q/k norms (`qk_norm`)  2(a d + g)/t + 4(a + kv heads)/t   their inputs (the reshaped q, k's contiguous copy)
                                                         and fp32 1/rms per head (Megatron-Core's TENorm on each
                                                         head, attention.py get_query_key_value_tensors)
    shardlab's own block keeps more (`llama_activation_bytes_per_layer`: each norm's normalised input and output,
    silu(gate) and the product apart).
    An MoE block (`moe_experts`; Megatron-Core's MoELayer, grouped GEMMs, experts never TP-split) keeps per token
    of this rank (ts: its sequence-parallel share) the router's input 2h and, per routed copy (k of them), the
    permuted input q h (the grouped fc1's), gate and up 4f, fc2's input q f and the copy's fp32 probability, 4 B:
    the probabilities weigh the activation's output inside the fused SwiGLU (Megatron-Core's TEGroupedMLP,
    `weighted_bias_swiglu_impl(fc1_output, bias, permuted_probs)`, which saves its input and the probabilities),
    and the un-permutation only sums, so no expert output is kept for the probabilities' gradient. The copies are
    the busiest expert-parallel rank's: moe_load x k of them (ModelSpec.expert_view).

    `modules`: Megatron-Core's selective recompute (recompute_granularity "selective", recompute_modules), what
    each module's checkpoint frees (transformer_config.py's list):
      core_attn    the attention's fp32 log-sum-exp and, under FP8, proj's quantized input (the checkpoint keeps
                   q, k, v; the output, proj's input in 16 bits, is kept by proj)
      mla_up_proj  q, k and v (multi_latent_attention.py: `qkv_up_checkpoint.discard_output_and_register_recompute`
                   after the core attention; the latents, the up-projections' inputs, stay)
      moe_act      fc2's input per routed copy (experts.py: the activation's output discarded after fc2, and under
                   FP8 `set_save_original_input(linear_fc2)` so fc2 keeps that 16-bit output, not a quantized copy;
                   fc1's output, the checkpoint's input, stays)
      mlp          a dense block's MLP but its input (transformer_layer.py: dense blocks only; the pre-MLP norm is
                   fc1's, TELayerNormColumnParallelLinear): its norm's 1/rms, fc1's input, gate and up, fc2's input"""
    h, a, g, f, qw = m.d_model, m.n_head, m.kv_width, m.ffn, m.q_width
    ts = t if sp else 1
    q = 1 if fp8 else 2
    norms = 2 * (2 * h + 4) / ts
    qkv = 2 * (qw + 2 * g) / t  # q, k and v as the attention saves them
    latents = 0.0
    if m.mla:  # latent attention: q and k (d + rope) and v (v wide) per head; the latents' norms (input and
        # 1/rms) and the up-projections' inputs on the sequence-parallel share
        ql, kl = m.mla_q_rank, m.mla_kv_rank
        qkv = 2 * (2 * a * m.qk_dim + a * m.v_dim) / t
        latents = ((2 * ql + 4 + q * ql if ql else 0) + 2 * kl + 4 + q * kl) / ts
        qw = a * m.v_dim  # proj's input
    proj_in = qw / t if fp8 and "core_attn" not in modules else 0  # its quantized copy
    attn = (0 if "mla_up_proj" in modules else qkv) + 2 * qw / t + (0 if "core_attn" in modules else 4 * a / t) \
        + latents  # the output (proj's 16-bit input) and the fp32 log-sum-exp
    if m.qk_norm and not m.mla:  # Qwen3's q and k RMSNorms (TENorm) save their inputs and fp32 1/rms per head
        attn += (2 * (qw + g) + 4 * (a + m.n_kv_heads)) / t
    if m.moe_experts:
        k, f, sf = m.moe_top_k, m.expert_ffn, m.moe_shared_ffn
        fc2_in = 0 if "moe_act" in modules else q * f
        mlp = (2 * h + k * m.moe_load * (q * h + 4 * f + fc2_in + 4)) / ts  # the busiest rank's copies
        shared = (4 * sf + q * sf) / t if sf else 0  # the shared expert's gate, up and fc2 input (its input: the router's)
        return s * b * (norms + q * h / ts + proj_in + attn + mlp + shared)
    if "mlp" in modules:  # the MLP keeps its input, the pre-MLP norm's (counted in `norms`), and no more
        return s * b * (norms - 4 / ts + q * h / ts + proj_in + attn)
    inputs = 2 * q * h / ts + proj_in + q * f / t
    return s * b * (norms + inputs + attn + 4 * f / t)


def llama_activation_bytes_per_layer(m: ModelSpec, b: int, s: int, t: int = 1, sp: bool = False,
                                     recompute: str = "none", flash: bool = False) -> float:
    """What one llama block (model/llama.py) keeps for backward, 16-bit (2 bytes an element; no dropout,
    so fp32 is exactly twice this). h = d_model, g = key/value width, f = SwiGLU width, a = heads,
    d = h/a. At t = 1 these are autograd's saved tensors, counted exactly (tests/model/test_llama.py):

      none       2sb(8h + 2g + 4f + 2) + 2abs + 4sd
                 8h: each RMSNorm's input, normalised input and output (x2), q (rotated), the attention
                 output; 2g: k (rotated) and v at their own width (GQA: the fused kernel reads them per
                 group, never repeated); 4f: gate, up, silu(gate), their product; 2: the RMSNorms' 1/rms;
                 abs: the attention's log-sum-exp; 2sd: the rotary cos and sin tables.
      selective  2sb(5h + 2g + 2f) + 2abs   (shardlab's policy: input, q, k, v, attention output and
                 log-sum-exp, proj, gate, up, down outputs; the rest is recomputed)
      full       2sbh                       (the block input)

    Without fused attention (`flash=False`) the s x s softmax output (2as^2b) is kept instead of the
    log-sum-exp. Under tensor parallelism the head- and width-split tensors divide by t; the RMSNorm
    tensors and the rotary tables are replicated (split by t too with sequence parallelism, as Megatron
    keeps them: Korthikanti et al.'s accounting, not measured here). An MoE block keeps its MLP's tensors once
    per routed copy of a token (f -> k f, the busiest expert-parallel rank's moe_load x k f; the permutation's
    copies not counted)."""
    h, a, g = m.d_model, m.n_head, m.kv_width
    f = m.expert_ffn * m.moe_top_k * m.moe_load + m.moe_shared_ffn if m.moe_experts else m.ffn
    d = m.d_head
    core = a * s if flash else a * s * s  # per sequence position: log-sum-exp, or the softmax rows
    if recompute == "selective":
        rep = 3 * h / (t if sp else 1) + (2 * h + 2 * g + 2 * f) / t
        return 2 * s * b * rep + 2 * a * s * b / t
    if recompute == "selective-op":  # torchtitan: the block input, q, v, gate and down (the odd matmuls of
        # q k v proj gate up down), the attention output and its fp32 log-sum-exp
        return 2 * s * b * (h / (t if sp else 1) + (2 * h + g + f) / t + h / (t if sp else 1)) + 4 * a * s * b / t
    rep = (6 * h + 2) / (t if sp else 1)  # the RMSNorms' tensors: replicated across TP
    split = (2 * h + 2 * g + 4 * f) / t
    return 2 * s * b * (rep + split) + 2 * core * b / t + 4 * s * d / (t if sp else 1)


def logits_bytes(m: ModelSpec, b: int, s: int, t: int = 1, fused_loss: bool = False,
                 dtensor_loss: bool = False) -> float:
    """The loss's tensors of tokens x vocabulary at its backward (the step's peak, every layer's activations
    still held), 16-bit activations:
      F.cross_entropy on fp32 logits (t = 1)   12sbv: its saved log-softmax output, the gradient coming into it
                                                and the gradient it makes, fp32 each
      vocab-parallel loss (t > 1)              8sbv/t: its saved softmax and the gradient cloned from it
      fused cross-entropy (`fused_loss`)        4sbv/t: the 16-bit logits it saves and the 16-bit gradient it
                                                writes (flash-attn's xentropy kernel, llm-foundry's default
                                                `loss_fn: fused_crossentropy`: it reads bf16 logits, computes
                                                in fp32 registers and keeps one fp32 log-sum-exp per token)
      torch's loss_parallel (`dtensor_loss`,   16sbv/t: its fused nll + log-softmax backward (torch/distributed/
      t > 1; torchtitan's TP loss)              tensor/parallel/loss.py) holds the saved fp32 log-softmax output,
                                                a zeroed fp32 gradient it scatters -1 into, exp(x) and their sum
                                                (then the product in place of exp(x)): four fp32 tensors"""
    if fused_loss:
        return 4 * s * b * m.vocab / t
    if dtensor_loss and t > 1:
        return 16 * s * b * m.vocab / t
    return (12 if t == 1 else 8) * s * b * m.vocab / t


def activation_bytes_extra(m: ModelSpec, b: int, s: int, t: int = 1, sp: bool = False,
                           p: int = 1, in_flight: float = 1.0, dropout: bool = True,
                           fused_loss: bool = False, dtensor_loss: bool = False) -> float:
    """Korthikanti et al. 2022 Sec. 4.3, outside the layers (first pipeline stage): the embedding
    dropout mask sbh per micro batch in flight; with p == 1 the same rank also holds the final
    LayerNorm and output projection inputs, 4sbh, and the loss's logits. The paper writes 4sbh(1 + v/h)/t
    for its setting, sequence parallelism; the two parts split differently without it: the hidden-size
    tensors are replicated across the tensor-parallel ranks (÷t only with SP), while the logits are
    always this rank's vocabulary slice (the vocab-parallel loss, parallel/tp/loss.py), so ÷t at any t.

    The logits term is the loss's peak as shardlab computes it, not the paper's 4sbv (the fp32 logits
    alone): the peak of a step comes at the loss's backward, when every layer's activations are still
    held, and there the loss holds fp32 tensors of tokens x vocabulary: F.cross_entropy (t = 1) its saved
    log-softmax output, the gradient coming into it and the gradient it makes, 12sbv; the vocab-parallel
    loss its saved softmax and the gradient cloned from it, 8sbv/t. (On an H200 the 4sbv of the paper
    left gpt2 at micro batch 32 under-predicted by 12 GiB, 41%: docs/cuda.md.) A fused cross-entropy kernel
    keeps 4sbv/t (`logits_bytes`); `dropout=False` drops the embedding's mask."""
    sbh = s * b * m.d_model
    rep = 0.0 if (m.llama or not dropout) else sbh * in_flight  # llama: no embedding dropout
    logits = 0.0
    if p == 1:
        rep += 4 * sbh
        logits = logits_bytes(m, b, s, t, fused_loss, dtensor_loss)
    return rep / (t if sp else 1) + logits
