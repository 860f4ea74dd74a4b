"""Where the pipeline cuts the model: the blocks of every stage, balanced by cost.

Pure arithmetic (no torch import), so the planner splits a model exactly as the composition does
(plan/layout.py `first_rank_layers`): the first stage pays for the embedding and the last for the head
and the loss, which at small models are several blocks' worth, and at large ones (a 128k vocabulary) about
one block's.
"""
from __future__ import annotations

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
