"""Context parallelism's declaration (parallel/spec.py): own ring attention or torch's context_parallel.

Both communicate in the dp_cp group (cp ranks hold replicas, their gradients are summed too), so they
compose with the data-parallel layers that take that group; FSDP2 and torch's ZeRO take their mesh or
group otherwise. Pure data: no torch import.
"""
from __future__ import annotations

from shardlab.parallel.spec import Impl, Key, Spec

_IMPLS = (
    # ring attention (parallel/cp/ring.py), every transfer through comm
    Impl("own", "shardlab.parallel.cp.layer:apply_context_parallel"),
    # torch's context_parallel (CUDA only)
    Impl("torch", "shardlab.parallel.cp.layer:apply_torch_context_parallel"),
)

SPEC = Spec(
    "cp", "context parallelism", _IMPLS, choose="parallel.cp_impl", dim="cp",
    keys=(
        Key("parallel.cp",
            'mesh degree: context parallelism, every sequence split across the ranks in 2 x cp zigzag chunks, '
            'attention by the ring (docs/context.md); train.seq_len must be a multiple of 2 x cp; -1 = fill '
            'the world',
            '-1 | int >= 1'),
        Key("parallel.cp_impl",
            'context parallelism: own ring attention (every K/V transfer through comm, CPU and CUDA) or '
            "torch's context_parallel (CUDA only)",
            " | ".join(i.name for i in _IMPLS)),
    ),
    checks=("shardlab.parallel.cp.checks:validate_cp",),
    cost={"bytes": "shardlab.plan.comm:cp_ring"},
    composes_with={"dp": ("ddp", "zero1", "zero2", "zero3", "torch-ddp")},
    inference=None,  # generation does not split a batch's sequence or tokens' experts across ranks
)
