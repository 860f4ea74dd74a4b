"""PowerSGD gradient compression for the own `ddp` layer (Vogels, Karimireddy, Jaggi 2019).

Instead of all-reducing a gradient matrix M (n x m) every step, each rank sends two thin factors:

    M <- M + e                      error feedback: what earlier steps' approximations left out
    P  = M Q            all-reduce P   (n x r)
    P  = orthogonalise(P)
    Q  = M^T P          all-reduce Q   (m x r), divided by the world: the average
    M ~ P Q^T,  e <- M - P Q^T     the local residual, added to the next step's gradient

Q is kept from one step to the next (warm start): one power-iteration step per training step then
tracks the gradient's dominant subspace. Vectors (biases, LayerNorm weights) are small and are
all-reduced uncompressed. The wire carries r*(n+m) numbers per matrix instead of n*m.

With r >= min(n, m) the approximation is exact (P spans the column space of the summed gradient),
so PowerSGD then computes what plain all-reduce computes, up to rounding: the parity test.

Orthogonalisation is a Householder QR (torch.linalg.qr) rather than the paper's Gram-Schmidt: it
keeps P orthonormal even when P is badly conditioned, which Gram-Schmidt in fp32 does not.

Every matrix of a step travels in one flat P all-reduce and one flat Q all-reduce (as torch's hook
batches a bucket), all through comm.py. The state (Q and the error per matrix) is per rank: the
errors differ between ranks, so it is not part of a checkpoint and resuming is refused.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab import comm


class PowerSGD:
    def __init__(self, params: list[nn.Parameter], rank: int, group=None, seed: int = 0):
        self.params, self.rank, self.group = params, rank, group
        # Every rank draws the same initial Q: same seed, same parameter order (checked at wrap).
        self.gen = torch.Generator().manual_seed(seed)
        self.q: dict[int, torch.Tensor] = {}  # warm start, per matrix
        self.error: dict[int, torch.Tensor] = {}  # error feedback, per matrix

    @staticmethod
    def is_matrix(p: torch.Tensor) -> bool:
        return p.dim() >= 2

    def wire_numel(self) -> int:
        """Numbers on the wire per step: r*(n+m) per matrix (r capped at min(n, m)) plus every vector."""
        total = 0
        for p in self.params:
            if self.is_matrix(p):
                n, m = p.shape[0], p.numel() // p.shape[0]
                total += min(self.rank, n, m) * (n + m)
            else:
                total += p.numel()
        return total

    @torch.no_grad()
    def reduce(self, world: int) -> None:
        """Replace every parameter's `.grad` (local) by the averaged, compressed gradient."""
        mats, vecs = [], []
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            (mats if self.is_matrix(p) else vecs).append((i, p.grad))
        if vecs:
            flat = torch.cat([g.reshape(-1) for _, g in vecs])
            comm.all_reduce(flat, group=self.group, tag="powersgd_vectors")
            flat.div_(world)
            offset = 0
            for _, g in vecs:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
        if not mats:
            return
        ms = []
        for i, g in mats:
            m = g.view(g.shape[0], -1)  # the gradient itself: overwritten with the approximation below
            if i in self.error:
                m.add_(self.error[i])
            if i not in self.q:
                r = min(self.rank, *m.shape)
                # drawn from the host generator (the same q on every rank, whatever the device), then moved
                self.q[i] = torch.randn(m.shape[1], r, generator=self.gen, dtype=m.dtype, device="cpu").to(m.device)
            ms.append((i, m))
        ps = [m @ self.q[i] for i, m in ms]
        flat_p = torch.cat([p.reshape(-1) for p in ps])
        comm.all_reduce(flat_p, group=self.group, tag="powersgd_p")  # a sum: orthogonalising removes the scale
        offset = 0
        for k, p in enumerate(ps):
            ps[k] = torch.linalg.qr(flat_p[offset:offset + p.numel()].view_as(p)).Q
            offset += p.numel()
        qs = [m.t() @ p for (_, m), p in zip(ms, ps)]
        flat_q = torch.cat([q.reshape(-1) for q in qs])
        comm.all_reduce(flat_q, group=self.group, tag="powersgd_q")
        flat_q.div_(world)
        offset = 0
        for (i, m), p, q in zip(ms, ps, qs):
            q = flat_q[offset:offset + q.numel()].view_as(q)
            offset += q.numel()
            approx = p @ q.t()
            self.error[i] = m - approx  # this rank's residual, fed back next step
            self.q[i] = q.clone()  # warm start
            m.copy_(approx)
