"""SGD with momentum over the same parameter groups: the registry's `sgd` row (one state tensor a
parameter, the momentum buffer; the planner models it as `optimizer=sgd`)."""
from __future__ import annotations

import torch

from shardlab.optim.groups import param_groups


def sgd_factory(cfg, no_decay: set[str], routers: set[str] = frozenset()):
    """Returns factory(named_params) -> SGD(momentum=train.beta1): elementwise and per tensor like AdamW."""
    t = cfg.train
    scale = float(getattr(cfg.model, "moe_router_lr_scale", 1.0))

    def factory(named_params):
        return torch.optim.SGD(param_groups(named_params, t, no_decay, routers, scale), lr=t.lr,
                               momentum=t.beta1)

    return factory
