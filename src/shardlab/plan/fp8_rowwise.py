"""float8 rowwise linears as torchao measured them: the speedup over bfloat16 by the forward's M, K, N.

torchao's float8 training README (section "Performance", "Rowwise scaling"; pytorch/ao fdddb2cf, 2025-06-06,
docs/static/fp8-rowwise-perf.png) publishes "Speedup observed vs bfloat16 for LayerNorm -> Linear -> Sigmoid fwd
+ bwd by forward M, K, N, dynamic row-wise scaling, PyTorch version 2.8.0a0+git48807d5" on an H100, compiled (its
`benchmarks/float8/float8_roofline.py`): M, K, N each 1024 to 32768. What it measures is what the planner's
rowwise model leaves out: the rowwise `_scaled_mm` (a CUTLASS kernel with per-row scales, where tensorwise runs
cuBLAS) and the rowwise casts, which scale each operand along the other axis again for the backward GEMMs (x and
the output gradient twice, W transposed), as compiled kernels at their achieved rate. Below N = 2048 the linear
is slower in float8 at every M (0.38 to 0.94); the table reaches 1.5-1.7x only for M, K, N all >= 8192.
torchtitan's vanilla-TP rowwise rows (benchmarks/asyncTP_llama3_h100_2025-06: the same month's nightlies) put
every converted linear of Llama 3 8B and 70B at TP 8 in the table's left columns (k and v: N = 128; q, o: 512
to 1024), and the root-cause in pytorch/torchtitan#1207 (June 2025) names exactly that: attention.wk and wv
"so small that float8 rowwise conversion resulted in significant slowdown (approx 40%)" (torchao then added
`_auto_filter_for_recipe`, pytorch/ao#2410, after these runs).

On a preset with `fp8_rowwise_by_shape` (the H100 parts the table was measured on), under compile, a converted
linear's 16-bit seconds are divided by the table's speedup at its (M, K, N) (trilinear in log2 of each, the
edge value outside 1024..32768), in place of the FP8 peak and the cast bytes. The table times the LayerNorm and
the Sigmoid around the linear too, the same in both columns, which pulls each figure toward 1: used as the
linear's own speedup it understates both the slowdowns and the gains.
"""
from __future__ import annotations

import math

SIZES = (1024, 2048, 4096, 8192, 16384, 32768)
# SPEEDUP[M][K] = the speedups at N = SIZES, transcribed from the README's figure
SPEEDUP = {
    1024: {1024: (.42, .42, .50, .51, .56, .56), 2048: (.40, .38, .42, .50, .50, .56),
           4096: (.48, .43, .46, .53, .57, .60), 8192: (.45, .48, .54, .62, .60, .62),
           16384: (.46, .48, .54, .60, .60, .61), 32768: (.45, .50, .55, .60, .62, .65)},
    2048: {1024: (.43, .43, .48, .55, .62, .65), 2048: (.38, .45, .58, .65, .72, .75),
           4096: (.43, .50, .68, .78, .81, .82), 8192: (.46, .58, .73, .82, .87, .89),
           16384: (.48, .62, .75, .83, .84, .85), 32768: (.50, .64, .75, .84, .83, .99)},
    4096: {1024: (.45, .47, .57, .66, .72, .76), 2048: (.43, .53, .70, .83, .90, .91),
           4096: (.44, .64, .84, 1.01, 1.01, 1.04), 8192: (.53, .72, .91, 1.01, 1.07, 1.13),
           16384: (.53, .74, .92, 1.05, 1.10, 1.18), 32768: (.54, .75, .93, 1.02, 1.17, 1.18)},
    8192: {1024: (.48, .52, .65, .77, .83, .84), 2048: (.45, .64, .82, 1.01, 1.03, 1.06),
           4096: (.52, .76, 1.00, 1.13, 1.17, 1.19), 8192: (.59, .85, 1.05, 1.20, 1.31, 1.41),
           16384: (.58, .82, 1.03, 1.22, 1.37, 1.40), 32768: (.59, .82, 1.04, 1.30, 1.36, 1.46)},
    16384: {1024: (.48, .58, .73, .86, .85, .89), 2048: (.51, .70, .90, 1.05, 1.07, 1.15),
            4096: (.57, .79, 1.02, 1.20, 1.26, 1.40), 8192: (.61, .87, 1.08, 1.33, 1.39, 1.49),
            16384: (.59, .83, 1.07, 1.34, 1.42, 1.55), 32768: (.60, .85, 1.16, 1.35, 1.48, 1.72)},
    32768: {1024: (.51, .62, .77, .87, .88, .94), 2048: (.54, .73, .91, 1.08, 1.14, 1.27),
            4096: (.59, .81, 1.04, 1.28, 1.35, 1.49), 8192: (.63, .87, 1.11, 1.41, 1.50, 1.62),
            16384: (.60, .83, 1.16, 1.39, 1.49, 1.73), 32768: (.63, .93, 1.16, 1.48, 1.70, 1.52)},
}
SOURCE = "torchao's measured rowwise speedup by M, K, N (float8 README, H100, torch 2.8.0a0)"


def _axis(x: float) -> tuple[int, int, float]:
    """(lower index, upper index, weight of the upper) of x on SIZES in log2, clamped to the ends."""
    p = min(max(math.log2(max(x, 1)) - 10, 0.0), len(SIZES) - 1.0)
    i = min(int(p), len(SIZES) - 2)
    return i, i + 1, p - i


def speedup(m: int, k: int, n: int) -> float:
    """The table's speedup at the forward's (M, K, N): trilinear in log2, the edge values outside it."""
    (m0, m1, wm), (k0, k1, wk), (n0, n1, wn) = _axis(m), _axis(k), _axis(n)
    out = 0.0
    for mi, fm in ((m0, 1 - wm), (m1, wm)):
        for ki, fk in ((k0, 1 - wk), (k1, wk)):
            row = SPEEDUP[SIZES[mi]][SIZES[ki]]
            out += fm * fk * ((1 - wn) * row[n0] + wn * row[n1])
    return out


def applies(train, c, compiled: bool) -> bool:
    return compiled and getattr(train, "fp8", "none") == "rowwise" and getattr(c, "fp8_rowwise_by_shape", False)
