"""What the local SGD / DiLoCo tests share (tests/parallel/dp/test_sync.py, tests/parallel/dp/test_sync_stream.py): plain SGD in
place of the trainer's AdamW for the parities with ddp."""
from __future__ import annotations

from contextlib import contextmanager

import torch


def sgd_factory(lr: float | None = None):
    """A stand-in for `optim.adamw_factory(cfg, no_decay, routers)`: plain SGD at `lr` (default the run's
    train.lr). Its update is linear in the gradient, so averaging the replicas' updated parameters equals
    updating with the averaged gradient. (AdamW's update is not linear, and its state stays per replica:
    with it, H = 1 is a different algorithm, not ddp.)"""
    def make(cfg, no_decay, routers=frozenset()):
        def factory(named_params):
            return torch.optim.SGD([p for _, p in named_params if p.requires_grad],
                                   lr=cfg.train.lr if lr is None else lr, foreach=False)
        return factory
    return make


@contextmanager
def sgd_instead_of_adamw(lr: float | None = None):
    """Within the block, whatever builds the optimizer (Trainer, parallel.build) gets `sgd_factory(lr)`'s."""
    from shardlab import optim

    real = optim.adamw_factory
    optim.adamw_factory = sgd_factory(lr)
    try:
        yield
    finally:
        optim.adamw_factory = real
