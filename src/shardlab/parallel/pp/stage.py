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


# The whole model's top-level modules that belong to one end of the pipeline (the rest, the blocks aside,
# every stage keeps): the positions mark the first stage, the final norm and the head the last; the token
# embedding is the first stage's lookup, and a tied head's last stage keeps it too, for its weight.
FIRST = ("wpe",)
LAST = ("ln_f", "lm_head")
EMBED = "wte"


def dropped(stages, n_stages: int, tied: bool = True) -> list[str]:
    """The top-level modules a part holding `stages` (of `n_stages`) does without (set to None)."""
    first, last = 0 in stages, n_stages - 1 in stages
    out = [] if first else list(FIRST)
    if not first and (not last or not tied):
        out.append(EMBED)  # untied (llama): only the first stage embeds
    return out + ([] if last else list(LAST))


def cut(model: nn.Module, stages, n_stages: int, ranges) -> nn.Module:
    """A copy of `model` holding the blocks of `stages` (`ranges[s]`: stage s's blocks) under their original
    names, and the ends of the pipeline those stages are: the one way the model is cut into stages."""
    part = copy.deepcopy(model)
    part.blocks = nn.ModuleDict({str(i): part.blocks[str(i)] for s in stages for i in ranges[s]})
    for name in dropped(stages, n_stages, getattr(model, "tied_head", True)):
        if hasattr(part, name):
            setattr(part, name, None)
    return part


def runs_on(module: str, ranges) -> int:
    """The stage that runs `module` of the whole model (a block's by its index; a pipeline end's at that
    end; what every stage keeps, first on stage 0)."""
    top, _, rest = module.partition(".")
    if top == "blocks" and rest:
        block = int(rest.split(".")[0])
        return next(s for s, r in enumerate(ranges) if block in r)
    return len(ranges) - 1 if top in LAST else 0


def build_stage(model: nn.Module, stage: int, n_stages: int, blocks: range) -> nn.Module:
    """A copy of `model` that runs only `blocks` (and the embedding / head if first / last)."""
    part = cut(model, [stage], n_stages, {stage: blocks})
    part.pipeline_stage = (stage, n_stages)  # read by the engine and by checkpoints; the forward ignores it
    return part
