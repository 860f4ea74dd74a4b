"""What the local SGD / DiLoCo tests share (tests/parallel/dp/test_sync.py, tests/parallel/dp/test_sync_stream.py): plain SGD in
place of the trainer's AdamW for the parities with ddp."""
from __future__ import annotations

from contextlib import contextmanager

import torch


def sgd_factory(lr: float | None = None):
    """A stand-in for `optim.adamw_factory(cfg, no_decay, routers)` (optim/registry.py's factories): plain SGD at `lr` (default the run's
    train.lr). Its update is linear in the gradient, so averaging the replicas' updated parameters equals
    updating with the averaged gradient. (AdamW's update is not linear, and its state stays per replica:
    with it, H = 1 is a different algorithm, not ddp.)"""
    def make(cfg, no_decay, routers=frozenset()):
        def factory(named_params):
            return torch.optim.SGD([p for _, p in named_params if p.requires_grad],
                                   lr=cfg.train.lr if lr is None else lr, foreach=False)
        return factory
    return make


_LR: list = [None]  # the lr of the block being run (sgd_instead_of_adamw)


def _plain_sgd(cfg, no_decay, routers=frozenset()):
    return sgd_factory(_LR[0])(cfg, no_decay, routers)


@contextmanager
def sgd_instead_of_adamw(lr: float | None = None):
    """Within the block, whatever builds the optimizer (Trainer, parallel.build) for a run that names the default
    `train.optimizer=adamw` gets `sgd_factory(lr)`'s: the registry's adamw row is swapped for one with this
    factory while the block lasts (the config names its row, so swapping the default name is not enough)."""
    import dataclasses

    from shardlab.optim import registry

    real, _LR[0] = registry.OPTIMIZERS[registry.DEFAULT], lr
    registry.register(dataclasses.replace(real, states=0, factory="sync_harness:_plain_sgd"))
    try:
        yield
    finally:
        registry.register(real)
