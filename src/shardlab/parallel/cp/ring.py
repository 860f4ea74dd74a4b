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

Packed documents (`data.doc_mask`, model/documents.py): query i of a document starting at i - p_i sees
the keys j with i - p_i <= j <= i, so each pair's mask follows from the chunks' global indices and the
queries' positions, computed where the pair is (no ids travel). A pair may mask a query row whole (its
document starts after the key chunk): that row's log-sum-exp is -inf and its output 0, and the merge
keeps two such parts empty instead of NaN (exp(-inf - (-inf))); every row has its own key in the
diagonal pair, so the final log-sum-exp, which the backward divides by, is finite. Pairs after the
query chunk are still skipped; a pair the documents mask whole is computed (deciding to skip it would
read the mask on the host: a sync per pair).

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
from shardlab.model.documents import allowed


def block_attention(q, k, v, causal: bool, mask=None, flash: bool | None = None):
    """One (q-chunk, k-chunk) pair: (out, lse), lse of shape (b, h, t_q). On CPU the flash kernel (it
    returns the log-sum-exp and never holds the t_q x t_k scores); elsewhere the plain formula (`flash`
    chooses: tests check the plain one on CPU too).
    `mask` (packed documents): (b, 1, t_q, t_k) bool, True = may attend, in place of `causal`. A row it
    masks whole has no key in this block: its lse is -inf and its output 0 (`merge` keeps them apart)."""
    if q.device.type == "cpu" if flash is None else flash:
        extra = {} if mask is None else {"attn_mask": _additive(mask, q.dtype)}
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, **extra)
        if mask is not None:  # the kernel reports an empty row as lse 0 (out 0): it carries no weight
            lse = lse.masked_fill(~mask.any(-1), float("-inf"))
        return out, lse
    s = _scores(q, k, causal, mask)
    lse = s.logsumexp(-1)
    # an empty row: exp(-inf - (-inf)) would be NaN; against a finite stand-in every weight is exp(-inf) = 0
    p = torch.exp(s - lse.masked_fill(lse == float("-inf"), 0.0).unsqueeze(-1))
    return (p.to(v.dtype) @ v), lse


def _scores(q, k, causal: bool, mask):
    """The pair's scaled scores in fp32, -inf where masked (the plain formula's)."""
    s = (q @ k.transpose(-1, -2)).float() * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(_upper(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask as the CPU flash kernel takes it: 0 where allowed, -inf elsewhere, in q's dtype."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def block_attention_backward(dout, q, k, v, out, lse, causal: bool, mask=None, flash: bool | None = None):
    """(dq, dk, dv) of one pair, given the final output and log-sum-exp of the query rows (finite: every
    query attends at least itself, so a row empty in this block has p = exp(-inf - lse) = 0 here)."""
    if q.device.type == "cpu" if flash is None else flash:
        extra = {} if mask is None else {"attn_mask": _additive(mask, q.dtype)}
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, causal, **extra)
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = _scores(q, k, causal, mask)
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
    # A row with no key in either part (packed documents: both blocks masked for it) has new = -inf, and
    # exp(-inf - (-inf)) is NaN; against 0 both weights are exp(-inf) = 0 and the row stays empty (out 0,
    # lse -inf) until a block with its keys arrives. Finite rows are untouched: the same bits as before.
    base = new.masked_fill(new == float("-inf"), 0.0)
    out = out * torch.exp(lse - base).unsqueeze(-1) + blk_out * torch.exp(blk_lse - base).unsqueeze(-1)
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

    def __call__(self, q, k, v, dropout_p: float = 0.0, doc_pos=None):
        """`doc_pos` (packed documents): (b, local length) this rank's queries' positions inside their
        documents, in local order (cut with the batch)."""
        if dropout_p:
            raise ValueError("context parallelism: attention dropout is not supported by the ring (set model.dropout=0)")
        return RingAttention.apply(q, k, v, self, doc_pos)

    def pair_mask(self, doc_pos, c: int, src: int, i: int, j: int):
        """Packed documents: (b, 1, c, c) which keys of `src`'s chunk j the queries of local chunk i may
        attend (model/documents.py), from the chunks' global indices and the queries' positions; None
        without documents. Computed locally: no positions travel."""
        if doc_pos is None:
            return None
        qc, kc = self.chunks(self.rank)[i], self.chunks(src)[j]
        q_index = torch.arange(qc * c, (qc + 1) * c, device=doc_pos.device)
        k_index = torch.arange(kc * c, (kc + 1) * c, device=doc_pos.device)
        return allowed(q_index, q_index - doc_pos[:, i * c:(i + 1) * c], k_index)

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
    def forward(ctx, q, k, v, ring: Ring, doc_pos=None):
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
                mask = ring.pair_mask(doc_pos, c, src, i, j)  # packed documents: causality included
                o, lse = block_attention(qs[i], ks, vs, kind == "diag" and mask is None, mask)
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
        ctx.ring, ctx.doc_pos = ring, doc_pos
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring, doc_pos = ctx.ring, ctx.doc_pos
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
                mask = ring.pair_mask(doc_pos, c, src, i, j)
                g_q, g_k, g_v = block_attention_backward(
                    dout[:, :, qsl], q[:, :, qsl], expand(kv[0, :, :, ksl], q.shape[1]),
                    expand(kv[1, :, :, ksl], q.shape[1]), out[:, :, qsl], lse[:, :, qsl],
                    kind == "diag" and mask is None, mask)
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
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None


def _flops(q, kind: str) -> int:
    """Forward FLOPs of one pair: 2 matmuls (QK^T, PV) of 2 FLOPs per multiply-add over the scored
    (query, key) entries; a diagonal pair scores t(t+1)/2 of its t^2."""
    b, h, t, d = q.shape
    entries = t * t if kind == "full" else t * (t + 1) // 2
    return 4 * b * h * d * entries
