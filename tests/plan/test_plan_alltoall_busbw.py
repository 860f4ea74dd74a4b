"""NCCL's all-to-all inside a node at its own achieved bus bandwidth (Cluster.busbw_eff_alltoall_intra: nccl-tests
alltoall busbw on 8 GPUs, NVIDIA's GTC 2025 figures: A100 210, H100 320, B200 640 GB/s), below the rings' 0.8 of the
link, and across nodes at the same slide's 32-GPU figures (DGX H100 48, DGX A100 24 GB/s: 0.743 of the NIC where the
rings keep 0.96); all-reduce with NVLink SHARP at the same slides' (H100 480, B200 850). A fused dispatcher's
all-to-all (DeepEP, HybridEP) keeps the rings' rates, and the rings and calibrated CPU profiles are unchanged."""
from dataclasses import replace

import pytest

from shardlab.plan.cli import main as plan_main
from shardlab.plan.comm import ep_all_to_all
from shardlab.plan.comm_time import achieved_bw, call_time
from shardlab.plan.hardware import PRESETS
from shardlab.plan.layout import Layout
from shardlab.plan.presets import PRESETS as MODELS
from shardlab.plan.train_spec import TrainSpec

GB = 1e9


@pytest.mark.parametrize("name, busbw", [("A100-80G", 210), ("H100-SXM", 320), ("H200", 320), ("B200", 640),
                                         ("GB200", 640), ("GB300", 640)])
def test_nccl_all_to_all_inside_a_node_runs_at_the_published_busbw(name, busbw):
    """The preset's fraction of its NVLink is the published figure's (to the fraction's 3 decimals)."""
    c = PRESETS[name]
    assert achieved_bw("all_to_all", c, False) == pytest.approx(busbw * GB, rel=1e-3)
    # the rings and all-reduce keep their own rates
    assert achieved_bw("all_gather", c, False) == c.intra_bw * c.busbw_eff_intra
    assert achieved_bw("all_reduce", c, False) == c.intra_bw * c.busbw_eff_allreduce_intra


@pytest.mark.parametrize("name, busbw", [("A100-80G", 240), ("H100-SXM", 480), ("B200", 850), ("GB200", 850)])
def test_all_reduce_inside_a_node_runs_at_the_same_slides_busbw(name, busbw):
    """All-reduce's nccl-tests bus bandwidth on 8 GPUs from the same slides where NVLink SHARP reduces in the switch
    (its bus bandwidth passes the H100's 450 GB/s link); the A100 keeps the rings' 0.8 (240, the slide's 232 inside
    the 230-250 it came from)."""
    assert achieved_bw("all_reduce", PRESETS[name], False) == pytest.approx(busbw * GB, rel=1e-3)


def test_a_large_call_is_its_wire_over_that_rate_and_a_flex_dispatchers_is_not():
    """One 1 GiB all-to-all over 8 H100s of a node: base latency + 7 steps of alpha + 7/8 of it at 320 GB/s;
    the same payload moved by HybridEP's kernels at the rings' 360 GB/s."""
    c, size = PRESETS["H100-SXM"], 2**30
    lat = c.call_latency + 7 * c.intra_latency
    t, intra, inter = call_time("all_to_all", size, 8, 8, c)
    assert t == pytest.approx(lat + 7 / 8 * size / (320 * GB), rel=1e-3)
    assert (intra, inter) == (7 / 8 * size, 0.0)
    flex = call_time("all_to_all", size, 8, 8, c, kernels="flex")[0]
    assert flex == pytest.approx(lat + 7 / 8 * size / (c.intra_bw * c.busbw_eff_intra))
    assert t / flex == pytest.approx((c.intra_bw * c.busbw_eff_intra) / (320 * GB), rel=2e-3)


@pytest.mark.parametrize("name, busbw", [("H100-SXM", 48), ("A100-80G", 24)])
def test_across_four_nodes_nccl_all_to_all_reaches_the_published_busbw(name, busbw):
    """The same slide's 32 GPUs on 4 nodes: nccl-tests' bus bandwidth ((n - 1) / n of the payload over the time) is
    48 GB/s on DGX H100s and 24 on DGX A100s at large sizes: the NIC carries the (n - 8) / n that leaves the node at
    0.743 of its rate. A fused dispatcher's network bytes keep the rings' 0.96."""
    c, size, n = PRESETS[name], 2**34, 32
    t = call_time("all_to_all", size, n, 8, c)[0]
    assert (n - 1) / n * size / t == pytest.approx(busbw * GB, rel=2e-3)
    flex = call_time("all_to_all", size, n, 8, c, kernels="flex")[0]
    assert (n - 8) / n * size / flex == pytest.approx(c.inter_bw * c.busbw_eff_inter, rel=2e-3)


def test_a_profile_without_the_figure_keeps_the_rings_rate():
    """Calibrated profiles (and presets built before the term) carry 0: the rings' busbw_eff_intra."""
    c = replace(PRESETS["H100-SXM"], busbw_eff_alltoall_intra=0.0, busbw_eff_alltoall_inter=0.0)
    assert achieved_bw("all_to_all", c, False) == c.intra_bw * c.busbw_eff_intra
    assert achieved_bw("all_to_all", c, True) == c.inter_bw * c.busbw_eff_inter


@pytest.mark.parametrize("dispatcher, kernels", [("alltoall", "nccl"), ("flex", "flex")])
def test_the_ep_all_to_all_names_whose_kernels_move_it(dispatcher, kernels):
    """Megatron-Core's all-to-all dispatcher (and shardlab's own) calls NCCL; the flex dispatcher its own kernels."""
    model = replace(MODELS["llama-small"], moe_experts=8, moe_top_k=2, moe_every=1)
    lay = Layout(dp=8, ep=8, ep_dispatcher=dispatcher)
    c = ep_all_to_all(model, TrainSpec(global_batch=8, seq=256), lay, 1)
    assert c.op == "all_to_all" and c.kernels == kernels


def test_explain_prints_the_all_to_all_rate(capsys):
    """--explain's communication line names the NCCL all-to-all's rate beside the rings' and all-reduce's."""
    assert plan_main(["model=gpt2", "cluster=H100-SXM", "gpus=8", "dp=8", "--explain"]) == 0
    assert "320 GB/s NCCL all-to-all" in capsys.readouterr().out
