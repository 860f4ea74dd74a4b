"""The conjugate operators of tensor parallelism (Megatron-LM, Shoeybi et al. 2019, and its sequence
parallelism, Korthikanti et al. 2022) as autograd functions. Every collective goes through `shardlab.comm`.

Without sequence parallelism a TP region is entered by `f` and left by `g`:

    f = copy_to_tp:      forward identity,    backward all-reduce   (before a column-parallel layer)
    g = reduce_from_tp:  forward all-reduce,  backward identity     (after a row-parallel layer)

With sequence parallelism the activations between regions are split along the sequence, and the pair
becomes all-gather / reduce-scatter (an all-reduce is exactly a reduce-scatter followed by an all-gather,
so SP sends the same bytes and stores 1/N of the LayerNorm/dropout activations):

    gather_seq:          forward all-gather,      backward reduce-scatter   (replaces f)
    reduce_scatter_seq:  forward reduce-scatter,  backward all-gather       (replaces g)

Activations are (batch, sequence, hidden); the sequence is dim 1. The flat collectives of comm.py work on
dim 0, so the sequence is moved to the front for the exchange (one copy each way).
"""
from __future__ import annotations

import torch

from shardlab import comm

SEQ_DIM = 1


def _all_reduce(x: torch.Tensor, group, tag: str) -> torch.Tensor:
    comm.all_reduce(x, group=group, tag=tag)
    return x


def _all_gather_seq(x: torch.Tensor, group, tag: str) -> torch.Tensor:
    n = comm.world_size(group)
    shard = x.movedim(SEQ_DIM, 0).contiguous()  # this rank's positions, contiguous rows
    full = shard.new_empty((n * shard.shape[0], *shard.shape[1:]))
    comm.all_gather(full, shard, group=group, tag=tag)
    return full.movedim(0, SEQ_DIM).contiguous()


def _reduce_scatter_seq(x: torch.Tensor, group, tag: str) -> torch.Tensor:
    n = comm.world_size(group)
    if x.shape[SEQ_DIM] % n:
        raise ValueError(f"sequence parallelism: sequence length {x.shape[SEQ_DIM]} is not divisible by the "
                         f"tensor-parallel degree {n}; choose train.seq_len as a multiple of parallel.tp")
    full = x.movedim(SEQ_DIM, 0).contiguous()
    shard = full.new_empty((full.shape[0] // n, *full.shape[1:]))
    comm.reduce_scatter(shard, full, group=group, tag=tag)
    return shard.movedim(0, SEQ_DIM).contiguous()


class _CopyToTP(torch.autograd.Function):
    """f: every rank needs the whole input; each computes a partial gradient for it."""

    @staticmethod
    def forward(ctx, x, group, tag):
        ctx.group, ctx.tag = group, tag
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        # autograd may hand the same gradient tensor to other consumers: reduce a copy, never in place
        return _all_reduce(grad.clone(memory_format=torch.contiguous_format), ctx.group, ctx.tag), None, None


class _ReduceFromTP(torch.autograd.Function):
    """g: each rank holds a partial sum of the output; the gradient of a sum is replicated to every term."""

    @staticmethod
    def forward(ctx, x, group, tag):
        return _all_reduce(x.clone(memory_format=torch.contiguous_format), group, tag)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class _GatherSeq(torch.autograd.Function):
    """SP's f: gather the sequence shards; the gradient is partial per rank, so reduce and re-split it."""

    @staticmethod
    def forward(ctx, x, group, tag):
        ctx.group, ctx.tag = group, tag
        return _all_gather_seq(x, group, tag)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_seq(grad, ctx.group, ctx.tag), None, None


class _ReduceScatterSeq(torch.autograd.Function):
    """SP's g: sum the partial outputs and keep this rank's positions; the gradient is gathered back."""

    @staticmethod
    def forward(ctx, x, group, tag):
        ctx.group, ctx.tag = group, tag
        return _reduce_scatter_seq(x, group, tag)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_seq(grad, ctx.group, ctx.tag), None, None


def copy_to_tp(x: torch.Tensor, group, tag: str = "tp") -> torch.Tensor:
    return _CopyToTP.apply(x, group, tag)


def reduce_from_tp(x: torch.Tensor, group, tag: str = "tp") -> torch.Tensor:
    return _ReduceFromTP.apply(x, group, tag)


def gather_seq(x: torch.Tensor, group, tag: str = "tp") -> torch.Tensor:
    return _GatherSeq.apply(x, group, tag)


def reduce_scatter_seq(x: torch.Tensor, group, tag: str = "tp") -> torch.Tensor:
    return _ReduceScatterSeq.apply(x, group, tag)


def enter(x: torch.Tensor, group, sp: bool, tag: str) -> torch.Tensor:
    """Into a TP region (before column-parallel layers): f, or all-gather along the sequence with SP."""
    return gather_seq(x, group, tag) if sp else copy_to_tp(x, group, tag)


def leave(x: torch.Tensor, group, sp: bool, tag: str) -> torch.Tensor:
    """Out of a TP region (after a row-parallel layer): g, or reduce-scatter along the sequence with SP."""
    return reduce_scatter_seq(x, group, tag) if sp else reduce_from_tp(x, group, tag)
