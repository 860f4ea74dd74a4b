"""Shared pieces of the Hugging Face import tests: tiny random GPT2LMHeadModel / LlamaForCausalLM models
saved with transformers (no download), transformers' own forward made float64 throughout, and the
functions worker ranks run (generate under tp / pp, a run starting from an imported checkpoint).

Why the reference needs patching to be float64: transformers' Llama computes its RMSNorm and its rotary
tables in float32 whatever the model's dtype (`hidden_states.to(torch.float32)`, `inv_freq` built with
`dtype=torch.float`), so a float64 LlamaForCausalLM still rounds to 6e-8 there, 1e-9 is out of reach, and
the gap would depend on the CPU's float32 kernels. `float64_reference` runs the same transformers code
with those two modules' `torch.float` / `torch.float32` meaning float64: every operation and its order stay
transformers', only the precision is raised, so both sides are float64 end to end (portable on any CPU:
shardlab/testing/compare.py). GPT-2's forward has no such upcast (only with reorder_and_upcast_attn).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

# the cases the tests import; with this original context (32) the four frequencies of a head of 8 at
# theta 500000 fit 5.1, 0.19, 0.007 and 0.0003 times into it: all three of llama3's bands (kept above
# high_freq_factor, blended between, divided below low_freq_factor) are exercised
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 0.1, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
# Every config field the import maps is away from its default (transformers' and shardlab's: MAPPED
# below) in at least one case, the norm epsilons in every case and far from the defaults (1e-5 / 1e-6):
# an import or export that reads a wrong key and falls back to a default builds a model whose logits
# differ (by ~1e-3 for eps: test_a_wrong_epsilon_moves_the_logits_far_beyond_the_tolerance) and fails.
CASES = {
    "gpt2-tied": dict(arch="gpt2", vocab=97, tie=True, eps=3e-3),
    "gpt2-untied": dict(arch="gpt2", vocab=1001, tie=False, eps=2e-2),
    "llama-gqa-sharded": dict(arch="llama", vocab=300, tie=False, kv=2, theta=5000.0, shard="20KB", eps=1e-2),
    "llama3-tied-scaled": dict(arch="llama", vocab=257, tie=True, kv=1, theta=500000.0, scaling=LLAMA3, eps=4e-3),
}
# HF config.json field -> shardlab's model record field, for each architecture: what import and export map
MAPPED = {
    "gpt2": {"n_layer": "n_layer", "n_head": "n_head", "n_embd": "d_model", "vocab_size": "vocab_size",
             "n_positions": "max_seq_len", "layer_norm_epsilon": "layer_norm_eps",
             "tie_word_embeddings": "tie_embeddings"},
    "llama": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "hidden_size": "d_model",
              "num_key_value_heads": "n_kv_heads", "vocab_size": "vocab_size",
              "max_position_embeddings": "max_seq_len", "intermediate_size": "intermediate_size",
              "rms_norm_eps": "norm_eps", "rope_theta": "rope_theta", "tie_word_embeddings": "tie_embeddings",
              "rope_scaling": "rope_scaling"},
}


def hf_field(conf: dict, field: str):
    """A field of a saved config.json, whichever transformers spelling it is in (5 keeps rope_theta and the
    scaling inside `rope_parameters`, 4 at the top level)."""
    rope = conf.get("rope_parameters")
    if field == "rope_theta" and isinstance(rope, dict):
        return rope["rope_theta"]
    if field == "rope_scaling" and isinstance(rope, dict):
        return {k: v for k, v in rope.items() if k != "rope_theta"} if rope.get("rope_type") != "default" else None
    return conf[field]


def make_hf(case: str, out: Path, dtype=torch.float32, std: float = 0.3):
    """Save the case's random model in `out` (safetensors; sharded with an index for `shard`). Weights at
    std 0.3 (not 0.02): greedy paths then wander over the vocabulary with clear gaps between the top two
    logits, so equal tokens prove something. Returns the transformers model (float32, eval)."""
    import transformers

    torch.manual_seed(0)
    conf = hf_config_of(case)
    model = (transformers.GPT2LMHeadModel if CASES[case]["arch"] == "gpt2" else transformers.LlamaForCausalLM)(conf)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name and "ln_" not in name:
                p.normal_(0.0, std)
            else:  # norms away from 1 and biases away from 0, so a missed or swapped one shows
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0.0, 0.1)
    model = model.to(dtype).eval()
    shard = CASES[case].get("shard")
    model.save_pretrained(str(out), **({"max_shard_size": shard} if shard else {}))
    return model


def hf_config_of(case: str):
    """The case's transformers config (GPT2Config or LlamaConfig)."""
    import transformers

    c = CASES[case]
    if c["arch"] == "gpt2":
        return transformers.GPT2Config(vocab_size=c["vocab"], n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                       layer_norm_epsilon=c["eps"], tie_word_embeddings=c["tie"], bos_token_id=None,
                                       eos_token_id=None, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    rope = {"rope_type": "default", **(c.get("scaling") or {}), "rope_theta": c["theta"]}
    return transformers.LlamaConfig(vocab_size=c["vocab"], hidden_size=32, intermediate_size=48,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=c["kv"],
                                    max_position_embeddings=64, rms_norm_eps=c["eps"], rope_parameters=rope,
                                    tie_word_embeddings=c["tie"], bos_token_id=None, eos_token_id=None)


def make_hf_config(case: str) -> dict:
    """The config.json `make_hf` writes for the case, as a dict (no weights made)."""
    return hf_config_of(case).to_dict()


def write_tokenizer(out: Path, vocab: int, eos: bool = False) -> None:
    """A word-level tokenizer.json of `vocab` entries (the import copies it, never reads it); with `eos` the
    last of them is `<|endoftext|>`, a special token, as GPT-2's (a run can then train with it)."""
    words = vocab - 1 if eos else vocab
    doc = {"version": "1.0", "model": {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(words)},
                                        "unk_token": "w0"}}
    if eos:
        doc["added_tokens"] = [{"id": words, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True}]
        doc["model"]["vocab"]["<|endoftext|>"] = words
    (out / "tokenizer.json").write_text(json.dumps(doc))
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))


class _Torch64:
    """The torch module, except that `torch.float` and `torch.float32` are float64."""

    def __getattr__(self, name):
        return torch.float64 if name in ("float", "float32") else getattr(torch, name)


@contextlib.contextmanager
def float64_reference():
    """transformers' Llama and its rope functions computing their float32 upcasts in float64 (module doc)."""
    from transformers import modeling_rope_utils
    from transformers.models.llama import modeling_llama

    saved = modeling_llama.torch, modeling_rope_utils.torch
    modeling_llama.torch = modeling_rope_utils.torch = _Torch64()
    try:
        yield
    finally:
        modeling_llama.torch, modeling_rope_utils.torch = saved


def reference_model(hf_dir: Path):
    """The saved model, loaded by transformers in float64 (under float64_reference for the rope tables)."""
    import transformers

    with float64_reference():
        model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float64,
                                                                  attn_implementation="eager")
    return model.eval()


def reference_logits(hf_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    model = reference_model(hf_dir)
    with float64_reference(), torch.no_grad():
        return model(ids).logits


def reference_greedy(hf_dir: Path, prompt: list[int], max_new: int) -> list[int]:
    model = reference_model(hf_dir)
    with float64_reference(), torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, max_new_tokens=max_new, pad_token_id=0)  # no eos: no early stop
    return out[0, len(prompt):].tolist()


def prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (7, 3, 11)]


def generate_layout(ck: str, tp: int, pp: int, max_new: int) -> torch.Tensor:
    """On every rank, in float64: greedy tokens of `prompts` from the imported checkpoint under the layout."""
    from shardlab.generate.engine import Layout, Options, generate
    from shardlab.generate.load import load_model

    model = load_model(ck).double()
    return generate(model, prompts(model.cfg.vocab_size), Options(max_new=max_new), Layout(tp=tp, pp=pp))[0]


def generate_layout_from(path: str, tp: int, pp: int, max_new: int) -> torch.Tensor:
    """`generate_layout` as `shardlab generate --nproc N` runs it: from the path, each rank building its part
    on the meta device and reading only that part's bytes (generate/shard_load.py)."""
    from shardlab.generate.engine import Layout, Options, generate
    from shardlab.generate.load import model_config

    vocab = model_config(path).vocab_size
    return generate(path, prompts(vocab), Options(max_new=max_new), Layout(tp=tp, pp=pp))[0]


def init_from_run(run_dir: Path, ck: str, overrides: list[str], world: int, steps: int = 2) -> dict:
    """A run starting from `ck` (ckpt.init_from): its full parameters before any step, its optimizer's
    state then, its start step, its norms' epsilons, and the global losses of `steps` steps."""
    from ckpt_harness import BASE, _steps

    from shardlab import config
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, [b for b in BASE if not b.startswith("model.")] + [f"ckpt.init_from={ck}", *overrides])
    cfg = config.validate(cfg, world)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, Path(run_dir))
    before = {k: v.detach().clone() for k, v in trainer.strategy.full_parameters().items()}
    fresh = not any(len(s) for s in trainer.state.optimizer.state.values())
    # the epsilon of every norm of the model that trained (the import's value must reach it through config)
    eps = sorted({m.eps for m in trainer.par.model.modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))})
    losses = _steps(trainer, steps)
    return {"before": before, "fresh_optimizer": fresh, "start": trainer.start_step, "losses": losses,
            "notes": trainer.ckpt.notes, "model": cfg.model, "eps": eps}
