"""Vocab-parallel cross-entropy (Megatron-LM): each TP rank holds the logits of its slice of the vocabulary,
and no rank ever materialises the full (tokens x vocab) logits.

Per token, softmax cross-entropy needs three numbers over the whole vocabulary: the max (for stability),
the target's logit, and the sum of exponentials. Each rank computes them over its slice and the ranks reduce
them: one all-reduce (MAX) of the maxima, one all-reduce (SUM) of [target logit, sum of exp] stacked.
Both carry O(tokens) values, not O(tokens x vocab). The backward is local: softmax minus one-hot on the slice.

Columns past the true vocabulary (padding, when the vocabulary is not divisible by the degree) are masked
to -inf before the max, so they contribute exp(-inf) = 0 to the sum and get zero gradient: padding never
changes the loss.
"""
from __future__ import annotations

import torch

from shardlab import comm


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, vocab_start, vocab_size, ignore_index, group):
        n_local = logits.shape[-1]
        real = max(0, min(n_local, vocab_size - vocab_start))  # columns of this slice inside the vocabulary
        if real < n_local:
            logits = logits.clone()
            logits[:, real:] = float("-inf")
        # max for stability: a constant shift, no gradient flows through it
        m = logits.max(dim=-1).values
        comm.all_reduce(m, op=comm.ReduceOp.MAX, group=group, tag="tp.loss.max")
        shifted = logits - m.unsqueeze(-1)

        local_t = targets - vocab_start
        mine = (local_t >= 0) & (local_t < n_local)
        local_t = local_t.masked_fill(~mine, 0)
        rows = torch.arange(shifted.shape[0], device=shifted.device)
        target_logit = shifted[rows, local_t].masked_fill(~mine, 0.0)
        exp = shifted.exp()
        both = torch.stack([target_logit, exp.sum(dim=-1)])
        comm.all_reduce(both, group=group, tag="tp.loss.sum")
        target_logit, sum_exp = both[0], both[1]

        loss = torch.log(sum_exp) - target_logit
        valid = targets != ignore_index
        loss = loss.masked_fill(~valid, 0.0)
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local_t, mine & valid, valid)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, local_t, hit, valid = ctx.saved_tensors
        grad = softmax.clone()  # not in place: a retained graph may run this backward again
        rows = torch.arange(grad.shape[0], device=grad.device)
        grad[rows, local_t] -= hit.to(grad.dtype)
        grad *= (grad_loss * valid.to(grad_loss.dtype)).unsqueeze(-1)
        return grad, None, None, None, None, None


def vocab_parallel_cross_entropy(local_logits: torch.Tensor, targets: torch.Tensor, group, vocab_size: int,
                                 vocab_start: int | None = None, reduction: str = "sum",
                                 ignore_index: int = -100) -> torch.Tensor:
    """Cross-entropy of logits split along the vocabulary across the TP `group`.

    `local_logits` (..., V_local) holds columns [vocab_start, vocab_start + V_local) of the padded vocabulary
    (default: rank * V_local, the even split); `vocab_size` is the true vocabulary (columns at or past it
    are padding); `targets` (...) are global token ids, the same on every rank. Computed in at least fp32,
    like `shardlab.model.loss.cross_entropy`; `reduction` is "sum", "mean" (over non-ignored tokens) or "none".
    """
    n_local = local_logits.shape[-1]
    if vocab_start is None:
        vocab_start = comm.rank(group) * n_local
    dtype = torch.promote_types(local_logits.dtype, torch.float32)
    flat = local_logits.to(dtype).reshape(-1, n_local)
    loss = _VocabParallelCrossEntropy.apply(flat, targets.reshape(-1), vocab_start, vocab_size, ignore_index,
                                            group)
    if reduction == "none":
        return loss.view(targets.shape)
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / (targets != ignore_index).sum()
    raise ValueError(f"reduction={reduction!r}: expected 'sum', 'mean' or 'none'")
