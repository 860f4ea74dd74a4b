"""The data-parallel layer's declaration (parallel/spec.py): its implementations, keys, checks, costs.

The data-parallel layer is the innermost wrapper (parallel/dp/apply.py), not one of the part's layers: its
entries name classes behind `base.Strategy`, and its `choose` key is `parallel.strategy` (alias
`parallel.dp`). A replicating implementation fills `dp_replicate`; the others shard and fill `dp_shard`;
"hsdp" ones also replicate their shards over `dp_replicate`. Pure data: no torch import.
"""
from __future__ import annotations

from shardlab import precision
from shardlab.parallel.spec import Impl, Key, Spec

# "meta": the layer allocates its shards itself from a model built on the meta device (parallel/materialize.py)
_REPLICATING, _HSDP = frozenset({"replicating"}), frozenset({"hsdp", "meta"})
_IMPLS = (
    Impl("single", "shardlab.parallel.dp.single:Single", tags=_REPLICATING),
    Impl("ddp", "shardlab.parallel.dp.ddp:DDP", tags=_REPLICATING),
    Impl("zero1", "shardlab.parallel.dp.zero:Zero1", tags=_HSDP),
    Impl("zero2", "shardlab.parallel.dp.zero:Zero2", tags=_HSDP),
    Impl("zero3", "shardlab.parallel.dp.zero:Zero3", tags=_HSDP),
    Impl("torch-ddp", "shardlab.parallel.dp.native:TorchDDP", tags=_REPLICATING),
    Impl("torch-fsdp2", "shardlab.parallel.dp.native:TorchFSDP2", tags=_HSDP),
    Impl("torch-zero1", "shardlab.parallel.dp.native:TorchZero1"),
)
_NAMES = " | ".join(i.name for i in _IMPLS)

SPEC = Spec(
    "dp", "data parallelism", _IMPLS, choose="parallel.strategy",
    keys=(
        Key("parallel.strategy",
            'data-parallel strategy: own single/ddp/zero1/zero2/zero3 or torch-native',
            _NAMES),
        Key("parallel.dp",
            'the data-parallel layer: another name of parallel.strategy',
            _NAMES),
        Key("parallel.dp_replicate",
            'mesh degree: data-parallel replicas (sharding layers with > 1: HSDP); 0 = derived from the layer '
            '(replicating layers fill it), -1 = fill the world',
            '0 | -1 | int >= 1'),
        Key("parallel.dp_shard",
            'mesh degree: ranks a sharding layer (zero1/2/3, torch-fsdp2, torch-zero1) shards over; 0 = '
            'derived from the layer (sharding layers fill it), -1 = fill the world',
            '0 | -1 | int >= 1'),
        Key("parallel.bucket_mb",
            'DDP/ZeRO gradient bucket size (MiB)',
            'float > 0'),
        Key("parallel.first_bucket_mb",
            'size of the first bucket (MiB), small so communication starts early',
            'float > 0'),
        Key("parallel.last_bucket_mb",
            'own DDP: the gradients ready last (embeddings), up to this size, get a bucket of their own so '
            'the all-reduce nothing can hide is short; 0 = none; docs/ddp.md',
            'float >= 0'),
        Key("parallel.comm_dtype",
            'precision of gradient communication',
            " | ".join(precision.WIRE_NAMES)),
        Key("parallel.compress",
            'gradient compression: powersgd sends rank-r factors of each gradient matrix with error feedback '
            "and warm start (ddp: own; torch-ddp: torch's powerSGD_hook); docs/ddp.md",
            'none | powersgd'),
        Key("parallel.powersgd_rank",
            'PowerSGD rank r (parallel.compress=powersgd): r*(rows+cols) numbers per matrix',
            'int >= 1'),
        Key("parallel.find_unused",
            'own DDP: tolerate parameters that get no gradient (slower)',
            'true | false'),
        Key("parallel.rebuild_buckets",
            'own DDP: rebuild buckets in the order gradients arrived in step 1',
            'true | false'),
        Key("parallel.reshard_after_forward",
            'zero3/fsdp2: free gathered parameters after forward (re-gather in backward)',
            'true | false'),
        Key("parallel.wrap",
            'zero3 wrap unit: one transformer block, one layer, or the whole model',
            'block | layer | whole'),
        Key("parallel.prefetch",
            "zero3: gather the next unit's parameters while computing this one",
            'true | false'),
        Key("parallel.offload",
            'ZeRO-Offload: the optimizer state and step (own zero1/2/3), or the parameter shards with them '
            'between uses (params: zero3, or torch-fsdp2 on CUDA) live off the device (docs/memory.md)',
            'none | optimizer | params'),
        Key("parallel.offload_to",
            'where offloaded state lives: memory-mapped files (disk), or pinned CPU memory (host; on a '
            'CPU-only machine a no-op)',
            'host | disk'),
    ),
    checks=("shardlab.parallel.dp.checks:validate_powersgd",),
    cost={"bytes": "shardlab.plan.comm:dp_bytes_per_step", "memory": "shardlab.plan.memory:state_bytes"},
)
