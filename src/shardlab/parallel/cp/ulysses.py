"""All-to-all context parallelism: DeepSpeed-Ulysses (Jacobs et al. 2023), and the 2-D hybrid of Ulysses
inside a ring (USP, Fang & Zhao 2024; Megatron core's `cp_comm_type=a2a+p2p`).

Ulysses: outside attention the sequence is sharded (rank u of U holds tokens u*s/U .. (u+1)*s/U - 1, a
contiguous piece: attention below sees the whole sequence, so no zigzag is needed). Entering attention one
all-to-all per tensor turns q, k, v from (all heads, my piece of the sequence) into (my 1/U of the heads, the
whole sequence); the block's own attention core runs on those heads, causal or with the whole sequence's
document mask; a second all-to-all turns the output back. The backward is the adjoint: the same all-to-alls
the other way (dO in; dQ, dK, dV out). Bytes per rank per layer and pass are the four tensors' local size,
constant as U grows with the sequence (the ring's grow with the block it circulates).

Heads (after tensor parallelism: h = n_head/tp query heads, g = max(n_kv_heads/tp, 1) key/value heads):
U must divide h. Grouped key/value heads split when U divides g; when g < U (and g divides U) each K/V head
is **replicated** U/g times before the all-to-all (repeat_interleave: its adjoint sums the copies' gradients),
so every rank receives the one K/V head its query heads use. Other pairs are refused (checks.py).

Hybrid over cp = R x U ranks (`parallel.cp_ulysses=U`): the cp group is cut into R Ulysses groups of U
consecutive ranks (inner, the fast links in a node) and U rings of R ranks (outer). The sequence is cut into
2R zigzag chunks, Ulysses group o holds chunks o and 2R-1-o, and its U ranks hold contiguous 1/U pieces of
those two chunks. The all-to-all gathers a Ulysses group's two chunks for 1/U of the heads, and the ring
(parallel/cp/ring.py) runs over the R groups on those heads. Ulysses alone is the hybrid with R = 1.

Packed documents: the per-token positions are cut with the tokens (`shard_batch`) and, the first time a
microbatch's positions reach attention, all-gathered over the Ulysses group (tag `cp.doc_pos`, int64), so
the core masks by the whole (ring-local) sequence's documents; later layers and the recompute reuse them.

Tags: `cp.a2a:NAME` (forward: q, k, v in, output back), `cp.a2a_bwd:NAME` (backward), with the ring's own
under the hybrid. `a2a_bytes` is the analytic count the recorder must equal.
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.model import anatomy
from shardlab.parallel.cp.cost import a2a_bytes, kv_heads  # noqa: F401 - the analytic count, re-exported
from shardlab.parallel.cp.layer import ContextParallel, _install, token_index
from shardlab.parallel.cp.ring import Ring, expand
from shardlab.parallel.layer import Layer


def all_to_all(x: torch.Tensor, scatter: int, gather: int, group, tag: str) -> torch.Tensor:
    """Dimension `scatter` of `x` cut in U pieces, piece j to group rank j; what arrives from rank j is
    concatenated along `gather` in rank order. Equal splits, one `comm.all_to_all_single`."""
    send = torch.stack(x.chunk(comm.world_size(group), dim=scatter))
    recv = torch.empty_like(send)
    comm.all_to_all_single(recv, send, group=group, tag=tag)
    return torch.cat(recv.unbind(0), dim=gather)


class _AllToAll(torch.autograd.Function):
    """The all-to-all with its adjoint: the same exchange with `scatter` and `gather` swapped."""

    @staticmethod
    def forward(ctx, x, scatter: int, gather: int, group, name: str):
        ctx.args = (gather, scatter, group, f"cp.a2a_bwd:{name}")
        return all_to_all(x, scatter, gather, group, f"cp.a2a:{name}")

    @staticmethod
    def backward(ctx, g):
        return all_to_all(g.contiguous(), *ctx.args), None, None, None, None


HEADS, SEQ = 1, 2  # (b, heads, t, head_dim)


def heads_for_attention(x: torch.Tensor, group, name: str) -> torch.Tensor:
    """(b, h, t/U, d) sequence shard -> (b, h/U, t, d) head shard over the group's whole sequence."""
    return _AllToAll.apply(x, HEADS, SEQ, group, name)


def sequence_after_attention(y: torch.Tensor, group, name: str) -> torch.Tensor:
    """(b, h/U, t, d) -> (b, h, t/U, d): attention's output back to this rank's piece of the sequence."""
    return _AllToAll.apply(y, SEQ, HEADS, group, name)


class Ulysses:
    """One attention core: what `attn.attend` becomes. `inner(q, k, v, doc_pos)` attends the head shard
    over the gathered sequence: the block's own core (Ulysses) or a Ring over the outer groups (hybrid).
    `docs` is the context's per-microbatch cache of gathered document positions."""

    def __init__(self, group, name: str, inner, docs: "DocPositions"):
        self.group, self.name, self.inner, self.docs = group, name, inner, docs
        self.size = comm.world_size(group)
        self.stats = {"flops": 0, "fwd_s": 0.0, "bwd_s": 0.0}

    def __call__(self, q, k, v, dropout_p: float = 0.0, doc_pos=None):
        if dropout_p:
            raise ValueError("context parallelism: attention dropout is not supported (set model.dropout=0)")
        g = kv_heads(k.shape[HEADS], self.size)
        if g != k.shape[HEADS]:  # fewer K/V heads than ranks: each is replicated to the ranks whose queries use it
            k, v = expand(k, g), expand(v, g)
        q, k, v = (heads_for_attention(t.contiguous(), self.group, self.name) for t in (q, k, v))
        full = None if doc_pos is None else self.docs.gather(doc_pos)
        t0 = time.perf_counter()
        y = self.inner(q, k, v, full)
        self.stats["fwd_s"] += time.perf_counter() - t0
        return sequence_after_attention(y.contiguous(), self.group, self.name)


class DocPositions:
    """Packed documents' positions of the Ulysses group's whole sequence: gathered once per microbatch (the
    first layer to see a microbatch's local positions), reused by every later layer and the recompute."""

    def __init__(self, group):
        self.group, self._local, self._full = group, None, None

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        if local is not self._local:
            u = comm.world_size(self.group)
            out = torch.empty((u * local.shape[0], local.shape[1]), dtype=local.dtype, device=local.device)
            comm.all_gather(out, local.contiguous(), group=self.group, tag="cp.doc_pos")  # rank-major rows
            self._local, self._full = local, torch.cat(out.chunk(u), dim=1)
        return self._full


def own_core(core):
    """The block's own attention core over the gathered sequence (its causal or document mask)."""
    return lambda q, k, v, doc_pos: core(q, k, v, 0.0) if doc_pos is None else core(q, k, v, 0.0, doc_pos=doc_pos)


def ring_core(group, outer: int, name: str, causal: bool = True):
    """The hybrid's inner core: ring attention over the `outer` Ulysses groups (zigzag chunks)."""
    ring = Ring(group, lambda r: (r, 2 * outer - 1 - r), name, causal)
    return ring, (lambda q, k, v, doc_pos: ring(q, k, v, 0.0, doc_pos=doc_pos))


class UlyssesContext(ContextParallel):
    """What a Ulysses (or hybrid) model offers the composition: `shard_batch` cuts this rank's piece of each
    sequence (its Ulysses group's zigzag chunks, then its contiguous 1/U of them), positions follow it."""

    def __init__(self, group, inner_group, outer: int, cores: dict[str, Ulysses], rings: dict[str, Ring]):
        super().__init__(group, "zigzag", rings)
        self.impl = "ulysses" if outer == 1 else "hybrid"
        self.inner, self.outer, self.cores = comm.world_size(inner_group), outer, cores
        self.inner_rank, self.outer_rank = self.rank % self.inner, self.rank // self.inner

    def index(self, seq_len: int, device=None) -> torch.Tensor:
        """Ulysses group o's chunks o and 2R-1-o (R = 1: the whole sequence in order), this rank's 1/U."""
        n = seq_len // self.size
        own = token_index(seq_len, self.outer_rank, self.outer, "zigzag", device)
        return own[self.inner_rank * n:(self.inner_rank + 1) * n]

    def attention_stats(self) -> dict:
        """The ring's counters under the hybrid; Ulysses' own core counts its forward seconds only."""
        if self.rings:
            return super().attention_stats()
        return {"flops": 0, "fwd_s": sum(c.stats["fwd_s"] for c in self.cores.values()), "bwd_s": 0.0}

    def reset_stats(self) -> None:
        super().reset_stats()
        for core in self.cores.values():
            core.stats.update(flops=0, fwd_s=0.0, bwd_s=0.0)


def groups(dims, inner: int):
    """(this rank's Ulysses group, its ring group) of a cp group cut into cp/inner groups of `inner`
    consecutive cp ranks and `inner` rings across them. Every rank creates every group, in one order
    (torch's rule for new_group)."""
    cp, me = dims.size("cp"), comm.rank()
    if inner == cp:
        return dims.group("cp"), None
    mine = [None, None]
    for members in sorted({tuple(dims.ranks("cp", r)) for r in range(dims.world_size)}):
        for o in range(cp // inner):
            g = comm.new_group(list(members[o * inner:(o + 1) * inner]), name="cp_a2a")
            mine[0] = g if me in members[o * inner:(o + 1) * inner] else mine[0]
        for u in range(inner):
            g = comm.new_group(list(members[u::inner]), name="cp_ring")
            mine[1] = g if me in members[u::inner] else mine[1]
    return tuple(mine)


def apply_ulysses(model: nn.Module, cp_group, inner_group, ring_group=None, causal: bool = True) -> Layer:
    """Make `model` compute on this rank's piece of every sequence with all-to-all attention over
    `inner_group` (and, the hybrid, the ring over `ring_group` across the Ulysses groups of `cp_group`).
    In place; parameter names are unchanged."""
    outer = comm.world_size(ring_group) if ring_group is not None else 1
    docs, anat = DocPositions(inner_group), anatomy.of(model)
    cores, rings = {}, {}
    for i, block in anat.named_blocks(model):
        if ring_group is None:
            inner = own_core(getattr(anat.attention_of(block), anat.attend))
        else:
            rings[i], inner = ring_core(ring_group, outer, anat.block(i), causal)
        cores[i] = Ulysses(inner_group, anat.block(i), inner, docs)
        anat.set_attend(block, cores[i])
    return _install(model, UlyssesContext(cp_group, inner_group, outer, cores, rings))


def apply_ulysses_cp(part: nn.Module, cfg, dims) -> Layer:
    """`parallel.cp_impl=ulysses`: all-to-all attention over the mesh's `cp` dimension."""
    from shardlab.parallel.cp.checks import check_heads_for

    check_heads_for(part, dims.tp, dims.cp)
    return apply_ulysses(part, dims.group("cp"), dims.group("cp"))


def apply_hybrid_cp(part: nn.Module, cfg, dims) -> Layer:
    """`parallel.cp_impl=hybrid`: Ulysses over `parallel.cp_ulysses` consecutive cp ranks, the zigzag ring
    across those groups."""
    from shardlab.parallel.cp.checks import check_heads_for

    u = cfg.parallel.cp_ulysses
    check_heads_for(part, dims.tp, u, "hybrid")
    inner, ring = groups(dims, u)
    return apply_ulysses(part, dims.group("cp"), inner, ring)
