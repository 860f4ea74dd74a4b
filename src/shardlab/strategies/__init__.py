"""Data-parallel strategies behind one interface (see `base.Strategy` and docs/strategies.md)."""
from __future__ import annotations

import importlib

from shardlab.strategies.base import Strategy

# name -> "module:Class", imported on demand so one strategy's import cost never hits another's run.
REGISTRY = {
    "single": "shardlab.strategies.single:Single",
    "ddp": "shardlab.strategies.ddp:DDP",
    "zero1": "shardlab.strategies.zero:Zero1",
    "zero2": "shardlab.strategies.zero:Zero2",
    "zero3": "shardlab.strategies.zero:Zero3",
    "torch-ddp": "shardlab.strategies.native:TorchDDP",
    "torch-fsdp2": "shardlab.strategies.native:TorchFSDP2",
    "torch-zero1": "shardlab.strategies.native:TorchZero1",
}


def build_strategy(name: str, pcfg, dims, device) -> Strategy:
    if name not in REGISTRY:
        raise ValueError(f"strategy {name!r} is not implemented yet; available: {', '.join(REGISTRY)}")
    mod, cls = REGISTRY[name].split(":")
    strategy = getattr(importlib.import_module(mod), cls)(pcfg, dims, device)
    strategy.group = dims.group("dp_shard" if dims.dp_shard > 1 else "dp_replicate")
    return strategy


__all__ = ["Strategy", "build_strategy", "REGISTRY"]
