"""The configuration's own checks, called from `config.validate()` (its entry point and the order of the
checks stay there): the model family and the ranges of every key. Each parallelism checks its own keys in its
package (parallel/dp, tp, cp, ep: `checks.py`). Each raises ConfigError with one line: what is wrong, what to
do instead."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from shardlab.errors import ConfigError, choice as _choice  # noqa: F401 - `checks._choice` for config

if TYPE_CHECKING:  # the types are for annotations only
    from shardlab.config.schema import Config, ModelConfig


# Model family: model.preset / model.arch and the llama-only keys.
LLAMA_KEYS = ("n_kv_heads", "rope_theta", "ffn_multiple_of", "ffn_dim_multiplier", "intermediate_size", "rope_factor",
              "rope_low_freq_factor", "rope_high_freq_factor", "rope_original_max_seq")


def _validate_arch(m: ModelConfig) -> None:
    """The preset names its family; `model.arch` picks one for model.preset=custom. Resolved in place, so
    config.toml says which family ran."""
    from shardlab.model.configs import LLAMA_PRESETS, PRESETS

    _choice("model.preset", m.preset, tuple(PRESETS) + tuple(LLAMA_PRESETS) + ("custom",))
    _choice("model.arch", m.arch, ("gpt2", "llama"))
    _choice("model.rope_scaling", m.rope_scaling, ("none", "llama3"))
    _choice("model.tie_embeddings", m.tie_embeddings, ("auto", "true", "false"))
    if m.preset in LLAMA_PRESETS:
        m.arch = "llama"
    elif m.preset != "custom" and m.arch != "gpt2":
        raise ConfigError(f"model.arch={m.arch} with model.preset={m.preset} (a gpt2 preset): use a llama preset "
                          f"({', '.join(LLAMA_PRESETS)}) or model.preset=custom with the sizes")
    if m.arch == "gpt2":
        for key in (*LLAMA_KEYS, "rope_scaling"):
            if getattr(m, key) and getattr(m, key) != "none":
                raise ConfigError(f"model.{key}={getattr(m, key)} applies to the llama family only; set "
                                  "model.arch=llama (or a llama-* preset) or drop the key")
    for key in (*LLAMA_KEYS, "norm_eps"):
        if getattr(m, key) < 0:
            raise ConfigError(f"model.{key}={getattr(m, key)}: must be at least 0 (0 = the preset's value)")


# Ranges: counts, probabilities and finite numbers, whatever the feature.
def _check_ranges(cfg: Config, world_size: int) -> None:
    """Values outside their meaning (negative counts, probabilities above 1, NaN) are bad input too."""
    import math

    from shardlab.config.schema import _public_name

    for section in fields(cfg):
        for f in fields(getattr(cfg, section.name)):
            v = getattr(getattr(cfg, section.name), f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{section.name}.{_public_name(f.name)}={v}: must be a finite number")
    t, m, c, d = cfg.train, cfg.model, cfg.ckpt, cfg.doctor
    from shardlab.observe.profile import parse_steps
    parse_steps(cfg.trace.profile)  # trace.profile=A-B, one line when malformed
    at_least = [("train.global_batch", t.global_batch, 0), ("train.warmup_steps", t.warmup_steps, 0),
                ("train.eval_every", t.eval_every, 0), ("train.eval_seqs", t.eval_seqs, 1),
                ("train.seed", t.seed, 0), ("train.grad_clip", t.grad_clip, 0), ("train.weight_decay", t.weight_decay, 0),
                ("ckpt.every", c.every, 0), ("ckpt.keep", c.keep, 0), ("ckpt.keep_every", c.keep_every, 0),
                ("ckpt.signal_grace_s", c.signal_grace_s, 0),
                ("doctor.hang_timeout_s", d.hang_timeout_s, 0), ("doctor.checksum_every", d.checksum_every, 0),
                ("doctor.spike_factor", d.spike_factor, 0), ("debug.slow_ms", cfg.debug.slow_ms, 0),
                ("debug.slow_rank", cfg.debug.slow_rank, -1)]  # mesh degrees: parallel.mesh.resolve
    at_least += [(f"model.{k}", getattr(m, k), 0) for k in ("n_layer", "n_head", "d_model", "vocab_size", "max_seq_len")]
    for key, value, low in at_least:
        if value < low:
            raise ConfigError(f"{key}={value}: must be at least {low}")
    if t.seed >= 2 ** 63:
        raise ConfigError(f"train.seed={t.seed}: must be below 2**63 (torch's seed range)")
    for key, value in (("model.dropout", m.dropout), ("train.beta1", t.beta1), ("train.beta2", t.beta2)):
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{key}={value}: must be in [0, 1)")
    if cfg.debug.slow_rank >= world_size:
        raise ConfigError(f"debug.slow_rank={cfg.debug.slow_rank}: no such rank at world size {world_size}")
    from shardlab.doctor.inject import Faults

    Faults.parse(cfg.debug, world_size)  # malformed debug.* fault specs: before launch, not in every rank
