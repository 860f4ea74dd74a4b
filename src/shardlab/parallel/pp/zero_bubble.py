"""Backward split into I (input gradient) and W (weight gradient), for zero-bubble schedules.

Autograd computes a layer's input gradient and weight gradient in one pass. Zero-bubble schedules
(Qi et al., 2023) need them apart: I is on the critical path (the previous stage waits for it), W is
not and can fill the bubble later. Every `nn.Linear` of a stage is switched to `SplitBackwardLinear`:
in backward it returns only dL/dx = dL/dy · W and queues the weight GEMM (dL/dW = dL/dyᵀ · x and the
bias sum) in the microbatch's `WeightGradStore`, which the W instruction runs. Everything else (the
LayerNorms, the embedding lookup) is cheap and keeps its gradient in I. Applied from outside: the
model's code does not change, only the class of its Linear modules.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class WeightGradStore:
    """The weight-gradient GEMMs one microbatch's I left for its W."""

    def __init__(self):
        self.pending: list = []
        # True: the backward running now is a whole B (DualPipeV mixes B with I / W): the weight gradients
        # are computed in it, as nn.Linear's would be, rather than queued
        self.full = False

    def params(self) -> list[torch.Tensor]:
        """The weights and biases whose gradients `run` computes."""
        return [t for weight, bias, _, _ in self.pending for t in (weight, bias) if t is not None]

    def run(self, extra: list | None = None) -> None:
        """Compute the queued weight gradients through autograd (a one-node graph per Linear, no
        recomputation), so they accumulate into `.grad` as any backward's would and the data-parallel
        layer's gradient hooks fire for them. `extra`: more scalar roots for the same backward (the
        engine's zero-weight terms)."""
        roots = [_WeightGrad.apply(weight, bias, x, gy) for weight, bias, x, gy in self.pending]
        self.pending.clear()
        roots += extra or []
        if roots:
            torch.autograd.backward(roots, [torch.zeros_like(r) for r in roots])


class _WeightGrad(torch.autograd.Function):
    """A node whose backward is dL/dW = dL/dyᵀ · x and dL/db = Σ dL/dy, whatever gradient it is given."""

    @staticmethod
    def forward(ctx, weight, bias, x, gy):
        ctx.save_for_backward(x, gy)
        ctx.has_bias = bias is not None
        ctx.dtype = weight.dtype  # under autocast gy is bf16/fp16; a gradient takes its parameter's dtype
        return weight.new_zeros(())

    @staticmethod
    def backward(ctx, _):
        x, gy = ctx.saved_tensors
        x2, gy2 = x.reshape(-1, x.shape[-1]), gy.reshape(-1, gy.shape[-1])
        dw = (gy2.t() @ x2.to(gy2.dtype)).to(ctx.dtype)
        return dw, (gy2.sum(0).to(ctx.dtype) if ctx.has_bias else None), None, None


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, store):
        ctx.save_for_backward(x, weight)
        # the parameters themselves for the W: under recompute the saved weight comes back as a detached
        # copy of the recomputed one, through which no gradient would reach the parameter
        ctx.weight, ctx.bias, ctx.store = weight, bias, store
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, gy):
        x, weight = ctx.saved_tensors
        if ctx.store.full:
            x2, gy2 = x.reshape(-1, x.shape[-1]), gy.reshape(-1, gy.shape[-1])
            dw = (gy2.t() @ x2.to(gy2.dtype)).to(weight.dtype)
            db = gy2.sum(0).to(weight.dtype) if ctx.bias is not None else None
            return gy @ weight.to(gy.dtype), dw, db, None
        ctx.store.pending.append((ctx.weight, ctx.bias, x.detach(), gy.detach()))
        return gy @ weight.to(gy.dtype), None, None, None


class SplitBackwardLinear(nn.Linear):
    store: WeightGradStore | None = None  # set by the engine for the microbatch being run

    def forward(self, x):
        if self.store is None or not torch.is_grad_enabled():
            return super().forward(x)
        return _Linear.apply(x, self.weight, self.bias, self.store)


def split_backward(module: nn.Module) -> list[SplitBackwardLinear]:
    """Switch every nn.Linear of `module` to the split-backward class in place (names and parameters
    unchanged); returns them so the engine can point them at a microbatch's store."""
    out = []
    for m in module.modules():
        if type(m) is nn.Linear:
            m.__class__ = SplitBackwardLinear
            out.append(m)
    return out
