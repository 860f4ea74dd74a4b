"""Parallelism applied to the single-device model: the named mesh, the layers, the composition.

    par = shardlab.parallel.build(cfg, device)   # mesh -> model -> layers (fixed order) -> optimizer
    loss_sum = par.forward_backward(microbatches, loss_weight)

See compose.py for the order, layers.py for the layer names, mesh.py for the mesh, docs/parallel.md.
Importing this package is cheap (the config module reads `layers`); the rest loads on first use.
"""
from __future__ import annotations


def build(cfg, device=None, model=None, world_size=None):
    from shardlab.parallel.compose import build as _build
    return _build(cfg, device, model, world_size)


def __getattr__(name):
    if name == "Parallel":
        from shardlab.parallel.step import Parallel
        return Parallel
    if name in ("ParallelDims", "resolve", "DIM_NAMES"):
        from shardlab.parallel import mesh
        return getattr(mesh, name)
    raise AttributeError(name)


__all__ = ["build", "Parallel", "ParallelDims", "resolve", "DIM_NAMES"]
