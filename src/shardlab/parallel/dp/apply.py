"""Data parallelism, the last layer applied to a model part: pick the layer of `parallel.dp` from
`layers.DATA_PARALLEL`, give it its process group from the mesh, and wrap the part.

The layers themselves live in `shardlab.parallel.dp` (own: ddp, zero1/2/3; torch-native: torch-ddp,
torch-fsdp2, torch-zero1), all behind `parallel/dp/base.Strategy`.
"""
from __future__ import annotations

import contextlib

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


def apply_data_parallel(part: nn.Module, pcfg, dims: ParallelDims, device: torch.device, inner=()) -> Strategy:
    """Wrap `part` in the data-parallel layer `parallel.dp`; returns the layer (its `.module` is what
    forward is called on, its `.model` the bare part). `inner`: the handles (parallel/layer.py) of the layers
    applied before: what they hide from the dp layer stays out of its buckets and shards (EP's experts), and
    the dp layer is returned seen through each one's `dp_view`."""
    name = layers.dp_name(pcfg)
    if dims.size("dp_cp") == 1 and dims.world_size > 1:
        # Every rank is busy with tp/pp/cp: there is no data-parallel group to talk to, and a layer
        # given no group would talk to the world. Nothing to synchronise: the no-communication layer.
        name = "single"
    layer = layers.load(layers.DATA_PARALLEL[name])(pcfg, dims, device)
    layer.group = data_parallel_group(dims)
    layer.inner_hands = tuple((handle.name, handle.optimizer_hands) for handle in inner)  # optim/serving.py
    with contextlib.ExitStack() as hidden:
        for handle in inner:
            hidden.enter_context(handle.hidden())
        layer.wrap(part)
    # the view of the layer applied last (nearest the dp layer) first: under TP x EP, TP sees the dp layer
    # through EP's view, as the step and the checkpoint see it through TP's
    for handle in reversed(inner):
        if handle.dp_view is not None:
            layer = handle.dp_view(layer)
    return layer
