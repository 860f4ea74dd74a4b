"""The modules of own tensor parallelism (Megatron-LM, Shoeybi et al. 2019; names as there): each takes
the bare model's layer and keeps this rank's part of its weights. `parallel/tp/own.py`'s `apply_tp` swaps them in;
they know their TP group and tag but nothing of the model around them. Every collective goes through
`shardlab.comm` (via `tp_ops`).

- ColumnParallelLinear / RowParallelLinear: a linear split by output / input features;
- VocabParallelEmbedding / VocabParallelHead: the embedding and the output layer split by vocabulary rows,
  padded to a multiple of the degree;
- KVHeadLinear: a replicated key/value projection of which this rank runs one head (grouped-query
  attention with fewer key/value heads than ranks);
- SequenceParallelPositions: SP's position lookup for this rank's part of the sequence;
- ShardedRegionRNG: the two dropout streams (replicated regions draw alike, sharded ones per rank).

The linear modules take their matmul from the linear they wrap: a plain nn.Linear's is F.linear; a module
that a precision converter put in its place (precision.py `CONVERTERS`, run before TP) declares its own,
`matmul(x, weight, bias)`, which is then called with this rank's piece of the weight, so a converted linear
stays converted under TP.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from shardlab.parallel.tp import ops as tp_ops


# --- layers --------------------------------------------------------------------------------------------

def converted(linear: nn.Module, piece: nn.Parameter | None = None) -> nn.Module | None:
    """The wrapped linear when it declares its own `matmul(x, weight, bias)` (a precision converter's
    module), emptied of its weight and bias (the TP module holds this rank's piece, under the same names)
    and kept as a child, so what else it holds (scales, counters) moves and saves with the model; None for
    a plain linear (F.linear). Call after the TP module has taken its piece of the weight; `piece`: that
    piece when it is a parameter of its own, which a module declaring `adopt_piece(piece)` is shown (a
    float8 linear gives it the float8 all-gather encoding its whole weight had)."""
    if not callable(getattr(linear, "matmul", None)):
        return None
    for name in ("weight", "bias"):
        if name in linear._parameters:
            linear.register_parameter(name, None)
    if piece is not None and callable(getattr(linear, "adopt_piece", None)):
        linear.adopt_piece(piece)
    return linear


def product(module: nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """x W^T + b the way the wrapped linear computes it (`module.converted`: see `converted`)."""
    if module.converted is None:
        return F.linear(x, weight, bias)
    return module.converted.matmul(x, weight, bias)


class ColumnParallelLinear(nn.Module):
    """Y = X A + b with A split by output features: rank r holds rows A_r (and b_r) and computes Y_r.
    The output stays split (e.g. this rank's heads). `enter=True` puts f (or SP's all-gather) on the input;
    q, k, v leave it to the attention module's pre-hook so that they share it."""

    def __init__(self, linear: nn.Linear, group, rank: int, size: int, sp: bool, tag: str, enter: bool = True):
        super().__init__()
        rows = linear.out_features // size
        sl = slice(rank * rows, (rank + 1) * rows)
        self.weight = nn.Parameter(linear.weight.detach()[sl].clone(), linear.weight.requires_grad)
        self.bias = (nn.Parameter(linear.bias.detach()[sl].clone(), linear.bias.requires_grad)
                     if linear.bias is not None else None)
        self.group, self.sp, self.tag, self.enter = group, sp, tag, enter
        self.converted = converted(linear, self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.enter:
            x = tp_ops.enter(x, self.group, self.sp, self.tag)
        return product(self, x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Y = X A + b with A split by input features: rank r holds columns A_r, takes X's r-th slice (the output
    of a column-parallel layer, no communication) and computes a partial sum X_r A_r; g (or SP's
    reduce-scatter) sums the partials. The bias is replicated and added once, after the sum."""

    def __init__(self, linear: nn.Linear, group, rank: int, size: int, sp: bool, tag: str):
        super().__init__()
        cols = linear.in_features // size
        self.weight = nn.Parameter(linear.weight.detach()[:, rank * cols:(rank + 1) * cols].clone(),
                                   linear.weight.requires_grad)
        self.bias = (nn.Parameter(linear.bias.detach().clone(), linear.bias.requires_grad)
                     if linear.bias is not None else None)
        self.group, self.sp, self.tag = group, sp, tag
        self.converted = converted(linear, self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = tp_ops.leave(product(self, x, self.weight), self.group, self.sp, self.tag)
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """Rank r holds rows [r*c, (r+1)*c) of the vocabulary-padded table (c = ceil(V / N)). Ids outside the
    slice look up row 0 and are zeroed; summing over ranks (g, or SP's reduce-scatter) gives the lookup."""

    def __init__(self, emb: nn.Embedding, group, rank: int, size: int, sp: bool, tag: str):
        super().__init__()
        self.vocab_size = emb.num_embeddings
        self.per_rank = -(-self.vocab_size // size)
        self.start = rank * self.per_rank
        local = emb.weight.detach().new_zeros(self.per_rank, emb.embedding_dim)  # padding rows stay zero
        real = self.real_rows
        local[:real] = emb.weight.detach()[self.start:self.start + real]
        self.weight = nn.Parameter(local, emb.weight.requires_grad)
        self.group, self.sp, self.tag = group, sp, tag

    @property
    def real_rows(self) -> int:
        return max(0, min(self.per_rank, self.vocab_size - self.start))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        outside = (local < 0) | (local >= self.per_rank)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out = out.masked_fill(outside.unsqueeze(-1), 0.0)
        return tp_ops.leave(out, self.group, self.sp, self.tag)


class VocabParallelHead(nn.Module):
    """The output layer, column-parallel over the vocabulary: logits for this rank's columns only, scored by
    the vocab-parallel cross-entropy. Its weight is the embedding's own slice (tied) or, untied, this rank's
    rows of the head's own (vocabulary-padded like the embedding's)."""

    def __init__(self, weight: nn.Parameter, group, sp: bool, tag: str, real_rows: int = 0):
        super().__init__()
        self.weight = weight
        self.real_rows = real_rows
        self.group, self.sp, self.tag = group, sp, tag

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(tp_ops.enter(x, self.group, self.sp, self.tag), self.weight)


class KVHeadLinear(nn.Module):
    """Grouped-query attention with fewer key/value heads than TP ranks: the k (or v) projection replicated
    whole on every rank, of which this rank runs only rows `rows` (the one key/value head its query heads
    share). Its weight's gradient is nonzero in those rows only, a partial sum: OwnTP.finish_backward adds
    the ranks' gradients, so every copy takes the same step."""

    def __init__(self, linear: nn.Linear, head: int, head_dim: int):
        super().__init__()
        self.weight = linear.weight
        self.rows = slice(head * head_dim, (head + 1) * head_dim)
        self.converted = converted(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return product(self, x, self.weight[self.rows])


class SequenceParallelPositions(nn.Module):
    """SP: the position embedding (replicated) looks up only this rank's positions, since the token
    embedding's reduce-scatter leaves each rank 1/N of the sequence. Its gradient is partial per rank."""

    def __init__(self, emb: nn.Embedding, rank: int, size: int):
        super().__init__()
        self.weight = emb.weight
        self.rank, self.size = rank, size

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        """`pos`: (t,) shared by the batch, or (b, t) per token (packed documents): the last dim is the
        sequence, whole here (the ids are not split, only the activations)."""
        if pos.shape[-1] % self.size:
            raise ValueError(f"sequence parallelism: sequence length {pos.shape[-1]} is not divisible by the "
                             f"tensor-parallel degree {self.size}; choose train.seq_len as a multiple of parallel.tp")
        return F.embedding(pos.unflatten(-1, (self.size, -1)).select(-2, self.rank), self.weight)


# --- dropout streams -------------------------------------------------------------------------------------

class ShardedRegionRNG:
    """Megatron's two dropout streams: where activations are replicated across TP (the residual stream
    without SP) dropout draws from the default generator, which every TP rank seeds alike, so the masks
    agree; where they are sharded (attention heads; with SP the sequence-split LayerNorm/dropout regions)
    each rank must draw independently. On entering a sharded module this draws one seed from the default
    generator, reseeds it with (seed, tp rank), and on leaving restores the default stream. Because the
    seed comes from the default stream, activation recompute (which restores the default generator's
    state) replays the same masks; there is no extra state to checkpoint."""

    STRIDE = 0x9E3779B97F4A7C15  # odd, so (seed, rank) -> seed + rank * STRIDE is one-to-one per seed

    def __init__(self, tp_rank: int):
        self.tp_rank = tp_rank
        self._saved: list = []

    @staticmethod
    def _generator(x: torch.Tensor) -> torch.Generator:
        if x.device.type == "cuda":
            return torch.cuda.default_generators[x.device.index if x.device.index is not None
                                                  else torch.cuda.current_device()]
        return torch.default_generator

    def enter(self, module, args):
        gen = self._generator(args[0])
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=gen, device=gen.device).item())
        self._saved.append((gen, gen.get_state()))
        gen.manual_seed((seed + self.tp_rank * self.STRIDE) % 2 ** 63)

    def leave(self, module, args, output):
        gen, state = self._saved.pop()
        gen.set_state(state)

    def install(self, module: nn.Module) -> None:
        module.register_forward_pre_hook(self.enter)
        module.register_forward_hook(self.leave)


__all__ = ["ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding", "VocabParallelHead",
           "KVHeadLinear", "SequenceParallelPositions", "ShardedRegionRNG"]
