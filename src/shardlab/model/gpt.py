"""GPT-2, exactly: learned positions, pre-LayerNorm, GELU(tanh), tied embedding/head (untied for a
GPT2LMHeadModel imported with `tie_word_embeddings: false`), GPT-2 init.

Single-device code. It knows nothing of ranks, device meshes or collectives: parallelism is applied to
it from the outside (`shardlab.parallel`). It returns logits; the loss is `shardlab.model.loss`.

Ready for splitting: the blocks live in a ModuleDict keyed "0", "1", ... (the same parameter names as
a ModuleList had: `blocks.3.attn.q.weight`), so a pipeline stage deletes the blocks it does not run and
sets the embeddings or the head it does not hold to None, and every name it keeps is unchanged; a
checkpoint written at any split loads into any other (torchtitan's scheme).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from shardlab.model.documents import block_causal_mask
from shardlab.model.kv_cache import attend_block, run_blocks
from shardlab.model.configs import PRESETS, GPTConfig, arch_of, resolve_model_config  # noqa: F401 - re-exported
from shardlab.model.init import initialise, parameters_on_meta, standard_rules
from shardlab.model.moe import mlp_for


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
                     doc_pos: torch.Tensor | None = None) -> torch.Tensor:
    """The attention core, (b, heads, t, head_dim) in and out: softmax(q k^T / sqrt(d) + causal mask) v.
    `doc_pos` (b, t) (packed documents, model/documents.py): the mask is block-causal within documents."""
    if doc_pos is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=block_causal_mask(doc_pos), dropout_p=dropout_p)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention with separate q, k, v projections.

    Separate projections (rather than one fused qkv) make each a plain (d, d) matrix whose rows are
    whole heads, so tensor parallelism splits heads by slicing rows and a checkpoint's shards stay
    contiguous. The number of heads is read from the projection's width at run time: a rank that holds
    n_head / tp heads runs this same code.

    `attend` is the attention core as a plain attribute (not a submodule, so no parameter names change):
    a layer applied from outside that computes attention differently (context parallelism's ring over
    sequence chunks) replaces it on each block, and this module stays single-device code. Its contract:
    `attend(q, k, v, dropout_p)`, and with packed documents `attend(q, k, v, dropout_p, doc_pos=...)`.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.head_dim = cfg.d_model // cfg.n_head
        self.dropout = cfg.dropout
        self.attend = causal_attention
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.v = nn.Linear(cfg.d_model, cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.proj.residual_scaled = True  # GPT-2 init: scale by 1/sqrt(2 * n_layer)

    def forward(self, x: torch.Tensor, cache=None, doc_pos=None) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, -1, self.head_dim).transpose(1, 2) for z in (self.q(x), self.k(x), self.v(x)))
        p = self.dropout if self.training else 0.0
        if cache is None and doc_pos is None:
            y = self.attend(q, k, v, p)
        elif cache is None:  # packed documents: block-causal (model/documents.py)
            y = self.attend(q, k, v, p, doc_pos=doc_pos)
        else:  # generation: this layer's KV cache appends k, v and attends over all cached positions
            y = cache.attend(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.proj.residual_scaled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, index: int = 0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlp = mlp_for(cfg, index, lambda: MLP(cfg))  # an MoE of MLPs on every moe_every-th block
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cache=None, doc_pos=None) -> torch.Tensor:
        h = self.ln_1(x)
        x = x + self.drop(attend_block(self.attn, h, cache, doc_pos))
        return x + self.drop(self.mlp(self.ln_2(x)))



class GPT(nn.Module):
    tied_head = True  # read by the pipeline split: the last stage keeps `wte` as its head's weight

    def __init__(self, cfg: GPTConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.init_seed = seed  # the draw of every parameter is seeded from it and the parameter's name
        self.tied_head = cfg.tie_embeddings  # (an untied head is its own parameter, as llama's)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleDict({str(i): Block(cfg, i) for i in range(cfg.n_layer)})
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight  # tied: one parameter, registered once (as wte.weight)
        self.reset_parameters()

    def init_rules(self) -> dict:
        """GPT-2 init as rules (model/init.py): std 0.02, residual projections scaled by 1/sqrt(2 n_layer),
        the position table 0.01, LayerNorms one and zero."""
        return standard_rules(self, self.cfg.n_layer, lambda mod: 0.02 if mod is self.wte else 0.01)

    def reset_parameters(self) -> None:
        """Each parameter drawn from its own seeded generator (model/init.py): any shard can redraw its part."""
        initialise(self, self.init_rules(), self.init_seed)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, x: torch.Tensor, cache=None, doc_pos=None) -> torch.Tensor:
        """Token ids -> logits. A pipeline stage without the embeddings takes (and one without the head
        returns) hidden states instead. The positions mark the first stage: the last stage keeps `wte`
        too, as the weight of its tied head.

        `cache` (generation only, model/kv_cache.py): a KVCache this call reads positions and the padding
        mask from, appends every layer's keys and values to, and advances by the new positions.
        `doc_pos` (packed documents, data.doc_mask): (b, t) each token's position inside its document; the
        position embedding looks them up and every block's attention is block-causal (model/documents.py)."""
        t = x.shape[1]
        if self.wpe is not None:
            if doc_pos is not None:
                pos = doc_pos
            else:
                pos = torch.arange(t, device=x.device) if cache is None else cache.positions(t)
            x = self.drop(self.wte(x) + self.wpe(pos))
        x = run_blocks(self.blocks, x, cache, doc_pos)
        if self.lm_head is not None:
            x = self.lm_head(self.ln_f(x))
        return x


def build_model(cfg, seed: int, meta: bool = False) -> nn.Module:
    """Same seed -> the same initial weights on every rank, at any world size. `cfg` is a GPTConfig or a
    LlamaConfig (model/llama.py): the model of that family. `meta`: the parameters on the meta device
    (nothing allocated, nothing drawn; buffers real): the composition allocates and draws each rank's part."""
    with torch.random.fork_rng(devices=[]), (parameters_on_meta() if meta else contextlib.nullcontext()):
        torch.manual_seed(seed)
        if getattr(cfg, "arch", "gpt2") == "llama":
            from shardlab.model.llama import Llama

            return Llama(cfg, seed)
        return GPT(cfg, seed)
