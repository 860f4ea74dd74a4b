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
# cuDNN's fused attention over a sliding window, measured by the same benchmark on the same parts (its gpt_oss
# configuration, configs/gpt_oss.py; results/gpt_oss/{gb200,gb300}/ at 60e572b): GPT-OSS's head dim 64 (batch 2 x 128
# heads), a window of 128 keys (top-left causal band), BF16, the backward non-deterministic; TFLOP/s at the band's
# own FLOPs (the benchmark counts W(W + 1)/2 + (s - W) W pairs a head, as ModelSpec.attention_share does), by
# sequence length: (seq, forward, backward). A 128-key band is two 128-wide key tiles a query tile: the kernel's
# fixed work per tile (loading q, the softmax's rescaling, writing the output and its statistics) is not spread
# over a long key loop, and it runs at a tenth of the full causal kernel's rate (161 against 1,408 TFLOP/s forward
# on a GB200 at 4k)
WINDOW_KEYS, WINDOW_HEAD_DIM = 128, 64  # the measured band's keys a query and head dim
MEASURED_WINDOWED = {
    ("cudnn", "GB200"): ((2048, 153.0, 176.0), (4096, 161.0, 182.0), (8192, 165.0, 187.0),
                         (16384, 167.0, 188.0), (32768, 104.0, 186.0)),
    ("cudnn", "GB300"): ((2048, 160.0, 184.0), (4096, 167.0, 191.0), (8192, 172.0, 198.0),
                         (16384, 173.0, 200.0), (32768, 108.0, 199.0)),
}


def _upto_16k(pts: tuple) -> tuple:
    """A BF16 table's points at the FP8 runs' lengths (2k-16k: the FP8 rows' 32k figures are not taken)."""
    return tuple(p for p in pts if p[0] <= 16384)


# FP8 attention (Transformer Engine's fp8_dot_product_attention: q, k, v and the backward's gradients in FP8 through
# cuDNN), measured by the same benchmark beside its BF16 runs: same part, same shape, the FP8 formats' TFLOP/s
# (per-tensor scaled E4M3 "fp8", block-scaled "mxfp8"). By (part, head dim of q and k, keys a query sees: 0 the full
# causal kernel, else the band's): {dtype: ((seq, forward, backward), ...)}, BF16's from the tables above. The
# shapes: Llama 3.1 405B's (head dim 128; results/llama3.1), DeepSeek-V3's latent attention (q/k 192, v 128;
# results/dsv3), GPT-OSS's 128-key band (head dim 64; results/gpt_oss). The band's FP8 backward grows with the
# square of the sequence (1.7, 6.2, 23 ms at 4k, 8k, 16k on a GB200): it runs the whole causal triangle, not the band
MEASURED_FP8 = {
    ("GB200", 128, 0): {
        "bf16": _upto_16k(MEASURED_BY_SEQ[("cudnn", "GB200")]),
        "fp8": ((2048, 1420.0, 831.0), (4096, 1805.0, 1178.0), (8192, 2047.0, 1454.0), (16384, 2154.0, 1632.0)),
        "mxfp8": ((2048, 1330.0, 745.0), (4096, 1685.0, 1054.0), (8192, 1902.0, 1287.0), (16384, 1999.0, 1436.0))},
    ("GB300", 128, 0): {
        "bf16": _upto_16k(MEASURED_BY_SEQ[("cudnn", "GB300")]),
        "fp8": ((2048, 1954.0, 944.0), (4096, 2532.0, 1396.0), (8192, 2897.0, 1781.0), (16384, 3054.0, 2035.0)),
        "mxfp8": ((2048, 1751.0, 811.0), (4096, 2272.0, 1143.0), (8192, 2570.0, 1404.0), (16384, 2727.0, 1563.0))},
    ("GB200", 192, 0): {
        "bf16": ((2048, 1072.0, 846.0), (4096, 1406.0, 1057.0), (8192, 1585.0, 1193.0), (16384, 1678.0, 1134.0)),
        "fp8": ((2048, 1659.0, 1312.0), (4096, 2095.0, 1692.0), (8192, 2397.0, 1959.0), (16384, 2486.0, 1968.0)),
        "mxfp8": ((2048, 1535.0, 1047.0), (4096, 1925.0, 1364.0), (8192, 2219.0, 1494.0), (16384, 2355.0, 1552.0))},
    ("GB300", 192, 0): {
        "bf16": ((2048, 1285.0, 914.0), (4096, 1590.0, 1143.0), (8192, 1825.0, 1291.0), (16384, 1967.0, 1302.0)),
        "fp8": ((2048, 2290.0, 1511.0), (4096, 2788.0, 1982.0), (8192, 3128.0, 2310.0), (16384, 3305.0, 2459.0)),
        "mxfp8": ((2048, 2069.0, 1158.0), (4096, 2517.0, 1522.0), (8192, 2829.0, 1780.0), (16384, 2998.0, 1844.0))},
    ("GB200", 64, 128): {
        "bf16": _upto_16k(MEASURED_WINDOWED[("cudnn", "GB200")]),
        "fp8": ((2048, 165.0, 78.0), (4096, 173.0, 49.0), (8192, 177.0, 28.0), (16384, 179.0, 15.0)),
        "mxfp8": ((2048, 153.0, 65.0), (4096, 161.0, 41.0), (8192, 164.0, 23.0), (16384, 166.0, 12.0))},
    ("GB300", 64, 128): {
        "bf16": _upto_16k(MEASURED_WINDOWED[("cudnn", "GB300")]),
        "fp8": ((2048, 193.0, 89.0), (4096, 203.0, 57.0), (8192, 208.0, 33.0), (16384, 211.0, 18.0)),
        "mxfp8": ((2048, 182.0, 72.0), (4096, 194.0, 45.0), (8192, 200.0, 26.0), (16384, 203.0, 14.0))},
}
# the measured part whose windowed / full ratio a Blackwell cluster without its own measurement takes: the B200 is
# the GB200's die and runs the same sm_100 kernels. Hopper's cuDNN kernels are others: no 128-key band is published
WINDOW_DEVICE = {"blackwell": "GB200"}
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


def window_device(backend: str, cluster, keys: int, head_dim: int) -> str:
    """The measured part (MEASURED_WINDOWED) whose rates a `keys`-wide band of `head_dim` heads takes on `cluster`,
    or "" where none is measured: the measured shape only (a wider band's key loop is long again, another head dim
    another kernel), on the cluster's own part or its generation's (WINDOW_DEVICE). 129 keys (Megatron-Core's
    window_size (128, 0) before it became (127, 0)) span the same two 128-wide key tiles a query tile."""
    if abs(keys - WINDOW_KEYS) > 1 or head_dim != WINDOW_HEAD_DIM:
        return ""
    device = measured_device(backend, cluster)
    return device if (backend, device) in MEASURED_WINDOWED else ""


def window_slowdown(backend: str, device: str, seq: int) -> tuple[float, float]:
    """(forward, backward) full causal rate / windowed rate at `seq` on the measured `device`: how much slower a
    FLOP of the band runs than one of the full causal kernel (MEASURED_WINDOWED over MEASURED_BY_SEQ)."""
    wf, wb = _interpolate(MEASURED_WINDOWED[(backend, device)], seq, 1e12)
    ff, fb = _interpolate(MEASURED_BY_SEQ[(backend, device)], seq, 1e12)
    return ff / wf, fb / wb


def measured_device(backend: str, cluster) -> str:
    """The measured part whose ratios (a band's, an FP8 format's) `cluster` takes: its own, else its generation's."""
    if backend != "cudnn":
        return ""
    return getattr(cluster, "attention_device", "") or WINDOW_DEVICE.get(generation(cluster.peak_flops), "")


def fp8_slowdown(device: str, head_dim: int, keys: int, fp8: str, seq: int) -> tuple[float, float] | None:
    """(forward, backward) BF16 rate / FP8 rate of the fused attention in the recipe `fp8`'s format (mxfp8, else
    per-tensor fp8) for this shape (keys 0: full causal; a band within one key of 128: the measured band), or None
    where the shape is not measured (MEASURED_FP8)."""
    keys = WINDOW_KEYS if keys and abs(keys - WINDOW_KEYS) <= 1 else keys
    table = MEASURED_FP8.get((device, head_dim, keys))
    if table is None:
        return None
    bf, bb = _interpolate(table["bf16"], seq, 1e12)
    ff, fb = _interpolate(table["mxfp8" if fp8 == "mxfp8" else "fp8"], seq, 1e12)
    return bf / ff, bb / fb


def sdpa_key(op) -> str:
    """The calibrated table's key of a fused attention op (cluster.gemm_table's sdpa: and sdpa_bwd: rates)."""
    return f"{op.count}x{op.shape[0]},{op.shape[2]}"


def calibrated(op, cluster) -> bool:
    """Whether a calibration measured this fused attention op as one (then its rates stand, not the presets')."""
    return f"sdpa:{sdpa_key(op)}" in cluster.gemm_table


def kernel_time(full_flops: float, cluster, backward: bool, backend: str | None = None, seq: int = 0,
                window: tuple = (), fp8: str = "", head_dim: int = 0) -> float:
    """Seconds of the fused kernel, forward or backward, for `full_flops` = the op's full-square forward FLOPs;
    `seq` the kernel's sequence length (used where the cluster rates attention by it: `attention_by_seq`).
    `window` (keys, head dim, share): that share of the FLOPs is a sliding band's, timed at the measured band's
    rate where one is measured (window_device), at the full kernel's otherwise. `fp8` (a recipe): FP8 attention,
    each part at its measured FP8 / BF16 ratio (fp8_slowdown; `head_dim` the q/k width), BF16's where unmeasured."""
    backend = backend or cluster.attention
    fwd, bwd = efficiency(backend, cluster.peak_flops,
                          seq if getattr(cluster, "attention_by_seq", False) else 0,
                          getattr(cluster, "attention_device", ""))
    # at the clock the chip sustains at its power limit, not the boost clock of the papers' short benchmarks
    peak = cluster.peak_flops * cluster.clock_factor * getattr(cluster, "attention_sustained", 1.0)
    work = full_flops * CAUSAL_SHARE * (BWD_FLOPS if backward else 1.0)
    i, at = (1 if backward else 0), seq or MEASURED_SEQ
    full, band = work * (1 - window[2]) if window else work, work * window[2] if window else 0.0
    if window and (device := window_device(backend, cluster, window[0], window[1])):
        band *= window_slowdown(backend, device, at)[i]
    if fp8 and (device := measured_device(backend, cluster)):
        full *= (fp8_slowdown(device, head_dim, 0, fp8, at) or (1.0, 1.0))[i]
        if window:
            band *= (fp8_slowdown(device, head_dim, window[0], fp8, at) or (1.0, 1.0))[i]
    return (full + band) / (peak * (bwd if backward else fwd))


def shape_note(model, train, cluster, seq: int) -> str:
    """--explain's words for the attention kernel's shape terms: the windowed blocks' measured band, FP8 attention."""
    if not cluster.attention:
        return ""
    out, hd = [], model.qk_dim
    windowed = bool(model.window) and model.window < seq
    if windowed and (device := window_device(cluster.attention, cluster, model.window, model.d_head)):
        f, b = window_slowdown(cluster.attention, device, seq)
        out.append(f"the {model.window}-key sliding window's attention {f:.1f}x slower forward, {b:.1f}x backward a "
                   f"FLOP than the full causal kernel's (cuDNN's own benchmark on a {device}: a {WINDOW_KEYS}-key "
                   f"band of head dim {WINDOW_HEAD_DIM})")
    elif windowed:
        out.append(f"the {model.window}-key sliding window's attention at the full causal kernel's rate over its "
                   f"band's FLOPs (no {NAMES.get(cluster.attention, cluster.attention)} rate is published for that "
                   f"band at head dim {model.d_head} on this part)")
    if getattr(train, "fp8_attention", False):
        device = measured_device(cluster.attention, cluster)
        parts = [(k, fp8_slowdown(device, hd, k, train.fp8, seq) if device else None)
                 for k in ((0, model.window) if windowed else (0,))]
        out.append(f"FP8 attention ({train.fp8}): " + ", ".join(
            (f"the {'full causal kernel' if not k else f'{k}-key band'} x{r[0]:.2f} forward, x{r[1]:.2f} backward "
             "the BF16 time" if r else f"the {'full causal kernel' if not k else f'{k}-key band'} at the BF16 rate "
             "(not measured)") for k, r in parts)
            + (f" (cuDNN's own benchmark on a {device}, head dim {hd})" if device else " (no FP8 attention measured "
               "on this part)"))
    return "".join("; " + x for x in out)


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
