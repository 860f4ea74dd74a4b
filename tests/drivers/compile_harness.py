"""Rank-side helper for the compile tests: the same training run eager and with `train.compile=true`, in
one pool call, with what dynamo counted while compiling (graphs, graph breaks)."""
from __future__ import annotations

import torch

from zero_harness import TINY, train


def eager_and_compiled(name: str, steps: int = 20, model_kw: dict = TINY, train_kw: dict | None = None,
                       **parallel) -> dict:
    """{"eager": ..., "compiled": ..., "graphs": n, "breaks": {reason: count}, "calls": n} for strategy
    `name`: graphs compiled in this call (0 when an earlier call's graph was reused), the graph breaks, the
    block forwards that ran compiled."""
    from torch._dynamo.utils import counters

    from shardlab.parallel import compile as compile_layer

    counters.clear()
    calls = sum(c._compile_state["calls"] for c in compile_layer._CLASSES.values())
    out = {}
    for mode in ("eager", "compiled"):
        torch.manual_seed(0)
        out[mode] = train(name, steps=steps, model_kw=model_kw,
                          train_kw={**(train_kw or {}), "compile": mode == "compiled"}, **parallel)
    out["graphs"] = counters["stats"]["unique_graphs"]
    out["breaks"] = dict(counters["graph_break"])
    out["calls"] = sum(c._compile_state["calls"] for c in compile_layer._CLASSES.values()) - calls
    out["failed"] = next((c._compile_state["failed"] for c in compile_layer._CLASSES.values()
                          if c._compile_state["failed"]), None)
    return out
