"""What `shardlab generate` reads: a run, its checkpoints/ directory, one step directory, or an exported
Hugging Face GPT-2 or LlamaForCausalLM directory -> the model's dimensions and its full (unsharded) tensors.
The family comes from the checkpoint's metadata (`model.arch`, gpt2 when absent: older checkpoints) or the
export's `model_type`.

A checkpoint of any training layout loads the same way: DCP keeps every tensor's global shape and reads
the shards of whatever world wrote them (the reshard path, `checkpoint.hf.load_model_tensors`); each rank
then cuts its own tensor-parallel slice or pipeline stage from the full model, exactly as training does.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint.state import STATE_FILE
from shardlab.model.gpt import GPTConfig, build_model
from shardlab.model.llama import LlamaConfig
from shardlab.model.moe import MOE_KEYS


class LoadError(ValueError):
    """Bad input: the path is not something generate can load (one line, exit 2)."""


def is_hf_dir(p: Path) -> bool:
    return (p / "config.json").is_file() and (p / "model.safetensors").is_file()


def step_dir(path: str | Path) -> Path:
    """The checkpoint a RUN_OR_CHECKPOINT names: a step directory as it is, else the latest committed one."""
    try:
        p, kind = mf.resolve(path)
    except FileNotFoundError as e:
        raise LoadError(str(e)) from None
    if kind == "step":
        return p
    latest = mf.read_latest(p)
    candidates = mf.resume_candidates(p)
    if latest is None and not candidates:
        raise LoadError(f"{path}: no committed checkpoint in {p}")
    return latest if latest is not None else candidates[0]


def model_config(path: str | Path) -> GPTConfig | LlamaConfig:
    """The dimensions alone (cheap: the launcher validates with them before starting ranks)."""
    p = Path(path)
    if is_hf_dir(p):
        c = json.loads((p / "config.json").read_text())
        if c.get("model_type") == "llama":
            return llama_hf_config(p, c)
        if c.get("model_type") != "gpt2":
            raise LoadError(f"{p}/config.json: model_type {c.get('model_type')!r}; generate reads GPT-2 and Llama "
                            "exports")
        return GPTConfig(n_layer=c["n_layer"], n_head=c["n_head"], d_model=c["n_embd"], vocab_size=c["vocab_size"],
                         max_seq_len=c["n_positions"], layer_norm_eps=c.get("layer_norm_epsilon", 1e-5))
    step = step_dir(p)
    try:
        meta = json.loads((step / STATE_FILE).read_text())
    except (OSError, ValueError):
        raise LoadError(f"{step} has no readable {STATE_FILE}: not a complete checkpoint "
                        f"(`shardlab ckpt verify {step}`)") from None
    m = meta.get("model")
    if not m:
        raise LoadError(f"{step}/{STATE_FILE} has no model dimensions; cannot build the model")
    if m.get("arch", "gpt2") == "llama":
        fields = LlamaConfig.__dataclass_fields__
        return LlamaConfig(**{k: v for k, v in m.items() if k in fields})
    return GPTConfig(**{k: m[k] for k in ("n_layer", "n_head", "d_model", "vocab_size", "max_seq_len",
                                          "layer_norm_eps", *MOE_KEYS) if k in m})


def llama_hf_config(p: Path, c: dict) -> LlamaConfig:
    """A LlamaForCausalLM config.json -> LlamaConfig; the SwiGLU width is taken as it is. One line for what
    the llama model here does not compute (rope scaling, biases, a head size other than d_model / n_head)."""
    try:
        d, heads = c["hidden_size"], c["num_attention_heads"]
        unsupported = [k for k in ("rope_scaling", "attention_bias", "mlp_bias") if c.get(k)]
        if c.get("head_dim", d // heads) != d // heads:
            unsupported.append("head_dim")
        if c.get("hidden_act", "silu") != "silu":
            unsupported.append("hidden_act")
        if unsupported:
            raise LoadError(f"{p}/config.json: {unsupported[0]}={c[unsupported[0]]!r} is not supported by "
                            "shardlab's llama model (plain RoPE, no biases, SiLU, head_dim = hidden / heads)")
        return LlamaConfig(n_layer=c["num_hidden_layers"], n_head=heads, d_model=d,
                           n_kv_heads=c.get("num_key_value_heads") or heads, vocab_size=c["vocab_size"],
                           max_seq_len=c["max_position_embeddings"], rope_theta=float(c.get("rope_theta", 10000.0)),
                           norm_eps=c.get("rms_norm_eps", 1e-6), intermediate_size=c["intermediate_size"])
    except KeyError as e:
        raise LoadError(f"{p}/config.json: no {e.args[0]!r}; not a complete LlamaForCausalLM config") from None


def from_hf(sd: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """The inverse of checkpoint.hf.to_hf: Conv1D weights transposed back, c_attn split into q, k, v."""
    out = {"wte.weight": sd["transformer.wte.weight"], "wpe.weight": sd["transformer.wpe.weight"],
           "ln_f.weight": sd["transformer.ln_f.weight"], "ln_f.bias": sd["transformer.ln_f.bias"]}
    names = {"ln_1": "ln_1", "attn.c_proj": "attn.proj", "ln_2": "ln_2", "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}
    for i in range(n_layer):
        h = f"transformer.h.{i}."
        for theirs, ours in names.items():
            w = sd[h + theirs + ".weight"]
            out[f"blocks.{i}.{ours}.weight"] = w if theirs.startswith("ln") else w.t().contiguous()
            out[f"blocks.{i}.{ours}.bias"] = sd[h + theirs + ".bias"]
        w, b = sd[h + "attn.c_attn.weight"].t(), sd[h + "attn.c_attn.bias"]
        for z, wz, bz in zip("qkv", w.chunk(3), b.chunk(3)):
            out[f"blocks.{i}.attn.{z}.weight"] = wz.contiguous()
            out[f"blocks.{i}.attn.{z}.bias"] = bz.contiguous()
    return out


def load_model(path: str | Path):
    """The bare single-device model (GPT or Llama) with the checkpoint's (or export's) weights, in eval mode."""
    from shardlab.checkpoint.hf import llama_from_hf, load_model_tensors

    p = Path(path)
    cfg = model_config(p)
    llama = isinstance(cfg, LlamaConfig)
    if is_hf_dir(p):
        from safetensors.torch import load_file
        sd = (llama_from_hf if llama else from_hf)(load_file(str(p / "model.safetensors")), cfg.n_layer)
    else:
        sd = load_model_tensors(step_dir(p))
        if "blocks.0.attn.qkv.weight" in sd:  # written before q, k, v were split: the same rows, fused
            for i in range(cfg.n_layer):
                a = f"blocks.{i}.attn."
                for kind in ("weight", "bias"):
                    for z, part in zip("qkv", sd.pop(a + "qkv." + kind).chunk(3)):
                        sd[a + z + "." + kind] = part
    if not llama:
        sd.setdefault("lm_head.weight", sd["wte.weight"])  # GPT-2's head is tied to wte
    model = build_model(cfg, 0)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    if missing or unexpected:
        raise LoadError(f"{path}: weights do not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.eval()
