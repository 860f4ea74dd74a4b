"""Context parallelism's declaration (parallel/spec.py): own ring attention, torch's context_parallel, own
Ulysses (all-to-all over heads) and the 2-D hybrid of Ulysses inside the ring.

All communicate in the dp_cp group (cp ranks hold replicas, their gradients are summed too), so they
compose with the data-parallel layers that take that group, FSDP2 on the flattened dp x cp mesh; torch's
ZeRO partitions over its own group. Pure data: no torch import.
"""
from __future__ import annotations

from shardlab.parallel.spec import Impl, Key, Spec

_IMPLS = (
    # ring attention (parallel/cp/ring.py), every transfer through comm
    Impl("own", "shardlab.parallel.cp.layer:apply_context_parallel"),
    # torch's context_parallel (CUDA only)
    Impl("torch", "shardlab.parallel.cp.layer:apply_torch_context_parallel"),
    # DeepSpeed-Ulysses (parallel/cp/ulysses.py): all-to-alls through comm turn a sequence shard into a head shard
    Impl("ulysses", "shardlab.parallel.cp.ulysses:apply_ulysses_cp"),
    # USP / Megatron a2a+p2p: Ulysses over parallel.cp_ulysses ranks inside, the zigzag ring across them
    Impl("hybrid", "shardlab.parallel.cp.ulysses:apply_hybrid_cp"),
)

SPEC = Spec(
    "cp", "context parallelism", _IMPLS, choose="parallel.cp_impl", dim="cp",
    keys=(
        Key("parallel.cp",
            'mesh degree: context parallelism, every sequence split across the ranks in 2 x cp zigzag chunks, '
            'attention by the ring (docs/context.md); train.seq_len must be a multiple of 2 x cp (ulysses: of '
            'cp); -1 = fill the world',
            '-1 | int >= 1'),
        Key("parallel.cp_impl",
            'context parallelism: own ring attention (every K/V transfer through comm, CPU and CUDA), '
            "torch's context_parallel (CUDA only), ulysses (all-to-all: heads split cp ways) or hybrid (ulysses "
            "over parallel.cp_ulysses ranks inside the ring)",
            " | ".join(i.name for i in _IMPLS)),
        Key("parallel.cp_ulysses",
            "parallel.cp_impl=hybrid: the Ulysses degree U (consecutive cp ranks, all-to-all over heads); the "
            "ring spans cp/U of those groups; U must divide parallel.cp and the heads",
            "int >= 1 dividing parallel.cp"),
    ),
    checks=("shardlab.parallel.cp.checks:validate_cp",),
    cost={"bytes": "shardlab.parallel.cp.cost:comm_bytes"},
    composes_with={"dp": ("ddp", "zero1", "zero2", "zero3", "torch-ddp", "torch-fsdp2")},
    inference=None,  # generation does not split a batch's sequence or tokens' experts across ranks
)
