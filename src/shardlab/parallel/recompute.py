"""Activation recompute (`train.recompute=none|full|selective`, `train.recompute_every=K`).

Memory for time: a recomputed block keeps less between its forward and its backward and runs (part of)
its forward again when backward reaches it. Non-reentrant `torch.utils.checkpoint` does the work: it
composes with hooks on parameters and module outputs (what the data-parallel layers use), needs no
`requires_grad` input, and stashes the RNG state so dropout masks are replayed exactly.

- full: the block keeps its input only and recomputes its whole forward in backward.
- selective: an op-level policy (torchtitan's selective AC, Megatron's selective recompute): the outputs
  of the matmuls and of fused attention are kept, everything cheap and memory-heavy between them
  (LayerNorm, GELU, softmax-like, elementwise, dropout) is recomputed. Functional collectives inside a
  block (DTensor tensor parallelism) are kept too; own TP's collectives go through comm.py, outside the
  policy's reach, and run again in the recompute, as in full recompute (docs/memory.md).

The block's class is swapped for a subclass whose `forward` runs the original one under checkpoint (the
way FSDP2's `fully_shard` swaps classes): no wrapper module, so parameter names, state dicts and
checkpoints are unchanged, and hooks a later layer puts on the block (zero3's all-gather before forward and
before backward) stay outside the checkpointed region: they fire once per forward, and the pre-backward
all-gather has run before backward's first unpack triggers the recompute.

Every K-th block (`recompute_every`, torchtitan's ac_freq): blocks K-1, 2K-1, ... by their global index,
so pipeline stages agree on which blocks are recomputed.
"""
from __future__ import annotations

import functools

import torch
import torch.nn as nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from shardlab.model import anatomy
from shardlab.parallel.layer import Layer
from shardlab.parallel.recompute_spec import MODES  # noqa: F401 - train.recompute's values, declared in the spec

_aten = torch.ops.aten
# What selective recompute keeps: the outputs that cost FLOPs (matmuls, fused attention) and collectives.
SAVE_OPS = {
    _aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default,
    _aten._scaled_dot_product_flash_attention.default,
    _aten._scaled_dot_product_flash_attention_for_cpu.default,
    _aten._scaled_dot_product_efficient_attention.default,
    _aten._scaled_dot_product_cudnn_attention.default,
}
for _name in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "wait_tensor"):
    _op = getattr(torch.ops._c10d_functional, _name, None)
    if _op is not None:
        SAVE_OPS.add(_op.default)


def _policy(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVE_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_contexts():
    return create_selective_checkpoint_contexts(_policy)


_CLASSES: dict[tuple[type, str], type] = {}


def _recomputed_class(cls: type, mode: str) -> type:
    """A subclass of `cls` whose forward is checkpointed (one per class and mode, so isinstance holds)."""
    key = (cls, mode)
    if key not in _CLASSES:
        extra = {"context_fn": _selective_contexts} if mode == "selective" else {}

        def forward(self, *args, **kwargs):
            fn = functools.partial(cls.forward, self)
            return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True, **extra, **kwargs)

        _CLASSES[key] = type(f"Recompute{mode.capitalize()}{cls.__name__}", (cls,),
                             {"forward": forward, "recompute": mode})
    return _CLASSES[key]


def wrap_block(block: nn.Module, mode: str) -> nn.Module:
    """Recompute `block` in backward (`mode` full or selective); returns the same object."""
    if mode not in ("full", "selective"):
        raise ValueError(f"recompute mode {mode!r}: must be full or selective")
    if getattr(block, "recompute", None) is None:
        block.__class__ = _recomputed_class(type(block), mode)
    return block


def recomputed(index: int, every: int) -> bool:
    """Is block `index` (global) recomputed with `recompute_every=every`? Blocks every-1, 2*every-1, ..."""
    return (index + 1) % every == 0


def apply(part: nn.Module, cfg, dims=None) -> Layer:
    """The recompute layer: wrap this part's blocks as `cfg.train.recompute` says. `dims` is unused (the
    layer is the same on every rank); it keeps the layers' common signature. Contributes nothing to the
    step beyond the wrapped blocks."""
    mode, every = getattr(cfg.train, "recompute", "none"), getattr(cfg.train, "recompute_every", 1)
    if mode != "none":  # a module brought by a test or a bench may have no blocks: nothing to wrap
        for key, block in anatomy.of(part).named_blocks(part):
            if recomputed(int(key), every):
                wrap_block(block, mode)
    return Layer("recompute", part)
