"""SyncBatchNorm that also runs on CPU (torch's kernels for it are GPU-only), with its collectives
going through comm.py.

BatchNorm normalises with the mean and variance of the batch. Under data parallelism each rank only
sees 1/N of the batch; SyncBatchNorm all-reduces the per-channel statistics so every rank normalises
with the statistics of the *global* batch, as one process with the whole batch would:

    forward:  all-reduce [sum x, count] -> mean;  all-reduce sum (x - mean)^2 -> var
    backward: all-reduce [sum dy, sum dy*xhat]   (the two terms of d loss / d x that couple samples)

The weight and bias gradients stay local: the data-parallel engine averages them like any other.
`DDP.wrap` turns torch's `nn.SyncBatchNorm` modules on CPU into this class (same state dict).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab import comm


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group):
        c = x.shape[1]
        dims = [0, *range(2, x.dim())]
        shape = [1, c] + [1] * (x.dim() - 2)
        stats = torch.cat([x.sum(dims), x.new_tensor([x.numel() // c])])
        comm.all_reduce(stats, group=group, tag="syncbn_stats")
        n = stats[-1]
        mean = stats[:-1] / n
        xc = x - mean.view(shape)
        sq = (xc * xc).sum(dims)
        comm.all_reduce(sq, group=group, tag="syncbn_stats")
        var = sq / n
        invstd = torch.rsqrt(var + eps)
        xhat = xc * invstd.view(shape)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
            running_var.mul_(1 - momentum).add_(var * (n / (n - 1)), alpha=momentum)  # unbiased, as torch
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.n, ctx.group, ctx.dims, ctx.shape = n, group, dims, shape
        out = xhat
        if weight is not None:
            out = xhat * weight.view(shape) + bias.view(shape)
        return out

    @staticmethod
    def backward(ctx, dy):
        xhat, invstd, weight = ctx.saved_tensors
        dims, shape = ctx.dims, ctx.shape
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        both = torch.cat([sum_dy, sum_dy_xhat])  # a copy: the local sums are the weight/bias grads
        comm.all_reduce(both, group=ctx.group, tag="syncbn_grad")
        mean_dy, mean_dy_xhat = (both / ctx.n).chunk(2)
        scale = invstd if weight is None else invstd * weight
        dx = (dy - mean_dy.view(shape) - xhat * mean_dy_xhat.view(shape)) * scale.view(shape)
        dw = sum_dy_xhat if weight is not None else None
        db = sum_dy if weight is not None else None
        return dx, dw, db, None, None, None, None, None


class SyncBatchNorm(nn.SyncBatchNorm):
    """`nn.SyncBatchNorm` with a CPU path; on GPU (or outside training) torch's own code runs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and comm.world_size(self.process_group) > 1 and x.device.type == "cpu"):
            return super().forward(x)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, as torch
                momentum = 1.0 / float(self.num_batches_tracked)
        return _SyncBatchNormFn.apply(x, self.weight, self.bias, self.running_mean if self.track_running_stats
                                      else None, self.running_var, self.eps, momentum, self.process_group)


def enable_cpu_sync_batchnorm(model: nn.Module) -> int:
    """Give every `nn.SyncBatchNorm` of the model the CPU path (in place; state is untouched)."""
    n = 0
    for m in model.modules():
        if isinstance(m, nn.SyncBatchNorm) and not isinstance(m, SyncBatchNorm):
            m.__class__ = SyncBatchNorm
            n += 1
    return n
