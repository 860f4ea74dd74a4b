"""Planner communication: payload bytes as shardlab's comm module records them, alpha-beta times."""
import math
from dataclasses import replace

import pytest

from shardlab.plan.comm import call_time, ddp_buckets, dp_bytes_per_step, dp_collectives, padded, units, wire_factor
from shardlab.plan.hardware import PRESETS as CLUSTERS, load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS

SMALL = PRESETS["small"]
PSI = SMALL.params
FP32 = TrainSpec(global_batch=2, precision="fp32")


def test_wire_factors_ring():
    assert wire_factor("all_reduce", 4) == 1.5
    assert wire_factor("reduce_scatter", 4) == wire_factor("all_gather", 4) == 0.75
    assert wire_factor("all_reduce", 1) == 0


def test_ddp_one_all_reduce_of_4psi_per_step_whatever_the_accumulation():
    for m in (1, 4):
        tr = TrainSpec(global_batch=2 * m, precision="fp32")
        assert dp_bytes_per_step(SMALL, tr, Layout(dp=2, strategy="ddp"), m) == {"all_reduce": 4 * PSI}
    # buckets in reverse registration order (as shardlab's ddp): first 1 MiB, then 25 MiB ...
    (c,) = dp_collectives(SMALL, FP32, Layout(dp=2, strategy="ddp", last_bucket_mb=0), 1)
    assert c.calls == 2 and c.last_payload > 10 * 2**20
    # ... and by default a tail of at most 8, 4, 2, 1 MiB from the end (13 MB: 1 MiB + 4 tail buckets)
    (c,) = dp_collectives(SMALL, FP32, Layout(dp=2, strategy="ddp"), 1)
    assert c.calls == 5 and c.last_payload <= 2**20
    assert ddp_buckets([3, 3, 3, 3, 3], 4, 7) == [6, 9]


def test_zero1_all_reduce_or_reduce_scatter_then_all_gather():
    lay = Layout(dp=2, strategy="zero1", zero1_impl="all_reduce")
    assert dp_bytes_per_step(SMALL, FP32, lay) == {"all_reduce": 4 * PSI, "all_gather": 4 * PSI}
    lay = Layout(dp=2, strategy="zero1")  # shardlab's zero1: reduce-scatter on the last micro batch
    for m in (1, 4):
        assert dp_bytes_per_step(SMALL, FP32, lay, m)["reduce_scatter"] == 4 * PSI
    assert dp_bytes_per_step(SMALL, FP32, lay) == {"reduce_scatter": 4 * PSI, "all_gather": 4 * PSI,
                                                   "all_reduce": 4}  # + the grad-norm scalar


def test_zero2_reduce_scatter_and_all_gather():
    got = dp_bytes_per_step(SMALL, FP32, Layout(dp=2, strategy="zero2"))
    assert got == {"reduce_scatter": 4 * PSI, "all_gather": 4 * PSI, "all_reduce": 4}


def test_zero3_gathers_before_forward_and_backward_minus_the_root_unit():
    us = units(SMALL)
    root = sum(us[0])
    got = dp_bytes_per_step(SMALL, FP32, Layout(dp=2, strategy="zero3"))
    assert got == {"all_gather": 4 * PSI + 4 * (PSI - root), "reduce_scatter": 4 * PSI, "all_reduce": 4}
    got = dp_bytes_per_step(SMALL, FP32, Layout(dp=2, strategy="zero3", root_reshards=True))
    assert got["all_gather"] == 8 * PSI
    got = dp_bytes_per_step(SMALL, FP32, Layout(dp=2, strategy="zero3", reshard_after_forward=False))
    assert got["all_gather"] == 4 * PSI
    calls = {c.op: c.calls for c in dp_collectives(SMALL, FP32, Layout(dp=2, strategy="zero3"), 1)}
    assert calls["all_gather"] == len(us) + len(us) - 1 and calls["reduce_scatter"] == len(us)


def test_zero_padding_at_odd_world_size():
    numels = [n for _, n in SMALL.param_shapes()]
    got = dp_bytes_per_step(SMALL, FP32, Layout(dp=3, strategy="zero2"))
    assert got["reduce_scatter"] == 4 * padded(numels, 3, "per_param") > 4 * PSI
    got = dp_bytes_per_step(SMALL, FP32, Layout(dp=3, strategy="zero2", padding="none"))
    assert got["reduce_scatter"] == 4 * PSI


def test_mixed_precision_halves_payload_and_hsdp_adds_replica_all_reduce():
    tr = TrainSpec(global_batch=8)
    got = dp_bytes_per_step(SMALL, tr, Layout(dp=8, strategy="zero3", dp_shard=4, padding="none"))
    assert got["reduce_scatter"] == 2 * PSI
    assert got["all_reduce"] == 4 + 2 * PSI / 4  # grad norm + shard all-reduced across 2 replicas


def test_ring_alpha_beta_inside_a_node():
    c = CLUSTERS["H100-SXM"]
    S, n = 1e9, 8
    # NCCL's base latency per call + ring steps x alpha + wire / the bus bandwidth rings achieve
    ar_bw, ring_bw = c.intra_bw * c.busbw_eff_allreduce_intra, c.intra_bw * c.busbw_eff_intra
    t, wi, wo = call_time("all_reduce", S, n, local=n, cluster=c)
    ring = 2 * (n - 1) * c.intra_latency + 2 * (n - 1) / n * S / ar_bw
    assert t == pytest.approx(c.call_latency + min(ring, 2 * 3 * c.intra_latency + 2 * S / ar_bw))
    assert wi == pytest.approx(1.75 * S) and wo == 0
    t, _, _ = call_time("all_gather", S, n, local=n, cluster=c)
    assert t == pytest.approx(c.call_latency + (n - 1) * c.intra_latency + (n - 1) / n * S / ring_bw)


def test_hierarchical_all_reduce_across_nodes_uses_per_gpu_nic_bandwidth():
    c = load_cluster("H100-SXM", 64)
    S = 4e9
    t, wi, wo = call_time("all_reduce", S, 64, local=8, cluster=c)
    # intra RS + AG over 8, inter all-reduce of S/8 over 8 nodes, at the bandwidths NCCL's rings achieve; one
    # ring through every rank runs its NVLink and network hops at once: every step's latency adds up, the
    # transfer takes the slower link's time (nccl-tests: busbw is the hardware bottleneck's speed)
    bi, bo = c.intra_bw * c.busbw_eff_intra, c.inter_bw * c.busbw_eff_inter
    xfer_in = 2 * 7 / 8 * S / bi
    # NCCL's tuning model: the ring's 2(n - 1) steps, 2(nodes - 1) of them on the network; the tree's
    # 2((local - 1) NVLink + log2(nodes) network steps); the faster
    ring = (112 * c.intra_latency + 14 * c.inter_latency, max(xfer_in, 2 * 7 / 8 * (S / 8) / bo))
    tree = (14 * c.intra_latency + 2 * 3 * c.inter_latency, max(xfer_in, 2 * (S / 8) / bo))
    assert t == pytest.approx(c.call_latency + sum(min(ring, tree, key=sum)))
    assert wo == pytest.approx(2 * 7 / 8 * S / 8)
    # bus bandwidth lands near what 8 x 400 Gb/s nodes give: algbw = S/t, busbw = 2(n-1)/n algbw
    busbw = S / t * 2 * 63 / 64
    assert 300e9 < busbw < 450e9
    # the two-level count (ring_latency_steps off): intra RS + AG over 8, inter all-reduce of S/8 over 8 nodes
    two = replace(c, ring_latency_steps=False)
    lat_in = 2 * 7 * c.intra_latency
    ring, tree = (14 * c.inter_latency, 2 * 7 / 8 * (S / 8) / bo), (2 * 3 * c.inter_latency, 2 * (S / 8) / bo)
    lat_out, xfer_out = min(ring, tree, key=sum)
    t2 = call_time("all_reduce", S, 64, 8, two)[0]
    assert t2 == pytest.approx(c.call_latency + lat_in + lat_out + max(xfer_in, xfer_out))
    # without NCCL's terms (a profile file) the two levels run one after the other
    seq = replace(two, pipelined_phases=False)
    assert call_time("all_reduce", S, 64, 8, seq)[0] == pytest.approx(t2 - max(xfer_in, xfer_out) + xfer_in + xfer_out)


def test_ring_latency_grows_with_the_ranks_as_nccls_tuning_model():
    """A ring through 256 ranks on 32 nodes takes 255 steps, 31 on the network (src/graph/tuning.cc), where
    the two-level count had 7 + 31: a 50 MB all-gather there is latency-bound."""
    c = load_cluster("A100-80G", 256)
    S = 50e6
    t = call_time("all_gather", S, 256, 8, c)[0]
    xfer = max(7 / 8 * S / (c.intra_bw * c.busbw_eff_intra), 31 / 32 * S / 8 / (c.inter_bw * c.busbw_eff_inter))
    assert t == pytest.approx(c.call_latency + 224 * c.intra_latency + 31 * c.inter_latency + xfer)
    two = call_time("all_gather", S, 256, 8, replace(c, ring_latency_steps=False))[0]
    assert two == pytest.approx(c.call_latency + 7 * c.intra_latency + 31 * c.inter_latency + xfer)
    assert t > 2 * two
    # inside a node nothing changes
    assert call_time("all_gather", S, 8, 8, c) == call_time("all_gather", S, 8, 8, replace(c, ring_latency_steps=False))


def test_tensor_parallel_four_all_reduces_per_layer_and_pipeline_sends():
    from shardlab.plan.comm import tp_pp_collectives
    m = PRESETS["gpt3-6.7b"]
    tr = TrainSpec(global_batch=8, micro_batch=1)
    cs = tp_pp_collectives(m, tr, Layout(tp=8, pp=2, dp=1), m=8)
    ar = [c for c in cs if c.op == "all_reduce"][0]
    act = m.seq * m.d_model * 2
    assert ar.payload == act * (4 * m.n_layer // 2 + 2) * 8
    p2p = [c for c in cs if c.op == "p2p"][0]
    assert p2p.payload == act * 2 * 8
    assert math.isclose(p2p.wire, p2p.payload)
