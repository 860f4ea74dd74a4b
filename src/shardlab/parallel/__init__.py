"""Parallelism applied to the single-device model: the named mesh, the layers, the composition.

    par = shardlab.parallel.build(cfg, device)   # mesh -> model -> layers (fixed order) -> optimizer
    loss_sum = par.forward_backward(microbatches, loss_weight)

See compose.py for the order, layers.py for the layer names, mesh.py for the mesh, step.py for `Parallel`,
docs/parallel.md and docs/architecture.md. Importing this package is cheap (the config module reads
`layers`): `build` imports the composition on first call, so `shardlab --help` never loads torch.
"""
from __future__ import annotations


def build(cfg, device=None, model=None, world_size=None):
    from shardlab.parallel.compose import build as _build
    return _build(cfg, device, model, world_size)


__all__ = ["build"]
