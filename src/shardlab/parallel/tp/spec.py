"""Tensor parallelism's declaration (parallel/spec.py): own Megatron-style layers or DTensor's plan.

Own TP keeps plain tensors, which the own data-parallel layers bucket and shard; DTensor TP's parameters
are DTensors, which only FSDP2 shards (2-D: Shard over dp_shard of a Shard over tp). The data-parallel
layer at dp = 1 is "single". Pure data: no torch import.
"""
from __future__ import annotations

from shardlab.parallel.spec import Impl, Key, Spec

_IMPLS = (
    # Megatron-style layers, collectives through comm
    Impl("own", "shardlab.parallel.tp.own:apply_tensor_parallel",
         composes_with={"dp": ("single", "ddp", "zero1", "zero2", "zero3")}),
    # parallelize_module on DTensor
    Impl("dtensor", "shardlab.parallel.tp.dtensor:apply_tensor_parallel",
         composes_with={"dp": ("single", "torch-fsdp2")}),
)

SPEC = Spec(
    "tp", "tensor parallelism", _IMPLS, choose="parallel.tp_impl", dim="tp",
    keys=(
        Key("parallel.tp",
            'mesh degree: tensor parallelism; -1 = fill the world',
            '-1 | int >= 1'),
        Key("parallel.tp_impl",
            "tensor parallelism: own Megatron-style layers (every collective through comm) or DTensor's "
            'parallelize_module (docs/tp.md)',
            " | ".join(i.name for i in _IMPLS)),
        Key("parallel.sp",
            'sequence parallelism inside tensor parallelism: LayerNorm/dropout regions split along the '
            'sequence (needs parallel.tp > 1 and train.seq_len divisible by it)',
            'true | false'),
    ),
    checks=("shardlab.parallel.tp.checks:validate_tp",),
    cost={"bytes": "shardlab.parallel.tp.cost:comm_bytes_per_step", "memory": "shardlab.plan.comm:local_params",
          "flops": "shardlab.plan.compute:layer_ops"},
)
