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
from shardlab.parallel.pp.schedule import ScheduleError


def layer_costs(n_layer: int, d_model: int, vocab: int, seq_len: int) -> tuple[float, list[float], float]:
    """Forward FLOPs per token of (embedding, each block, head + loss). A block: q, k, v, proj and the
    4x MLP (24 h^2) plus attention scores and mixing (4 s h); the head: 2 h V plus the softmax; the
    embedding a lookup and an add, counted at a few h so it is not free."""
    block = 24 * d_model ** 2 + 4 * seq_len * d_model
    return 4.0 * d_model, [float(block)] * n_layer, 2.0 * d_model * vocab + 5.0 * vocab


def balanced_split(n_stages: int, embed: float, blocks: list[float], head: float) -> list[int]:
    """First block of each stage after the first: the contiguous split that minimises the most
    expensive stage (every stage gets at least one block), by dynamic programming over prefixes."""
    n = len(blocks)
    if n_stages > n:
        raise ScheduleError(f"{n_stages} pipeline stages but the model has {n} layers: use fewer stages")
    prefix = [0.0]
    for c in blocks:
        prefix.append(prefix[-1] + c)

    def cost(i, j, k):  # blocks i..j-1 as stage k
        return prefix[j] - prefix[i] + (embed if k == 0 else 0.0) + (head if k == n_stages - 1 else 0.0)

    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(n_stages + 1)]  # best[k][j]: first j blocks in k stages
    cut = [[0] * (n + 1) for _ in range(n_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, n_stages + 1):
        for j in range(k, n - (n_stages - k) + 1):
            for i in range(k - 1, j):
                c = max(best[k - 1][i], cost(i, j, k - 1))
                if c < best[k][j]:
                    best[k][j], cut[k][j] = c, i
    starts, j = [], n
    for k in range(n_stages, 0, -1):
        j = cut[k][j]
        starts.append(j)
    return sorted(starts)[1:]


def stage_ranges(n_layer: int, n_stages: int, split: list[int] | None = None, costs=None) -> list[range]:
    """The blocks of every stage. `split` (parallel.pp_split) gives the first block of stages 1..S-1."""
    if split:
        if len(split) != n_stages - 1 or sorted(set(split)) != list(split) or split[0] < 1 or split[-1] >= n_layer:
            raise ScheduleError(f"parallel.pp_split={','.join(map(str, split))}: need {n_stages - 1} increasing "
                                f"block indices between 1 and {n_layer - 1} (the first block of stages 1..{n_stages - 1})")
        starts = list(split)
    else:
        embed, blocks, head = costs if costs is not None else (0.0, [1.0] * n_layer, 0.0)
        starts = balanced_split(n_stages, embed, blocks, head)
    bounds = [0, *starts, n_layer]
    return [range(bounds[k], bounds[k + 1]) for k in range(n_stages)]


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
