"""Context parallelism, own implementation: every sample's sequence split across the `cp` ranks, attention
computed by the ring (parallel/cp/ring.py), applied to the single-device GPT from outside.

    model = apply_cp(model, cp_group)            # attn.attend -> Ring per block; positions follow the chunks
    x, y = model.cp.shard_batch(x, y)            # this rank's tokens and targets (the step does this)
    # packed documents (data.doc_mask): shard_batch(x, y, doc_pos) also cuts the per-token positions
    loss_sum = cross_entropy(model(x), y, "sum") # this rank's part of the sequence's loss

Zigzag ("head-tail") chunking: the sequence is cut into 2N chunks and rank r holds chunks r and 2N-1-r,
so under a causal mask every rank scores the same number of (query, key) pairs (a contiguous split gives
the last rank ~2x the first's). Positions and targets follow the chunks: the step slices inputs and
targets alike, and a pre-hook on the position embedding maps local positions to global ones (also under
sequence parallelism, whose own position layer then takes its slice of those). The llama family has no
position table: its rotary positions are set on every block's `attn.rope_positions` by a pre-hook on the
model, from the length of the chunks it is handed (so q and k rotate by their global positions, and
q.k depends on the global distance between them, as on one device). Its grouped k/v heads travel the
ring as they are (parallel/cp/ring.py).

Packed documents (`data.doc_mask`): the per-token positions inside documents are computed from the whole
sequence before the cut and cut with the tokens; the ring masks each (query chunk, key chunk) pair by
document from the queries' positions and the chunks' global indices (parallel/cp/ring.py), with no extra
traffic. The rotary seam `rope_positions` is then unused: the model rotates by the batch's positions.

Parameters are not split: every cp rank holds a replica, and their gradients are summed over cp as well
as dp (the data-parallel layer communicates in the `dp_cp` group). See docs/context.md.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.errors import ConfigError
from shardlab.model import anatomy
from shardlab.parallel.layer import Layer
from shardlab.parallel.cp.ring import Ring, expand

LAYOUTS = ("zigzag", "contiguous")  # contiguous: only to measure what zigzag balances (bench context)


def chunk_ids(rank: int, size: int, layout: str = "zigzag") -> tuple[int, ...]:
    """The global chunk indices rank `rank` holds, in local order."""
    return (rank, 2 * size - 1 - rank) if layout == "zigzag" else (rank,)


def n_chunks(size: int, layout: str = "zigzag") -> int:
    return 2 * size if layout == "zigzag" else size


def token_index(seq_len: int, rank: int, size: int, layout: str = "zigzag", device=None) -> torch.Tensor:
    """The global positions of this rank's tokens, in local order (on `device`: the host by default)."""
    c = seq_len // n_chunks(size, layout)
    return torch.cat([torch.arange(i * c, (i + 1) * c, device=device or "cpu") for i in chunk_ids(rank, size, layout)])


def shard_sequence(t: torch.Tensor, rank: int, size: int, layout: str = "zigzag", dim: int = 1) -> torch.Tensor:
    """This rank's chunks of `t` along `dim` (the sequence)."""
    check_divisible(t.shape[dim], size, layout)
    return t.index_select(dim, token_index(t.shape[dim], rank, size, layout, t.device))


def check_divisible(seq_len: int, size: int, layout: str = "zigzag") -> None:
    n = n_chunks(size, layout)
    if seq_len % n:
        raise ConfigError(f"train.seq_len={seq_len} is not divisible by 2 x parallel.cp = {n} (zigzag context "
                          f"parallelism cuts every sequence into {n} equal chunks); choose a multiple of {n}")


def attention_flops(seq_len: int, rank: int, size: int, layout: str = "zigzag", causal: bool = True,
                    batch: int = 1, heads: int = 1, head_dim: int = 1) -> int:
    """Forward attention FLOPs rank `rank` computes (QK^T and PV over the (query, key) pairs it scores):
    the analytic count the ring's `stats["flops"]` must equal."""
    from shardlab.parallel.cp.ring import pair_kind

    c = seq_len // n_chunks(size, layout)
    entries = 0
    for qc in chunk_ids(rank, size, layout):
        for src in range(size):
            for kc in chunk_ids(src, size, layout):
                kind = pair_kind(qc, kc, causal)
                entries += 0 if kind is None else c * c if kind == "full" else c * (c + 1) // 2
    return 4 * batch * heads * head_dim * entries


class ContextParallel:
    """What a cp model offers the composition: `shard_batch` for the step, the rings (their work counters)."""

    impl = "own"

    def __init__(self, group, layout: str, rings: dict[str, Ring]):
        self.group, self.layout, self.rings = group, layout, rings
        self.rank, self.size = comm.rank(group), comm.world_size(group)

    def index(self, seq_len: int, device=None) -> torch.Tensor:
        """The global positions of this rank's tokens of a `seq_len` sequence, in local order."""
        check_divisible(seq_len, self.size, self.layout)
        return token_index(seq_len, self.rank, self.size, self.layout, device)

    def shard_batch(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """This rank's chunks of a batch's inputs, targets and (packed documents) per-token positions, all cut
        alike (sequence = dim 1): each token keeps its target and its position inside its document."""
        return tuple(t.index_select(1, self.index(t.shape[1], t.device)) for t in tensors)

    def positions(self, pos: torch.Tensor) -> torch.Tensor:
        """Local positions 0..L-1 (what the model asks the position embedding for) -> global positions.
        Packed documents' positions, (b, L) per token, came cut with the batch (`shard_batch`) and are
        already the right ones: they pass as they are."""
        if pos.dim() > 1:
            return pos
        return self.index(pos.shape[0] * self.size, pos.device)[pos]

    def attention_stats(self) -> dict:
        """This rank's attention work summed over blocks: FLOPs and seconds (forward, backward)."""
        out = {"flops": 0, "fwd_s": 0.0, "bwd_s": 0.0}
        for ring in self.rings.values():
            for k in out:
                out[k] += ring.stats[k]
        return out

    def reset_stats(self) -> None:
        for ring in self.rings.values():
            ring.stats.update(flops=0, fwd_s=0.0, bwd_s=0.0)


def apply_cp(model: nn.Module, group, layout: str = "zigzag", causal: bool = True) -> Layer:
    """Make `model` (a GPT, whole or tensor-parallel) compute on this rank's chunks of every sequence: the
    ring replaces each block's attention core, the position embedding looks up global positions. In place;
    parameter names are unchanged. `causal=False` only for tests of the ring on other masks."""
    if layout not in LAYOUTS:
        raise ValueError(f"context parallelism layout {layout!r}: must be one of {', '.join(LAYOUTS)}")
    size = comm.world_size(group)
    anat = anatomy.of(model)
    rings = {}
    for i, block in anat.named_blocks(model):
        rings[i] = Ring(group, lambda r: chunk_ids(r, size, layout), anat.block(i), causal)
        anat.set_attend(block, rings[i])
    return _install(model, ContextParallel(group, layout, rings))


def apply_context_parallel(part: nn.Module, cfg, dims) -> Layer:
    """The composition's context-parallel layer (`layers.CONTEXT_PARALLEL["own"]`): ring attention over the
    mesh's `cp` dimension, zigzag chunks."""
    check_divisible(cfg.train.seq_len, dims.cp)
    return apply_cp(part, dims.group("cp"))


def apply_torch_context_parallel(part: nn.Module, cfg, dims) -> Layer:
    """`parallel.cp_impl=torch`: torch's experimental context parallelism (ring attention dispatched on
    DTensor) for each block's attention core. Its ring handlers are registered for the CUDA attention
    kernels only; the chunks, positions and targets are ours (torch's head-tail load balancer is the same
    zigzag layout), so only the attention core changes."""
    if comm.device().type != "cuda":
        raise ConfigError(TORCH_ON_CPU)
    import torch.nn.functional as F
    from torch.distributed.tensor.experimental import _attention as cp_attention
    from torch.distributed.tensor.parallel import parallelize_module

    check_divisible(cfg.train.seq_len, dims.cp)
    mesh = dims.submesh("cp")
    cp_attention._cp_options.enable_load_balance = True  # head-tail: our zigzag chunks

    class SDPA(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    cp_attention._enable_context_parallel_dispatcher()
    anat = anatomy.of(part)
    for _, block in anat.named_blocks(part):
        core = parallelize_module(SDPA(), mesh, cp_attention._ContextParallel(
            seq_dim=2, attention_type=cp_attention._ContextParallel.AttentionType.SDPA))
        # GQA: torch's ring dispatches SDPA with equal head counts, so the grouped k/v heads are repeated first
        anat.set_attend(block, lambda q, k, v, dropout_p, core=core: core(q, expand(k, q.shape[1]), expand(v, q.shape[1])))
    return _install(part, ContextParallel(dims.group("cp"), "zigzag", {}))


def _install(model: nn.Module, cp: ContextParallel) -> Layer:
    """Positions follow the chunks (a pre-hook keeps the embedding's parameter name); the step slices each
    batch into this rank's chunks (`shard_batch`)."""
    anat = anatomy.of(model)
    table = anat.get(model, anat.positions)
    if table is not None:
        table.register_forward_pre_hook(lambda mod, args: (cp.positions(args[0]), *args[1:]))
    seam = anat.rotary_positions
    attns = [anat.attention_of(b) for _, b in anat.named_blocks(model)] if seam else []
    if attns:  # rotary positions (llama): the model's input is this rank's chunks, (b, local_len[, d])

        def rope_positions(mod, args):
            pos = cp.positions(torch.arange(args[0].shape[1], device=args[0].device))
            for attn in attns:
                setattr(attn, seam, pos)

        model.register_forward_pre_hook(rope_positions)
    return Layer("cp", model, shard_batch=cp.shard_batch, impl=cp)


TORCH_ON_CPU = ("parallel.cp_impl=torch: torch's context_parallel runs only with CUDA attention kernels (on CPU its "
                "ring handlers are not registered, the causal case fails and CPU flash attention's backward has no "
                "sharding rule); use parallel.cp_impl=own")
