"""Data parallelism, the last layer applied to a model part: pick the layer of `parallel.dp` from
`layers.DATA_PARALLEL`, give it its process group from the mesh, and wrap the part.

The layers themselves live in `shardlab.parallel.dp` (own: ddp, zero1/2/3; torch-native: torch-ddp,
torch-fsdp2, torch-zero1), all behind `strategies.base.Strategy`.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab.parallel import layers
from shardlab.parallel.mesh import ParallelDims
from shardlab.parallel.dp.base import Strategy


def data_parallel_group(dims: ParallelDims):
    """The group a one-dimensional data-parallel layer communicates in: the sharding dimension when
    there is one, else the replicating one. Under context parallelism the cp ranks hold replicas whose
    gradients must be summed too: the layer communicates in dp_cp (a sharding layer shards over it)."""
    if dims.cp > 1:
        return dims.group("dp_cp")
    return dims.group("dp_shard" if dims.dp_shard > 1 else "dp_replicate")


def apply_data_parallel(part: nn.Module, pcfg, dims: ParallelDims, device: torch.device) -> Strategy:
    """Wrap `part` in the data-parallel layer `parallel.dp`; returns the layer (its `.module` is what
    forward is called on, its `.model` the bare part)."""
    name = layers.dp_name(pcfg)
    if dims.size("dp_cp") == 1 and dims.world_size > 1:
        # Every rank is busy with tp/pp/cp: there is no data-parallel group to talk to, and a layer
        # given no group would talk to the world. Nothing to synchronise: the no-communication layer.
        name = "single"
    layer = layers.load(layers.DATA_PARALLEL[name])(pcfg, dims, device)
    layer.group = data_parallel_group(dims)
    ep = getattr(part, "ep", None)  # expert parallelism: the dp layer wraps the dense parameters only
    if ep is None:
        layer.wrap(part)
        return layer
    from shardlab.parallel.ep.layer import ExpertParallelDP

    with ep.experts_hidden():
        layer.wrap(part)
    return ExpertParallelDP(layer, ep)
