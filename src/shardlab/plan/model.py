"""Model dimensions, exact parameter counts and FLOPs (activation memory: plan/activations.py).

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

SHARED = "shared"  # an MoE block's shared expert, beside its router and experts: blocks.i.mlp.shared.{gate,up,down}
MLA_WHOLE = ("q_down", "q_norm", "kv_down", "kv_norm")  # latent attention's parameters TP leaves whole
MTP_WHOLE = ("enorm", "hnorm", "final_norm")  # a multi-token-prediction depth's norms (TP leaves them whole)


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
    # llama: an RMSNorm on each head's q and k (Qwen3's qk_layernorm): its passes, saved inputs and host kernels
    qk_norm: bool = False
    expert_bias: bool = False  # experts with biases (GPT-OSS): moe.bias_ops' passes; their parameters not counted
    glu_clamp: float = 0.0  # the experts' GLU inputs clamped at this limit (GPT-OSS: 7): moe.clamp_ops' passes
    # sliding-window attention (GPT-OSS, Mistral): a query sees its `window` latest keys; every window_skip-th block
    # (blocks window_skip-1, 2 window_skip-1, ...) attends fully (Megatron-Core's window_size, window_attn_skip_freq;
    # 0: every block windowed). The fused kernel skips the tiles outside the band: the blocks' attention work
    window: int = 0
    window_skip: int = 0
    # mixture of experts (the trainer's model.moe_*, docs/moe.md): every moe_every-th block's MLP becomes
    # moe_experts routed copies of it (each of width `ffn`) and a router; each token meets moe_top_k of them
    moe_experts: int = 0  # E (0 = dense)
    moe_top_k: int = 2  # k
    moe_every: int = 1
    # llama: an expert's SwiGLU width apart from the dense blocks' `ffn` (0 = ffn; DeepSeek's and Megatron-Core's
    # moe_ffn_hidden_size), a shared expert every token meets beside its k routed ones (0 = none; Megatron-Core's
    # moe_shared_expert_intermediate_size: one dense SwiGLU, split by TP like the MLP), and leading dense blocks
    # (DeepSeek's first_k_dense_replace: blocks 0 .. moe_first_dense-1 keep the dense MLP)
    moe_ffn: int = 0
    moe_shared_ffn: int = 0
    moe_first_dense: int = 0
    # group-limited routing (DeepSeek-V3's node-limited: its top moe_group_topk of moe_groups expert groups, then
    # top-k experts among them; Megatron-Core's moe_router_num_groups, moe_router_group_topk); 0 = none
    moe_groups: int = 0
    moe_group_topk: int = 0
    # llama: multi-head latent attention (DeepSeek-V2/V3; Megatron-Core's MLASelfAttention) where mla_kv_rank > 0:
    # k and v from a kv_lora-wide latent (kv_down h -> mla_kv_rank + mla_rope_dim, a norm, kv_up -> a(d + v)), q from
    # a mla_q_rank-wide one (0: q straight from h), each head's q and k d (head_dim, no position) + mla_rope_dim
    # (rotated; k's shared by the heads) wide, v mla_v_dim (0: d) wide
    mla_kv_rank: int = 0
    mla_q_rank: int = 0
    mla_rope_dim: int = 0
    mla_v_dim: int = 0
    mtp_layers: int = 0  # multi-token prediction depths (DeepSeek-V3's 1; Megatron-Core's mtp_num_layers)
    # the experts of each MoE block one rank holds (0 = all E) and the token-slots its busiest rank receives over the
    # mean (TrainSpec.moe_load): expert parallelism's view (`expert_view`); params and FLOPs stay the whole model's
    moe_local: int = 0
    moe_load: float = 1.0

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
        if self.window < 0 or self.window_skip < 0:
            raise ValueError(f"window {self.window} and window_skip {self.window_skip} must be 0 or positive")
        for f in ("glu_clamp", "moe_ffn", "moe_shared_ffn", "moe_first_dense", "moe_groups", "moe_group_topk"):
            if getattr(self, f) < 0:
                raise ValueError(f"model.{f} must be 0 or positive, got {getattr(self, f)}")
        if self.moe_groups and (self.moe_experts % self.moe_groups or not 1 <= self.moe_group_topk <= self.moe_groups):
            raise ValueError(f"moe_groups {self.moe_groups} must divide moe_experts {self.moe_experts}, and "
                             f"moe_group_topk {self.moe_group_topk} be between 1 and it")
        if (self.moe_ffn or self.moe_shared_ffn) and self.arch != "llama":
            raise ValueError("moe_ffn and moe_shared_ffn are SwiGLU widths: arch llama only")
        for f in ("mla_kv_rank", "mla_q_rank", "mla_rope_dim", "mla_v_dim", "mtp_layers"):
            if getattr(self, f) < 0:
                raise ValueError(f"model.{f} must be 0 or positive, got {getattr(self, f)}")
        if (self.mla_q_rank or self.mla_rope_dim or self.mla_v_dim) and not self.mla_kv_rank:
            raise ValueError("mla_q_rank, mla_rope_dim and mla_v_dim need mla_kv_rank (latent attention)")
        if self.mla_kv_rank and self.arch != "llama":
            raise ValueError("latent attention (mla_kv_rank) is a llama-arch block's")
        if self.mla_kv_rank:  # every head has its own k and v
            object.__setattr__(self, "n_kv_heads", self.n_head)

    @property
    def d_head(self) -> int:
        """d: one attention head's width."""
        return self.head_dim or self.d_model // self.n_head

    @property
    def mla(self) -> bool:
        return self.mla_kv_rank > 0

    @property
    def qk_dim(self) -> int:
        """One head's q and k width: d, + the rotated part under latent attention."""
        return self.d_head + self.mla_rope_dim

    @property
    def v_dim(self) -> int:
        """One head's v (and output) width."""
        return self.mla_v_dim or self.d_head

    def attention_share(self, s: int) -> float:
        """The blocks' mean causal attention work at sequence s over full causal attention's (s^2 / 2 pairs a
        head): a windowed block's queries see min(i + 1, window) keys, s w - w^2 / 2 pairs (1 without a window)."""
        if not self.window or self.window >= s:
            return 1.0
        w = self.window
        windowed = (s * w - w * w / 2) / (s * s / 2)
        full = self.n_layer // self.window_skip if self.window_skip else 0  # blocks window_skip-1, 2 window_skip-1, ...
        return (full + (self.n_layer - full) * windowed) / self.n_layer

    @property
    def q_width(self) -> int:
        """a x d: the width of q and of the attention's output (h, unless head_dim says otherwise); latent
        attention: q's, a x (d + rope)."""
        return self.n_head * self.qk_dim

    def mla_attention_params(self) -> int:
        """One block's latent-attention parameters: q's down, norm and up (or q from h), kv's down, norm and up, proj."""
        h, a, ql, kl, dr = self.d_model, self.n_head, self.mla_q_rank, self.mla_kv_rank, self.mla_rope_dim
        q = (h * ql + ql + ql * a * self.qk_dim) if ql else h * a * self.qk_dim
        return q + h * (kl + dr) + kl + kl * a * (self.d_head + self.v_dim) + a * self.v_dim * h

    def mla_attention_flops(self, s: int) -> float:
        """One token's forward FLOPs of latent attention at sequence length s: its GEMMs (2 per multiply-add) and
        the core, q.k over d + rope and the weights over v, each head (full s: no causal discount, as elsewhere)."""
        a = self.n_head
        return 2 * (self.mla_attention_params() - self.mla_q_rank - self.mla_kv_rank) \
            + 2 * s * a * (self.qk_dim + self.v_dim)

    def is_moe(self, i: int) -> bool:
        """Whether block i is an MoE block (blocks moe_every-1, 2 moe_every-1, ...; model/moe.py's rule), past
        the leading dense blocks (moe_first_dense)."""
        return bool(self.moe_experts) and i >= self.moe_first_dense and i % self.moe_every == self.moe_every - 1

    @property
    def moe_blocks(self) -> int:
        return sum(self.is_moe(i) for i in range(self.n_layer)) if self.moe_experts else 0

    @property
    def mixed_blocks(self) -> bool:
        """Some blocks MoE and some dense (moe_every > 1, moe_first_dense): the step is timed as each kind
        weighted by its share of the blocks (`uniform`)."""
        return 0 < self.moe_blocks < self.n_layer

    def uniform(self, moe: bool) -> "ModelSpec":
        """The model with every block MoE (moe=True) or every block dense: a mixed model's two kinds of block."""
        return replace(self, moe_every=1, moe_first_dense=0) if moe else replace(self, moe_experts=0)

    @property
    def expert_ffn(self) -> int:
        """One expert's width: moe_ffn, else the MLP's (llama's f; GPT-2's r x h)."""
        return self.moe_ffn or (self.ffn if self.llama else self.mlp_ratio * self.d_model)

    @property
    def experts_held(self) -> int:
        """Experts of each MoE block on one rank (all of them without expert parallelism)."""
        return self.moe_local or self.moe_experts

    def received_slots(self, tokens: int) -> int:
        """Token-slots the busiest expert-parallel rank's experts receive for `tokens` routed on a rank: tokens x k,
        times the routing's load on it (moe_load: 1 under balanced routing or without ep)."""
        return round(tokens * self.moe_top_k * self.moe_load)

    def expert_view(self, ep: int, load: float = 1.0) -> "ModelSpec":
        """The model as the busiest of `ep` expert-parallel ranks holds it: E / ep experts per MoE block, receiving
        `load` x the mean token-slots."""
        if not self.moe_experts or ep <= 1:
            return self
        if self.moe_experts % ep:
            raise ValueError(f"moe_experts {self.moe_experts} is not divisible by ep {ep}")
        return replace(self, moe_local=self.moe_experts // ep, moe_load=load)

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
    def param_shapes(self, blocks: frozenset | None = None) -> list[tuple[str, "Param"]]:
        """(name, numel) of every parameter in registration order, like model.named_parameters();
        each numel is a `Param` that also knows its dim-0 row size (sharding pads whole rows). `blocks`: only these
        blocks' parameters (with the rest of the model's), where one block of each kind tells all."""
        return list(_param_shapes(self, blocks))

    def _param_shapes(self, blocks: frozenset | None = None) -> list[tuple[str, "Param"]]:
        """The model's parameters as model/anatomy.py lays them out: embedding (and positions), per block a
        norm, the attention's linears, a norm, the MLP's linears; the final norm, the head when untied."""
        anat = anatomy.by_arch(self.arch)
        h, v = self.d_model, self.vocab
        f = self.ffn if self.llama else self.mlp_ratio * h
        kinds = ("weight", "bias") if anat.bias else ("weight",)
        qw = self.q_width
        ef, sf = self.expert_ffn, self.moe_shared_ffn
        shapes = {anat.attention: {COLUMN: (qw, h), KV: (self.kv_width, h), ROW: (h, qw)},
                  anat.mlp: {COLUMN: (f, h), ROW: (h, f)},  # (out, in) by role
                  anat.experts: {COLUMN: (ef, h), ROW: (h, ef)}, SHARED: {COLUMN: (sf, h), ROW: (h, sf)}}

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
        def block(b, moe):
            out = norm(f"{b}.{before_attn}") + (self._mla_shapes(f"{b}.{anat.attention}") if self.mla
                                                else linears(b, anat.attention, anat.attention_linears))
            out += norm(f"{b}.{before_mlp}")
            if not moe:
                return out + linears(b, anat.mlp, anat.mlp_linears)
            # an MoE block (model/moe.py): the router (E x h, no bias), then each expert held, a copy of the MLP
            # (moe_ffn wide), then the shared expert
            out.append((f"{b}.{anat.mlp}.{anat.router}.weight", Param(self.moe_experts, h)))
            for e in range(self.experts_held):
                out += linears(b, f"{anat.mlp}.{anat.experts}.{e}", anat.mlp_linears, like=anat.experts)
            if sf:
                out += linears(b, f"{anat.mlp}.{SHARED}", anat.mlp_linears, like=SHARED)
            return out

        for i in range(self.n_layer) if blocks is None else sorted(blocks):
            out += block(anat.block(i), self.is_moe(i))
        out += norm(anat.final_norm)
        out = out if self.tied else out + [(anat.weight(anat.head), Param(v, h))]
        # multi-token prediction (DeepSeek-V3; Megatron-Core's MultiTokenPredictionLayer), each depth on the last
        # stage: the next token's embedding and the hidden state normed, concatenated and projected (2h -> h), one
        # block (an MoE one in an MoE model), a final norm; the embedding and the head are the model's
        for j in range(self.mtp_layers):
            out += [(f"mtp.{j}.enorm.weight", Param(h)), (f"mtp.{j}.hnorm.weight", Param(h)),
                    (f"mtp.{j}.eh_proj.weight", Param(h, 2 * h))]
            out += block(f"mtp.{j}.block", bool(self.moe_experts)) + [(f"mtp.{j}.final_norm.weight", Param(h))]
        return out

    def linear_roles(self) -> dict:
        """Each block linear weight's role, by its name inside a block (an expert's without its index:
        mlp.experts.down): how tensor parallelism cuts it (anatomy's COLUMN, ROW, KV), EXPERT or None where every
        TP rank holds it whole (experts; latent attention's down-projections). Muon's plan reads it
        (optim/muon/cost.py: every block linear weight is a Muon matrix, the router not)."""
        from shardlab.model import anatomy
        a = anatomy.by_arch(self.arch)
        roles = a.linear_roles()  # the trainer's models' linears; the planner's own names below
        roles.update({f"{a.mlp}.{SHARED}.{n}": r for n, r in a.mlp_linears})
        roles.update({f"{a.attention}.{n}": r for n, r in (("q_down", None), ("kv_down", None),
                                                          ("q_up", anatomy.COLUMN), ("kv_up", anatomy.COLUMN))})
        return roles

    def _mla_shapes(self, attn: str) -> list[tuple[str, "Param"]]:
        """Latent attention's parameters (Megatron-Core's linear_q_down_proj, q_layernorm, linear_q_up_proj,
        linear_kv_down_proj, kv_layernorm, linear_kv_up_proj, linear_proj), named in the planner's words."""
        h, a, ql, kl = self.d_model, self.n_head, self.mla_q_rank, self.mla_kv_rank
        q = ([(f"{attn}.q_down.weight", Param(ql, h)), (f"{attn}.q_norm.weight", Param(ql)),
              (f"{attn}.q_up.weight", Param(a * self.qk_dim, ql))] if ql
             else [(f"{attn}.q.weight", Param(a * self.qk_dim, h))])
        return q + [(f"{attn}.kv_down.weight", Param(kl + self.mla_rope_dim, h)), (f"{attn}.kv_norm.weight", Param(kl)),
                    (f"{attn}.kv_up.weight", Param(a * (self.d_head + self.v_dim), kl)),
                    (f"{attn}.proj.weight", Param(h, a * self.v_dim))]

    @property
    def params_per_layer(self) -> int:
        """A dense block's parameters (`params` adds what the MoE blocks hold beyond one MLP)."""
        h, r = self.d_model, self.mlp_ratio
        if self.mla:
            return self.mla_attention_params() + 3 * self.ffn * h + 2 * h
        if self.llama:  # q, proj h(ad) each; k, v g*h each; SwiGLU 3fh; two RMSNorm gains
            return 2 * self.q_width * h + 2 * self.kv_width * h + 3 * self.ffn * h + 2 * h
        return (4 + 2 * r) * h * h + (9 + r) * h  # r=4: 12h^2 + 13h

    @property
    def mlp_params(self) -> int:
        """One MLP's (one expert's) parameters, P_e."""
        h = self.d_model
        return 3 * self.ffn * h if self.llama else 2 * self.mlp_ratio * h * h + self.mlp_ratio * h + h

    @property
    def mlp_flops_fwd(self) -> int:
        """One MLP's (one expert's) forward GEMM FLOPs for one token, 2 per multiply-add (biases not counted)."""
        h = self.d_model
        return 2 * (3 * self.ffn * h if self.llama else 2 * self.mlp_ratio * h * h)

    @property
    def expert_params(self) -> int:
        """One expert's parameters, P_e (the MLP's, at the expert's width)."""
        return 3 * self.expert_ffn * self.d_model if self.llama else self.mlp_params

    @property
    def expert_flops_fwd(self) -> int:
        """One expert's forward GEMM FLOPs for one token."""
        return 6 * self.expert_ffn * self.d_model if self.llama else self.mlp_flops_fwd

    @property
    def moe_extra_params(self) -> int:
        """What the MoE blocks hold in place of one MLP each: E experts, the router (E x h) and the shared expert."""
        shared = 3 * self.moe_shared_ffn * self.d_model
        return self.moe_blocks * (self.moe_experts * self.expert_params - self.mlp_params + self.moe_experts
                                  * self.d_model + shared)

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
        return self.n_layer * self.params_per_layer + self.params_embedding + final_norm + self.moe_extra_params \
            + self.mtp_params

    @property
    def mtp_params(self) -> int:
        """The multi-token-prediction depths' own parameters: two norms, the 2h -> h projection, a block (MoE in an
        MoE model: its router, experts and shared expert as an MoE block's), a final norm."""
        if not self.mtp_layers:
            return 0
        h = self.d_model
        moe = self.moe_extra_params // self.moe_blocks if self.moe_blocks else 0
        return self.mtp_layers * (3 * h + 2 * h * h + self.params_per_layer + moe)

    # ---- FLOPs (multiply-add = 2 FLOPs; causal mask not discounted, as in Narayanan et al.) ---
    def flops_fwd_layer(self, tokens: int, seq: int | None = None) -> float:
        """Forward FLOPs of one transformer block for `tokens` tokens in sequences of length s:
        GEMMs 2*(4+2r)*h^2 per token, attention scores and attention-over-values 2*2*s*h per token."""
        s = seq or self.seq
        h, r = self.d_model, self.mlp_ratio
        if self.mla:
            return tokens * (self.mla_attention_flops(s) + 6 * self.ffn * h) + self.moe_flops_fwd_layer(tokens)
        if self.llama:  # GEMMs: q, proj 2h(ad); k, v 2gh; SwiGLU 3fh (x2 FLOPs per multiply-add)
            return tokens * (2 * (2 * self.q_width * h + 2 * self.kv_width * h + 3 * self.ffn * h)
                             + 4 * s * self.q_width) + self.moe_flops_fwd_layer(tokens)
        return tokens * (2 * (4 + 2 * r) * h * h + 4 * s * h) + self.moe_flops_fwd_layer(tokens)

    def moe_flops_fwd_layer(self, tokens: int) -> float:
        """What an MoE block adds to a dense one's forward, averaged over the blocks (plan/moe.py's count):
        the router's 2Eh, k experts and the shared one per token in place of the MLP."""
        if not self.moe_experts:
            return 0.0
        extra = (2 * self.moe_experts * self.d_model + self.moe_top_k * self.expert_flops_fwd - self.mlp_flops_fwd
                 + 6 * self.moe_shared_ffn * self.d_model)
        return tokens * extra * self.moe_blocks / self.n_layer

    def flops_fwd_attention_core(self, tokens: int, seq: int | None = None) -> float:
        """QK^T and softmax(QK^T)V: what selective recomputation recomputes."""
        if self.mla:
            return tokens * 2 * (seq or self.seq) * self.n_head * (self.qk_dim + self.v_dim)
        return tokens * 4 * (seq or self.seq) * self.q_width

    def flops_fwd_logits(self, tokens: int) -> float:
        return tokens * 2 * self.d_model * self.vocab

    def flops_fwd(self, tokens: int, seq: int | None = None) -> float:
        return self.n_layer * self.flops_fwd_layer(tokens, seq) + self.flops_fwd_logits(tokens) \
            + self.flops_fwd_mtp(tokens, seq)

    def flops_fwd_mtp(self, tokens: int, seq: int | None = None) -> float:
        """The multi-token-prediction depths' forward: each its projection (2h -> h), a block (an MoE one in an MoE
        model) and the logits again."""
        if not self.mtp_layers:
            return 0.0
        h = self.d_model
        block = self.uniform(True).flops_fwd_layer(tokens, seq) if self.moe_experts else self.flops_fwd_layer(tokens, seq)
        return self.mtp_layers * (tokens * 4 * h * h + block + self.flops_fwd_logits(tokens))

    def model_flops(self, tokens: int, seq: int | None = None) -> float:
        """FLOPs of forward + backward (backward = 2 x forward), no recomputation: the MFU numerator
        (PaLM's definition). Equals 6*Psi_nonembedding*T + 12*L*s*h*T + 6*v*h*T for r=4."""
        return 3 * self.flops_fwd(tokens, seq)


@functools.lru_cache(maxsize=64)
def _param_shapes(model: ModelSpec, blocks: frozenset | None = None) -> tuple:
    """ModelSpec.param_shapes, built once per model: a search evaluates thousands of layouts of one model,
    and an 80-layer model has ~700 parameters to list each time."""
    return tuple(model._param_shapes(blocks))
