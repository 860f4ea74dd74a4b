"""Muon's orthogonalisation: quintic Newton-Schulz iterations (Keller Jordan, "Muon: An optimizer for hidden
layers in neural networks", 2024, kellerjordan.github.io/posts/muon) and the update-RMS matching scale of
Moonlight ("Muon is Scalable for LLM Training", Liu et al. 2025), as torch.optim.Muon spells them."""
from __future__ import annotations

import math

# (a, b, c) of X <- aX + (bXX^T + c(XX^T)^2)X: chosen by Jordan to maximise the slope at zero (the singular
# values land in about [0.7, 1.2] rather than at 1, which does not hurt training); torch.optim.Muon's defaults
COEFFICIENTS = (3.4445, -4.7750, 2.0315)
STEPS = 5
EPS = 1e-7  # the Frobenius norm is clamped to it (torch.optim.Muon's eps)
MOMENTUM = 0.95
NESTEROV = True
RMS_MATCH = 0.2  # Moonlight: an update of RMS 0.2 x sqrt(max(m, n)) / sqrt(max(m, n)) ~ AdamW's typical RMS


def newton_schulz(g: torch.Tensor, steps: int = STEPS, coefficients=COEFFICIENTS, eps: float = EPS,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
    """~U V^T of g = U S V^T, by `steps` quintic iterations on the wide orientation (X X^T is the smaller
    Gram matrix). `dtype`: where the iterations run; None: g's own (torch.optim.Muon always uses bfloat16,
    which parity across layouts in float64 cannot). The op sequence is torch.optim.Muon's, so with
    dtype=torch.bfloat16 the result is bitwise its own. Orthogonal-equivariant: NS(P g Q) = P NS(g) Q, so
    pieces gathered in any row or column order (TP's head slices of a fused matrix) give the same matrix
    up to that order."""
    import torch  # here: the module's constants and FLOP counts are read torch-free (the planner)

    a, b, c = coefficients
    x = g.to(dtype) if dtype is not None else g.clone()
    tall = g.size(0) > g.size(1)
    if tall:
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def rms_scale(shape) -> float:
    """Moonlight's factor on the learning rate of an (m, n) matrix: 0.2 sqrt(max(m, n)), so that Muon's
    update has AdamW's RMS and reuses its learning rate and weight decay (torch.optim.Muon's
    adjust_lr_fn="match_rms_adamw"). `shape`: the whole matrix's, not a shard's."""
    return RMS_MATCH * math.sqrt(max(shape[0], shape[1]))


def flops(shape, steps: int = STEPS) -> int:
    """Matrix-multiply FLOPs (multiply-adds x 2) of one orthogonalisation of an (m, n) matrix, k = min(m, n),
    l = max(m, n), X k x l on the wide side. Per step, as `newton_schulz` runs it:

        gram = X X^T                      (k x l)(l x k)   2 k^2 l
        B = b gram + c gram gram          (k x k)(k x k)   2 k^3     (addmm)
        X = a X + B X                     (k x k)(k x l)   2 k^2 l   (addmm)

    steps x (4 k^2 l + 2 k^3): what torch's FLOP counter counts (tests/optim/test_muon_cost.py). For a
    square d x d matrix, 5 steps: 30 d^3. The elementwise rest (`elementwise_flops`) is O(steps k l)."""
    k, l = sorted(shape[:2])
    return steps * (4 * k * k * l + 2 * k ** 3)


def elementwise_flops(shape, steps: int = STEPS) -> int:
    """The non-matmul FLOPs: the Frobenius norm (k l squares and adds) and the division (k l), then per step
    the two addmms' scale-and-add (3 k^2 and 3 k l)."""
    k, l = sorted(shape[:2])
    return 3 * k * l + steps * (3 * k * k + 3 * k * l)
