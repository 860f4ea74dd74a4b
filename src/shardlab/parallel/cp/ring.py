"""Ring attention (Liu et al. 2023; the zigzag layout of Brandon et al. / ring-flash-attention): exact
attention over a sequence split into chunks across the ranks of a ring.

Every rank keeps its queries; the key/value *blocks* (one rank's K and V) travel around the ring by
point-to-point messages through `comm`. At step s rank r holds the block of rank r - s, computes its
queries against it (each (q-chunk, k-chunk) pair as one flash-attention call that also returns the
row log-sum-exp), and merges the partial results by the log-sum-exp rule (online softmax):

    lse = logaddexp(lse_a, lse_b)
    out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)

The transfer of the next block is posted before the current block's compute, so they overlap.
Causal masking is exact per pair of global chunks: a key chunk after the query chunk is skipped, the
same chunk is the diagonal (causal inside), an earlier one is attended in full.

The backward runs the ring again: K/V blocks travel as in forward, and with each block travels the
accumulator of its gradient dK/dV, which every rank adds its queries' contribution to; after the last
step the accumulator goes home. Each pair's gradient is the flash backward given the *final* output
and log-sum-exp (its softmax rows are then the global ones): the standard ring-attention backward.

Per rank and pass: forward sends size - 1 K/V blocks; backward size - 1 K/V blocks and size dK/dV
blocks (tags "cp.kv:NAME", "cp.kv_bwd:NAME", "cp.dkv:NAME"). docs/context.md has the picture.

Grouped-query attention (Llama): k and v may have fewer heads than q (a divisor of q's). The ring runs on
the grouped heads: the blocks that travel keep n_kv_heads heads, so the K/V traffic shrinks by
n_head / n_kv_heads (GQA's point, and the ring's whole cost); each pair repeats its key/value chunk over
the query groups just before the kernel (`expand`), and the pair's dK/dV is summed back over each group
(`reduce_groups`, the adjoint of the repeat) before it joins the travelling accumulator.
"""
from __future__ import annotations

import math
import time

import torch

from shardlab import comm


def block_attention(q, k, v, causal: bool):
    """One (q-chunk, k-chunk) pair: (out, lse), lse of shape (b, h, t_q). On CPU the flash kernel (it
    returns the log-sum-exp and never holds the t_q x t_k scores); elsewhere the plain formula."""
    if q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        return out, lse
    s = (q @ k.transpose(-1, -2)).float() * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(_upper(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    lse = s.logsumexp(-1)
    return (torch.exp(s - lse.unsqueeze(-1)).to(v.dtype) @ v), lse


def block_attention_backward(dout, q, k, v, out, lse, causal: bool):
    """(dq, dk, dv) of one pair, given the final output and log-sum-exp of the query rows."""
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, causal)
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)).float() * scale
    if causal:
        s = s.masked_fill(_upper(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    p = torch.exp(s - lse.unsqueeze(-1))
    dv = p.to(dout.dtype).transpose(-1, -2) @ dout
    dp = (dout @ v.transpose(-1, -2)).float()
    ds = p * (dp - (dout.float() * out.float()).sum(-1, keepdim=True)) * scale
    return (ds.to(q.dtype) @ k), (ds.to(q.dtype).transpose(-1, -2) @ q), dv


def expand(kv: torch.Tensor, heads: int) -> torch.Tensor:
    """(b, kv_heads, t, d) -> (b, heads, t, d): key/value head j serves query heads j*r .. j*r + r - 1
    (model/llama.py's repeat_kv); the CPU flash kernel takes equal head counts only."""
    rep = heads // kv.shape[1]
    return kv if rep == 1 else kv.repeat_interleave(rep, dim=1)


def reduce_groups(g: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(b, heads, t, d) -> (b, kv_heads, t, d): the gradient of `expand`, a sum over each group."""
    b, h, t, d = g.shape
    return g if h == kv_heads else g.view(b, kv_heads, h // kv_heads, t, d).sum(2)


def _upper(tq: int, tk: int, device) -> torch.Tensor:
    return torch.ones(tq, tk, dtype=torch.bool, device=device).triu(1)


def merge(out, lse, blk_out, blk_lse):
    """The log-sum-exp rule: two partial softmax-weighted sums over disjoint key sets become one."""
    if out is None:
        return blk_out.to(torch.promote_types(blk_out.dtype, torch.float32)), blk_lse.to(out_dtype(blk_lse))
    new = torch.logaddexp(lse, blk_lse)
    out = out * torch.exp(lse - new).unsqueeze(-1) + blk_out * torch.exp(blk_lse - new).unsqueeze(-1)
    return out, new


def out_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.promote_types(t.dtype, torch.float32)


def pair_kind(qc: int, kc: int, causal: bool) -> str | None:
    """How query chunk `qc` attends key chunk `kc` (global chunk indices): "full", "diag" or None (masked)."""
    if not causal or kc < qc:
        return "full"
    return "diag" if kc == qc else None


class Ring:
    """One attention core on the ring: what `attn.attend` becomes under context parallelism.

    `chunks(r)` are the global chunk indices rank r holds, in its local order (zigzag: r and 2N-1-r).
    `stats` counts this rank's attention work: FLOPs of the pairs computed (QK^T and PV, forward only)
    and the seconds spent computing them, forward and backward."""

    def __init__(self, group, chunks, name: str, causal: bool = True):
        self.group, self.chunks, self.name, self.causal = group, chunks, name, causal
        self.rank, self.size = comm.rank(group), comm.world_size(group)
        self.stats = {"flops": 0, "fwd_s": 0.0, "bwd_s": 0.0}

    def __call__(self, q, k, v, dropout_p: float = 0.0):
        if dropout_p:
            raise ValueError("context parallelism: attention dropout is not supported by the ring (set model.dropout=0)")
        return RingAttention.apply(q, k, v, self)

    # --- the ring -------------------------------------------------------------------------------------
    def pairs(self, src: int):
        """(local q chunk, block chunk, kind) this rank computes against rank `src`'s block."""
        for i, qc in enumerate(self.chunks(self.rank)):
            for j, kc in enumerate(self.chunks(src)):
                kind = pair_kind(qc, kc, self.causal)
                if kind is not None:
                    yield i, j, kind

    def shift(self, send: torch.Tensor, tag: str):
        """Post: send `send` to the next rank, receive the previous rank's into a new buffer.
        Returns (buffer, handles); the caller waits before reading the buffer."""
        recv = torch.empty_like(send)
        nxt, prev = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        handles = comm.batch_isend_irecv([comm.P2POp(comm.isend, send, nxt, self.group, tag),
                                          comm.P2POp(comm.irecv, recv, prev, self.group, tag)])
        return recv, handles


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring: Ring):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        n = len(ring.chunks(ring.rank))
        c = q.shape[2] // n  # chunk length
        qs = q.split(c, dim=2)
        acc = [(None, None)] * n
        kv = torch.stack([k, v])
        for s in range(ring.size):
            src = (ring.rank - s) % ring.size
            if s < ring.size - 1:  # the next block's transfer first: it overlaps this block's compute
                nxt, handles = ring.shift(kv, f"cp.kv:{ring.name}")
            t0 = time.perf_counter()
            for i, j, kind in ring.pairs(src):
                ks, vs = (expand(kv[z, :, :, j * c:(j + 1) * c], q.shape[1]) for z in (0, 1))
                o, lse = block_attention(qs[i], ks, vs, kind == "diag")
                acc[i] = merge(*acc[i], o, lse)
                ring.stats["flops"] += _flops(qs[i], kind)
            ring.stats["fwd_s"] += time.perf_counter() - t0
            if s < ring.size - 1:
                for h in handles:
                    h.wait()
                kv = nxt
        out = torch.cat([o for o, _ in acc], dim=2).to(q.dtype)
        lse = torch.cat([l for _, l in acc], dim=2)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring = ring
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring = ctx.ring
        dout = dout.contiguous()
        n = len(ring.chunks(ring.rank))
        c = q.shape[2] // n
        acc_t = out_dtype(q)
        dq = torch.zeros_like(q, dtype=acc_t)
        kv = torch.stack([k, v])
        dkv = torch.zeros_like(kv, dtype=acc_t)  # travels with its block
        for s in range(ring.size):
            src = (ring.rank - s) % ring.size
            if s < ring.size - 1:
                nxt, handles = ring.shift(kv, f"cp.kv_bwd:{ring.name}")
            t0 = time.perf_counter()
            for i, j, kind in ring.pairs(src):
                qsl, ksl = slice(i * c, (i + 1) * c), slice(j * c, (j + 1) * c)
                g_q, g_k, g_v = block_attention_backward(
                    dout[:, :, qsl], q[:, :, qsl], expand(kv[0, :, :, ksl], q.shape[1]),
                    expand(kv[1, :, :, ksl], q.shape[1]), out[:, :, qsl], lse[:, :, qsl], kind == "diag")
                dq[:, :, qsl] += g_q
                dkv[0, :, :, ksl] += reduce_groups(g_k, k.shape[1])
                dkv[1, :, :, ksl] += reduce_groups(g_v, k.shape[1])
            ring.stats["bwd_s"] += time.perf_counter() - t0
            # This block's gradient moves on with it (after the last step: home to its owner).
            dkv, dkv_handles = ring.shift(dkv, f"cp.dkv:{ring.name}")
            if s < ring.size - 1:
                for h in handles:
                    h.wait()
                kv = nxt
            for h in dkv_handles:
                h.wait()
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None


def _flops(q, kind: str) -> int:
    """Forward FLOPs of one pair: 2 matmuls (QK^T, PV) of 2 FLOPs per multiply-add over the scored
    (query, key) entries; a diagonal pair scores t(t+1)/2 of its t^2."""
    b, h, t, d = q.shape
    entries = t * t if kind == "full" else t * (t + 1) // 2
    return 4 * b * h * d * entries
