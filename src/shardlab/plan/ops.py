"""The op list of one micro batch, as the planner times it (compute.py): each transformer block's GEMMs and
elementwise ops with their FLOPs, bytes and shapes, and the embedding's and head's. GPT-2 blocks mirror
shardlab.model.gpt (SDPA attention, GELU-tanh MLP, tied head), llama blocks shardlab.model.llama (RMSNorm,
rope, SwiGLU, grouped-query attention); `t` splits the block as Megatron's tensor parallelism does.
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import ModelSpec


@dataclass(frozen=True)
class Op:
    name: str
    kind: str  # gemm | elem
    flops: float = 0.0
    bytes: float = 0.0  # elementwise: bytes the forward moves
    shape: tuple = ()  # (m, n, k) per GEMM
    count: int = 1  # batched GEMMs (attention heads)
    ew: str = ""  # elementwise family, calibrated separately: ln gelu add copy sum ce softmax
    bias: bool = False  # a Linear with bias: the forward is addmm (bias broadcast + GEMM)
    bwd_bytes: float | None = None  # bytes the backward moves (None: 2 x forward)
    window: tuple = ()  # fused attention: (keys, head dim, share of its FLOPs in sliding-window blocks)


# the block's GEMMs by tensor-parallel region (attention, MLP), as layer_ops names them: the column-parallel ones
# entering each region and the row-parallel one leaving it (Megatron's split; async TP backward and DTensor's
# copies are placed by these)
COLUMN_PARALLEL = (("q", "k", "v", "q_up", "kv_up"), ("fc", "gate", "up"))  # q_up, kv_up: latent attention's
ROW_PARALLEL = ("proj", "mlp_proj", "down")
ROW_REGIONS = (("proj",), ("mlp_proj", "down"))  # the row-parallel linear of each region, attention then MLP


# dispatched aten ops (views included) per block and outside the blocks, forward and backward, in
# shardlab.model.gpt under eager autograd (counted once with a dispatch mode); used when a profile
# gives a per-op cost but no measured framework overhead
DEFAULT_OP_COUNTS = {"layer_fwd": 36, "layer_bwd": 60, "fixed_fwd": 20, "fixed_bwd": 30}


# a dropout kernel (torch's native_dropout) per element: forward reads x and writes the output and a 1-byte mask,
# backward reads the gradient and the mask and writes the input's gradient: 2e + 1 bytes each way
def _dropout_bytes(elements: float, e: int) -> float:
    return (2 * e + 1) * elements


def layer_ops(model: ModelSpec, b: int, s: int, t: int, e: int, flash: bool, eager_norm: bool = False,
              sp: bool = False, dropout: bool = False, impl: str = "own") -> list[Op]:
    """One transformer block forward, tensor-parallel degree t, activation element size e. `dropout`: the
    block's dropout kernels as a run with dropout > 0 executes them (GPU presets; Megatron's GPT: dropout on the
    attention probabilities of the unfused core, a separate kernel over the b*a*s*s scores, and the 1-byte masks
    of the two fused bias-dropout-adds; a fused attention kernel drops inside itself). `impl`: whose llama
    module's eager kernels (`titan_attention_kernels`)."""
    if model.llama:
        return llama_layer_ops(model, b, s, t, e, flash, eager_norm, sp, impl)
    h, r, a = model.d_model, model.mlp_ratio, model.n_head
    T, dh, ah = b * s, h // a, a // t
    att = [Op("attention", "gemm", 4 * T * s * h / t, shape=(s, s, dh), count=b * ah)]
    if not flash:
        drop = _dropout_bytes(b * ah * s * s, e)
        att = [Op("scores", "gemm", 2 * T * s * h / t, shape=(s, s, dh), count=b * ah),
               Op("softmax", "elem", bytes=2 * b * ah * s * s * e, ew="softmax"),
               *([Op("attn_dropout", "elem", bytes=drop, ew="softmax", bwd_bytes=drop)] if dropout else []),
               Op("attn_v", "gemm", 2 * T * s * h / t, shape=(s, dh, s), count=b * ah)]
    th = T * h * e / t
    # sequence parallelism: the norms, residual adds and their dropout masks run on this rank's s/t tokens
    # (Korthikanti et al. 2022, Sec. 4.2.2; shardlab's own SP, docs/tp.md: (b, s/N, h))
    Ts = T // (t if sp else 1)
    res = (3 * e + (1 if dropout else 0)) * Ts * h  # bias-dropout-add: + the mask written, read back
    return [
        Op("ln_1", "elem", bytes=2 * Ts * h * e, ew="ln"),
        *(Op(z, "gemm", bias=True, flops=2 * T * h * h / t, shape=(T, h // t, h)) for z in "qkv"),
        # backward: each of the q, k, v gradients copied back from the heads layout (separate
        # projections: no concatenation of the three, as the fused qkv had)
        Op("split_heads", "elem", bytes=2 * th, ew="copy", count=3, bwd_bytes=2 * th),
        *att,
        Op("merge_heads", "elem", bytes=2 * th, ew="copy"),
        Op("proj", "gemm", bias=True, flops=2 * T * h * h / t, shape=(T, h, h // t)),
        Op("residual", "elem", bytes=res, ew="add", bwd_bytes=res),
        Op("ln_2", "elem", bytes=2 * Ts * h * e, ew="ln"),
        *(moe_ops(model, Ts, e) if model.moe_experts else [
            Op("fc", "gemm", bias=True, flops=2 * T * r * h * h / t, shape=(T, r * h // t, h)),
            Op("gelu", "elem", bytes=2 * r * th, ew="gelu"),
            Op("mlp_proj", "gemm", bias=True, flops=2 * T * r * h * h / t, shape=(T, h, r * h // t))]),
        Op("residual", "elem", bytes=res, ew="add", bwd_bytes=res),
        Op("bias_grads", "elem", bytes=0, ew="sum", bwd_bytes=(3 + 1 + r) * th + T * h * e),
    ]


# Meta's reference RMSNorm in eager kernels, per element of the b*s*h input (bf16 in and out, fp32 inside):
# forward x.float() 2+4, pow 4+4, mean 4, x * rsqrt 4+4, type_as 4+2, * weight 2+2 = 36 B (a fused norm: 4);
# backward (autograd of each): the weight's product and sum 8, dy * weight 4, type_as 6, the mul's two
# gradients 8 + 16, mean and pow 4 + 12, the two x gradients added 12, float() 6 = 76 B
EAGER_NORM_BYTES = (36, 76)


def _rms_norm(name: str, T: int, h: int, e: int, eager: bool) -> Op:
    if not eager:
        return Op(name, "elem", bytes=2 * T * h * e, ew="ln")
    fwd, bwd = EAGER_NORM_BYTES
    return Op(name, "elem", bytes=fwd * T * h, ew="ln", bwd_bytes=bwd * T * h)


# torchtitan's llama attention in eager kernels (torchtitan/models/llama/model.py at 395a52627, the same at 9dec370):
# apply_rotary_emb rotates q and k as complex numbers in fp32: xq.float() (e + 4 B per element), the complex product
# with freqs_cis (4 + 4: read and write the fp32 pairs; freqs_cis is s x d/2, read from cache), type_as back (4 + e);
# autograd runs the same three backward (to fp32, the product with the conjugate, to the 16-bit dtype). fp32 training:
# the two casts are no-ops (x.float() returns x), only the product's 8 B.
def titan_rope_bytes(e: int) -> float:
    return 8 if e == 4 else 2 * e + 16


def titan_attention_kernels(T: int, h: int, gt: int, t: int, e: int, flash: bool) -> list[Op]:
    """The kernels torchtitan's llama attention runs around SDPA where shardlab's llama runs others (`impl`
    "torchtitan", a row input; eager only, plan/compute.py): rope in complex fp32 (`titan_rope_bytes` per element of
    q and k, each way); repeat_kv's `expand(...).reshape(...)` of k and v to every local query head, a copy reading
    the g/t-wide tensor and writing the h/t-wide one, whose backward (expand's) sums the n_rep copies back (as many
    bytes); no head-merge copy: SDPA's flash output is laid out (b, s, heads, d) and its transpose(1, 2) back
    is contiguous already, so `.contiguous()` copies nothing (torch `_scaled_dot_product_flash_attention`)."""
    q, kv = T * h / t, T * gt  # elements of this rank's q and of one of k, v
    rep = 2 * (kv + q) * e if flash and kv < q else 0.0  # k and v widened to the local query heads
    return [Op("rope", "elem", bytes=titan_rope_bytes(e) * (q + kv), ew="copy",
               bwd_bytes=titan_rope_bytes(e) * (q + kv)),
            *([Op("repeat_kv", "elem", bytes=rep, ew="copy", bwd_bytes=rep)] if rep else [])]


def _window(model: ModelSpec, s: int) -> tuple:
    """The attention op's sliding-window part: (keys, head dim, share of the op's FLOPs that the windowed blocks
    run), timed apart (attention.kernel_time); () without a window."""
    if not model.window or model.window >= s:
        return ()
    full = model.n_layer // model.window_skip if model.window_skip else 0
    return model.window, model.d_head, 1 - full / model.n_layer / model.attention_share(s)


def llama_layer_ops(model: ModelSpec, b: int, s: int, t: int, e: int, flash: bool, eager_norm: bool = False,
                    sp: bool = False, impl: str = "own") -> list[Op]:
    """One llama block forward (model/llama.py): RMSNorm, q/k/v without biases (k, v of width g),
    rotary positions on q and k, grouped-query attention (each key/value head read by its group),
    SwiGLU (gate, up, silu x up, down). `impl` "torchtitan": torchtitan's attention kernels in place of
    shardlab's rope and head-merge copy (`titan_attention_kernels`). `qk_norm` (Qwen3): an RMSNorm on each head of
    q and k, read and written once each, k first copied contiguous (Megatron-Core's attention.py)."""
    h, a, g, f, qw = model.d_model, model.n_head, model.kv_width, model.ffn, model.q_width
    T, dh, ah = b * s, model.d_head, a // t
    gt = g // t if model.n_kv_heads >= t else dh  # replicated key/value heads: one head per rank
    band = model.attention_share(s)  # sliding-window blocks: the fused kernel's work within the band
    att = [Op("attention", "gemm", 4 * T * s * qw / t * band, shape=(s, s, dh), count=b * ah, window=_window(model, s))]
    if not flash:
        att = [Op("scores", "gemm", 2 * T * s * qw / t, shape=(s, s, dh), count=b * ah),
               Op("softmax", "elem", bytes=2 * b * ah * s * s * e, ew="softmax"),
               Op("attn_v", "gemm", 2 * T * s * qw / t, shape=(s, dh, s), count=b * ah)]
    th = T * qw * e / t
    Ts = T // (t if sp else 1)  # sequence parallel: the norms and residual adds on this rank's s/t tokens
    # rotary: q and k read, rotated half built, two products and a sum written; the heads merged by a copy
    own = [Op("rope", "elem", bytes=6 * (th + T * gt * e), ew="copy"), Op("merge_heads", "elem", bytes=2 * th, ew="copy")]
    rope, merge = (titan_attention_kernels(T, qw, gt, t, e, flash), []) if impl == "torchtitan" else (own[:1], own[1:])
    attention = mla_ops(model, b, s, t, e, sp) if model.mla else [
        Op("q", "gemm", flops=2 * T * qw * h / t, shape=(T, qw // t, h)),
        *(Op(z, "gemm", flops=2 * T * gt * h, shape=(T, gt, h)) for z in "kv"),
        *([Op("qk_norm", "elem", bytes=2 * (th + T * gt * e) + 2 * T * gt * e, ew="ln")] if model.qk_norm else []),
        *rope,
        *att,
        *merge,
        Op("proj", "gemm", flops=2 * T * h * qw / t, shape=(T, h, qw // t))]
    return [
        _rms_norm("ln_1", Ts, h, e, eager_norm),
        *attention,
        Op("residual", "elem", bytes=3 * Ts * h * e, ew="add", bwd_bytes=3 * Ts * h * e),
        _rms_norm("ln_2", Ts, h, e, eager_norm),
        *(moe_ops(model, Ts, e, T, t) if model.moe_experts else [
            *(Op(z, "gemm", flops=2 * T * f * h / t, shape=(T, f // t, h)) for z in ("gate", "up")),
            Op("swiglu", "elem", bytes=5 * T * f * e / t, ew="gelu"),  # silu(gate) x up
            Op("down", "gemm", flops=2 * T * f * h / t, shape=(T, h, f // t))]),
        Op("residual", "elem", bytes=3 * Ts * h * e, ew="add", bwd_bytes=3 * Ts * h * e),
    ]


def mla_ops(model: ModelSpec, b: int, s: int, t: int, e: int, sp: bool) -> list[Op]:
    """Latent attention's forward on one TP rank (Megatron-Core's MLASelfAttention; ModelSpec.mla): the
    down-projections of q and of k/v (whole on every rank, run on its sequence-parallel share of the tokens, the
    latents then gathered), their norms, the up-projections split by heads, the rotated parts of q and k, q and
    k assembled per head (d + rope wide: a copy each), the fused attention over those widths and v's, the heads
    merged, proj."""
    h, a, ql, kl, dr = model.d_model, model.n_head, model.mla_q_rank, model.mla_kv_rank, model.mla_rope_dim
    T, at, qk, dv, dn = b * s, a // t, model.qk_dim, model.v_dim, model.d_head
    Tq = T // (t if sp else 1)
    q = [Op("q_down", "gemm", flops=2 * Tq * ql * h, shape=(Tq, ql, h)),
         Op("q_norm", "elem", bytes=2 * Tq * ql * e, ew="ln"),
         Op("q_up", "gemm", flops=2 * T * at * qk * ql, shape=(T, at * qk, ql))] if ql else \
        [Op("q", "gemm", flops=2 * T * at * qk * h, shape=(T, at * qk, h))]
    return [*q,
            Op("kv_down", "gemm", flops=2 * Tq * (kl + dr) * h, shape=(Tq, kl + dr, h)),
            Op("kv_norm", "elem", bytes=2 * Tq * kl * e, ew="ln"),
            Op("kv_up", "gemm", flops=2 * T * at * (dn + dv) * kl, shape=(T, at * (dn + dv), kl)),
            Op("rope", "elem", bytes=6 * T * (at + 1) * dr * e, ew="copy"),
            Op("mla_cat", "elem", bytes=2 * 2 * T * at * qk * e, ew="copy"),  # q and k of d + rope per head
            Op("attention", "gemm", 2 * T * s * at * (qk + dv), shape=(s, s, qk), count=b * at),
            Op("merge_heads", "elem", bytes=2 * T * at * dv * e, ew="copy"),
            Op("proj", "gemm", flops=2 * T * h * at * dv, shape=(T, h, at * dv))]


def moe_ops(model: ModelSpec, tokens: int, e: int, T: int = 0, t: int = 1) -> list[Op]:
    """An MoE block's MLP on one rank (model/moe.py; Megatron-Core's MoELayer with grouped GEMMs), for the `tokens`
    this rank holds (its sequence-parallel share under TP: experts are never TP-split, anatomy's EXPERT role):
    the router's logits (E x h, in 16 bits) and their top-k in fp32, the permutation that copies each token once
    per expert it goes to (read h, write k h), each held expert's MLP as one batched GEMM per linear over the
    expert's rows, and the un-permutation that weighs the k results by their probabilities and sums them.
    Routing is taken as balanced (the published benchmarks force it) unless `moe_load` says otherwise: under expert
    parallelism over ep ranks each rank receives as many token-slots as it sends, tokens x k, spread over its E / ep
    experts, and the busiest rank `moe_load` x that (TrainSpec.moe_load, ModelSpec.expert_view); the
    all-to-alls that move them are plan/comm.py's `ep_all_to_all`. A shared expert (moe_shared_ffn) is a SwiGLU
    over the block's T tokens split by TP as the dense MLP is. Every block these ops time is an MoE block (a model
    of mixed blocks is timed as its two kinds weighted: compute.micro_batch_time)."""
    h, f, E, k, El = model.d_model, model.expert_ffn, model.moe_experts, model.moe_top_k, model.experts_held
    sf, T = model.moe_shared_ffn, T or tokens
    shared = [*(Op(f"shared_{z}", "gemm", flops=2 * T * sf * h / t, shape=(T, sf // t, h)) for z in ("gate", "up")),
              Op("shared_swiglu", "elem", bytes=5 * T * sf * e / t, ew="gelu"),
              Op("shared_down", "gemm", flops=2 * T * sf * h / t, shape=(T, h, sf // t))] if sf else []
    slots = tokens * k
    recv = model.received_slots(tokens)  # what the busiest rank's experts receive (ModelSpec.expert_view)
    rows = max(1, recv // El)  # one expert's rows
    perm = (h + k * h) * tokens * e  # read each token, write it k times (and the reverse to un-permute)
    router = [Op("router", "gemm", flops=2 * tokens * E * h, shape=(tokens, E, h)),
              Op("topk", "elem", bytes=3 * tokens * E * 4, ew="softmax"),  # fp32 logits: softmax, top-k, probs
              Op("permute", "elem", bytes=perm, ew="copy", bwd_bytes=perm)]
    unperm = Op("unpermute", "elem", bytes=perm + slots * 4, ew="copy", bwd_bytes=perm + slots * 4)
    if model.llama:
        return [*router,
                *(Op(z, "gemm", flops=2 * recv * f * h, shape=(rows, f, h), count=El) for z in ("gate", "up")),
                Op("swiglu", "elem", bytes=5 * recv * f * e, ew="gelu"),
                Op("down", "gemm", flops=2 * recv * f * h, shape=(rows, h, f), count=El), unperm, *shared]
    return [*router, Op("fc", "gemm", bias=True, flops=2 * recv * f * h, shape=(rows, f, h), count=El),
            Op("gelu", "elem", bytes=2 * recv * f * e, ew="gelu"),
            Op("mlp_proj", "gemm", bias=True, flops=2 * recv * f * h, shape=(rows, h, f), count=El), unperm]


def embed_ops(model: ModelSpec, b: int, s: int, e: int) -> list[Op]:
    T, h = b * s, model.d_model
    # backward: a dense V x h gradient is zeroed and the T rows are added into it
    return [Op("embedding", "elem", bytes=4 * T * h * e, ew="add",
               bwd_bytes=(model.vocab * h + (0 if model.llama else model.seq * h)) * e + 3 * T * h * e)]


# The eager z-loss on fp32 logits, bytes per logit (forward, backward). Forward: ATen's logsumexp
# (ReduceOps.cpp `logsumexp_out_impl`, what every backend runs) is amax (reads 4), the shifted copy `self - maxes`
# (4 + 4), its exp_ in place (4 + 4) and the sum (4): 24. Backward: derivatives.yaml's `logsumexp_backward`,
# grad * (self - result).exp(): a subtraction, an exp and a product over the logits (8 each); then autograd adds it
# to the cross-entropy's gradient of the same logits (4 + 4 + 4): 36. The squares and the sum over tokens are
# per-token vectors (not counted). tests/plan/test_plan_z_loss.py counts them through torch's dispatcher
Z_LOSS_BYTES = (24, 36)


def head_ops(model: ModelSpec, b: int, s: int, t: int, e: int, upcast: bool = False, z_loss: bool = False) -> list[Op]:
    """The final norm, the logits and the loss. `upcast`: the logits cast to fp32 by a kernel of their own before
    the loss, e + 4 B a logit each way (torchtitan's `self.output(h).float()` in its llama forward, 395a52627 and
    9dec370; a row input where the loss runs eager), where F.cross_entropy's log-softmax reads them as they are.
    `z_loss`: the eager z-loss's passes over the fp32 logits (Z_LOSS_BYTES)."""
    T, h, v = b * s, model.d_model, model.vocab
    up = [Op("logits_float", "elem", bytes=(e + 4) * T * v / t, ew="copy", bwd_bytes=(e + 4) * T * v / t)]
    z = [Op("z_loss", "elem", bytes=Z_LOSS_BYTES[0] * T * v / t, ew="ce", bwd_bytes=Z_LOSS_BYTES[1] * T * v / t)]
    return [Op("ln_f", "elem", bytes=2 * T * h * e, ew="ln"),
            Op("logits", "gemm", 2 * T * h * v / t, shape=(T, v // t, h)),
            *(up if upcast and e != 4 else []),
            Op("cross_entropy", "elem", bytes=2 * T * v * 4 / t, ew="ce"),  # fp32 log-softmax
            *(z if z_loss else [])]


def gemm_shapes(model: ModelSpec, b: int, s: int, t: int = 1, flash: bool = True) -> list[tuple]:
    """Every GEMM the forward and backward run, as nn.Linear runs them: (kind, m, n, k) with kind
    linear (x @ W^T + bias: addmm), linear_nobias (x @ W^T), mm (dX = dY @ W), mm_ta (dW = dY^T @ X)."""
    out = []
    for op in layer_ops(model, b, s, t, 4, flash) + head_ops(model, b, s, t, 4):
        if op.kind == "gemm" and op.name != "attention":
            m, n, k = op.shape
            out += [("linear" if op.bias else "linear_nobias", m, n, k), ("mm", m, k, n), ("mm_ta", n, k, m)]
    return sorted(set(out))
