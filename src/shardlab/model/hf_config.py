"""A Hugging Face model directory's config.json -> the shardlab model config that computes what transformers
computes with it (GPT-2's `GPTConfig`, Llama's `LlamaConfig`), field by field; a field whose value the model
here does not compute (exact GELU, biases on Llama, yarn rope scaling, ...) is refused in one line naming it.

Torch-free: `ckpt import --hf` (checkpoint/hf_import.py) reads it, and so does config validation, where
`ckpt.init_from=HF_DIR` takes the model's dimensions from the directory before anything is built.
"""
from __future__ import annotations

import json
from pathlib import Path

from shardlab.model.configs import GPTConfig, LlamaConfig

ARCHITECTURES = {"GPT2LMHeadModel": "gpt2", "LlamaForCausalLM": "llama"}


class HFImportError(ValueError):
    """The directory is not something the import reads: one line naming what (exit 2)."""


def read_config(hf_dir: Path) -> dict:
    try:
        c = json.loads((Path(hf_dir) / "config.json").read_text())
    except FileNotFoundError:
        raise HFImportError(f"{hf_dir} has no config.json: not a Hugging Face model directory") from None
    except (OSError, ValueError) as e:
        raise HFImportError(f"{hf_dir}/config.json is not readable JSON ({type(e).__name__})") from None
    if not isinstance(c, dict):
        raise HFImportError(f"{hf_dir}/config.json is not a JSON object")
    return c


def model_config(hf_dir: Path, c: dict | None = None) -> GPTConfig | LlamaConfig:
    """config.json -> the shardlab model that computes what transformers computes with it."""
    c = read_config(hf_dir) if c is None else c
    archs = c.get("architectures") or []
    arch = ARCHITECTURES.get(archs[0]) if len(archs) == 1 else None
    if arch is None:
        raise HFImportError(f"{hf_dir}/config.json: architectures={archs!r} is not supported; shardlab imports "
                            f"{' and '.join(ARCHITECTURES)}")
    if c.get("model_type") != arch:
        raise HFImportError(f"{hf_dir}/config.json: model_type={c.get('model_type')!r} does not match "
                            f"architectures {archs!r} (expected {arch!r})")
    try:
        return gpt2_config(c) if arch == "gpt2" else llama_config(c)
    except KeyError as e:
        raise HFImportError(f"{hf_dir}/config.json: no {e.args[0]!r}; not a complete {archs[0]} config") from None
    except _Unsupported as e:
        field, value, why = e.args
        raise HFImportError(f"{hf_dir}/config.json: {field}={value!r} is not supported ({why})") from None


class _Unsupported(Exception):
    """(field, value, why)"""


def _require(c: dict, field: str, ok, default, why: str) -> None:
    value = c.get(field, default)
    if not ok(value):
        raise _Unsupported(field, value, why)


def gpt2_config(c: dict) -> GPTConfig:
    d, heads = c["n_embd"], c["n_head"]
    _require(c, "activation_function", lambda v: v in ("gelu_new", "gelu_pytorch_tanh"), "gelu_new",
             "shardlab's GPT-2 MLP is GELU with the tanh approximation: gelu_new or gelu_pytorch_tanh")
    _require(c, "n_inner", lambda v: v in (None, 4 * d), None, f"the MLP is 4 x n_embd = {4 * d} wide")
    _require(c, "scale_attn_weights", lambda v: v is True, True, "attention scores are scaled by 1/sqrt(head size)")
    _require(c, "scale_attn_by_inverse_layer_idx", lambda v: not v, False, "no per-layer attention scaling")
    _require(c, "add_cross_attention", lambda v: not v, False, "a decoder-only model has no cross-attention")
    _require(c, "n_head", lambda v: v > 0 and d % v == 0, heads, f"must divide n_embd={d}")
    return GPTConfig(n_layer=c["n_layer"], n_head=heads, d_model=d, vocab_size=c["vocab_size"],
                     max_seq_len=c["n_positions"], layer_norm_eps=float(c.get("layer_norm_epsilon", 1e-5)),
                     tie_embeddings=bool(c.get("tie_word_embeddings", True)))


def llama_config(c: dict) -> LlamaConfig:
    d, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    _require(c, "hidden_act", lambda v: v == "silu", "silu", "the SwiGLU MLP gates with SiLU")
    _require(c, "attention_bias", lambda v: not v, False, "shardlab's llama projections have no bias")
    _require(c, "mlp_bias", lambda v: not v, False, "shardlab's llama MLP has no bias")
    _require(c, "num_attention_heads", lambda v: v > 0 and d % v == 0 and (d // v) % 2 == 0, heads,
             f"must divide hidden_size={d} into heads of even size (rotary pairs)")
    _require(c, "head_dim", lambda v: v in (None, d // heads), d // heads,
             f"heads are hidden_size / heads = {d // heads} wide")
    _require(c, "num_key_value_heads", lambda v: heads % kv == 0, kv, f"must divide num_attention_heads={heads}")
    theta, scaling = _rope(c)
    return LlamaConfig(n_layer=c["num_hidden_layers"], n_head=heads, d_model=d, n_kv_heads=kv,
                       vocab_size=c["vocab_size"], max_seq_len=c["max_position_embeddings"], rope_theta=theta,
                       norm_eps=float(c.get("rms_norm_eps", 1e-6)), intermediate_size=c["intermediate_size"],
                       tie_embeddings=bool(c.get("tie_word_embeddings", False)), rope_scaling=scaling)


def _rope(c: dict) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) from either spelling: transformers 5's `rope_parameters` (theta inside) or
    4's `rope_theta` + `rope_scaling` (whose type may be under "type")."""
    field = "rope_parameters" if isinstance(c.get("rope_parameters"), dict) else "rope_scaling"
    params = dict(c.get(field) or {})
    theta = float(params.pop("rope_theta", c.get("rope_theta", 10000.0)))
    kind = params.pop("rope_type", params.pop("type", "default"))
    if kind == "default":
        return theta, None
    if kind != "llama3":
        raise _Unsupported(f"{field}.rope_type", kind, "shardlab computes plain RoPE and Llama 3.1's llama3 scaling")
    try:
        scaling = {"rope_type": "llama3", "factor": float(params["factor"]),
                   "low_freq_factor": float(params["low_freq_factor"]),
                   "high_freq_factor": float(params["high_freq_factor"]),
                   "original_max_position_embeddings": int(params["original_max_position_embeddings"])}
    except KeyError as e:
        raise _Unsupported(f"{field}.{e.args[0]}", None, "llama3 scaling needs factor, low_freq_factor, "
                           "high_freq_factor and original_max_position_embeddings") from None
    if scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
        raise _Unsupported(f"{field}.high_freq_factor", scaling["high_freq_factor"], "must exceed low_freq_factor")
    return theta, scaling
