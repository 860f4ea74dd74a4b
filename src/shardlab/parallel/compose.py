"""The composition: the one place that turns a config into a parallel model, in a fixed order.

Read top to bottom, this is the order torchtitan applies its layers in:

    1. degrees -> named mesh                  mesh.py        (pp, dp_replicate, dp_shard, cp, tp)
    2. the single-device model                model/         (gpt.py or llama.py; same seed -> same weights)
    3. pipeline split -> model parts          parallel/pp/   (pp > 1; without it one part, the model)
    4. per part, innermost first:
         tensor parallel                      parallel/tp*.py (tp > 1)
         context parallel                     parallel/cp/layer.py (cp > 1: ring attention, zigzag chunks)
         expert parallel                      parallel/ep/layer.py (ep > 1: experts split, all-to-all dispatch)
         activation recompute                 recompute.py   (train.recompute)
         compile                              compile.py     (train.compile: each block, inductor)
         data parallel                        parallel/dp/apply.py -> shardlab.parallel.dp
    5. the optimizer over what the layers left on this rank (+ local SGD / DiLoCo: sync.py)
    6. `Parallel`, which owns the step's forward/backward     step.py

A layer not built yet (`layers.not_built`) is refused here in one line, as `config.validate` does.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab import comm
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
    from shardlab.optim import adamw_factory, no_decay_names, router_names

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
    model = model.to(device)
    no_decay = no_decay_names(model)  # read before any layer renames or wraps parameters
    routers = router_names(model)  # MoE routers: their own optimizer group (empty for a dense model)
    # 3. pipeline split: this rank's part (its stages' blocks, names unchanged); without pp, the model
    part = model
    if dims.pp > 1:
        part, stages, schedule = _layer(layers.PIPELINE_PARALLEL, cfg.parallel.pp_schedule, "pp")(model, cfg, dims)
    # 4. per part: tensor parallel -> context parallel -> expert parallel -> activation recompute -> compile -> data parallel
    if dims.tp > 1:
        part = _layer(layers.TENSOR_PARALLEL, getattr(cfg.parallel, "tp_impl", "own"), "tp")(part, cfg, dims)
    if dims.cp > 1:  # the ring replaces each block's attention core; positions follow the chunks
        part = _layer(layers.CONTEXT_PARALLEL, getattr(cfg.parallel, "cp_impl", "own"), "cp")(part, cfg, dims)
    if dims.ep > 1:  # this rank's experts; their tokens travel by all-to-all; hidden from the dp layer
        part = _layer(layers.EXPERT_PARALLEL, "own", "ep")(part, cfg, dims)
    part = recompute.apply(part, cfg, dims)
    part = compile_layer.apply(part, cfg, dims)  # after recompute: the checkpoint is traced into the graph
    dp = apply_data_parallel(part, cfg.parallel, dims, device)
    # 5. the optimizer over this rank's parameters (the layer decides which: zero gives its shards)
    optimizer = dp.make_optimizer(adamw_factory(cfg, no_decay, routers))
    if getattr(cfg.parallel, "sync", "every_step") in ("local_sgd", "diloco"):  # they replace the
        from shardlab.parallel.dp.sync import PeriodicSync  # per-step gradient all-reduce
        # across whole replicas: the data-parallel group; across HSDP replicas: the replicate dimension
        if getattr(cfg.parallel, "fault_tolerant", False):  # replicas that may die: the outer step via a store
            from shardlab.parallel.dp.fault_tolerant import FaultTolerantSync as PeriodicSync
        group = dims.group("dp_replicate") if hasattr(dp, "replicas_step_alone") else data_parallel_group(dims)
        dp = PeriodicSync(dp, cfg.parallel, group, optimizer)
    # 6. the step: a pipeline schedule owns it when there are stages, else the plain microbatch loop
    if dims.pp > 1:
        from shardlab.parallel.pp.pipeline import PipelineParallel
        par = PipelineParallel(dims, model, dp, optimizer, device, cfg.train.dtype, cfg, part, stages, schedule)
    else:
        par = Parallel(dims, model, dp, optimizer, device, dtype=cfg.train.dtype)
    if getattr(part, "tp", None) is not None:  # what the tp layer offers the step (own or DTensor)
        par.use_tensor_parallel(part.tp)  # vocab-parallel loss (+ context), SP gradients, the norm
    if getattr(part, "cp", None) is not None:
        par.shard_batch = part.cp.shard_batch  # the step slices inputs and targets into this rank's chunks
    return par


def _layer(table: dict, impl: str, dim: str):
    """The apply function registered for `impl` in a layer table: `apply(part, cfg, dims) -> part`."""
    if impl not in table:
        raise ConfigError(f"parallel.{'pp_schedule' if dim == 'pp' else dim + '_impl'}={impl!r}: must be one of {', '.join(table) or '(none built yet)'}")
    return layers.load(table[impl])
