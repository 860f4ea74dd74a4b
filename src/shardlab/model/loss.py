"""The training loss, outside the model: the model returns logits and knows nothing of how they are scored.

Keeping the loss out of `GPT.forward` lets a parallel layer replace it (a vocab-parallel cross-entropy
under tensor parallelism, where no rank holds the full logits) and lets a pipeline schedule compute it
on the last stage only.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from shardlab.model.dtypes import at_least_fp32


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Next-token cross-entropy in fp32 (or wider: float64 stays float64) over every position. `reduction="sum"` (the trainer's choice)
    leaves the normalisation by the global token count to the caller, so accumulation and data
    parallelism weight every token equally."""
    return F.cross_entropy(at_least_fp32(logits).reshape(-1, logits.size(-1)), targets.reshape(-1), reduction=reduction)
