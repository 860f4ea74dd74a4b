"""Optimizers: the registry of what each declares (registry.py), the one serve-or-refuse rule the sharding
layers ask (serving.py), the parameter groups (groups.py), AdamW and SGD (adamw.py, sgd.py), Muon with AdamW
and its sharded step and cost formulas (muon/: docs/optim.md), bf16 optimizer states with stochastic rounding
(bf16_state.py) and the learning-rate schedule (schedule.py). Importing the package is cheap: names load their module on first use,
so the config and the planner read the registry without torch.
"""
from __future__ import annotations

from shardlab.lazy import lazy_names

__getattr__ = lazy_names(__name__, {
    "no_decay_names": "groups", "router_names": "groups", "param_groups": "groups",
    "adamw_factory": "adamw", "sgd_factory": "sgd", "lr_at": "schedule", "set_lr": "schedule",
    "Factory": "serving", "serve": "serving", "factory_for": "serving",
    "OptimizerRow": "registry", "register": "registry", "get": "registry"})
