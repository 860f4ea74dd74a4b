"""Model dimensions, exact parameter counts, FLOPs and activation memory.

Architecture: GPT-2 (learned positional embeddings, pre-LayerNorm blocks, biases everywhere, tied
embedding/head unless `tied=False`). Notation follows Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models"): a = heads, b = micro batch, h = hidden, L = layers,
s = sequence length, v = vocabulary, t = tensor-parallel degree, p = pipeline-parallel degree.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


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
    tied: bool = True  # head shares the embedding matrix (GPT-2)

    def __post_init__(self) -> None:
        for f in ("n_layer", "d_model", "n_head", "vocab", "seq", "mlp_ratio"):
            if getattr(self, f) <= 0:
                raise ValueError(f"model.{f} must be positive, got {getattr(self, f)}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")

    def miniature(self) -> "ModelSpec":
        """The same blocks (so the same parameter tensors, hooks and ZeRO units) at 1 dim per head,
        8 positions and a 256-token vocabulary: its step is almost all per-op and per-tensor cost."""
        return ModelSpec(f"{self.name}-mini", n_layer=self.n_layer, d_model=self.n_head, n_head=self.n_head,
                         vocab=256, seq=8, mlp_ratio=self.mlp_ratio, tied=self.tied)

    # ---- parameters ------------------------------------------------------------------------
    def param_shapes(self) -> list[tuple[str, "Param"]]:
        """(name, numel) of every parameter in registration order, like model.named_parameters();
        each numel is a `Param` that also knows its dim-0 row size (sharding pads whole rows)."""
        h, f = self.d_model, self.mlp_ratio * self.d_model
        out = [("wte.weight", Param(self.vocab, h)), ("wpe.weight", Param(self.seq, h))]
        for i in range(self.n_layer):
            p = f"blocks.{i}."
            out += [
                (p + "ln_1.weight", Param(h)), (p + "ln_1.bias", Param(h)),
                *((p + f"attn.{z}.{kind}", Param(h, h) if kind == "weight" else Param(h))
                  for z in "qkv" for kind in ("weight", "bias")),
                (p + "attn.proj.weight", Param(h, h)), (p + "attn.proj.bias", Param(h)),
                (p + "ln_2.weight", Param(h)), (p + "ln_2.bias", Param(h)),
                (p + "mlp.fc.weight", Param(f, h)), (p + "mlp.fc.bias", Param(f)),
                (p + "mlp.proj.weight", Param(h, f)), (p + "mlp.proj.bias", Param(h)),
            ]
        out += [("ln_f.weight", Param(h)), ("ln_f.bias", Param(h))]
        if not self.tied:
            out.append(("lm_head.weight", Param(self.vocab, h)))
        return out

    @property
    def params_per_layer(self) -> int:
        h, r = self.d_model, self.mlp_ratio
        return (4 + 2 * r) * h * h + (9 + r) * h  # r=4: 12h^2 + 13h

    @property
    def params_embedding(self) -> int:
        """Token + positional embeddings and (untied) head; the final LayerNorm is counted apart."""
        return (self.vocab * (1 if self.tied else 2) + self.seq) * self.d_model

    @property
    def params(self) -> int:
        """Psi. For r=4, tied: 12*L*h^2 + 13*L*h + v*h + s*h + 2*h."""
        return self.n_layer * self.params_per_layer + self.params_embedding + 2 * self.d_model

    # ---- FLOPs (multiply-add = 2 FLOPs; causal mask not discounted, as in Narayanan et al.) ---
    def flops_fwd_layer(self, tokens: int, seq: int | None = None) -> float:
        """Forward FLOPs of one transformer block for `tokens` tokens in sequences of length s:
        GEMMs 2*(4+2r)*h^2 per token, attention scores and attention-over-values 2*2*s*h per token."""
        s = seq or self.seq
        h, r = self.d_model, self.mlp_ratio
        return tokens * (2 * (4 + 2 * r) * h * h + 4 * s * h)

    def flops_fwd_attention_core(self, tokens: int, seq: int | None = None) -> float:
        """QK^T and softmax(QK^T)V: what selective recomputation recomputes."""
        return tokens * 4 * (seq or self.seq) * self.d_model

    def flops_fwd_logits(self, tokens: int) -> float:
        return tokens * 2 * self.d_model * self.vocab

    def flops_fwd(self, tokens: int, seq: int | None = None) -> float:
        return self.n_layer * self.flops_fwd_layer(tokens, seq) + self.flops_fwd_logits(tokens)

    def model_flops(self, tokens: int, seq: int | None = None) -> float:
        """FLOPs of forward + backward (backward = 2 x forward), no recomputation: the MFU numerator
        (PaLM's definition). Equals 6*Psi_nonembedding*T + 12*L*s*h*T + 6*v*h*T for r=4."""
        return 3 * self.flops_fwd(tokens, seq)


def activation_bytes_per_layer(m: ModelSpec, b: int, s: int, t: int = 1, sp: bool = False,
                               recompute: str = "none", flash: bool = False) -> float:
    """Korthikanti et al. 2022, Table 2: activation bytes of one transformer layer for one micro
    batch with 16-bit activations and 1-byte dropout masks.

      no parallelism            sbh(34 + 5as/h)
      tensor parallel           sbh(10 + 24/t + 5as/(ht))
      tensor + sequence par.    sbh(34/t + 5as/(ht))
      selective-attn            drops the 5as/h term (Megatron's selective: attention core recomputed)
      full recompute            sbh*2 (only the layer input; /t with sequence parallelism)
    `flash=True`: a fused attention kernel never stores the s x s scores, like selective-attn.

    `selective` is shardlab's policy (parallel/recompute.py), as measured (docs/memory.md): it keeps the
    outputs of the matmuls and of attention and recomputes LayerNorm, GELU, dropout and the residual adds:
      sbh(2/t_sp + 16/t + 4) + 4asb/t   (16-bit values; the attention log-sum-exp is fp32)
    the layer input (÷t with sequence parallelism), q, k, v, attention output and the 4h MLP matmul output
    (head/column-split: ÷t), both row-parallel matmul outputs (a partial sum of full size before its
    reduction), plus the s x s scores (as²b) where attention is not fused.
    """
    h, a = m.d_model, m.n_head
    sbh = s * b * h
    if recompute == "full":
        return sbh * 2 / (t if sp else 1)
    if recompute == "selective":
        scores = 0.0 if flash else 2 * a * s * s * b / t
        return sbh * (2 / (t if sp else 1) + 16 / t + 4) + 4 * a * s * b / t + scores
    attn_core = 0.0 if (recompute == "selective-attn" or flash) else 5 * a * s / h
    if sp:
        return sbh * (34 / t + attn_core / t)
    return sbh * (10 + 24 / t + attn_core / t)


def activation_bytes_extra(m: ModelSpec, b: int, s: int, t: int = 1, sp: bool = False,
                           p: int = 1, in_flight: float = 1.0) -> float:
    """Korthikanti et al. 2022 Sec. 4.3, outside the layers (first pipeline stage): the embedding
    dropout mask sbh per micro batch in flight; with p == 1 the same rank also holds the final
    LayerNorm, output projection and cross-entropy inputs, 4sbh(1 + v/h). Both are split t ways
    under sequence parallelism (the paper's setting)."""
    sbh = s * b * m.d_model
    out = sbh * in_flight
    if p == 1:
        out += 4 * sbh * (1 + m.vocab / m.d_model)
    return out / (t if sp else 1)


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
