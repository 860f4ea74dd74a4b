"""Where a computation is widened for accuracy (losses, router probabilities, rotary tables, norms), it is
widened to *at least* fp32, never narrowed: bf16/fp16 activations go up to fp32, a float64 model stays
float64. A float64 run is then float64 end to end, which is what makes the parity tests portable across CPU
kernels (shardlab/testing/compare.py)."""
from __future__ import annotations

import torch


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for fp32 and narrower floating dtypes, float64 for float64."""
    return torch.promote_types(dtype, torch.float32)


def at_least_fp32(t: torch.Tensor) -> torch.Tensor:
    return t.to(wide_dtype(t.dtype))
