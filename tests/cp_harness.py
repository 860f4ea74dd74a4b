"""Rank-side helpers for the context-parallel tests: ring attention against single-device attention, and
`parallel.build`'s step at cp layouts (the tp harness's `composed`, with the loss weight over dp x cp)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def ring_vs_sdpa(dtype: torch.dtype, causal: bool, size: int, layout: str = "zigzag", seq: int = 32,
                 batch: int = 2, heads: int = 3, head_dim: int = 8) -> dict | None:
    """Forward and backward of the ring over a group of `size` ranks (the first `size` of the world) against
    F.scaled_dot_product_attention on the whole sequence. Every rank draws the same full q, k, v, dout.
    Rank 0 returns the max errors, this rank's recorded send bytes by tag, the per-rank FLOPs counted."""
    from shardlab import comm
    from shardlab.parallel import cp
    from shardlab.parallel.ring_attention import Ring

    group = comm.new_group(list(range(size))) if size < comm.world_size() else None
    if comm.rank() >= size:
        return None
    gen = torch.Generator().manual_seed(7)
    q, k, v, dout = (torch.randn(batch, heads, seq, head_dim, generator=gen, dtype=dtype) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref.backward(dout)
    r = comm.rank(group)
    ring = Ring(group, lambda i: cp.chunk_ids(i, size, layout), "t", causal)
    mine = [cp.shard_sequence(t.detach(), r, size, layout, dim=2).requires_grad_() for t in (q, k, v)]
    comm.RECORDER.reset_step()
    out = ring(*mine)
    out.backward(cp.shard_sequence(dout, r, size, layout, dim=2))
    sent = {tag: n for tag, n in comm.RECORDER.step_stats()["bytes_by_tag"].items() if tag.startswith("cp.")}
    errs = {"out": (out - cp.shard_sequence(ref.detach(), r, size, layout, dim=2)).abs().max().item()}
    for name, t, m in zip("qkv", (q, k, v), mine):
        errs["d" + name] = (m.grad - cp.shard_sequence(t.grad, r, size, layout, dim=2)).abs().max().item()
    everyone = comm.all_gather_object({"errs": errs, "sent": sent, "flops": ring.stats["flops"]}, group=group)
    return everyone if r == 0 else None
