"""Clusters: vendor presets and profile files (TOML), including the calibrated `this` machine.

Every preset number is cited in docs/planner.md. Bandwidths are per GPU, one direction, bytes/s;
latencies are per ring step (alpha), seconds.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

GB = 1e9
GiB = 2**30
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "p2p")


@dataclass(frozen=True)
class Cluster:
    name: str
    num_gpus: int  # total GPUs (ranks) available
    gpus_per_node: int
    peak_flops: float  # dense 16-bit tensor-core FLOP/s per GPU (the MFU denominator)
    peak_flops_fp32: float  # dense fp32 FLOP/s per GPU, used when training in fp32
    hbm_bytes: float  # memory capacity per GPU
    hbm_bw: float  # memory bandwidth per GPU, bytes/s (elementwise ops, optimizer step)
    intra_bw: float  # NVLink, per GPU one direction, bytes/s
    intra_latency: float  # s per ring step inside a node
    inter_bw: float  # network (InfiniBand NIC) per GPU one direction, bytes/s
    inter_latency: float  # s per ring step across nodes
    pcie_bw: float = 64 * GB  # host link per GPU one direction (offload)
    peak_flops_fp8: float = 0.0  # dense FP8 tensor-core FLOP/s per GPU (train.fp8's GEMMs); 0: none
    # ---- assumptions, one value per cluster (never per case) ----
    gemm_efficiency: float = 0.75  # fraction of peak a large GEMM reaches
    # fraction of the FP8 peak a large FP8 GEMM (train.fp8) sustains; 0 = gemm_efficiency's (FP8 at 2x the 16-bit rate)
    gemm_efficiency_fp8: float = 0.0
    # float8 rowwise linears (compiled) at torchao's measured speedup over bf16 by M, K, N (plan/fp8_rowwise.py):
    # the H100 parts the table was measured on
    fp8_rowwise_by_shape: bool = False
    # 16-bit GEMMs with a dimension that is not a multiple of 8 (16 bytes: cuBLAS's tensor-core alignment)
    # run on slower kernels: their rate relative to an aligned GEMM's (1 = no penalty known)
    unaligned_gemm_factor: float = 1.0
    mem_usable_fraction: float = 0.95  # what the allocator can hand out (context, fragmentation)
    overlap_efficiency: float = 1.0  # fraction of overlappable comm actually hidden
    op_overhead_s: float = 0.0  # per-op dispatch cost not hidden behind the device (CPU eager)
    cpu_adam_params_per_s: float = 2e9  # offloaded optimizer step throughput per node (assumed)
    # ---- GPU terms (docs/planner.md "The GPU terms"; 0 / 1 / "" = off, as on calibrated profiles) ----
    tdp_w: float = 0.0  # the datasheet's board power, at which the datasheet's peak holds
    power_w: float = 0.0  # the power limit it runs at (0 = tdp): sustained clock (power/tdp)^(1/3)
    sms: int = 0  # streaming multiprocessors: GEMM wave quantization, the SMs NCCL's kernels take
    busbw_eff_intra: float = 1.0  # achieved / link bus bandwidth of ring collectives inside a node
    busbw_eff_allreduce_intra: float = 1.0  # the same for all-reduce (NVLink SHARP on NVSwitch Hopper, Blackwell)
    # the same for NCCL's all-to-all inside a node (its grouped sends and receives, one peer each, not a ring): 0 =
    # the rings' busbw_eff_intra. Fused dispatchers (DeepEP, HybridEP) move their all-to-alls with their own
    # kernels and keep the rings' rate (comm.Collective.kernels; docs/planner.md, "NCCL's all-to-all at its own rate")
    busbw_eff_alltoall_intra: float = 0.0
    # the same across nodes: the share of the NIC NCCL's all-to-all puts its network bytes through; 0 = busbw_eff_inter
    busbw_eff_alltoall_inter: float = 0.0
    busbw_eff_inter: float = 1.0  # achieved / NIC bandwidth across nodes
    call_latency: float = 0.0  # per collective call, s (NCCL's base latency), besides alpha per ring step
    nccl_ctas: int = 0  # SMs (one CTA each) a running NCCL collective occupies
    gemm_roofline: bool = False  # GEMMs by shape: wave quantization and max(compute, HBM traffic)
    attention: str = ""  # the fused attention kernel: flash2, flash3, flash4, cudnn, triton (plan/attention.py); "" = GEMM rate
    # the attention kernel's rate by its sequence length where the papers' figures give one (attention.py:
    # FlashAttention-2 and Triton's on Hopper); False = the backend's one published fraction
    attention_by_seq: bool = False
    # the device whose own measured attention rates apply (attention.MEASURED_BY_SEQ: cuDNN's on GB200 and GB300), for
    # the backends measured there; "" = the generation's published fractions
    attention_device: str = ""
    # the rate a tensor-core kernel keeps at the board's power limit over the rate it reaches in a short benchmark
    # (the boost burst): MSMF / MAMF of the same GEMM benchmark. The attention kernels' published rates are short
    # benchmarks; in a training step the chip runs at its power limit and every kernel at the clock the GEMMs
    # settle at. 1 = none known (the GEMM rate, gemm_efficiency, is sustained already where it is measured)
    attention_sustained: float = 1.0
    kernel_gap_s: float = 0.0  # device time between two back-to-back kernels of a stream (launch gap), s
    host_kernel_s: float = 0.0  # host time an eager training step spends per kernel it issues (plan/host.py), s
    unit_pipeline: bool = False  # ZeRO's unit-wise collectives hidden unit by unit (plan/overlap.py), not as a budget
    pipelined_phases: bool = False  # a collective across nodes takes its slowest link's time, not the phases' sum
    # a ring across nodes pays a step's latency at each of its n - 1 steps (all-reduce 2(n - 1)), nodes - 1 of them
    # (2(nodes - 1)) at the network's, as NCCL's tuning model counts (src/graph/tuning.cc); False = the
    # hierarchical (local - 1) + (nodes - 1) steps of a two-level algorithm
    ring_latency_steps: bool = False
    # achieved / datasheet HBM bandwidth of a memory-bound kernel by the bytes it moves: ((bytes, fraction), ...)
    # largest first, the first the kernel reaches applies (); () = the datasheet's (profiles: measured rates)
    hbm_efficiency: tuple = ()
    # ---- measured (calibrated profiles) ----
    # op -> (alpha seconds per call, bus bandwidth bytes/s) measured end to end at `measured_world`
    collectives: dict = field(default_factory=dict)
    measured_world: int = 0
    gemm_table: dict = field(default_factory=dict)  # "m,n,k" -> FLOP/s at that shape
    gemm_fit: tuple = ()  # (peak FLOP/s, FLOPs at half peak): rate = peak * f / (f + f_half)
    adam_s_per_param: float = 0.0  # optimizer step cost per (local) parameter, 0 = from hbm_bw
    adam_s_per_tensor: float = 0.0  # optimizer step cost per parameter tensor (eager loop overhead)
    elementwise_bw: float = 0.0  # bytes/s for non-GEMM ops, 0 = hbm_bw
    overhead: dict = field(default_factory=dict)  # eager framework seconds: layer_fwd, layer_bwd, fixed_fwd, fixed_bwd
    step_overhead: dict = field(default_factory=dict)  # world size (str) -> trainer seconds per step
    call_overhead: dict = field(default_factory=dict)  # strategy -> seconds per collective call
    # (compute seconds between two syncs, seconds a rank waits at the sync): ranks that reach a sync apart on
    # shared cores (calibrate.measure_sync_wait; empty: 0, as on a dedicated GPU per rank)
    sync_wait: tuple = ()
    cpu_share: float = 1.0  # calibrated in CPU seconds: fraction of a core each rank gets (world ranks busy)
    cpu_share_solo: float = 1.0  # the same for a rank alone
    solo_speedup: float = 1.0  # compute measured with `measured_world` ranks at once runs this much
    #                            faster when a rank is alone (shared cores, memory bandwidth)
    source: str = "preset"

    def compute_speed(self, world: int) -> float:
        """Divisor from calibrated compute seconds to wall seconds at this world size: the share of a
        core a rank gets (1 on presets). Compute is calibrated with every rank busy at once; the
        speed-up a rank alone shows then (`solo_speedup`, recorded) is not applied: on a machine
        with other work the neighbouring core is rarely idle, and runs at world 1 bore that out."""
        return self.cpu_share_solo if world < self.measured_world else self.cpu_share

    def sync_wait_at(self, segment_s: float) -> float:
        """Seconds a rank waits at a sync after `segment_s` of compute: the calibrated points, linear
        between them, in proportion beyond the last (0 without a calibration)."""
        pts = sorted(self.sync_wait)
        if not pts or segment_s <= 0:
            return 0.0
        for (s0, w0), (s1, w1) in zip(pts, pts[1:]):
            if segment_s <= s1:
                return w0 + (w1 - w0) * (segment_s - s0) / max(s1 - s0, 1e-12)
        s_last, w_last = pts[-1]
        return w_last * segment_s / s_last if s_last > 0 else w_last

    @property
    def nodes(self) -> int:
        return max(1, -(-self.num_gpus // self.gpus_per_node))

    @property
    def clock_factor(self) -> float:
        """Sustained clock under a power limit relative to the datasheet's: dynamic power ~ f V^2 with V ~ f
        (DVFS), so f ~ P^(1/3). The datasheets bear it out: the H100 NVL (400 W) lists 835 dense BF16
        TFLOP/s against the SXM's 989 at 700 W, 0.844, and (400/700)^(1/3) = 0.830. 1 without a limit."""
        if self.tdp_w <= 0 or self.power_w <= 0 or self.power_w >= self.tdp_w:
            return 1.0
        return (self.power_w / self.tdp_w) ** (1 / 3)

    def hbm_at(self, nbytes: float, bw: float = 0.0) -> float:
        """Bytes/s a memory-bound kernel moving `nbytes` achieves: `bw` (default the elementwise or HBM
        bandwidth) x the cluster's `hbm_efficiency` at that size (1 without a curve)."""
        bw = bw or self.elementwise_bw or self.hbm_bw
        for size, frac in self.hbm_efficiency:
            if nbytes >= size:
                return bw * frac
        return bw

    @property
    def sm_share_comm(self) -> float:
        """Fraction of the SMs a running collective takes from the kernels it overlaps (0: not modelled)."""
        return min(0.5, self.nccl_ctas / self.sms) if self.sms and self.nccl_ctas else 0.0

    def gemm_flops(self, m: int, n: int, k: int, fp32: bool) -> float:
        """Achieved FLOP/s for an (m x k) @ (k x n) GEMM."""
        key = f"{m},{n},{k}"
        if key in self.gemm_table:
            return self.gemm_table[key]
        slow = 1.0 if fp32 or not (m % 8 or n % 8 or k % 8) else self.unaligned_gemm_factor
        if self.gemm_fit:
            peak, half = self.gemm_fit
            f = 2.0 * m * n * k
            return peak * f / (f + half) * slow
        peak = (self.peak_flops_fp32 if fp32 else self.peak_flops) * self.clock_factor
        return peak * self.gemm_efficiency * slow * self.wave_efficiency(m, n)

    def wave_efficiency(self, m: int, n: int) -> float:
        """Tile and wave quantization (NVIDIA, Matrix Multiplication Background User's Guide): the output is
        cut into tiles, one per SM at a time; the last wave runs partly empty and the edge tiles partly
        filled. The rate is the useful share of the tile work of the best of cuBLAS's large tiles
        (256x128, 128x256, 128x128). 1 without an SM count."""
        if not self.sms or not self.gemm_roofline or m <= 0 or n <= 0:
            return 1.0
        best = 0.0
        for tm, tn in ((256, 128), (128, 256), (128, 128)):
            tiles = -(-m // tm) * -(-n // tn)
            waves = -(-tiles // self.sms)
            best = max(best, (m * n) / (waves * self.sms * tm * tn))
        return min(1.0, best)


def _node(name, gpus_per_node=8, **kw) -> Cluster:
    return Cluster(name=name, num_gpus=gpus_per_node, gpus_per_node=gpus_per_node, **kw)


# Sources for each field: docs/planner.md, "Cluster presets".
# The GPU terms every GPU preset shares (each cited in docs/planner.md, "The GPU terms"): NCCL's base
# latency per call (src/graph/tuning.cc, Ring/Simple) and ring efficiency on NVLink and InfiniBand, the
# CTAs its NVLink rings run on, and SDPA's fused attention kernel (FlashAttention-2)
# kernel_gap_s: a kernel queued behind another starts ~1 us after it ends (NVIDIA, "Getting Started with CUDA
# Graphs": back-to-back launches of a 2.9 us kernel ran at 3.8 us each, 3.4 us as a graph)
# hbm_efficiency: Calculon's achieved-memory curve, the same in its A100 and H100 system files (Isaev et al., SC'23;
# calculon-ai/calculon systems/a100_80g.json, h100_80g_nvl8.json "mem1" MB_efficiency, looked up as
# calculon/memory.py does): 90% of the datasheet from 100 MB a kernel, 75% from 10 MB, 60% from 1 MB, 30% below
CALCULON_HBM = ((100e6, 0.90), (10e6, 0.75), (1e6, 0.6), (0.0, 0.3))
# host_kernel_s: S. Bekman, ml-engineering, training/performance/README.md (torch-compile-bench.py; one B200, torch
# 2.13.0+cu130, 2026-08-09): Llama 3.2 1B, bf16, SDPA, batch 1 x 512, forward + backward with gradient
# checkpointing, 48.8 ms a step eager against 8.1 ms under CUDA graphs (reduce-overhead): a step whose device work
# is a few ms, so the eager step is the host's. It issues 2,378 kernel-launching aten ops (views, detaches and
# allocations left out; scripts/count_host_ops.py counts them in transformers' LlamaForCausalLM at that
# configuration): 20.5 us each. (The forward alone, inference without autograd: 8.1 ms / 662 = 12.2 us.)
HOST_KERNEL_S = 48.8e-3 / 2378
_NCCL = dict(call_latency=8.4e-6, busbw_eff_intra=0.8, busbw_eff_inter=0.96, nccl_ctas=16, attention="flash2",
             kernel_gap_s=1e-6, host_kernel_s=HOST_KERNEL_S, unit_pipeline=True, pipelined_phases=True,
             hbm_efficiency=CALCULON_HBM,
             ring_latency_steps=True)
# gemm_efficiency on Hopper: the sustained rate, not the boost burst. At 700 W a GH100 running GEMMs back to back
# settles at ~1.45 GHz: 698.6 TFLOP/s BF16 (MSMF, eight H200s all busy; the best shape of a search) of the
# datasheet's 989, 0.706 (S. Bekman, ml-engineering, compute/accelerator/benchmarks: MAMF and MSMF; the H100 SXM
# has the same compute and board power). The A100 keeps the 0.75 assumption: no sustained figure is published
# gemm_efficiency_fp8: the same benchmark's FP8 (float8_e4m3fn) MSMF on an H200: 1,288.7 of 1,979 TFLOP/s, 0.651,
# at ~693 W and a settled ~1,374 MHz (the BF16 MSMF settles at ~1,465 MHz: FP8 draws more power per clock), so an
# FP8 GEMM runs 1.84x, not 2x, a BF16 one (S. Bekman, ml-engineering, compute/accelerator/README.md, MAMF & MSMF
# table, branch fast-mamf, commit 082816f)
# attention_by_seq: FlashAttention-2's rate on an H100 by sequence length and direction, from the FlashAttention-3
# paper's figures (attention.HOPPER_FA2_BY_SEQ), not its abstract's one "35%"
# attention_sustained: those figures are a short benchmark's (30 repeats of each configuration); at the power limit a
# GH100 settles below the boost clock they ran at: MSMF / MAMF of the same BF16 GEMM benchmark, 698.6 / ~828 = 0.844
# (S. Bekman, ml-engineering, as gemm_efficiency above). The A100 keeps 1: no sustained figure is published
# busbw_eff_alltoall_intra: NCCL's all-to-all inside a node reaches less of NVLink than its rings do. nccl-tests
# alltoall_perf bus bandwidth on 8 GPUs (NVIDIA, GTC 2025 session S72583, the slide "All-to-all Communication
# Bandwidth", as reproduced in S. Bekman, ml-engineering, network/README.md, images/all-to-all-bw-2025.png, f2d6d3d):
# NVLink3 (A100) 210, NVLink4 (H100) 320, NVLink5 (B200) 640 GB/s, and 640 on 32 GPUs of a GB200 NVL72: 0.70 and
# 0.711 of the 300 / 450 / 900 GB/s links, where the same slides' all-reduce rings reach 232 / 370 / 700 (0.77-0.82,
# the rings' 0.8).
# busbw_eff_alltoall_inter: the same slide's 32 GPUs across 4 nodes, 48 GB/s on 8 x 400 Gb/s NICs (DGX H100) and 24 on
# 8 x 200 Gb/s (DGX A100). nccl-tests' bus bandwidth counts all (n - 1) / n of the payload, of which (n - 8) / n crosses
# the network, so each GPU's NIC carried 48 x 24 / 31 = 37.2 of 50 GB/s (18.6 of 25): 0.743 on both, where the rings
# across nodes keep 0.96 (busbw_eff_inter)
# busbw_eff_allreduce_intra: the same slides' allreduce_perf bus bandwidth on 8 GPUs ("Collective Communication
# Bandwidth", images/all-reduce-bw-2025.png): NVLink3 (A100) 232, NVLink4 with NVLink SHARP (H100) 480, NVLink5 with
# SHARP (B200) 850 GB/s, 850 on 32 GPUs of a GB200 NVL72 (in-switch reduction: a ring's bus bandwidth can pass the
# link). Was 1.0 on Hopper and Blackwell (the link; nccl-tests guides' 460-480 GB/s on 8 H100s) until 2026-12-07.
# The A100 keeps 0.8 (240 GB/s): the slide's 232 is inside the guides' 230-250, and Korthikanti et al.'s timed layer
# (TP 8 on A100s, published_gpu_layer.py) is met within 0.4% forward at 0.8, 1.1% at 232
_HOPPER = dict(_NCCL, gemm_roofline=True, sms=132, tdp_w=700.0, busbw_eff_allreduce_intra=round(480 / 450, 3),
               busbw_eff_alltoall_intra=round(320 / 450, 3), busbw_eff_alltoall_inter=round(48 * 24 / 31 / 50, 3),
               gemm_efficiency=0.706, gemm_efficiency_fp8=0.651, attention_by_seq=True,
               attention_sustained=round(698.6 / 828, 3))

# Blackwell (B200): the same NCCL and HBM terms as Hopper (NVLink 5 switches do NVLink SHARP too), its own sustained
# rates. gemm_efficiency: 1,456.3 of 2,250 TFLOP/s BF16, 0.647 (MSMF: ~994 W at a settled ~1,339 MHz against the
# 1,965 MHz boost the datasheet's peak assumes); gemm_efficiency_fp8: 2,795.7 of 4,500, 0.621 (S. Bekman,
# ml-engineering, compute/accelerator/README.md, MAMF & MSMF table, branch fast-mamf, commit 082816f).
# attention: torch SDPA's own flash kernel (FlashAttention-2) unless a run registers FlashAttention-4
# (`attention=flash4`); its rates by backend in attention.EFFICIENCY. attention_sustained: MSMF / MAMF of the same
# benchmark, 1,456.3 / 1,770.9. No rate by sequence length is published for Blackwell (attention_by_seq off)
_BLACKWELL = dict(_HOPPER, sms=148, tdp_w=1000.0, gemm_efficiency=round(1456.3 / 2250, 3),
                  busbw_eff_alltoall_intra=round(640 / 900, 3), busbw_eff_allreduce_intra=round(850 / 900, 3),
                  gemm_efficiency_fp8=round(2795.7 / 4500, 3), attention_by_seq=False,
                  attention_sustained=round(1456.3 / 1770.9, 3))


def _sustained_at(power_w: float, boost_mhz: float) -> float:
    """MSMF / MAMF of a Blackwell GPU run at `power_w` whose burst clock is `boost_mhz`, from the B200's measured pair
    (1,456.3 / 1,770.9 BF16 at 1,000 W: a ~1,339 MHz settled clock against the 1,965 MHz boost) with the settled clock
    scaled by the power limit's cube root, as Cluster.clock_factor scales it. No MSMF is published for these parts."""
    settled = 1339.0 * (power_w / 1000.0) ** (1 / 3)
    return (1456.3 / 1770.9) * (settled / boost_mhz) / (1339.0 / 1965.0)


# The NVL72 parts (Grace Blackwell): the B200's terms with their own sustained rates. gemm_efficiency: the GB200's
# measured MAMF (1,822.0 BF16, 3,615.6 FP8, of 2,500 / 5,000: S. Bekman, ml-engineering, MAMF table, branch fast-mamf,
# commit 082816f; boost 2,062 MHz, the device's maximum SM clock, same README) times _sustained_at its 1,200 W (the
# FP8 pair: the B200's 2,795.7 / 3,435.2). The GB300 has no MAMF or clock published: the GB200's MAMF (its B300
# silicon bursts as the B200 does: 1,769.0 against 1,770.9) and boost clock, at its 1,400 W. Derived, not measured:
# docs/planner.md says so beside every figure planned on them. attention_device: cuDNN's attention measured on each
# part by cuDNN's own benchmark, by sequence length (attention.MEASURED_BY_SEQ), at the same sustained clock
_B200_FP8_RATIO = (2795.7 / 3435.2) / (1456.3 / 1770.9)  # the FP8 GEMM's MSMF / MAMF over the BF16 one's
# host_kernel_s on Grace: the same eager work takes a Grace CPU 2.75x a DGX H100's Xeon Platinum 8480C. Transformer
# Engine's report "High CPU overhead on Grace systems" (github.com/NVIDIA/TransformerEngine/issues/2053,
# 2025-08-11) timed the host side of one torch Linear forward (BF16, hidden 2,048, 8,192 tokens) at 37.08 us on a
# GB200 against 13.48 us on a DGX H100 (33.17 on a GH200); the x86 presets (A100 to B300) take the measured B200
# host's (HOST_KERNEL_S): no per-host figure is published for them
GRACE_HOST = 37.08 / 13.48
_GRACE_BLACKWELL = {
    name: dict(_BLACKWELL, tdp_w=watts,
               gemm_efficiency=round(1822.0 * _sustained_at(watts, 2062.0) / 2500, 3),
               gemm_efficiency_fp8=round(3615.6 * _sustained_at(watts, 2062.0) * _B200_FP8_RATIO / 5000, 3),
               attention_sustained=round(min(1.0, _sustained_at(watts, 2062.0)), 3),
               attention_device=name, attention_by_seq=True, host_kernel_s=HOST_KERNEL_S * GRACE_HOST)
    for name, watts in (("GB200", 1200.0), ("GB300", 1400.0))}

PRESETS: dict[str, Cluster] = {
    "A100-80G": _node(
        "A100-80G", peak_flops=312e12, peak_flops_fp32=19.5e12, hbm_bytes=80 * GB,
        hbm_bw=2039 * GB, intra_bw=300 * GB, intra_latency=5.7e-6,
        inter_bw=25 * GB, inter_latency=6.6e-6, pcie_bw=32 * GB,
        **_NCCL, gemm_roofline=True, sms=108, tdp_w=400.0, busbw_eff_allreduce_intra=0.8,
        busbw_eff_alltoall_intra=round(210 / 300, 3), busbw_eff_alltoall_inter=round(24 * 24 / 31 / 25, 3)),
    "H100-SXM": _node(
        "H100-SXM", peak_flops=989e12, peak_flops_fp32=67e12, peak_flops_fp8=1979e12, hbm_bytes=80 * GB,
        hbm_bw=3350 * GB, intra_bw=450 * GB, intra_latency=5.7e-6,
        inter_bw=50 * GB, inter_latency=6.6e-6, pcie_bw=64 * GB, fp8_rowwise_by_shape=True, **_HOPPER),
    # Meta's Grand Teton H100s (torchtitan docs/performance.md): the SXM part with 96 GB of HBM2e at
    # 2.4 TB/s, run at its default 500 W limit; the MFU denominator stays the SXM datasheet's 989 TF, and its
    # tensor cores are the SXM part's, FP8 included (1,979 TF dense; the preset had left it out until 2026-12-06,
    # so float8 plans ran their GEMMs at the 16-bit rate)
    "H100-SXM-500W": _node(
        "H100-SXM-500W", peak_flops=989e12, peak_flops_fp32=67e12, peak_flops_fp8=1979e12, hbm_bytes=96 * GB,
        hbm_bw=2400 * GB, intra_bw=450 * GB, intra_latency=5.7e-6,
        inter_bw=50 * GB, inter_latency=6.6e-6, pcie_bw=64 * GB, fp8_rowwise_by_shape=True, **_HOPPER, power_w=500.0),
    "H200": _node(
        "H200", peak_flops=989e12, peak_flops_fp32=67e12, peak_flops_fp8=1979e12, hbm_bytes=141 * GB,
        hbm_bw=4800 * GB, intra_bw=450 * GB, intra_latency=5.7e-6,
        inter_bw=50 * GB, inter_latency=6.6e-6, pcie_bw=64 * GB, unaligned_gemm_factor=0.18, **_HOPPER),
    # NVIDIA DGX B200: 8 B200 (180 GB HBM3e each, 1,440 GB in all; 64 TB/s in all), NVLink 5 at 1.8 TB/s per GPU
    # (14.4 TB/s in all), 8 single-port ConnectX-7 at 400 Gb/s; 72 PFLOPS FP8 training for 8 GPUs = 4.5 dense FP8
    # and 2.25 dense BF16 per GPU; FP32 80 TFLOP/s (ml-engineering's peak table, from the same datasheet)
    "B200": _node(
        "B200", peak_flops=2250e12, peak_flops_fp32=80e12, peak_flops_fp8=4500e12, hbm_bytes=180 * GB,
        hbm_bw=8000 * GB, intra_bw=900 * GB, intra_latency=5.7e-6,
        inter_bw=50 * GB, inter_latency=6.6e-6, pcie_bw=64 * GB, **_BLACKWELL),
    # NVIDIA GB200 NVL72 (docs/planner.md, "Cluster presets", GB200 and GB300): two Blackwell GPUs and a Grace CPU per
    # superchip, 72 GPUs on one NVLink 5 domain (900 GB/s a direction each, as the B200's). Per GPU: 2,500 dense BF16
    # and 5,000 FP8 TFLOP/s, 186 GB of HBM3e at 8 TB/s, 1,200 W, one ConnectX-7 at 400 Gb/s; the host link is the
    # superchip's 900 GB/s bidirectional NVLink-C2C shared by its two GPUs. gpus_per_node 64: the NVLink domain as
    # jobs take it (power-of-two groups tile 64 of its 72 GPUs; a node here is what an NVLink group can span)
    "GB200": _node(
        "GB200", gpus_per_node=64, peak_flops=2500e12, peak_flops_fp32=80e12, peak_flops_fp8=5000e12,
        hbm_bytes=186 * GB, hbm_bw=8000 * GB, intra_bw=900 * GB, intra_latency=5.7e-6,
        inter_bw=50 * GB, inter_latency=6.6e-6, pcie_bw=225 * GB, **_GRACE_BLACKWELL["GB200"]),
    # NVIDIA GB300 NVL72: Blackwell Ultra, the GB200's compute peaks (2,500 / 5,000), 288 GB of HBM3e at 8 TB/s,
    # 1,400 W, one ConnectX-8 at 800 Gb/s per GPU
    "GB300": _node(
        "GB300", gpus_per_node=64, peak_flops=2500e12, peak_flops_fp32=80e12, peak_flops_fp8=5000e12,
        hbm_bytes=288 * GB, hbm_bw=8000 * GB, intra_bw=900 * GB, intra_latency=5.7e-6,
        inter_bw=100 * GB, inter_latency=6.6e-6, pcie_bw=225 * GB, **_GRACE_BLACKWELL["GB300"]),
}
# Parts that are a preset's silicon with other memory or links, every other field that preset's: the A100's 40 GB
# part (NVIDIA A100 datasheet: 40 GB of HBM2 at 1,555 GB/s; the DGX A100 320GB has the same network) and the H800
# SXM5 (NVIDIA H800 datasheet: the H100 SXM's GH100 and HBM3, NVLink cut to 400 GB/s total, 200 GB/s a direction)
PRESETS["A100-40G"] = replace(PRESETS["A100-80G"], name="A100-40G", hbm_bytes=40 * GB, hbm_bw=1555 * GB)
PRESETS["H800"] = replace(PRESETS["H100-SXM"], name="H800", intra_bw=200 * GB)
# NVIDIA DGX B300: 8 Blackwell Ultra GPUs (the GB300's die) on the B200's NVLink 5 (1.8 TB/s a GPU), 288 GB of HBM3e at
# 8 TB/s each, 72 PFLOPS FP8 training for 8 GPUs (4,500 dense FP8 and 2,250 dense BF16 a GPU, the B200's), one
# ConnectX-8 at 800 Gb/s a GPU. Its GEMMs sustain the B200's rates (Transformer Engine's GEMM profile on a B300:
# BF16 1,503, FP8 2,815 TFLOP/s; docs/planner.md), so the B200's terms; its attention is cuDNN's measured on the
# GB300 (the same die's doubled exponential rate, attention.MEASURED_BY_SEQ) at the B200's sustained clock
PRESETS["B300"] = replace(PRESETS["B200"], name="B300", hbm_bytes=288 * GB, inter_bw=100 * GB,
                          attention_device="GB300", attention_by_seq=True)
ALIASES = {"a100": "A100-80G", "a100-40g": "A100-40G", "h100": "H100-SXM", "h800": "H800", "h200": "H200",
           "h100-500w": "H100-SXM-500W", "b200": "B200", "b300": "B300", "gb200": "GB200", "gb300": "GB300"}


def default_profile_path() -> Path:
    return Path(os.environ.get("SHARDLAB_CACHE", Path.home() / ".cache" / "shardlab")) / "this.toml"


def load_cluster(spec: str, num_gpus: int | None = None) -> Cluster:
    """`spec` is a preset name, `this` (the calibrated profile) or a path to a profile TOML."""
    key = ALIASES.get(spec.lower(), spec)
    if key in PRESETS:
        c = PRESETS[key]
    else:
        path = default_profile_path() if spec == "this" else Path(spec)
        if not path.exists():
            hint = " (run `shardlab plan calibrate` first)" if spec == "this" else ""
            raise ValueError(f"unknown cluster {spec!r}: not a preset ({', '.join(PRESETS)}) "
                             f"and no profile file at {path}{hint}")
        c = read_profile(path)
    if num_gpus is not None:
        if num_gpus <= 0:
            raise ValueError(f"gpus must be positive, got {num_gpus}")
        c = replace(c, num_gpus=num_gpus)
    return c


def read_profile(path: Path) -> Cluster:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    cl = data.get("cluster", data)
    known = {f.name for f in fields(Cluster)}
    unknown = set(cl) - known - {"collectives", "gemm", "overhead", "step_overhead", "call_overhead"}
    if unknown:
        raise ValueError(f"{path}: unknown cluster keys {sorted(unknown)}")
    kw = {k: v for k, v in cl.items() if k in known}
    if "hbm_efficiency" in kw:
        kw["hbm_efficiency"] = tuple((float(b), float(e)) for b, e in kw["hbm_efficiency"])
    kw["collectives"] = {op: (float(v["alpha_s"]), float(v["bus_bw"]))
                         for op, v in data.get("collectives", {}).items()}
    kw["overhead"] = {k: float(v) for k, v in data.get("overhead", {}).items()}
    kw["step_overhead"] = {k: float(v) for k, v in data.get("step_overhead", {}).items()}
    kw["call_overhead"] = {k: float(v) for k, v in data.get("call_overhead", {}).items()}
    gemm = data.get("gemm", {})
    kw["gemm_table"] = {k: float(v) for k, v in gemm.get("table", {}).items()}
    if "fit_peak" in gemm:
        kw["gemm_fit"] = (float(gemm["fit_peak"]), float(gemm["fit_half_flops"]))
    kw.setdefault("source", str(path))
    try:
        return Cluster(**kw)
    except TypeError as e:
        raise ValueError(f"{path}: incomplete cluster profile ({e})") from None


def write_profile(c: Cluster, path: Path) -> None:
    """TOML by hand (the standard library only reads TOML); flat scalars, three tables."""
    lines = ["# shardlab cluster profile (written by `shardlab plan calibrate`)", "[cluster]"]
    for f in fields(Cluster):
        v = getattr(c, f.name)
        if f.name in ("collectives", "gemm_table", "gemm_fit", "overhead", "step_overhead", "call_overhead",
                      "sync_wait") or (f.name == "hbm_efficiency" and not v):
            continue
        if f.name == "hbm_efficiency":  # ((bytes, fraction), ...): a TOML array of pairs
            lines.append(f"{f.name} = [" + ", ".join(f"[{b!r}, {e!r}]" for b, e in v) + "]")
            continue
        lines.append(f"{f.name} = {_toml(v)}")
    for op, (alpha, bw) in c.collectives.items():
        lines += ["", f"[collectives.{op}]", f"alpha_s = {alpha!r}", f"bus_bw = {bw!r}"]
    lines += ["", "[overhead]"] + [f"{k} = {v!r}" for k, v in c.overhead.items()]
    lines += ["", "[step_overhead]"] + [f'"{k}" = {v!r}' for k, v in c.step_overhead.items()]
    lines += ["", "[call_overhead]"] + [f'"{k}" = {v!r}' for k, v in c.call_overhead.items()]
    lines += ["", "[gemm]"]
    if c.gemm_fit:
        lines += [f"fit_peak = {c.gemm_fit[0]!r}", f"fit_half_flops = {c.gemm_fit[1]!r}"]
    lines += ["", "[gemm.table]"] + [f'"{k}" = {v!r}' for k, v in c.gemm_table.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def meminfo(field: str) -> float | None:
    """Bytes of a /proc/meminfo field (`MemTotal`, `MemAvailable`), or None where there is none (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024.0
    except OSError:
        pass
    return None
