"""The one list of parallel layers shardlab knows, by mesh dimension.

Config validation, the composition (`compose.py`), the CLI's help and the bench read their names from
here. An entry is "module:attribute", imported on demand so one layer's import cost never hits another's
run. Pure data: no torch import, so `shardlab.config` can read it cheaply.

A dimension whose table is empty is accepted by the mesh (its degree can be set) but has no layer yet:
`not_built` names it, and both `config.validate` and `compose.build` refuse such a layout in one line.
"""
from __future__ import annotations

from shardlab.parallel.pp import registry as pp_registry

# Data parallelism (`parallel.dp`, alias `parallel.strategy`): the classes of `shardlab.parallel.dp`.
DATA_PARALLEL = {
    "single": "shardlab.parallel.dp.single:Single",
    "ddp": "shardlab.parallel.dp.ddp:DDP",
    "zero1": "shardlab.parallel.dp.zero:Zero1",
    "zero2": "shardlab.parallel.dp.zero:Zero2",
    "zero3": "shardlab.parallel.dp.zero:Zero3",
    "torch-ddp": "shardlab.parallel.dp.native:TorchDDP",
    "torch-fsdp2": "shardlab.parallel.dp.native:TorchFSDP2",
    "torch-zero1": "shardlab.parallel.dp.native:TorchZero1",
}
# Layers that keep a whole replica per data-parallel rank: they fill `dp_replicate`; the others shard
# (parameters, gradients or optimizer state) and fill `dp_shard`.
REPLICATING = ("single", "ddp", "torch-ddp")
# Sharding layers that also replicate their shards over `dp_replicate` (HSDP); the others need
# dp_replicate == 1.
HSDP = ("zero1", "zero2", "zero3", "torch-fsdp2")

# The other mesh dimensions: name -> "module:apply_function". Filled in by the branches that build them
# (tensor parallelism: parallel/tp*.py, pipeline schedules: parallel/pp/, context parallelism).
TENSOR_PARALLEL: dict[str, str] = {
    "own": "shardlab.parallel.tp.own:apply_tensor_parallel",  # Megatron-style layers, collectives through comm
    "dtensor": "shardlab.parallel.tp.dtensor:apply_tensor_parallel",  # parallelize_module on DTensor
}
# The data-parallel layers each TP implementation composes with (the dp layer at dp = 1 is "single").
# Own TP keeps plain tensors, which the own dp layers bucket and shard; DTensor TP's parameters are
# DTensors, which only FSDP2 shards (2-D: Shard over dp_shard of a Shard over tp).
TP_WITH_DP: dict[str, tuple[str, ...]] = {
    "own": ("single", "ddp", "zero1", "zero2", "zero3"),
    "dtensor": ("single", "torch-fsdp2"),
}
# Pipeline parallelism: `parallel.pp_schedule` -> the function that splits the model (parallel/pp/pipeline.py);
# the schedule itself is data (parallel/pp/schedule.py), run by parallel/pp/engine.py or by torch.
# The schedule names come from the one table of schedules, parallel/pp/registry.py.
PIPELINE_PARALLEL: dict[str, str] = {name: "shardlab.parallel.pp.pipeline:split" for name in pp_registry.NAMES}
# Context parallelism: `parallel.cp_impl` -> the function that applies it (parallel/cp/layer.py): own ring attention
# (parallel/cp/ring.py, every transfer through comm) or torch's context_parallel (CUDA only).
CONTEXT_PARALLEL: dict[str, str] = {
    "own": "shardlab.parallel.cp.layer:apply_context_parallel",
    "torch": "shardlab.parallel.cp.layer:apply_torch_context_parallel",
}
# The data-parallel layers context parallelism composes with: they communicate in the dp_cp group (cp ranks
# hold replicas, their gradients are summed too). FSDP2 and torch's ZeRO take their mesh or group otherwise.
CP_WITH_DP = ("ddp", "zero1", "zero2", "zero3", "torch-ddp")
EP_WITH_DP = ("ddp", "torch-ddp")  # the data-parallel layers expert parallelism composes with

# Expert parallelism (`parallel.ep`, borrowing data-parallel ranks): the function that applies it.
EXPERT_PARALLEL: dict[str, str] = {"own": "shardlab.parallel.ep.layer:apply_expert_parallel"}

_BY_DIM = {"tp": ("tensor", TENSOR_PARALLEL), "pp": ("pipeline", PIPELINE_PARALLEL),
           "cp": ("context", CONTEXT_PARALLEL)}


def dp_name(pcfg) -> str:
    """The data-parallel layer of a `[parallel]` section."""
    return pcfg.strategy


def not_built(degrees: dict) -> str | None:
    """One line naming the first dimension with degree > 1 that has no layer yet, or None."""
    for dim, (kind, table) in _BY_DIM.items():
        if degrees.get(dim, 1) > 1 and not table:
            return (f"parallel.{dim}={degrees[dim]}: {kind} parallelism is not implemented yet in this version "
                    f"(the mesh accepts the degree, no layer applies it); set parallel.{dim}=1")
    return None


def load(entry: str):
    """Import "module:attribute" and return the attribute."""
    import importlib

    mod, _, attr = entry.partition(":")
    return getattr(importlib.import_module(mod), attr)
