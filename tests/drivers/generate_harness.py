"""Shared pieces of the generate tests: a model whose greedy choices are decisive, prompts of different
lengths, and the function the worker ranks run."""
from __future__ import annotations

import torch

from shardlab.generate.engine import Layout, Options, analytic_comm_bytes, generate
from shardlab.model.gpt import GPTConfig, build_model
from shardlab.model.llama import LlamaConfig

CFG = GPTConfig(n_layer=4, n_head=4, d_model=64, vocab_size=256, max_seq_len=64)
# grouped-query attention: 4 query heads share 2 key/value heads (tp=2 splits them, one per rank)
LLAMA_CFG = LlamaConfig(n_layer=4, n_head=4, n_kv_heads=2, d_model=64, vocab_size=256, max_seq_len=64,
                        ffn_multiple_of=32, rope_theta=10000.0)
PROMPTS = [list(b"def main():"), list(b"x"), list(b"import os, sys"), list(b"ab =")]


def decisive_model(arch: str = "gpt2") -> torch.nn.Module:
    """The tiny GPT with weights of std 0.3 instead of GPT-2's 0.02: an untrained model at GPT-2's scale
    has near-uniform logits and repeats one byte, so equal tokens would prove little; at this scale the
    greedy path wanders over the vocabulary and its top-two logit gaps are >= 8e-4 (LayerNorms stay at 1, 0).
    `arch="llama"`: LLAMA_CFG's model, made decisive the same way (RMSNorm gains stay at 1)."""
    return make_decisive(build_model(LLAMA_CFG if arch == "llama" else CFG, seed=0))


def make_decisive(model: torch.nn.Module) -> torch.nn.Module:
    """Redraw every weight but the norms' at std 0.3 (seeded), in eval mode: see `decisive_model`."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" not in name and not name.startswith("ln_"):
                p.normal_(0.0, 0.3, generator=g)
    return model.eval()


def run_layout(tp: int, pp: int, dp: int, lanes: int = 0, use_cache: bool = True, temperature: float = 0.0,
               max_new: int = 12, arch: str = "gpt2") -> dict:
    """On every rank: generate PROMPTS under the layout; return the tokens, this rank's comm bytes by op
    and the analytic bytes for its pipeline stage."""
    from shardlab import comm

    opts = Options(max_new=max_new, temperature=temperature, top_k=20 if temperature else 0, seed=7,
                   use_cache=use_cache, lanes=lanes)
    layout = Layout(tp=tp, pp=pp, dp=dp)
    tokens, stats = generate(decisive_model(arch), PROMPTS, opts, layout)
    stage = (comm.rank() // (tp * dp)) if pp > 1 else 0
    replica = (comm.rank() // tp) % dp
    return {"tokens": tokens, "bytes": stats.comm_bytes, "replica": replica, "stage": stage,
            "analytic": analytic_comm_bytes(LLAMA_CFG if arch == "llama" else CFG, layout, PROMPTS, opts,
                                            rank_stage=stage)}
