"""The planner's formulas for float8 training (the spec's cost hooks, read by plan/fp8.py): torch-free arithmetic.

- GEMM time: a converted linear's three GEMMs run at the device's FP8 dense peak instead of its 16-bit one
  (the cluster profiles' `peak_flops_fp8`: H100 SXM and H200 1979 against 989 TFLOP/s dense, NVIDIA's
  datasheets), so the 16-bit estimate scales by peak_16 / peak_fp8, plus the casts, memory-bound: an operand
  is read in high precision and written in float8 for every GEMM it enters (nothing float8 is kept from the
  forward to the backward), x and W in the forward, x, W and twice g in the backward; a weight gathered in
  float8 (zero3's float8 all-gather) is not cast again.
- all-gather bytes: a float8 all-gather of the weights (zero3 / FSDP) moves 1 byte an element plus one fp32
  scale per tensor (tensorwise) or per row (rowwise), against 2 (bf16) or 4 (fp32) bytes an element.
- scale memory: the scales a step holds: one fp32 per operand (tensorwise), one per row or column of each
  cast operand (rowwise), one byte (e8m0) per 32 elements (MXFP8).
"""
from __future__ import annotations


def gemm_time(seconds_16bit: float, peak_16bit: float, peak_fp8: float, cast_bytes: float = 0.0,
              mem_bw: float = 3.35e12) -> float:
    """Seconds of converted GEMMs that take `seconds_16bit` at the 16-bit peak: the same fraction of the FP8
    peak (no FP8 peak, 0: the 16-bit rate, as on a CPU where the float8 GEMMs are emulated), plus the casts'
    memory traffic `cast_bytes` at `mem_bw` bytes/s (elementwise: bandwidth-bound)."""
    return seconds_16bit * (peak_16bit / peak_fp8 if peak_fp8 else 1.0) + cast_bytes / mem_bw


def cast_bytes(tokens: int, k: int, n: int, phase: str = "both", weight_gathered: bool = False) -> float:
    """Bytes the casts of one linear (tokens x k in-features, n out) move: each operand read in bf16 (x, g)
    or fp32 (W) and written in float8 (1 B), once per GEMM it enters; `phase` forward (x, W), backward (x, W,
    g twice) or both. `weight_gathered`: W arrives in float8 (the float8 all-gather): no cast of it."""
    x, w, g = tokens * k * 3, 0 if weight_gathered else n * k * 5, tokens * n * 3
    fwd, bwd = x + w, x + w + 2 * g
    return {"forward": fwd, "backward": bwd, "both": fwd + bwd}[phase]


def all_gather_bytes(shapes: list[tuple[int, int]], recipe: str = "tensorwise", dtype_bytes: int = 2,
                     tp: int = 1) -> tuple[float, float]:
    """(float8, high-precision) bytes of gathering the weights `shapes` whole once: float8 elements plus
    their scales, against `dtype_bytes` an element. Under tensor parallelism (`tp` > 1; `shapes` are the
    pieces) a tensorwise amax is agreed over the shard group and then over the TP group: 4 bytes twice."""
    agree = 2 if tp > 1 else 1
    f8 = sum(r * c + 4 * (r if recipe == "rowwise" else agree) for r, c in shapes)
    return float(f8), float(sum(r * c for r, c in shapes) * dtype_bytes)


def scale_bytes(shapes: list[tuple[int, int]], tokens: int, recipe: str = "tensorwise") -> float:
    """Bytes of the scales of one step's casts for linears of `shapes` (out, in) over `tokens` tokens."""
    if recipe == "tensorwise":
        return 4.0 * 3 * len(shapes)
    if recipe == "mxfp8":
        return float(sum((tokens * c + r * c + tokens * r) * 2 // 32 for r, c in shapes))
    return 4.0 * sum(2 * tokens + r + c + r + c for r, c in shapes)  # per row: x, g twice; W per row and column
