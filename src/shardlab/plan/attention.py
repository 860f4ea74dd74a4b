"""Fused attention's kernel time on GPU presets, per backend (the cluster's `attention`, or the plan's).

The planner's attention op counts 4*T*s*h/t FLOPs forward (QK^T and PV over the full s x s square). A causal
kernel skips the blocks above the diagonal, so it executes about half of them; its backward runs five matrix
products to the forward's two (dV, dP, dQ, dK and the recomputed S): 2.5 times the forward's FLOPs. The
FlashAttention papers count FLOPs this way and report the rate reached as a fraction of the dense 16-bit peak:

  flash2  FlashAttention-2 (Dao 2023, arXiv 2307.08691; what torch's SDPA runs as its flash backend):
          50-73% of peak on A100 (abstract); on H100 only about 35% (FlashAttention-3 paper, abstract), and by
          sequence length and direction the FlashAttention-3 paper's own figures (HOPPER_FA2_BY_SEQ below)
  flash3  FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608): up to 75% of H100's peak forward
          (740 TFLOP/s BF16), 1.5-2.0x FlashAttention-2 overall; by sequence length HOPPER_BY_SEQ below
  cudnn   cuDNN's fused attention (torch SDPA's CUDNN_ATTENTION backend; Transformer Engine's FusedAttention, which
          Megatron-Core and NeMo run): on Hopper the FlashAttention-3 paper's cuDNN bars, by sequence length
  flash4  FlashAttention-4 (Zadouri et al. 2026, arXiv 2603.05451; CuTe-DSL kernels for Blackwell, which torch's
          SDPA runs once registered: torch.nn.attention's FA4 registration): on B200 at head dim 128, causal,
          8k tokens, 1,418 TFLOP/s forward and 1,209 backward (flash-attention PR #2280, 2026-02-27, the 2-CTA
          backward it made the default), 63% and 54% of the 2,250 TF peak
  triton  FlashAttention (the first algorithm) in Triton (flash-attn's flash_attn_triton.py; llm-foundry's
          attn_impl=triton, its benchmarks' default): FlashAttention-2 is "around 2x" FlashAttention (Dao 2023,
          abstract), so half of FlashAttention-2's rate on either generation (on Hopper both run Ampere's
          mma instructions, no wgmma)
"""
from __future__ import annotations

CAUSAL_SHARE = 0.5  # executed / full-square FLOPs of a causal kernel
BWD_FLOPS = 2.5  # backward FLOPs / forward FLOPs (five matrix products to two)
# (forward, backward) fraction of the dense 16-bit peak, by backend and GPU generation (the peak says which)
EFFICIENCY = {
    ("flash2", "ampere"): (0.62, 0.62),  # the middle of FlashAttention-2's 50-73% on A100
    ("flash2", "hopper"): (0.35, 0.35),  # "only 35% utilization on H100" (FlashAttention-3)
    ("flash3", "hopper"): (0.75, 0.55),  # 75% forward; backward 1.5-1.75x FlashAttention-2's
    ("cudnn", "hopper"): (539 / 989, 516 / 989),  # HOPPER_BY_SEQ's 16k figures (no single one is published)
    ("triton", "ampere"): (0.31, 0.31),  # FlashAttention-2's rate / 2
    ("triton", "hopper"): (0.175, 0.175),
    # Blackwell (B200, 2,250 TF dense BF16). FlashAttention-2 (torch SDPA's own flash kernel): 352 / 354 / 362 TFLOP/s
    # forward at 2k / 4k / 8k tokens, head dim 128, without the causal mask (meta-pytorch/tritonbench PR #171,
    # 2025-03-04), 0.158 of peak; the backward at the forward's rate x 0.914, the mean backward / forward of
    # flash-attn 2.7.4 on a B200 at 2k-16k tokens (head dim 64, no causal mask: Dao-AILab/flash-attention#1589).
    # Non-causal rates: on an H100 the causal kernel runs 8-10% slower at 4k-8k (FlashAttention-2 release figure)
    ("flash2", "blackwell"): (0.158, 0.145),
    ("flash4", "blackwell"): (round(1418.1 / 2250, 3), round(1208.6 / 2250, 3)),  # flash-attention PR #2280
    # cuDNN's fused attention (Transformer Engine's FusedAttention, which it prefers on Hopper and later) on Blackwell:
    # FlashAttention-4's rates. Beside it on one GB200 or GB300 (flash-attention PR #2605, forward, head dim 64, causal;
    # its MFU column divides by those parts' 2,500 TF) cuDNN
    # ran 977 / 1,071 / 1,115 TFLOP/s at 4k / 8k / 16k against FlashAttention-4's 917 / 1,079 / 1,176, within 6%;
    # the FlashAttention-4 paper's "up to 1.3x over cuDNN 9.13" is its best case. No backward comparison was read
    ("cudnn", "blackwell"): (round(1418.1 / 2250, 3), round(1208.6 / 2250, 3)),
}
BACKENDS = ("flash2", "flash3", "flash4", "cudnn", "triton")

# FlashAttention-2 on an H100 80GB SXM5, head dim 128, BF16, TFLOP/s counted as above (causal half, backward 2.5x),
# by sequence length: (seq, forward with the causal mask, backward). Shah et al. 2024 (FlashAttention-3, arXiv
# 2407.08608), Fig. 5 (forward, "with causal mask, head dim 128") and Fig. 6 (backward, head dim 128; the paper
# shows the backward without the causal mask only), bars labelled "FlashAttention-2"; measured with flash-attention's
# benchmark (benchmarks/benchmark_flash_attention.py: 16k tokens per configuration, 30 repeats). The abstract's
# "35%" is the top of this table; at seq 2048 the kernel reaches 30% forward, 29% backward. Of the 989 TF peak
HOPPER_FA2_BY_SEQ = ((512, 191.0, 214.0), (1024, 260.0, 260.0), (2048, 298.0, 291.0), (4096, 319.0, 310.0),
                     (8192, 333.0, 318.0), (16384, 335.0, 322.0))
# The same two figures' other bars: FlashAttention-3 and cuDNN (the paper's cuDNN 9.x), forward with the causal mask,
# backward without (the paper's backward figure has no causal panel; FlashAttention-2's rows read it the same way)
HOPPER_BY_SEQ = {
    "flash2": HOPPER_FA2_BY_SEQ,
    "flash3": ((512, 292.0, 316.0), (1024, 423.0, 424.0), (2048, 521.0, 501.0), (4096, 579.0, 542.0),
               (8192, 602.0, 559.0), (16384, 616.0, 561.0)),
    "cudnn": ((512, 315.0, 305.0), (1024, 410.0, 408.0), (2048, 484.0, 465.0), (4096, 518.0, 499.0),
              (8192, 529.0, 518.0), (16384, 539.0, 516.0)),
}
HOPPER_FA2_PEAK = 989e12
# cuDNN's fused attention measured on each NVL72 part by cuDNN's own training benchmark (NVIDIA/cudnn-frontend,
# benchmark/sdpa_benchmark_training/results/llama3.1/{gb200,gb300}/ at 60e572b, 2026-04-24; cuDNN 9.22, frontend
# 1.21.1): Llama 3.1 405B's attention (64 query heads, 8 k/v heads, head dim 128, batch 2), causal, BF16, the
# backward non-deterministic (Transformer Engine's default); TFLOP/s counted as above (causal half, backward 2.5x),
# by sequence length: (seq, forward, backward). The benchmark spaces its runs "to avoid GPU throttling" (its README),
# so these are burst-clock rates, as the papers' are: Cluster.attention_sustained applies to them too. Blackwell Ultra
# (GB300) doubles the special-function units' MUFU.EX2 rate, softmax's exponential (NVIDIA technical blog, "Making
# Softmax More Efficient with NVIDIA Blackwell Ultra"; FlashAttention-4 turns its emulated exp2 off on sm_103 for it:
# flash_attn/cute/flash_fwd_sm100.py): the forward, which the exponentials bound on Blackwell, runs 1.18x the GB200's
# at 8k; the backward, bound by shared memory (the FlashAttention-4 paper), 1.08x. The GB200's figures at 8k are
# FlashAttention-4's on a B200 (EFFICIENCY) scaled to its peak within 1%
MEASURED_BY_SEQ = {
    ("cudnn", "GB200"): ((2048, 1097.0, 885.0), (4096, 1408.0, 1148.0), (8192, 1574.0, 1332.0),
                         (16384, 1708.0, 1328.0), (32768, 1622.0, 1226.0)),
    ("cudnn", "GB300"): ((2048, 1373.0, 967.0), (4096, 1703.0, 1248.0), (8192, 1856.0, 1435.0),
                         (16384, 1915.0, 1507.0), (32768, 1953.0, 1490.0)),
}
MEASURED_SEQ = 8192  # the figure a cluster without attention_by_seq takes from a measured table
NAMES = {"flash2": "FlashAttention-2", "flash3": "FlashAttention-3", "flash4": "FlashAttention-4",
         "cudnn": "cuDNN attention", "triton": "Triton's FlashAttention"}


def _interpolate(pts, seq: int, peak: float) -> tuple[float, float]:
    """(forward, backward) fraction of `peak` from TFLOP/s points ((seq, forward, backward), ...), linear in log2(seq)
    between the measured lengths, the end values beyond them."""
    import math
    x = math.log2(max(pts[0][0], min(pts[-1][0], seq)))
    for (s0, f0, b0), (s1, f1, b1) in zip(pts, pts[1:]):
        if x <= math.log2(s1):
            w = (x - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return (f0 + w * (f1 - f0)) * 1e12 / peak, (b0 + w * (b1 - b0)) * 1e12 / peak
    return pts[-1][1] * 1e12 / peak, pts[-1][2] * 1e12 / peak


def hopper_by_seq(backend: str, seq: int) -> tuple[float, float]:
    """(forward, backward) fraction of the dense peak `backend` (flash2, flash3, cudnn) reaches on Hopper at this
    sequence length (the kernel's key length): the FlashAttention-3 paper's figures, linear in log2(seq) between
    the measured lengths, the end values beyond them."""
    return _interpolate(HOPPER_BY_SEQ[backend], seq, HOPPER_FA2_PEAK)


def generation(peak_flops: float) -> str:
    """Ampere (A100: 312 TF dense BF16), Hopper (H100/H200: 989 TF) or Blackwell (B200: 2,250 TF): a kernel's
    published fraction of one generation's peak says nothing of another's (FlashAttention-2 reaches 62% of an
    A100's, 35% of an H100's, 16% of a B200's)."""
    return "blackwell" if peak_flops >= 2000e12 else "hopper" if peak_flops > 500e12 else "ampere"


def by_seq(backend: str, gen: str, device: str = "") -> bool:
    """Whether `backend` has rates by sequence length on generation `gen` (Hopper's figures; Triton's from
    FlashAttention-2's) or on `device` (a cluster's `attention_device`: MEASURED_BY_SEQ)."""
    return (backend, device) in MEASURED_BY_SEQ or (
        gen == "hopper" and (backend in HOPPER_BY_SEQ or backend == "triton"))


def efficiency(backend: str, peak_flops: float, seq: int = 0, device: str = "") -> tuple[float, float]:
    """(forward, backward) fraction of the dense peak. `seq` > 0 (a cluster with `attention_by_seq`): on Hopper,
    FlashAttention-2, FlashAttention-3 and cuDNN at the FlashAttention-3 paper's rate for that sequence length,
    Triton's at half of FlashAttention-2's. `device` (a cluster's `attention_device`) with a measurement of `backend`
    on it (MEASURED_BY_SEQ): that device's rate, at `seq` (MEASURED_SEQ without one)."""
    if (backend, device) in MEASURED_BY_SEQ:
        return _interpolate(MEASURED_BY_SEQ[(backend, device)], seq or MEASURED_SEQ, peak_flops)
    gen = generation(peak_flops)
    if (backend, gen) not in EFFICIENCY:
        raise ValueError(f"attention backend {backend!r} has no published rate on {gen} "
                         f"(known: {', '.join(f'{b} on {g}' for b, g in EFFICIENCY)})")
    if seq and by_seq(backend, gen):
        f, b = hopper_by_seq("flash2" if backend == "triton" else backend, seq)
        half = 0.5 if backend == "triton" else 1.0  # Triton's FlashAttention: half of FlashAttention-2's rate
        return f * half, b * half
    return EFFICIENCY[(backend, gen)]


def kernel_time(full_flops: float, cluster, backward: bool, backend: str | None = None, seq: int = 0) -> float:
    """Seconds of the fused kernel, forward or backward, for `full_flops` = the op's full-square forward FLOPs;
    `seq` the kernel's sequence length (used where the cluster rates attention by it: `attention_by_seq`)."""
    fwd, bwd = efficiency(backend or cluster.attention, cluster.peak_flops,
                          seq if getattr(cluster, "attention_by_seq", False) else 0,
                          getattr(cluster, "attention_device", ""))
    # at the clock the chip sustains at its power limit, not the boost clock of the papers' short benchmarks
    peak = cluster.peak_flops * cluster.clock_factor * getattr(cluster, "attention_sustained", 1.0)
    work = full_flops * CAUSAL_SHARE * (BWD_FLOPS if backward else 1.0)
    return work / (peak * (bwd if backward else fwd))


# torch's ring attention (torch.distributed.tensor.experimental._attention, `_templated_ring_attention` and its
# backward; what cp_impl=torch runs, torchtitan's CP): around the cp kernel calls per layer, eager kernels over the
# rank's attention output / q-sized tensors (N = b x heads x s/cp x d elements; k and v have as many: torchtitan
# repeats the k/v heads before SDPA), bytes per element, averaged over the ranks (rank r merges r whole blocks
# and cp-1-r half blocks, each half followed by a torch.cat of the full tensor):
#   forward   each block's output upcast to fp32 (2 + 4) and merged into the fp32 accumulator with the
#             log-sum-exp rule (out - block_out: 12, x sigmoid: 8, out - that: 12; a half block on N/2 + the
#             cat: 8), k and v concatenated to send (2 x (2 + 2)), the result cast back (4 + 2):
#             12 + 40.5 (cp - 1)
#   backward  three fp32 accumulators zeroed (12), each step dQ, dK, dV added in fp32 (10 each, 13 for a half
#             one and its cat), dK and dV concatenated in fp32 to send on (16), k and v concatenated (8), the
#             sums cast back (6 + 12): 84 + 58.5 (cp - 1)
RING_MERGE_BYTES = ((12.0, 40.5), (84.0, 58.5))  # (forward, backward): (fixed, per further block) bytes per element
# Under torch.compile (torchtitan compiles each block with fullgraph=True, so the ring is traced into the block's
# graph: a graph break would be an error) Inductor runs the same source as fused kernels. Two things follow from
# the source alone: with the all-gather rotater the k/v torch.cat of every step but the first feeds
# `exchange_buffers`, which ignores it, so the graph drops it as dead code (0 B; the first step's cat, 8 B, stays);
# the merge's chain (upcast, sigmoid, subtracts, `_partial_update`'s cat) is pointwise. The fused bytes were
# counted by compiling the ring's merge and accumulation code (the source's steps, the flash kernels' outputs
# as graph inputs, ranks averaged, cp = 2, 4, 8) with Inductor and summing its kernels' read and write buffers:
#   forward   7.6 per further block, 2.5 fixed (+ the first step's k/v cat: 8)
#   backward  32.5 per further block (dQ, dK, dV accumulated; dK/dV written once into the fp32 send buffer),
#             16 fixed (+ the first k/v cat 8 + the received dK/dV cast back 12)
RING_MERGE_BYTES_COMPILED = ((10.5, 7.6), (36.0, 32.5))


def ring_merge_bytes(elements: float, cp: int, compiled: bool = False) -> tuple[float, float]:
    """(forward, backward) bytes the ring's merge and accumulation kernels move per layer, N = `elements`
    (`compiled`: as Inductor fuses them, RING_MERGE_BYTES_COMPILED)."""
    (f0, f1), (b0, b1) = RING_MERGE_BYTES_COMPILED if compiled else RING_MERGE_BYTES
    return elements * (f0 + f1 * (cp - 1)), elements * (b0 + b1 * (cp - 1))
