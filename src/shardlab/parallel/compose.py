"""The composition: the one place that turns a config into a parallel model, in a fixed order.

Read top to bottom, this is the order torchtitan applies its layers in:

    1. degrees -> named mesh                  mesh.py        (pp, dp_replicate, dp_shard, cp, tp)
    2. the single-device model                model/         (gpt.py or llama.py; same seed -> same weights),
       as the precision computes it           precision.py   (a converter's row rewrites modules, before TP)
    3. pipeline split -> model parts          parallel/pp/   (pp > 1; without it one part, the model)
    4. per part, innermost first, each layer of `layers.LAYERS` the run turns on (its spec's `on(dims)`):
       `apply(part, cfg, dims) -> Layer` (the contract: parallel/layer.py), today
         tensor parallel                      parallel/tp/   (tp > 1)
         context parallel                     parallel/cp/   (cp > 1: ring attention, zigzag chunks)
         expert parallel                      parallel/ep/   (ep > 1: experts split, all-to-all dispatch)
         activation recompute                 recompute.py   (train.recompute)
         compile                              compile.py     (train.compile: each block, inductor)
    5. data parallel over what they left      parallel/dp/   (seen through the layers' dp views), the
       optimizer (optim/registry.py) over this rank's parameters, and the run's sync in front of it
       (local SGD / DiLoCo, fault-tolerant replicas)  parallel/sync/, parallel/ft/
    6. `Parallel`, which owns the step and asks the handles (loss, batch slicing, norm groups, the
       executor that runs the microbatches: the pipeline's schedule)                          step.py

The layout is resolved by `mesh.resolve_run`, as config validation, the dry run and the planner resolve it: a
layer not built yet (`layers.not_built`) is refused there in one line.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from shardlab import comm, precision
from shardlab.errors import ConfigError
from shardlab.parallel import layers, materialize, sync
from shardlab.parallel.dp.apply import apply_data_parallel
from shardlab.parallel.mesh import resolve, resolve_run
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
    # 1. the mesh: the run's layout as config validation resolved it (a dimension no layer builds: refused)
    dims = resolve_run(cfg, comm.world_size() if world_size is None else world_size).dims
    dims.build_mesh(device.type)
    # 2. the single-device model on the meta device: its shape, no storage (model/init.py); each rank
    # allocates and draws only what it holds, after the layers (step 5). A module the caller brings is
    # whole already: it goes to the device as it is.
    on_meta = model is None
    if on_meta:
        with materialize.meta_phase():
            model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), cfg.train.seed, meta=True)
        rules, buffers = model.init_rules(), {n: b.detach().clone() for n, b in model.named_buffers()}
    else:
        model = model.to(device)
    with materialize.meta_phase() if on_meta else contextlib.nullcontext():
        model = precision.convert(model, cfg.train.dtype)  # a converter's row rewrites it before any layer
        total = sum(p.numel() for p in model.parameters())  # whole here; the layers below split it
        no_decay = no_decay_names(model)  # read before any layer renames or wraps parameters
        routers = router_names(model)  # MoE routers: their own optimizer group (empty for a dense model)
        # 3. pipeline split: this rank's part (its stages' blocks, names unchanged); without pp, the model.
        # 4. per part, every layer the run turns on, in the list's order (parallel/layers.py: tensor, context,
        # expert parallel, activation recompute, compile). Each apply returns the layer's handle
        # (parallel/layer.py); the next layer takes its part.
        handles, part = _apply_layers(model, cfg, dims)
    # 5. data parallel, seen through the layers inside it; the optimizer over this rank's parameters (the
    # layer decides which: zero gives its shards). A sharding layer allocates its shards itself; before a
    # replicating one the part gets its storage; what no layer allocated (experts hidden from it) after.
    if on_meta and not layers.builds_on_meta(cfg.parallel, dims):
        materialize.allocate(part, device)
    dp = apply_data_parallel(part, cfg.parallel, dims, device, inner=handles)
    if on_meta:
        materialize.allocate(part, device, move=False)
        if device.type != "meta":  # the simulation's device holds no values to draw
            from shardlab.parallel import init_shards
            init_shards.initialise(dp, rules, buffers, cfg.train.seed, model)
    optimizer = dp.make_optimizer(factory_for(cfg, no_decay, routers))  # the registry's row (optim/registry.py)
    # local SGD / DiLoCo, fault-tolerant replicas: a view in front of the layer (parallel/sync/, parallel/ft/)
    dp = sync.wrap(dp, cfg, dims, optimizer)
    # 6. the step: the plain microbatch loop, or a layer's executor (the pipeline's schedule) when one has it
    return Parallel(dims, model, dp, optimizer, device, dtype=cfg.train.dtype, layers=handles, params_total=total)


def _apply_layers(model: nn.Module, cfg, dims, inference: bool = False) -> tuple[list, nn.Module]:
    """Steps 3 and 4 of `build`: each layer the run turns on, applied to the part the previous one left."""
    handles, part = [], model
    for spec in layers.LAYERS:
        if not spec.on(dims):
            continue
        if inference and spec.inference != "":  # the spec says how (or whether) it applies at inference
            if spec.inference is None:
                if not spec.dim:
                    continue
                raise ConfigError(f"parallel.{spec.dim}={dims.size(spec.dim)}: not applied at inference "
                                  f"(generation); set it to 1")
            apply = layers.load(spec.inference)
        else:
            apply = _layer(spec, spec.chosen(cfg))
        handles.append(apply(part, cfg, dims))
        part = handles[-1].part
    return handles, part


def build_inference(cfg, model, device: torch.device | None = None):
    """The composition in inference mode (`shardlab generate`): the same mesh and the same per-part layers
    as `build`, in the same order; nothing that only training needs (recompute, compile, the data-parallel
    layer, the optimizer: an inference replica is a copy). `model` is either a whole module (a copy of it is
    split, in eval mode) or a model config (GPTConfig / LlamaConfig): then the model is built on the meta
    device, the pipeline stage and tensor parallelism cut it there, and only this rank's part gets storage,
    uninitialised: the caller loads its values (generate/shard_load.py reads them from the checkpoint).
    Returns (dims, this rank's part, the layers' handles)."""
    import copy

    from shardlab.model.gpt import build_model

    device = device or comm.device()
    dims = resolve(cfg.parallel, comm.world_size())
    dims.build_mesh(device.type)
    on_meta = not isinstance(model, nn.Module)
    if on_meta:  # no rank ever holds the whole model: its shape only, then this rank's cut of it
        with materialize.meta_phase():
            part = build_model(model, 0, meta=True).eval()
    else:
        part = model.to(device).eval()
        if any(spec.dim and dims.size(spec.dim) > 1 for spec in layers.LAYERS):
            part = copy.deepcopy(part)  # the layers split in place: keep the caller's model whole
    with materialize.meta_phase() if on_meta else contextlib.nullcontext():
        handles, part = _apply_layers(part, cfg, dims, inference=True)
    if on_meta:
        materialize.allocate(part, device)
    return dims, part.eval(), handles


def _layer(spec, impl: str):
    """The apply function registered for `impl` in a layer's table: `apply(part, cfg, dims) -> Layer`."""
    table = layers.TABLES[spec.name]
    if impl not in table:
        raise ConfigError(f"{spec.choose}={impl!r}: must be one of {', '.join(table) or '(none built yet)'}")
    return layers.load(table[impl])
