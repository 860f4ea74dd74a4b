"""The time of a collective, alpha-beta (Thakur et al. 2005; Patarasuk & Yuan 2009), ring over N ranks:
  all_reduce      2(N-1) alpha + 2(N-1)/N * S / B
  reduce_scatter   (N-1) alpha +  (N-1)/N * S / B      (all_gather the same)
  tree all_reduce  2 log2(N) alpha + 2 S / B           (latency-bound messages)
Across nodes the collective is hierarchical (intra reduce-scatter, inter all-reduce of S/g,
intra all-gather), which is why the per-GPU NIC bandwidth, not the node's, is what matters; on GPU presets
its phases run at once (one NCCL ring through every rank), the transfer at the slower link's pace.
Wire bytes: what a ring sends per rank (all_reduce 2(N-1)/N x payload, reduce_scatter and all_gather
(N-1)/N x payload, p2p = payload).
"""
from __future__ import annotations

import math

from .hardware import Cluster
from .layout import Layout


def wire_factor(op: str, n: int) -> float:
    if n <= 1:
        return 0.0
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_gather": (n - 1) / n, "p2p": 1.0, "all_to_all": (n - 1) / n}[op]


def ring_steps(op: str, n: int) -> int:
    return {"all_reduce": 2 * (n - 1), "p2p": 1}.get(op, n - 1)


def group_placement(group: str, lay: Layout, cluster: Cluster) -> int:
    """Members of the group inside one node. Rank order (innermost first): tp, dp_shard,
    dp_replicate, pp - so tensor parallelism stays on NVLink."""
    stride = {"tp": 1, "dp": lay.tp, "dp_shard": lay.tp, "dp_replicate": lay.tp * lay.shard,
              "pp": lay.tp * lay.dp_cp, "cp": lay.tp, "ep": 1, "edp": lay.ep}[group]  # cp (Ulysses'): just outside tp
    # ep: consecutive ranks (Megatron-Core's expert mesh with expert_tensor_parallel_size 1 puts ep innermost);
    # edp, the ranks holding the same experts: every ep-th rank of a stage's tp x cp x dp
    # dp: the gradient group, dp x cp (the cp ranks sit between tp and dp_shard, so it starts at stride tp)
    n = {"tp": lay.tp, "dp": lay.dp_cp, "dp_shard": lay.shard, "dp_replicate": lay.replicate,
         "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "edp": lay.edp}[group]
    g = cluster.gpus_per_node
    if stride >= g:
        return 1
    return max(1, min(n, g // stride))


def _ring(op: str, size: float, n: int, alpha: float, bw: float) -> float:
    return sum(_ring_parts(op, size, n, alpha, bw))


def _ring_parts(op: str, size: float, n: int, alpha: float, bw: float) -> tuple[float, float]:
    """(latency, transfer) seconds of one call over n ranks: ring steps x alpha and wire / bw, or the double
    binary tree's where that is faster (all-reduce, as NCCL picks)."""
    ring = (ring_steps(op, n) * alpha, wire_factor(op, n) * size / bw)
    if op == "all_reduce" and n > 2:  # NCCL picks the faster of ring and double binary tree
        tree = (2 * math.ceil(math.log2(n)) * alpha, 2 * size / bw)
        return min(ring, tree, key=sum)
    return ring


def call_time(op: str, size: float, n: int, local: int, cluster: Cluster,
              net_share: float | None = None, kernels: str = "nccl") -> tuple[float, float, float]:
    """(seconds, intra wire bytes, inter wire bytes) of one call with a `size`-byte payload over
    n ranks of which `local` share a node. `net_share`: an all-to-all's share of the payload on the network where
    a dispatcher deduplicates it (None: (n - local) / n, each copy its own). `kernels`: whose kernels move it
    (comm.Collective.kernels), for the all-to-all's achieved rate."""
    if n <= 1 or size <= 0:
        return 0.0, 0.0, 0.0
    wire = wire_factor(op, n) * size
    if op in cluster.collectives:  # measured end to end: alpha per call, bus bandwidth
        alpha, busbw = cluster.collectives[op]
        mw = max(2, cluster.measured_world)
        alpha *= ring_steps(op, n) / ring_steps(op, mw)
        return alpha + wire / busbw, wire, 0.0
    nodes = max(1, n // max(1, local))
    base = cluster.call_latency  # NCCL's fixed cost of a call, before its ring steps
    intra_bw, inter_bw = achieved_bw(op, cluster, False, kernels), achieved_bw(op, cluster, True, kernels)
    if nodes == 1:
        return base + _ring(op, size, n, cluster.intra_latency, intra_bw), wire, 0.0
    if op == "all_to_all":  # every rank sends 1/n of its payload to each other rank at once, each link its share
        intra, inter = size * (local - 1) / n, size * ((n - local) / n if net_share is None else net_share)
        lat = cluster.inter_latency + (cluster.intra_latency if local > 1 else 0.0)
        return base + lat + max(intra / intra_bw, inter / inter_bw), intra, inter
    if local == 1:
        return base + _ring(op, size, n, cluster.inter_latency, inter_bw), 0.0, wire
    # hierarchical: intra reduce-scatter, inter collective on 1/local of the data, intra all-gather
    lat_in = xfer_in = w_in = 0.0
    phases = {"all_reduce": ("reduce_scatter", "all_gather"), "reduce_scatter": ("reduce_scatter",),
              "all_gather": ("all_gather",)}.get(op, ())
    for ph in phases:
        lat, xfer = _ring_parts(ph, size, local, cluster.intra_latency, achieved_bw(ph, cluster, False))
        lat_in, xfer_in, w_in = lat_in + lat, xfer_in + xfer, w_in + wire_factor(ph, local) * size
    inner = size / local
    lat_out, xfer_out = _ring_parts(op, inner, nodes, cluster.inter_latency, inter_bw)
    # NCCL runs one ring (or tree) through every rank: a chunk's NVLink and network hops run at once, so the
    # transfer takes as long as its slowest link's share (NCCL's tuning model, src/graph/tuning.cc, rates a ring
    # across nodes at channels x the inter-node channel speed; nccl-tests, doc/PERFORMANCE.md: bus bandwidth is
    # "the speed of the hardware bottleneck"), while every step's latency still adds up. Summing the phases
    # (a two-level algorithm run phase after phase) stays on profiles without NCCL's terms
    xfer = max(xfer_in, xfer_out) if cluster.pipelined_phases else xfer_in + xfer_out
    if cluster.ring_latency_steps:
        lat_in, lat_out, xfer = nccl_latency(op, size, n, local, nodes, cluster, xfer_in)
    return base + lat_in + lat_out + xfer, w_in, wire_factor(op, nodes) * inner


def nccl_latency(op: str, size: float, n: int, local: int, nodes: int, cluster: Cluster,
                 xfer_in: float) -> tuple[float, float, float]:
    """(NVLink-step latency, network-step latency, transfer) of one call across nodes as NCCL's tuning model
    counts it (src/graph/tuning.cc, ncclTopoTuneModel): one ring through all n ranks takes n - 1 steps (all-reduce
    2(n - 1)), nodes - 1 of them (all-reduce 2(nodes - 1)) over the network and the rest over NVLink, so its
    latency grows with the ranks, not with (local - 1) + (nodes - 1); the double binary tree (all-reduce only)
    takes 2((local - 1) NVLink + log2(nodes) network steps). The transfer is the slower link's share, as before.
    All-reduce takes the faster of the two, as NCCL picks."""
    inter_bw = achieved_bw(op, cluster, True)
    inter = 2 * (nodes - 1) if op == "all_reduce" else nodes - 1
    ring_lat = ((ring_steps(op, n) - inter) * cluster.intra_latency, inter * cluster.inter_latency)
    ring_x = max(xfer_in, wire_factor(op, nodes) * size / local / inter_bw)
    if op != "all_reduce":
        return ring_lat + (ring_x,)
    tree_lat = (2 * (local - 1) * cluster.intra_latency, 2 * math.ceil(math.log2(nodes)) * cluster.inter_latency)
    tree_x = max(xfer_in, 2 * size / local / inter_bw)
    return min(ring_lat + (ring_x,), tree_lat + (tree_x,), key=sum)


def achieved_bw(op: str, cluster: Cluster, inter: bool, kernels: str = "nccl") -> float:
    """The bus bandwidth a collective reaches at large messages: the link's times the fraction NCCL achieves for
    it (nccl-tests' busbw; docs/planner.md, "The GPU terms"): its rings', all-reduce's (NVLink SHARP), its
    all-to-all's inside a node, unless a fused dispatcher's `kernels` move the all-to-all. With the per-call and
    per-step latencies this is the size curve: busbw(S) = wire(S) / (latency + wire(S) / achieved), low for small
    messages."""
    nccl_a2a = op == "all_to_all" and kernels == "nccl"
    if inter:
        return cluster.inter_bw * (cluster.busbw_eff_alltoall_inter if nccl_a2a and cluster.busbw_eff_alltoall_inter
                                   else cluster.busbw_eff_inter)
    eff = cluster.busbw_eff_allreduce_intra if op == "all_reduce" else cluster.busbw_eff_intra
    if nccl_a2a and cluster.busbw_eff_alltoall_intra:
        eff = cluster.busbw_eff_alltoall_intra
    return cluster.intra_bw * eff


def collective_time(c, lay: Layout, cluster: Cluster) -> tuple[float, float, float]:
    """(seconds per step, intra wire bytes, inter wire bytes) for all calls of a collective."""
    if c.calls == 0 or c.payload == 0:
        return 0.0, 0.0, 0.0
    if c.op == "p2p":
        inter = lay.tp * lay.dp >= cluster.gpus_per_node and lay.pp > 1
        if c.group == "cp":  # cp sits just outside tp in the rank order
            inter = lay.tp * lay.cp > cluster.gpus_per_node
        if "p2p" in cluster.collectives:
            alpha, bw = cluster.collectives["p2p"]
        else:
            alpha = (cluster.inter_latency if inter else cluster.intra_latency) + cluster.call_latency
            bw = achieved_bw("p2p", cluster, inter)
        t = c.calls * alpha + c.payload / bw
        return t, (0.0 if inter else c.payload), (c.payload if inter else 0.0)
    local = min(group_placement(c.group, lay, cluster), c.n)  # the hybrid's all-to-all spans U of the cp ranks
    share = None
    if c.dedup and c.n > local:  # each token once per remote node it goes to (moe.remote_nodes)
        from .moe import remote_nodes
        k, experts, groups, top = c.dedup
        share = remote_nodes(k, experts, c.n // local, groups, top) / k
    t, wi, wo = call_time(c.op, c.payload / c.calls, c.n, local, cluster, share, c.kernels)
    return t * c.calls, wi * c.calls, wo * c.calls
