"""Pipeline stages: the single-device GPT cut into contiguous pieces, parameter names unchanged.

A stage is the model itself with what it does not run removed: blocks outside its range are dropped
(the rest kept under their original indices, so `blocks.5.attn.q.weight` is called that on every
stage and in every checkpoint), the positions and embedding lookup live on the first stage, the final
LayerNorm and the head on the last. The head is tied to the token embedding, so the last stage keeps
`wte` too (only for its weight): the first and last stages then hold the same parameter, and their
gradients are summed between them before the step (Megatron's embedding group).

Stages are balanced by cost, not by block count: the first stage pays for the embedding and the last
for the head and the loss, which at small models are several blocks' worth.
"""
from __future__ import annotations

import copy

import torch.nn as nn

from shardlab.model import anatomy
from shardlab.parallel.pp.split import balanced_split, layer_costs, stage_ranges  # noqa: F401 - re-exported


def runs_on(module: str, ranges, anat) -> int:
    """The stage that runs `module` of the whole model (`anat`: its anatomy): a block's by its index, the
    final norm's and the head's on the last stage, the rest (the embedding, which a tied head's last stage
    also holds for its weight) first on stage 0."""
    top, _, rest = module.partition(".")
    if top == anat.blocks and rest:
        block = int(rest.split(".")[0])
        return next(s for s, r in enumerate(ranges) if block in r)
    return len(ranges) - 1 if top in (anat.final_norm, anat.head) else 0


def build_stage(model: nn.Module, stage: int, n_stages: int, blocks: range) -> nn.Module:
    """A copy of `model` that runs only `blocks` (and the embedding / head if first / last): the model's
    anatomy (model/anatomy.py) says which parts a stage at this place holds."""
    part = anatomy.of(model).cut(copy.deepcopy(model), blocks, stage == 0, stage == n_stages - 1)
    part.pipeline_stage = (stage, n_stages)  # read by the engine and by checkpoints; the forward ignores it
    return part


def split_for_inference(model: nn.Module, cfg, dims):
    """The pipeline layer in the composition's inference mode (compose.build_inference): this rank's one
    stage, blocks balanced by count (no schedule: generation runs its own request lanes, generate/lanes.py)."""
    from shardlab.parallel.layer import Layer

    stage, n = dims.coord("pp"), dims.size("pp")
    part = build_stage(model, stage, n, stage_ranges(model.cfg.n_layer, n)[stage])
    return Layer("pp", part, norm_groups=("pp",), impl=([stage], None))
