"""The model families' configurations: GPT-2's and Llama's dataclasses, their presets, the mixture-of-experts
fields both share, and `resolve_model_config` (a `[model]` config section -> a family's config, with its
ConfigError on impossible dimensions).

No torch here: config validation reads this module, and the launcher validates a run before it starts
the ranks, so it must not spend seconds importing torch. The modules (gpt.py, llama.py, moe.py) build
from these configs and re-export their names.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from shardlab.errors import ConfigError


@dataclass(kw_only=True)
class MoEFields:
    """The mixture-of-experts fields of both families' model configs (GPTConfig and LlamaConfig inherit them;
    0 experts = dense). Keyword-only, so that a family's own fields keep their positions and may come
    without defaults after these; `dataclasses.asdict` of a config (checkpoint `model` metadata) still holds
    them as flat `moe_*` keys."""
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_every: int = 1
    moe_capacity: float = 1.25
    moe_aux_weight: float = 0.01
    moe_z_weight: float = 0.001
    moe_bias_update: float = 0.0


MOE_KEYS = tuple(f.name for f in fields(MoEFields))


def moe_fields(m) -> dict:
    """The mixture-of-experts settings of a `[model]` config section, for either family's config."""
    return {k: getattr(m, k) for k in MOE_KEYS if hasattr(m, k)}


# --- GPT-2 ---------------------------------------------------------------------------------------

@dataclass
class GPTConfig(MoEFields):  # the moe_* fields: MoEFields (below)
    n_layer: int
    n_head: int
    d_model: int
    vocab_size: int = 256
    max_seq_len: int = 128
    dropout: float = 0.0
    layer_norm_eps: float = 1e-5
    tie_embeddings: bool = True  # the head's weight is wte's (GPT-2); False: a head of its own


PRESETS = {
    "tiny": dict(n_layer=2, n_head=4, d_model=64, vocab_size=256),  # tests: ~0.1M params
    "small": dict(n_layer=4, n_head=4, d_model=256, vocab_size=256),  # default run: ~3.2M params
    "gpt2": dict(n_layer=12, n_head=12, d_model=768, vocab_size=50257),  # GPT-2 124M
}


def arch_of(m) -> str:
    """The family a `[model]` section asks for: a llama preset names it, otherwise `model.arch`."""
    if m.preset in LLAMA_PRESETS:
        return "llama"
    return getattr(m, "arch", "gpt2")


def resolve_model_config(m, seq_len: int):
    """Merge a `[model]` config section with its preset; raise ConfigError on impossible dimensions.
    Returns a GPTConfig, or a LlamaConfig for the llama family (model/llama.py)."""
    if arch_of(m) == "llama":
        return resolve_llama_config(m, seq_len)
    base = dict(PRESETS.get(m.preset, {}))
    for key in ("n_layer", "n_head", "d_model", "vocab_size"):
        if getattr(m, key):
            base[key] = getattr(m, key)
    missing = [k for k in ("n_layer", "n_head", "d_model") if not base.get(k)]
    if missing:
        raise ConfigError(f"model.preset=custom needs model.{missing[0]} (and n_layer, n_head, d_model) set")
    base.setdefault("vocab_size", 256)
    if base["d_model"] % base["n_head"]:
        raise ConfigError(f"model.n_head={base['n_head']} does not divide model.d_model={base['d_model']}")
    if base["vocab_size"] < 256:
        raise ConfigError(f"model.vocab_size={base['vocab_size']}: byte-level data needs at least 256")
    max_seq = m.max_seq_len or seq_len
    if seq_len > max_seq:
        raise ConfigError(f"train.seq_len={seq_len} exceeds model.max_seq_len={max_seq}")
    return GPTConfig(max_seq_len=max_seq, dropout=m.dropout, layer_norm_eps=getattr(m, "norm_eps", 0.0) or 1e-5,
                     tie_embeddings=getattr(m, "tie_embeddings", "auto") != "false", **base, **moe_fields(m))


# --- Llama ---------------------------------------------------------------------------------------

@dataclass
class LlamaConfig(MoEFields):  # the moe_* fields: MoEFields (below)
    n_layer: int
    n_head: int
    d_model: int
    n_kv_heads: int = 0  # 0 = n_head (multi-head attention); 1 = multi-query attention
    vocab_size: int = 256
    max_seq_len: int = 128
    ffn_multiple_of: int = 256
    ffn_dim_multiplier: float = 1.0
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    dropout: float = 0.0  # Llama trains without dropout; kept for the config's common shape (must be 0)
    intermediate_size: int = 0  # 0: Llama 3's rule (ffn_hidden); else the SwiGLU width as given (HF imports)
    arch: str = "llama"  # written into checkpoint metadata: export and resume read the family from it
    tie_embeddings: bool = False  # True: the head's weight is wte's (Llama 3.2 1B/3B)
    # None: plain RoPE; Llama 3.1's: {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    # "original_max_position_embeddings"} (Hugging Face's names, so import and export copy it)
    rope_scaling: dict | None = None

    def __post_init__(self):
        if not self.n_kv_heads:
            self.n_kv_heads = self.n_head

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def ffn_hidden(self) -> int:
        if self.intermediate_size:
            return self.intermediate_size
        return ffn_hidden(self.d_model, self.ffn_multiple_of, self.ffn_dim_multiplier)


def ffn_hidden(d_model: int, multiple_of: int, multiplier: float = 1.0) -> int:
    """Llama 3's SwiGLU width: 2/3 of 4d (three matrices cost what GPT's two 4d ones do), times the
    multiplier, rounded up to a multiple of `multiple_of` (8B: 4096 -> 14336)."""
    hidden = int(2 * (4 * d_model) / 3)
    if multiplier != 1.0:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# Llama presets. Real shapes from Meta's Llama 3 / 3.1 releases (params.json), and small byte-vocabulary ones for CPU.
LLAMA_PRESETS = {
    "llama-tiny": dict(n_layer=2, n_head=4, n_kv_heads=2, d_model=64, vocab_size=256, ffn_multiple_of=32,
                       rope_theta=10000.0),  # tests: ~0.13M params
    "llama-small": dict(n_layer=4, n_head=8, n_kv_heads=2, d_model=256, vocab_size=256, ffn_multiple_of=64,
                        rope_theta=10000.0),  # CPU runs: ~2.95M params
    "llama3-8b": dict(n_layer=32, n_head=32, n_kv_heads=8, d_model=4096, vocab_size=128256,
                      ffn_multiple_of=1024, ffn_dim_multiplier=1.3, rope_theta=500000.0, max_seq_len=8192),
    "llama3-70b": dict(n_layer=80, n_head=64, n_kv_heads=8, d_model=8192, vocab_size=128256,
                       ffn_multiple_of=4096, ffn_dim_multiplier=1.3, rope_theta=500000.0, max_seq_len=8192),
    "llama3-405b": dict(n_layer=126, n_head=128, n_kv_heads=8, d_model=16384, vocab_size=128256,
                        ffn_multiple_of=4096, ffn_dim_multiplier=1.2, rope_theta=500000.0, max_seq_len=8192),
}


def resolve_llama_config(m, seq_len: int) -> LlamaConfig:
    """Merge a `[model]` section (arch = llama) with its preset; ConfigError on impossible dimensions."""
    base = dict(LLAMA_PRESETS.get(m.preset, {}))
    for key in ("n_layer", "n_head", "d_model", "vocab_size", "n_kv_heads", "ffn_multiple_of",
                "ffn_dim_multiplier", "rope_theta"):
        if getattr(m, key, 0):
            base[key] = getattr(m, key)
    missing = [k for k in ("n_layer", "n_head", "d_model") if not base.get(k)]
    if missing:
        raise ConfigError(f"model.preset=custom needs model.{missing[0]} (and n_layer, n_head, d_model) set")
    base.setdefault("vocab_size", 256)
    base.setdefault("ffn_multiple_of", 256)
    if base["d_model"] % base["n_head"]:
        raise ConfigError(f"model.n_head={base['n_head']} does not divide model.d_model={base['d_model']}")
    if (base["d_model"] // base["n_head"]) % 2:
        raise ConfigError(f"model.d_model / model.n_head = {base['d_model'] // base['n_head']}: rotary "
                          "positions rotate pairs of dimensions, so the head size must be even")
    kv = base.get("n_kv_heads") or base["n_head"]
    if kv > base["n_head"] or base["n_head"] % kv:
        raise ConfigError(f"model.n_kv_heads={kv} must divide model.n_head={base['n_head']} (each key/value "
                          "head serves a whole group of query heads)")
    if base["vocab_size"] < 256:
        raise ConfigError(f"model.vocab_size={base['vocab_size']}: byte-level data needs at least 256")
    if m.dropout:
        raise ConfigError(f"model.dropout={m.dropout}: the llama family trains without dropout; use model.dropout=0")
    preset_seq = base.pop("max_seq_len", 0)
    max_seq = m.max_seq_len or max(seq_len, preset_seq)
    if seq_len > max_seq:
        raise ConfigError(f"train.seq_len={seq_len} exceeds model.max_seq_len={max_seq}")
    return LlamaConfig(max_seq_len=max_seq, intermediate_size=getattr(m, "intermediate_size", 0),
                       norm_eps=getattr(m, "norm_eps", 0.0) or 1e-5,
                       tie_embeddings=getattr(m, "tie_embeddings", "auto") == "true",
                       rope_scaling=rope_scaling_of(m), **base, **moe_fields(m))


# Llama 3.1's published values: what `model.rope_scaling=llama3` uses where a model.rope_* key is 0
LLAMA3_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}
ROPE_KEYS = {"rope_factor": "factor", "rope_low_freq_factor": "low_freq_factor",
             "rope_high_freq_factor": "high_freq_factor", "rope_original_max_seq": "original_max_position_embeddings"}


def rope_scaling_of(m) -> dict | None:
    """The `rope_scaling` of a `[model]` section: None (model.rope_scaling=none), or llama3's parameters."""
    if getattr(m, "rope_scaling", "none") != "llama3":
        return None
    out = {"rope_type": "llama3"}
    for key, name in ROPE_KEYS.items():
        out[name] = getattr(m, key, 0) or LLAMA3_SCALING[name]
    out["original_max_position_embeddings"] = int(out["original_max_position_embeddings"])
    if out["high_freq_factor"] <= out["low_freq_factor"]:
        raise ConfigError(f"model.rope_high_freq_factor={out['high_freq_factor']} must exceed "
                          f"model.rope_low_freq_factor={out['low_freq_factor']} (the blended band lies between)")
    return out
