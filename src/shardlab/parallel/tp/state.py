"""Checkpoint state of own tensor parallelism under a ZeRO layer (zero1, zero2, zero3 on a (dp, tp) mesh).

Each rank holds a zero shard (rows [s, s + l) of dim 0, torch.chunk over dp_shard) of its TP piece (rows or
columns of the bare model's tensor; the vocabulary padded to a multiple of tp). In the bare model's
coordinates that shard is one block:

    TP split on dim 0 (q, k, v, fc, the tied embedding): rows [t*P + s, t*P + s + n), where P is the TP
        piece's rows and n <= l the shard's rows that are not vocabulary padding
    TP split on dim 1 (the attention and MLP projections): rows [s, s + l), columns [t*C, (t+1)*C)

The dim-0 case is TP first, then zero: no DTensor placement describes it once either level is uneven
(FSDP2's _StridedShard covers the even case only). So the state dict hands DCP the block itself: a DTensor
with the bare model's global shape whose local tensor is torch's LocalShardsWrapper (shards at explicit
offsets, what DCP's save and load planners read through `__create_write_items__` / `__create_chunk_list__`).
DCP stores chunks with their offsets, so any layout (single, ddp, zero, own or DTensor TP at any degree)
reads the parts it needs, and the keys stay the bare model's FQNs. Replicated parameters keep the zero
layer's DTensors (Shard(0) over dp_shard, equal on every tp rank: DCP writes them once).
"""
from __future__ import annotations

import torch

from shardlab.model import anatomy


def _contiguous_stride(shape) -> tuple:
    return torch.empty(shape, device="meta").stride()


def to_block(tp, info, fqn: str, value):
    """The zero layer's value of TP-split parameter `fqn` (a DTensor Shard(0) over dp_shard of the TP piece:
    this rank's unpadded zero rows) as a DTensor of the bare model's shape holding this rank's block."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._shards_wrapper import LocalShardsWrapper

    spec = tp.specs[fqn]
    local = value.to_local() if hasattr(value, "to_local") else value
    offset = [0] * local.dim()
    offset[0] = info.start
    if spec.dim == 0:  # rows t*P + s ...; the rows past the TP piece's real ones are vocabulary padding
        local = local[: max(0, min(info.start + local.shape[0], spec.real) - info.start)]
        offset[0] += tp.rank * info.rows
    else:
        offset[spec.dim] = tp.rank * info.shape[spec.dim]
    if local.shape[0] == 0:  # no rows here (all padding): at the end of dim 0, where it overlaps no block
        offset[0] = spec.full_shape[0]
    shape = torch.Size(spec.full_shape)
    return DTensor.from_local(LocalShardsWrapper([local], [tuple(offset)]), tp.mesh, [Shard(spec.dim)],
                              run_check=False, shape=shape, stride=_contiguous_stride(shape))


def from_block(strategy, tp, info, fqn: str, value):
    """Back to the zero layer's format (a DTensor Shard(0) over dp_shard of the TP piece) from a loaded
    block (`to_block`'s DTensor after dcp.load) or from the bare model's full tensor."""
    from shardlab.parallel.dp import zero_state

    if hasattr(value, "to_local") and hasattr(value.to_local(), "local_shards"):
        block = value.to_local().local_shards()[0]
        shard = block.new_zeros((info.chunk, *info.shape[1:]))  # zero padding and vocabulary padding: zero
        shard[: block.shape[0]].copy_(block)
        return zero_state._dtensor(strategy, info, shard)
    return tp.local_value(fqn, value)  # the full TP piece: the zero layer takes its rows (shard_of)


def _infos(strategy) -> dict:
    return {i.fqn: i for i in strategy.infos}


def model_state_dict(strategy, tp) -> dict:
    sd = strategy.model_state_dict()
    infos = _infos(strategy)
    anat = anatomy.of(tp.model)
    for fqn, value in sd.items():
        key = anat.tied_key(fqn)  # the tied head: the embedding's value
        if key in infos and tp.is_sharded(key):
            sd[fqn] = to_block(tp, infos[key], key, value)
    return sd


def load_model_state_dict(strategy, tp, sd: dict) -> None:
    infos = _infos(strategy)
    strategy.load_model_state_dict({fqn: from_block(strategy, tp, infos[fqn], fqn, v)
                                    if fqn in infos and tp.is_sharded(fqn) else v for fqn, v in sd.items()})


def _map_states(sd: dict, infos: dict, tp, fn) -> dict:
    """`fn(info, fqn, value)` on every per-element optimizer state (tensors with dims) of a TP-split parameter."""
    state = {fqn: {k: fn(infos[fqn], fqn, v) if tp.is_sharded(fqn) and torch.is_tensor(v) and v.dim() > 0 else v
                   for k, v in st.items()} for fqn, st in sd["state"].items()}
    return {**sd, "state": state}


def optim_state_dict(strategy, tp, optimizer) -> dict:
    return _map_states(strategy.optim_state_dict(optimizer), _infos(strategy), tp,
                       lambda info, fqn, v: to_block(tp, info, fqn, v))


def load_optim_state_dict(strategy, tp, optimizer, sd: dict) -> None:
    strategy.load_optim_state_dict(optimizer, _map_states(
        sd, _infos(strategy), tp, lambda info, fqn, v: from_block(strategy, tp, info, fqn, v)))
