"""A Llama-family decoder (Llama 2/3): RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention,
untied output head, no biases.

Single-device code, like model/gpt.py, and built to the same skeleton so the parallel layers apply
unchanged where they can: `wte`, `blocks` (a ModuleDict "0".."n-1"), `attn.q/k/v/proj` with the
attention core in the replaceable `attn.attend`, `ln_f`, `lm_head`. What differs:

- no position table: positions enter as a rotation of q and k inside attention (RoPE, Su et al. 2021), in
  Hugging Face's "rotate half" layout, so the weights export to `LlamaForCausalLM` by renaming alone;
- grouped-query attention (Ainslie et al. 2023): k and v have `n_kv_heads` heads, each serving
  n_head / n_kv_heads consecutive query heads. The attention core takes them as they are (the fused
  kernel reads each key/value head once per group, and backward keeps k and v at their own, smaller
  width: GQA's activation saving); so `attend`'s contract here is GPT's with one addition: k and v may
  have fewer heads than q, a divisor of q's. An attention core that needs equal head counts calls
  `repeat_kv` first. Head counts are read from the tensors at run time: a tensor-parallel rank holding
  n_head / tp query heads and the key/value heads they use runs this same code;
- SwiGLU MLP (Shazeer 2020): down(silu(gate(x)) * up(x)), hidden width as Llama 3 sizes it
  (`ffn_hidden`), or an imported checkpoint's width as it is (`intermediate_size`);
- the head is its own parameter (`tie_embeddings=False`, Llama 3's 8B and up), or the embedding's
  (`tie_embeddings=True`, Llama 3.2's 1B/3B): then a pipeline's last stage keeps `wte` as its head's
  weight, and the forward embeds only what is token ids (integers; a later stage gets hidden states);
- Llama 3.1's long-context frequencies (`rope_scaling`, `rope_type` llama3): each rotary frequency keeps,
  divides by `factor`, or blends the two by its wavelength against the original context (`inv_frequencies`).
"""
from __future__ import annotations

import math
import torch
import torch.nn as nn
import torch.nn.functional as F

from shardlab.model.documents import block_causal_mask
from shardlab.model.dtypes import wide_dtype
from shardlab.model.kv_cache import attend_block, run_blocks
from shardlab.model.configs import (  # noqa: F401 - re-exported: the family's config lives in configs.py
    LLAMA3_SCALING, LLAMA_PRESETS as PRESETS, ROPE_KEYS, LlamaConfig, ffn_hidden, resolve_llama_config as resolve_model_config,
    rope_scaling_of)
from shardlab.model.init import initialise, standard_rules
from shardlab.model.moe import mlp_for


# --- rotary position embedding -------------------------------------------------------------------------

def inv_frequencies(head_dim: int, theta: float, dtype: torch.dtype, device=None,
                    scaling: dict | None = None) -> torch.Tensor:
    """The head_dim/2 rotary frequencies theta^(-2i/head_dim), radians per position.

    Llama 3.1 (`scaling`, rope_type llama3) stretches the context by `factor` where it matters: a
    frequency whose wavelength (2 pi / frequency) fits high_freq_factor times into the original context
    is kept (it resolves nearby positions), one fitting fewer than low_freq_factor times is divided by
    `factor` (it spans the long context), and those in between are interpolated linearly in
    (original context / wavelength) from the divided to the kept value."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).to(dtype) / head_dim))
    if not scaling:
        return inv_freq
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    fits = scaling["original_max_position_embeddings"] * inv_freq / (2 * math.pi)  # wavelengths in the context
    blend = ((fits - low) / (high - low)).clamp(0.0, 1.0)  # 0: long wavelength (divide), 1: short (keep)
    blended = (1 - blend) * (inv_freq / factor) + blend * inv_freq
    return torch.where(fits > high, inv_freq, torch.where(fits < low, inv_freq / factor, blended))


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float,
                scaling: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, (t, head_dim), for integer `positions`: frequency i rotates dimensions i and
    i + head_dim/2 by position x frequency i (`inv_frequencies`). Computed in fp32 as Hugging Face does,
    so exported logits agree to round-off."""
    dtype = wide_dtype(torch.get_default_dtype())  # fp32, or float64 for a float64 model
    inv_freq = inv_frequencies(head_dim, theta, dtype, positions.device, scaling)
    freqs = positions.to(dtype)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q: torch.Tensor, k: torch.Tensor, theta: float, positions: torch.Tensor | None = None,
               scaling: dict | None = None):
    """Rotate q and k, (b, heads, t, head_dim), by their positions: (t,) shared by the batch (default
    0..t-1), or (b, t), one row each (generation's left-padded rows count from their first real token)."""
    t, hd = q.shape[-2], q.shape[-1]
    if positions is None:
        positions = torch.arange(t, device=q.device)
    cos, sin = rope_tables(positions.reshape(-1), hd, theta, scaling)
    cos, sin = (z.view(*positions.shape, hd).to(q.dtype) for z in (cos, sin))
    if positions.dim() == 2:  # (b, t, hd) -> (b, 1, t, hd): the same rotation for every head of a row
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


# --- the model -------------------------------------------------------------------------------------------

def repeat_kv(k: torch.Tensor, heads: int) -> torch.Tensor:
    """(b, kv_heads, t, d) -> (b, heads, t, d): key/value head j serves query heads j*r .. j*r + r - 1
    (Hugging Face's repeat_kv), for an attention core that needs equal head counts."""
    rep = heads // k.shape[1]
    return k if rep == 1 else k.repeat_interleave(rep, dim=1)


def grouped_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
                             doc_pos: torch.Tensor | None = None) -> torch.Tensor:
    """The attention core, (b, heads, t, head_dim) q and (b, kv_heads, t, head_dim) k, v in, q's shape
    out: softmax(q k^T / sqrt(d) + causal mask) v, each key/value head shared by its group of query heads.
    `doc_pos` (b, t) (packed documents, model/documents.py): the mask is block-causal within documents."""
    gqa = k.shape[1] != q.shape[1]
    if doc_pos is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=block_causal_mask(doc_pos), dropout_p=dropout_p,
                                          enable_gqa=gqa)


class GroupedQueryAttention(nn.Module):
    """Causal attention with n_head query heads and n_kv_heads key/value heads, rotary positions.

    `attend` is the seam of model/gpt.py, k and v with n_kv_heads heads (`grouped_causal_attention`).
    `rope_positions` (None: 0..t-1) is the positions' seam: a layer that hands this module a chunk of
    the sequence sets the chunk's positions. Packed documents (`doc_pos`, model/documents.py) bring their
    own: each token rotates by its position inside its document, and `attend` gets them too."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.head_dim = cfg.head_dim
        self.theta = cfg.rope_theta
        self.rope_scaling = cfg.rope_scaling
        self.attend = grouped_causal_attention
        self.rope_positions = None
        self.q = nn.Linear(cfg.d_model, cfg.n_head * self.head_dim, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.n_kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.n_kv_heads * self.head_dim, bias=False)
        self.proj = nn.Linear(cfg.n_head * self.head_dim, cfg.d_model, bias=False)
        self.proj.residual_scaled = True

    def forward(self, x: torch.Tensor, cache=None, doc_pos=None) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, -1, self.head_dim).transpose(1, 2) for z in (self.q(x), self.k(x), self.v(x)))
        if cache is None and doc_pos is None:
            q, k = apply_rope(q, k, self.theta, self.rope_positions, self.rope_scaling)
            y = self.attend(q, k, v, 0.0)
        elif cache is None:  # packed documents: positions restart per document, block-causal mask
            q, k = apply_rope(q, k, self.theta, doc_pos, self.rope_scaling)
            y = self.attend(q, k, v, 0.0, doc_pos=doc_pos)
        else:  # generation (model/kv_cache.py): rotate by each row's positions, then the cache stores the
            # rotated k at n_kv_heads heads (as Hugging Face's cache does) and attends over every position
            q, k = apply_rope(q, k, self.theta, cache.positions(t), self.rope_scaling)
            y = cache.attend(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.down = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=False)
        self.down.residual_scaled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig, index: int = 0):
        super().__init__()
        self.ln_1 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = GroupedQueryAttention(cfg)
        self.ln_2 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = mlp_for(cfg, index, lambda: SwiGLU(cfg))  # an MoE of SwiGLUs on every moe_every-th block

    def forward(self, x: torch.Tensor, cache=None, doc_pos=None) -> torch.Tensor:
        h = self.ln_1(x)
        x = x + attend_block(self.attn, h, cache, doc_pos)  # model/kv_cache.py: how each caller passes what
        return x + self.mlp(self.ln_2(x))


class Llama(nn.Module):
    tied_head = False  # read by the pipeline split: the last stage needs no embedding

    def __init__(self, cfg: LlamaConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.init_seed = seed  # the draw of every parameter is seeded from it and the parameter's name
        self.tied_head = cfg.tie_embeddings  # tied: the pipeline's last stage keeps `wte` (its head's weight)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleDict({str(i): LlamaBlock(cfg, i) for i in range(cfg.n_layer)})
        self.ln_f = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight  # one parameter, registered once (as wte.weight)
        self.reset_parameters()

    def init_rules(self) -> dict:
        """GPT-2's scheme as rules (model/init.py): std 0.02, residual projections scaled by 1/sqrt(2 n_layer),
        RMSNorm gains 1."""
        return standard_rules(self, self.cfg.n_layer, lambda mod: 0.02)

    def reset_parameters(self) -> None:
        """Each parameter drawn from its own seeded generator (model/init.py): any shard can redraw its part."""
        initialise(self, self.init_rules(), self.init_seed)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, x: torch.Tensor, cache=None, doc_pos=None) -> torch.Tensor:
        """Token ids -> logits. A pipeline stage without `wte` (not the first) takes hidden states, one
        without the head (not the last) returns them.

        `cache` (generation only, model/kv_cache.py): as GPT's; each layer reads the rotary positions of
        the new tokens from it, appends its keys and values, and the call advances it. `doc_pos` (packed
        documents): as GPT's; every layer rotates by them and attends block-causally."""
        if self.wte is not None and not x.is_floating_point():  # token ids (a tied last stage gets hidden states)
            x = self.wte(x)
        x = run_blocks(self.blocks, x, cache, doc_pos)
        if self.lm_head is not None:
            x = self.lm_head(self.ln_f(x))
        return x
