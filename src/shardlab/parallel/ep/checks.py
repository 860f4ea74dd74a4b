"""What mixture of experts and expert parallelism accept, checked before launch by `config.validate`
(one line each)."""
from __future__ import annotations

from shardlab.errors import ConfigError
from shardlab.parallel import rules


# Mixture of experts and expert parallelism.
def validate_moe(cfg, dims) -> None:
    """The mixture-of-experts keys and expert parallelism (docs/moe.md)."""
    m, p = cfg.model, cfg.parallel
    E = m.moe_experts
    if E < 0:
        raise ConfigError(f"model.moe_experts={E}: must be 0 (dense) or the number of experts")
    if m.moe_every < 1:
        raise ConfigError(f"model.moe_every={m.moe_every}: must be at least 1 (1 = every block's MLP is an MoE)")
    if m.moe_capacity < 0 or m.moe_aux_weight < 0 or m.moe_z_weight < 0:
        raise ConfigError("model.moe_capacity, model.moe_aux_weight and model.moe_z_weight must be >= 0 "
                          "(moe_capacity=0: dropless)")
    if m.moe_bias_update < 0:
        raise ConfigError(f"model.moe_bias_update={m.moe_bias_update}: must be >= 0 (0 = off; DeepSeek-V3 uses "
                          "0.001)")
    if m.moe_router_lr_scale <= 0:
        raise ConfigError(f"model.moe_router_lr_scale={m.moe_router_lr_scale}: must be > 0 (1.0 = the routers "
                          "learn at train.lr)")
    if E and not 1 <= m.moe_top_k <= E:
        raise ConfigError(f"model.moe_top_k={m.moe_top_k}: must be between 1 and model.moe_experts={E}")
    rules.check(cfg, dims, "moe")  # the layers an MoE model runs under
    if p.ep < 1:
        raise ConfigError(f"parallel.ep={p.ep}: must be a positive degree (1 = no expert parallelism)")
    if p.ep == 1:
        return
    if not E:
        raise ConfigError(f"parallel.ep={p.ep} without experts: set model.moe_experts (a multiple of {p.ep}) "
                          "or parallel.ep=1")
    if E % p.ep:
        raise ConfigError(f"model.moe_experts={E} is not divisible by parallel.ep={p.ep}: each expert-parallel "
                          "rank holds the same number of experts")
    if dims.dp_size % p.ep:
        raise ConfigError(f"parallel.ep={p.ep} must divide the data-parallel size {dims.dp_size} (expert "
                          "parallelism borrows its ranks from the data-parallel ranks)")
    rules.check(cfg, dims, "ep")  # the data-parallel layers it composes with (its spec), plain reduction
