"""Rank-side helpers for the memory tests: the same training run once per recompute mode, or with and
without optimizer offload, in one pool call (one process start for all)."""
from __future__ import annotations

import torch

from zero_harness import TINY, train

MODES = ("none", "full", "selective")


def modes(name: str, modes: tuple = MODES, steps: int = 5, model_kw: dict = TINY, every: int = 1,
          **parallel) -> dict:
    """mode -> `zero_harness.train`'s result for `name` with `train.recompute=mode`. Every run starts from
    the same global RNG state, so dropout draws the same masks if recompute replays them."""
    out = {}
    for mode in modes:
        torch.manual_seed(0)
        out[mode] = train(name, steps=steps, model_kw=model_kw,
                          train_kw={"recompute": mode, "recompute_every": every}, **parallel)
    return out


def offload(name: str, steps: int = 5, **parallel) -> dict:
    """{"none": ..., "disk": ...}: `zero_harness.train` without and with the optimizer offloaded to disk."""
    return {"none": train(name, steps=steps, **parallel),
            "disk": train(name, steps=steps, offload="optimizer", offload_to="disk", **parallel)}
