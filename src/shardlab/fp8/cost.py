"""The planner's formulas for float8 training (the spec's cost hooks): torch-free arithmetic.

- GEMM time: a converted linear's three GEMMs run at the device's FP8 dense peak instead of its bf16 one
  (H100 SXM: 1979 vs 989 TFLOP/s dense; H200 the same chip), plus the casts, memory-bound: each operand read
  in high precision and written in float8 once per GEMM it enters (rowwise casts x, W and g twice).
- all-gather bytes: a float8 all-gather of the weights (zero3 / FSDP) moves 1 byte an element plus one fp32
  scale per tensor (tensorwise) or per row (rowwise), against 2 (bf16) or 4 (fp32) bytes an element.
- scale memory: the scales a step holds: one fp32 per operand (tensorwise), one per row or column of each
  cast operand (rowwise), one byte (e8m0) per 32 elements (MXFP8).
"""
from __future__ import annotations

PEAK_TFLOPS = {  # dense, no sparsity: (bf16, fp8)
    "h100": (989.0, 1979.0), "h200": (989.0, 1979.0), "b200": (2250.0, 4500.0), "cpu": (0.105, 0.105),
}


def gemm_time(flops: float, device: str = "h100", fp8: bool = True, cast_bytes: float = 0.0,
              mem_gbps: float = 3350.0) -> float:
    """Seconds for `flops` of converted GEMMs at the device's FP8 (or bf16) peak, plus the casts'
    memory traffic `cast_bytes` at `mem_gbps` (the casts are elementwise: bandwidth-bound)."""
    bf16, f8 = PEAK_TFLOPS[device]
    return flops / ((f8 if fp8 else bf16) * 1e12) + cast_bytes / (mem_gbps * 1e9)


def cast_bytes(tokens: int, k: int, n: int, recipe: str = "tensorwise") -> float:
    """Bytes the casts of one linear (tokens x k by n) move in a forward and backward: each operand read
    in bf16 (x, g) or fp32 (W) and written in float8, once per GEMM it enters (tensorwise: once)."""
    x, w, g = tokens * k, n * k, tokens * n
    once = x * (2 + 1) + w * (4 + 1) + g * (2 + 1)
    return once * (2 if recipe in ("rowwise", "mxfp8") else 1)


def all_gather_bytes(shapes: list[tuple[int, int]], recipe: str = "tensorwise", dtype_bytes: int = 2) -> tuple[float, float]:
    """(float8, high-precision) bytes of gathering the weights `shapes` whole once: float8 elements plus
    their scales, against `dtype_bytes` an element."""
    f8 = sum(r * c + 4 * (r if recipe == "rowwise" else 1) for r, c in shapes)
    return float(f8), float(sum(r * c for r, c in shapes) * dtype_bytes)


def scale_bytes(shapes: list[tuple[int, int]], tokens: int, recipe: str = "tensorwise") -> float:
    """Bytes of the scales of one step's casts for linears of `shapes` (out, in) over `tokens` tokens."""
    if recipe == "tensorwise":
        return 4.0 * 3 * len(shapes)
    if recipe == "mxfp8":
        return float(sum((tokens * c + r * c + tokens * r) * 2 // 32 for r, c in shapes))
    return 4.0 * sum(2 * tokens + r + c + r + c for r, c in shapes)  # per row: x, g twice; W per row and column
