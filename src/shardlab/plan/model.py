"""Model dimensions, exact parameter counts, FLOPs and activation memory.

Architectures: GPT-2 (learned positional embeddings, pre-LayerNorm blocks, biases everywhere, tied
embedding/head unless `tied=False`) and, with `arch="llama"`, shardlab's Llama (model/llama.py: RMSNorm,
rotary positions, SwiGLU of width f, grouped-query attention with g = n_kv_heads x h/a key/value
width, untied head, no biases). Notation follows Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models"): a = heads, b = micro batch, h = hidden, L = layers,
s = sequence length, v = vocabulary, t = tensor-parallel degree, p = pipeline-parallel degree.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from shardlab.model import anatomy
from shardlab.model.anatomy import COLUMN, KV, ROW


class Param(int):
    """A parameter's element count that remembers its shape as rows x row (torch.chunk shards rows)."""

    def __new__(cls, rows: int, row: int = 1):
        obj = super().__new__(cls, rows * row)
        obj.rows, obj.row = rows, row
        return obj


@dataclass(frozen=True)
class ModelSpec:
    name: str
    n_layer: int  # L
    d_model: int  # h
    n_head: int  # a
    vocab: int  # v
    seq: int  # s (also the size of the learned positional table)
    mlp_ratio: int = 4
    tied: bool | None = None  # the head shares the embedding matrix; None: the arch's default (GPT-2 tied, llama not)
    arch: str = "gpt2"  # gpt2 | llama
    n_kv_heads: int = 0  # llama: key/value heads (0 = n_head)
    ffn: int = 0  # llama: SwiGLU width f (0 = Llama 3's rule, 2/3 x 4h rounded up to a multiple of 256)
    head_dim: int = 0  # d, one head's width (0 = h/a); Qwen3's a x d differs from h: q and proj are h x ad
    # mixture of experts (the trainer's model.moe_*, docs/moe.md): every moe_every-th block's MLP becomes
    # moe_experts routed copies of it (each of width `ffn`) and a router; each token meets moe_top_k of them
    moe_experts: int = 0  # E (0 = dense)
    moe_top_k: int = 2  # k
    moe_every: int = 1
    # the experts of each MoE block one rank holds (0 = all E): expert parallelism's view of the model
    # (`expert_view`), which param_shapes lists; params and FLOPs stay the whole model's
    moe_local: int = 0

    def __post_init__(self) -> None:
        if self.tied is None:
            object.__setattr__(self, "tied", self.arch != "llama")
        for f in ("n_layer", "d_model", "n_head", "vocab", "seq", "mlp_ratio"):
            if getattr(self, f) <= 0:
                raise ValueError(f"model.{f} must be positive, got {getattr(self, f)}")
        if self.d_model % self.n_head and not self.head_dim:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        if self.arch not in ("gpt2", "llama"):
            raise ValueError(f"arch must be gpt2 or llama, got {self.arch!r}")
        if self.arch == "llama":
            kv = self.n_kv_heads or self.n_head
            if kv < 0 or self.n_head % kv:
                raise ValueError(f"n_kv_heads {kv} must divide n_head {self.n_head}")
            object.__setattr__(self, "n_kv_heads", kv)
            if self.ffn <= 0:
                object.__setattr__(self, "ffn", 256 * -(-int(8 * self.d_model / 3) // 256))
        if self.moe_experts:
            if self.moe_experts < 0 or not 1 <= self.moe_top_k <= self.moe_experts or self.moe_every < 1:
                raise ValueError(f"moe_top_k {self.moe_top_k} must be between 1 and moe_experts {self.moe_experts}"
                                 f" (and moe_every {self.moe_every} at least 1)")

    @property
    def d_head(self) -> int:
        """d: one attention head's width."""
        return self.head_dim or self.d_model // self.n_head

    @property
    def q_width(self) -> int:
        """a x d: the width of q and of the attention's output (h, unless head_dim says otherwise)."""
        return self.n_head * self.d_head

    def is_moe(self, i: int) -> bool:
        """Whether block i is an MoE block (blocks moe_every-1, 2 moe_every-1, ...; model/moe.py's rule)."""
        return bool(self.moe_experts) and i % self.moe_every == self.moe_every - 1

    @property
    def moe_blocks(self) -> int:
        return self.n_layer // self.moe_every if self.moe_experts else 0

    @property
    def experts_held(self) -> int:
        """Experts of each MoE block on one rank (all of them without expert parallelism)."""
        return self.moe_local or self.moe_experts

    def expert_view(self, ep: int) -> "ModelSpec":
        """The model as one of `ep` expert-parallel ranks holds it: E / ep experts per MoE block."""
        if not self.moe_experts or ep <= 1:
            return self
        if self.moe_experts % ep:
            raise ValueError(f"moe_experts {self.moe_experts} is not divisible by ep {ep}")
        return replace(self, moe_local=self.moe_experts // ep)

    @property
    def llama(self) -> bool:
        return self.arch == "llama"

    @property
    def kv_width(self) -> int:
        """g: the width of k and v (all of h for GPT-2, n_kv_heads heads for llama)."""
        return self.n_kv_heads * self.d_head if self.llama else self.d_model

    def tp_ok(self, t: int) -> bool:
        """Tensor parallelism splits whole heads; llama's key/value heads are split (t divides them)
        or replicated (they divide t), and t divides the SwiGLU width."""
        if self.n_head % t or self.d_model % t:
            return False
        if self.llama:
            kv = self.n_kv_heads
            return (kv % t == 0 if kv >= t else t % kv == 0) and self.ffn % t == 0
        return True

    def miniature(self) -> "ModelSpec":
        """The same blocks (so the same parameter tensors, hooks and ZeRO units) at 1 dim per head,
        8 positions and a 256-token vocabulary: its step is almost all per-op and per-tensor cost."""
        return replace(self, name=f"{self.name}-mini", d_model=self.n_head, vocab=256, seq=8,
                       ffn=max(1, self.ffn * self.n_head // self.d_model) if self.llama else 0)

    # ---- parameters ------------------------------------------------------------------------
    def param_shapes(self) -> list[tuple[str, "Param"]]:
        """(name, numel) of every parameter in registration order, like model.named_parameters();
        each numel is a `Param` that also knows its dim-0 row size (sharding pads whole rows)."""
        return list(_param_shapes(self))

    def _param_shapes(self) -> list[tuple[str, "Param"]]:
        """The model's parameters as model/anatomy.py lays them out: embedding (and positions), per block a
        norm, the attention's linears, a norm, the MLP's linears; the final norm, the head when untied."""
        anat = anatomy.by_arch(self.arch)
        h, v = self.d_model, self.vocab
        f = self.ffn if self.llama else self.mlp_ratio * h
        kinds = ("weight", "bias") if anat.bias else ("weight",)
        qw = self.q_width
        shapes = {anat.attention: {COLUMN: (qw, h), KV: (self.kv_width, h), ROW: (h, qw)},
                  anat.mlp: {COLUMN: (f, h), ROW: (h, f)}}  # (out, in) by role

        def norm(name):
            return [(f"{name}.{kind}", Param(h)) for kind in kinds]

        def linears(prefix, module, table, like=None):  # like: whose shapes (an expert is the MLP's copy)
            sh = shapes[like or module]
            return [(f"{prefix}.{module}.{name}.{kind}", Param(*sh[role]) if kind == "weight"
                     else Param(sh[role][0])) for name, role in table for kind in kinds]

        out = [(anat.weight(anat.embedding), Param(v, h))]
        if anat.positions:
            out.append((anat.weight(anat.positions), Param(self.seq, h)))
        before_attn, before_mlp = anat.norms
        for i in range(self.n_layer):
            b = anat.block(i)
            out += norm(f"{b}.{before_attn}") + linears(b, anat.attention, anat.attention_linears)
            out += norm(f"{b}.{before_mlp}")
            if not self.is_moe(i):
                out += linears(b, anat.mlp, anat.mlp_linears)
                continue
            # an MoE block (model/moe.py): the router (E x h, no bias), then each expert held, a copy of the MLP
            out.append((f"{b}.{anat.mlp}.{anat.router}.weight", Param(self.moe_experts, h)))
            for e in range(self.experts_held):
                out += linears(b, f"{anat.mlp}.{anat.experts}.{e}", anat.mlp_linears, like=anat.mlp)
        out += norm(anat.final_norm)
        return out if self.tied else out + [(anat.weight(anat.head), Param(v, h))]

    @property
    def params_per_layer(self) -> int:
        """A dense block's parameters (`params` adds what the MoE blocks hold beyond one MLP)."""
        h, r = self.d_model, self.mlp_ratio
        if self.llama:  # q, proj h(ad) each; k, v g*h each; SwiGLU 3fh; two RMSNorm gains
            return 2 * self.q_width * h + 2 * self.kv_width * h + 3 * self.ffn * h + 2 * h
        return (4 + 2 * r) * h * h + (9 + r) * h  # r=4: 12h^2 + 13h

    @property
    def mlp_params(self) -> int:
        """One MLP's (one expert's) parameters, P_e."""
        h = self.d_model
        return 3 * self.ffn * h if self.llama else 2 * self.mlp_ratio * h * h + self.mlp_ratio * h + h

    @property
    def moe_extra_params(self) -> int:
        """What the MoE blocks hold beyond one MLP each: E - 1 more experts and the router (E x h)."""
        return self.moe_blocks * ((self.moe_experts - 1) * self.mlp_params + self.moe_experts * self.d_model)

    @property
    def params_embedding(self) -> int:
        """Token + positional embeddings and (untied) head; the final LayerNorm is counted apart."""
        if self.llama:  # no position table
            return self.vocab * (1 if self.tied else 2) * self.d_model
        return (self.vocab * (1 if self.tied else 2) + self.seq) * self.d_model

    @property
    def params(self) -> int:
        """Psi. For r=4, tied: 12*L*h^2 + 13*L*h + v*h + s*h + 2*h. Llama: L(2h^2 + 2gh + 3fh + 2h) + 2vh + h."""
        final_norm = self.d_model if self.llama else 2 * self.d_model
        return self.n_layer * self.params_per_layer + self.params_embedding + final_norm + self.moe_extra_params

    # ---- FLOPs (multiply-add = 2 FLOPs; causal mask not discounted, as in Narayanan et al.) ---
    def flops_fwd_layer(self, tokens: int, seq: int | None = None) -> float:
        """Forward FLOPs of one transformer block for `tokens` tokens in sequences of length s:
        GEMMs 2*(4+2r)*h^2 per token, attention scores and attention-over-values 2*2*s*h per token."""
        s = seq or self.seq
        h, r = self.d_model, self.mlp_ratio
        if self.llama:  # GEMMs: q, proj 2h(ad); k, v 2gh; SwiGLU 3fh (x2 FLOPs per multiply-add)
            return tokens * (2 * (2 * self.q_width * h + 2 * self.kv_width * h + 3 * self.ffn * h)
                             + 4 * s * self.q_width) + self.moe_flops_fwd_layer(tokens)
        return tokens * (2 * (4 + 2 * r) * h * h + 4 * s * h) + self.moe_flops_fwd_layer(tokens)

    def moe_flops_fwd_layer(self, tokens: int) -> float:
        """What an MoE block adds to a dense one's forward, averaged over the blocks (plan/moe.py's count):
        the router's 2Eh and k - 1 more experts per token."""
        if not self.moe_experts:
            return 0.0
        extra = 2 * self.moe_experts * self.d_model + (self.moe_top_k - 1) * 2 * (self.mlp_params - (
            0 if self.llama else self.mlp_ratio * self.d_model + self.d_model))
        return tokens * extra * self.moe_blocks / self.n_layer

    def flops_fwd_attention_core(self, tokens: int, seq: int | None = None) -> float:
        """QK^T and softmax(QK^T)V: what selective recomputation recomputes."""
        return tokens * 4 * (seq or self.seq) * self.q_width

    def flops_fwd_logits(self, tokens: int) -> float:
        return tokens * 2 * self.d_model * self.vocab

    def flops_fwd(self, tokens: int, seq: int | None = None) -> float:
        return self.n_layer * self.flops_fwd_layer(tokens, seq) + self.flops_fwd_logits(tokens)

    def model_flops(self, tokens: int, seq: int | None = None) -> float:
        """FLOPs of forward + backward (backward = 2 x forward), no recomputation: the MFU numerator
        (PaLM's definition). Equals 6*Psi_nonembedding*T + 12*L*s*h*T + 6*v*h*T for r=4."""
        return 3 * self.flops_fwd(tokens, seq)


def activation_bytes_per_layer(m: ModelSpec, b: int, s: int, t: int = 1, sp: bool = False,
                               recompute: str = "none", flash: bool = False, dropout: bool = True,
                               impl: str = "own", fp8: bool = False) -> float:
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
    h, a = m.d_model, m.n_head
    sbh = s * b * h
    if m.llama and impl == "te" and recompute == "none" and flash:
        return te_llama_activation_bytes_per_layer(m, b, s, t, sp, fp8)
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


def te_llama_activation_bytes_per_layer(m: ModelSpec, b: int, s: int, t: int = 1, sp: bool = False,
                                        fp8: bool = False) -> float:
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
    shardlab's own block keeps more (`llama_activation_bytes_per_layer`: each norm's normalised input and output,
    silu(gate) and the product apart).
    An MoE block (`moe_experts`; Megatron-Core's MoELayer, grouped GEMMs, experts never TP-split) keeps per token
    of this rank (ts: its sequence-parallel share) the router's input 2h and, per routed copy (k of them), the
    permuted input q h (the grouped fc1's), gate and up 4f, fc2's input q f and the expert output 2h (the
    un-permutation weighs it by the probabilities: their gradient needs it)."""
    h, a, g, f, qw = m.d_model, m.n_head, m.kv_width, m.ffn, m.q_width
    ts = t if sp else 1
    q = 1 if fp8 else 2
    norms = 2 * (2 * h + 4) / ts
    attn = (2 * (qw + 2 * g) + 2 * qw + 4 * a) / t
    if m.moe_experts:
        k = m.moe_top_k
        inputs = q * h / ts + (qw / t if fp8 else 0)
        mlp = (2 * h + k * (q * h + 4 * f + q * f + 2 * h)) / ts
        return s * b * (norms + inputs + attn + mlp)
    inputs = 2 * q * h / ts + (qw / t if fp8 else 0) + q * f / t
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
    per routed copy of a token (f -> k f; the permutation's copies not counted)."""
    h, a, g = m.d_model, m.n_head, m.kv_width
    f = m.ffn * (m.moe_top_k if m.moe_experts else 1)
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


PRESETS: dict[str, ModelSpec] = {
    # shardlab's own presets (must match shardlab.model)
    "tiny": ModelSpec("tiny", n_layer=2, d_model=64, n_head=4, vocab=256, seq=64),
    "small": ModelSpec("small", n_layer=4, d_model=256, n_head=4, vocab=256, seq=128),
    "gpt2": ModelSpec("gpt2", n_layer=12, d_model=768, n_head=12, vocab=50257, seq=1024),
    # GPT-3 family dimensions (Brown et al. 2020, Table 2.1), GPT-2 style blocks, seq 2048
    "gpt3-1.3b": ModelSpec("gpt3-1.3b", n_layer=24, d_model=2048, n_head=16, vocab=50257, seq=2048),
    "gpt3-6.7b": ModelSpec("gpt3-6.7b", n_layer=32, d_model=4096, n_head=32, vocab=50257, seq=2048),
    "gpt3-13b": ModelSpec("gpt3-13b", n_layer=40, d_model=5120, n_head=40, vocab=50257, seq=2048),
    "gpt3-175b": ModelSpec("gpt3-175b", n_layer=96, d_model=12288, n_head=96, vocab=50257, seq=2048),
    # Korthikanti et al. 2022, Table 3 (vocab 51200 as in Megatron-LM)
    "mt-22b": ModelSpec("mt-22b", n_layer=48, d_model=6144, n_head=64, vocab=51200, seq=2048),
    "mt-530b": ModelSpec("mt-530b", n_layer=105, d_model=20480, n_head=128, vocab=51200, seq=2048),
    "mt-1t": ModelSpec("mt-1t", n_layer=128, d_model=25600, n_head=160, vocab=51200, seq=2048),
    # shardlab's llama presets (must match shardlab.model.llama) and Meta's Llama 3 / 3.1 shapes
    "llama-tiny": ModelSpec("llama-tiny", n_layer=2, d_model=64, n_head=4, vocab=256, seq=64, arch="llama",
                            n_kv_heads=2, ffn=192),
    "llama-small": ModelSpec("llama-small", n_layer=4, d_model=256, n_head=8, vocab=256, seq=128, arch="llama",
                             n_kv_heads=2, ffn=704),
    "llama3-8b": ModelSpec("llama3-8b", n_layer=32, d_model=4096, n_head=32, vocab=128256, seq=8192,
                           arch="llama", n_kv_heads=8, ffn=14336),
    "llama3-70b": ModelSpec("llama3-70b", n_layer=80, d_model=8192, n_head=64, vocab=128256, seq=8192,
                            arch="llama", n_kv_heads=8, ffn=28672),
    "llama3-405b": ModelSpec("llama3-405b", n_layer=126, d_model=16384, n_head=128, vocab=128256, seq=8192,
                             arch="llama", n_kv_heads=8, ffn=53248),
}
# Older or looser names, kept working: each reads as the preset it names. "7b" was the planner's
# first name for GPT-3 6.7B, but "7B" usually means LLaMA-7B (another architecture), so the
# preset is named by what it is and "7b" only resolves to it, with a note (see resolve_preset).
ALIASES: dict[str, str] = {"7b": "gpt3-6.7b", "gpt3-6.7B": "gpt3-6.7b", "gpt2-124m": "gpt2",
                           "gpt3-1.3B": "gpt3-1.3b", "gpt3-13B": "gpt3-13b", "gpt3-175B": "gpt3-175b"}


def resolve_preset(name: str) -> tuple[str, str | None]:
    """(preset name, note for the user or None). Unknown names raise with the known ones listed."""
    if name in PRESETS:
        return name, None
    if name in ALIASES:
        real = ALIASES[name]
        note = None if name.lower() == real.lower() else (
            f"model={name} is read as {real} (GPT-3 family, Brown et al. 2020, Table 2.1); "
            f"name it model={real}")
        return real, note
    raise ValueError(f"unknown model preset {name!r} (known: {', '.join(PRESETS)})")


def model_from_args(preset: str | None = None, **dims) -> ModelSpec:
    """A preset, optionally with dimensions overridden (n_layer=..., d_model=..., ...)."""
    dims = {k: v for k, v in dims.items() if v is not None}
    if preset:
        preset, _ = resolve_preset(preset)
        return replace(PRESETS[preset], **dims) if dims else PRESETS[preset]
    missing = [k for k in ("n_layer", "d_model", "n_head", "vocab", "seq") if k not in dims]
    if missing:
        raise ValueError(f"model needs a preset or all of n_layer, d_model, n_head, vocab, seq "
                         f"(missing: {', '.join(missing)})")
    return ModelSpec(name=dims.pop("name", "custom"), **dims)


@functools.lru_cache(maxsize=64)
def _param_shapes(model: ModelSpec) -> tuple:
    """ModelSpec.param_shapes, built once per model: a search evaluates thousands of layouts of one model,
    and an 80-layer model has ~700 parameters to list each time."""
    return tuple(model._param_shapes())
