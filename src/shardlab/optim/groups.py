"""The parameter groups every optimizer of the registry builds: GPT-2-style decay groups and the MoE routers'
own group, decided on the bare model so that sharded layers (whose shards are flat) group the same way."""
from __future__ import annotations

import torch


def no_decay_names(model: torch.nn.Module) -> set[str]:
    """Biases, LayerNorm weights and anything 1-D are not decayed (as in GPT-2 / nanoGPT).
    Decided on the bare model, so sharded strategies (whose shards are flat) group the same way."""
    return {n for n, p in model.named_parameters() if p.dim() < 2}


def router_names(model: torch.nn.Module) -> set[str]:
    """The MoE routers' weights (empty for a dense model). Read on the bare model, like no_decay_names."""
    from shardlab.model import anatomy
    from shardlab.model.moe import MoE

    router = anatomy.of(model).weight(anatomy.of(model).router)
    return {f"{n}.{router}" if n else router for n, m in model.named_modules() if isinstance(m, MoE)}


def _is_dtensor(p: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(p, DTensor)


def param_groups(named_params, t, no_decay: set[str], routers: set[str], scale: float) -> list[dict]:
    """Decayed, not decayed, and the MoE routers (lr x `scale` through the group's `lr_scale`, which `set_lr`
    applies, and no weight decay, as Switch / ST-MoE leave the router undecayed); `t`: the config's [train].
    One fused kernel call per group must not mix DTensors with plain tensors (DTensor TP without SP leaves
    LayerNorms plain): each group is split by kind, same hyperparameters. Empty groups are left out."""
    named_params = [(n, p) for n, p in named_params if p.requires_grad]
    decay = [p for n, p in named_params if n not in no_decay and n not in routers]
    rest = [p for n, p in named_params if n in no_decay and n not in routers]
    router = [p for n, p in named_params if n in routers]
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": rest, "weight_decay": 0.0},
              {"params": router, "weight_decay": 0.0, "lr": t.lr * scale, "lr_scale": scale}]
    return [{**g, "params": ps} for g in groups
            for ps in ([p for p in g["params"] if not _is_dtensor(p)],
                       [p for p in g["params"] if _is_dtensor(p)]) if ps]
