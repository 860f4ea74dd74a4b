"""Rank-side helpers for the context-parallel tests: ring attention against single-device attention, and
`parallel.build`'s step at cp layouts (the tp harness's `composed`, with the loss weight over dp x cp)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def ring_vs_sdpa(dtype: torch.dtype, causal: bool, size: int, layout: str = "zigzag", seq: int = 32,
                 batch: int = 2, heads: int = 3, head_dim: int = 8, kv_heads: int = 0,
                 doc_pos: torch.Tensor | None = None) -> dict | None:
    """Forward and backward of the ring over a group of `size` ranks (the first `size` of the world) against
    F.scaled_dot_product_attention on the whole sequence. Every rank draws the same full q, k, v, dout.
    Rank 0 returns the max errors, this rank's recorded send bytes by tag, the per-rank FLOPs counted.
    `kv_heads` (0: = heads): grouped-query attention, k and v with fewer heads (reference: SDPA's enable_gqa).
    `doc_pos` (batch, seq): packed documents' positions (reference: SDPA with the block-causal mask)."""
    from shardlab import comm
    from shardlab.parallel.cp import layer as cp
    from shardlab.parallel.cp.ring import Ring

    group = comm.new_group(list(range(size))) if size < comm.world_size() else None
    if comm.rank() >= size:
        return None
    gen = torch.Generator().manual_seed(7)
    kv_heads = kv_heads or heads
    q, k, v, dout = (torch.randn(batch, h, seq, head_dim, generator=gen, dtype=dtype)
                     for h in (heads, kv_heads, kv_heads, heads))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    if doc_pos is None:
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=kv_heads != heads)
    else:
        from shardlab.model.documents import block_causal_mask
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=block_causal_mask(doc_pos),
                                             enable_gqa=kv_heads != heads)
    ref.backward(dout)
    r = comm.rank(group)
    ring = Ring(group, lambda i: cp.chunk_ids(i, size, layout), "t", causal)
    mine = [cp.shard_sequence(t.detach(), r, size, layout, dim=2).requires_grad_() for t in (q, k, v)]
    first = comm.RECORDER.order
    out = ring(*mine) if doc_pos is None else ring(*mine, doc_pos=cp.shard_sequence(doc_pos, r, size, layout))
    out.backward(cp.shard_sequence(dout, r, size, layout, dim=2))
    sent = _sent_since(first)
    errs = {"out": (out - cp.shard_sequence(ref.detach(), r, size, layout, dim=2)).abs().max().item()}
    for name, t, m in zip("qkv", (q, k, v), mine):
        errs["d" + name] = (m.grad - cp.shard_sequence(t.grad, r, size, layout, dim=2)).abs().max().item()
    everyone = comm.all_gather_object({"errs": errs, "sent": sent, "flops": ring.stats["flops"]}, group=group)
    return everyone if r == 0 else None


COMPOSED = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.lr=0.001",
            "train.grad_clip=1.0", "ckpt.final=false"]


def composed(overrides: list[str], steps: int = 5, accum: int = 1) -> dict | None:
    """`steps` steps of `parallel.build(cfg)`'s Parallel the way the trainer drives it, on the same global
    batches at any layout: each data-parallel rank takes its rows, the cp ranks of one dp rank the same rows
    (the step cuts them into chunks). The loss weight counts the ranks that saw different tokens (dp x cp),
    as the trainer's; `accum` microbatches per step (a pipeline schedules several). Rank 0 returns the
    global losses, clipped norms, full parameters (under a pipeline, every stage's), the model state dict's
    shape per name, an eval loss, and every rank's K/V send bytes of the last step by tag."""
    from shardlab import comm
    import step_driver as driver

    cfg, par = driver.build(overrides, COMPOSED)
    t = cfg.train
    tokens = t.global_batch * t.seq_len
    marks = []  # the recorder's position before each step: the last step's sends are counted
    out = driver.train(par, cfg, steps, accum, before_step=lambda s: marks.append(comm.RECORDER.order))
    sent = _sent_since(marks[-1])
    data = driver.random_batch(0, (t.global_batch, t.seq_len + 1), seed=999)[driver.rows(par, t.micro_batch)]
    ev = par.sum_over_data(par.eval_loss_sum(data[:, :-1], data[:, 1:]).double(), "eval")
    out["eval"] = float(ev) / tokens
    out["params"] = {k: v.detach().clone() for k, v in par.full_parameters().items()}
    if par.dims.pp > 1:  # a pipeline stage holds its own blocks only: the union over the ranks
        for held in comm.all_gather_object(out["params"]):
            out["params"].update(held)
    sd = par.model_state_dict()
    out["state"] = {k: tuple(v.shape) for k, v in sd.items()}
    cp = getattr(par.model, "cp", None)
    out["sent"] = comm.all_gather_object(sent)
    out["flops"] = comm.all_gather_object(cp.attention_stats()["flops"] if cp is not None else 0)
    return out if comm.rank() == 0 else None


def _sent_since(first: int) -> dict[str, int]:
    """Bytes this rank sent by context parallelism since record number `first`, by tag: the ring's sends (a
    receive's record carries the same payload, and a pair's transfer is counted once) and Ulysses'
    all-to-alls and document-position gathers (comm's payload)."""
    from shardlab import comm

    sent: dict[str, int] = {}
    for rec in comm.RECORDER.ring:
        if rec.order > first and rec.op in ("send", "all_to_all", "all_gather") and rec.tag.startswith("cp."):
            sent[rec.tag] = sent.get(rec.tag, 0) + rec.bytes
    return sent
