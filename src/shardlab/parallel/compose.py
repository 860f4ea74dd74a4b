"""The composition: the one place that turns a config into a parallel model, in a fixed order.

Read top to bottom, this is the order torchtitan applies its layers in:

    1. degrees -> named mesh                  mesh.py        (pp, dp_replicate, dp_shard, cp, tp)
    2. the single-device model                model/         (gpt.py or llama.py; same seed -> same weights),
       as the precision computes it           precision.py   (a converter's row rewrites modules, before TP)
    3. pipeline split -> model parts          parallel/pp/   (pp > 1; without it one part, the model)
    4. per part, innermost first, each `apply(part, cfg, dims) -> Layer` (the contract: parallel/layer.py):
         tensor parallel                      parallel/tp/   (tp > 1)
         context parallel                     parallel/cp/   (cp > 1: ring attention, zigzag chunks)
         expert parallel                      parallel/ep/   (ep > 1: experts split, all-to-all dispatch)
         activation recompute                 recompute.py   (train.recompute)
         compile                              compile.py     (train.compile: each block, inductor)
    5. data parallel over what they left      parallel/dp/   (seen through the layers' dp views), the
       optimizer (optim/registry.py) over this rank's parameters (+ local SGD / DiLoCo: parallel/dp/sync.py)
    6. `Parallel`, which owns the step and asks the handles (loss, batch slicing, norm groups)   step.py

A layer not built yet (`layers.not_built`) is refused here in one line, as `config.validate` does.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab import comm, precision
from shardlab.errors import ConfigError
from shardlab.parallel import compile as compile_layer, layers, recompute
from shardlab.parallel.dp.apply import apply_data_parallel, data_parallel_group
from shardlab.parallel.mesh import resolve
from shardlab.parallel.step import Parallel


def build(cfg, device: torch.device | None = None, model: nn.Module | None = None,
          world_size: int | None = None) -> Parallel:
    """Mesh, model, layers, optimizer for this rank. `cfg` is a `shardlab.config.Config`; `model`
    replaces the one `cfg.model` describes (tests and benchmarks bring their own sizes or modules).
    Call on every rank after `comm.init` (or without a process group for one rank). `world_size=1`
    builds a whole model that talks to no one although the process group is larger (the asynchronous
    parameter server's ranks each hold one: train/async_trainer.py)."""
    from shardlab.model.gpt import build_model, resolve_model_config
    from shardlab.optim import factory_for, no_decay_names, router_names

    device = device or comm.device()
    # 1. the mesh
    dims = resolve(cfg.parallel, comm.world_size() if world_size is None else world_size)
    missing = layers.not_built(dims.degrees)
    if missing:
        raise ConfigError(missing)
    dims.build_mesh(device.type)
    # 2. the model, whole, on every rank
    if model is None:
        model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), cfg.train.seed)
    model = precision.convert(model.to(device), cfg.train.dtype)  # a converter's row rewrites it before any layer
    total = sum(p.numel() for p in model.parameters())  # whole here; the layers below split it
    no_decay = no_decay_names(model)  # read before any layer renames or wraps parameters
    routers = router_names(model)  # MoE routers: their own optimizer group (empty for a dense model)
    # 3. pipeline split: this rank's part (its stages' blocks, names unchanged); without pp, the model.
    # 4. per part: tensor parallel -> context parallel -> expert parallel -> activation recompute -> compile.
    # Each apply returns the layer's handle (parallel/layer.py); the next layer takes its part.
    handles, part = [], model
    for dim, table, impl in (("pp", layers.PIPELINE_PARALLEL, cfg.parallel.pp_schedule),
                             ("tp", layers.TENSOR_PARALLEL, cfg.parallel.tp_impl),
                             ("cp", layers.CONTEXT_PARALLEL, cfg.parallel.cp_impl),  # the ring; positions follow
                             ("ep", layers.EXPERT_PARALLEL, "own")):  # this rank's experts, by all-to-all
        if dims.size(dim) > 1:
            handles.append(_layer(table, impl, dim)(part, cfg, dims))
            part = handles[-1].part
    for apply in (recompute.apply, compile_layer.apply):  # compile after recompute: the checkpoint is traced
        handles.append(apply(part, cfg, dims))
        part = handles[-1].part
    # 5. data parallel, seen through the layers inside it; the optimizer over this rank's parameters (the
    # layer decides which: zero gives its shards)
    dp = apply_data_parallel(part, cfg.parallel, dims, device, inner=handles)
    optimizer = dp.make_optimizer(factory_for(cfg, no_decay, routers))  # the registry's row (optim/registry.py)
    if cfg.parallel.sync in ("local_sgd", "diloco"):  # they replace the per-step gradient all-reduce
        from shardlab.parallel.dp.fault_tolerant import FaultTolerantSync
        from shardlab.parallel.dp.sync import PeriodicSync

        # replicas that may die: the outer step via a store
        sync = FaultTolerantSync if cfg.parallel.fault_tolerant else PeriodicSync
        # across whole replicas: the data-parallel group; across HSDP replicas: the replicate dimension
        group = dims.group("dp_replicate") if dp.shards_within_replica else data_parallel_group(dims)
        dp = sync(dp, cfg.parallel, group, optimizer)
    elif cfg.parallel.fault_tolerant:  # every step, averaged across the replicas of each step's quorum
        from shardlab.parallel.dp.ft_step import EveryStepFaultTolerance
        dp = EveryStepFaultTolerance(dp, cfg.parallel, optimizer, absent=cfg.debug.ft_absent)
    # 6. the step: a pipeline schedule owns it when there are stages, else the plain microbatch loop
    if dims.pp > 1:
        from shardlab.parallel.pp.pipeline import PipelineParallel
        stages, schedule = handles[0].impl
        return PipelineParallel(dims, model, dp, optimizer, device, cfg.train.dtype, cfg, part, stages, schedule,
                                layers=handles, params_total=total)
    return Parallel(dims, model, dp, optimizer, device, dtype=cfg.train.dtype, layers=handles, params_total=total)


def _layer(table: dict, impl: str, dim: str):
    """The apply function registered for `impl` in a layer table: `apply(part, cfg, dims) -> part`."""
    if impl not in table:
        raise ConfigError(f"parallel.{'pp_schedule' if dim == 'pp' else dim + '_impl'}={impl!r}: must be one of {', '.join(table) or '(none built yet)'}")
    return layers.load(table[impl])
