"""The layer contract: what a parallel layer hands the composition.

Every layer package registers an `apply(part, cfg, dims) -> Layer` (parallel/layers.py lists them by mesh
dimension). It changes `part` (splits, wraps or replaces its modules) and returns a `Layer`: the part to give
the next layer, and what the layer contributes to the step and to the mechanisms around it. `compose.build`
keeps the handles in order; the step (`Parallel`), the data-parallel layer, the checkpoint state and the
device-discipline check ask the handles, never the module's attributes or the mesh degrees.

A field left at its default contributes nothing, so a layer declares only what it changes:

    loss_fn        (logits, targets, reduction) -> loss, replacing cross-entropy (TP: vocab-parallel)
    loss_context   entered around each microbatch's loss *and* its backward (DTensor TP: loss_parallel)
    shard_batch    (x, y, ...) -> this rank's slice of each, before the forward (CP: the zigzag chunks): every
                   per-token tensor of a microbatch, cut alike along the sequence (dim 1), the same number
                   back; with packed documents the third is doc_pos, computed from the whole sequence
                   before any cut (parallel/step.py's `unpack`)
    norm_groups    mesh dimensions across which ranks hold different parts of the gradient (TP, PP): the
                   gradient norm sums over them
    hidden         a context manager hiding parameters from the data-parallel layer while it wraps the part
                   (EP: the experts, which the layer synchronises itself)
    dp_view        dp -> the dp layer as this layer needs it seen (TP: full values, SP's gradient sum, the
                   checkpoint's shapes; EP: the experts' gradients and state): applied innermost first
    host_syncs     {module prefix: host syncs per step} this layer's code may make (the CUDA discipline check,
                   shardlab.simulate; anything not declared has a budget of 0). Each entry says why it is worth it
    params_elsewhere  parameters of the whole model this layer moved to other ranks and no rank's part
                   counts twice (EP: the experts the other ep ranks hold): the model's parameter count
    optimizer_hands  what the optimizer steps of each matrix this layer splits, in words ("its column or row
                   slice of each split matrix"); None: whole matrices. The dp layer asks the one rule
                   (optim/serving.py) with it before building the optimizer: a whole-matrix optimizer is refused
                   in one line where a layer hands it parts
    executor       (par) -> the object that runs the step's microbatches for `Parallel` (the pipeline's
                   schedule): its forward_backward, finish, clip_grad_norm_ and eval_loss_sum replace the plain
                   microbatch loop's; `placement` (where each module runs) for the doctor. Built by `Parallel`
                   once the data-parallel layer and the optimizer exist
    impl           the layer's own object (OwnTP, ContextParallel, ExpertParallel, the pipeline stages), for
                   the tools that study that layer alone
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch.nn as nn


@dataclass
class Layer:
    name: str  # the mesh dimension or feature: "tp", "cp", "ep", "pp", "recompute", "compile"
    part: nn.Module
    loss_fn: Callable | None = None
    loss_context: Callable | None = None
    shard_batch: Callable | None = None
    norm_groups: tuple[str, ...] = ()
    hidden: Callable = contextlib.nullcontext
    dp_view: Callable | None = None
    host_syncs: dict[str, int] = field(default_factory=dict)
    params_elsewhere: int = 0
    optimizer_hands: str | None = None
    executor: Callable | None = None
    impl: Any = None


def the_one(layers: list[Layer], what: str):
    """The single contribution `what` among the layers (None when no layer makes one). Two layers that both
    replace the loss, say, cannot be composed: refused here rather than one silently winning."""
    found = [(layer.name, getattr(layer, what)) for layer in layers if getattr(layer, what) is not None]
    if len(found) > 1:
        raise ValueError(f"layers {', '.join(n for n, _ in found)} each set {what}: only one may")
    return found[0][1] if found else None
