"""One transformer layer, timed by its authors: Korthikanti et al. 2022 (arXiv 2205.05198), Table 4.

The 22B model's layer (h 6144, 64 heads, s 2048, micro batch 4, TP 8, no data or pipeline parallelism; Megatron-LM
on A100 80GB, Selene), forward and backward in ms, under five recipes. It is the one published measurement of a
single block's passes the project holds; the sets of whole runs (published_gpu_heldout.py, published_gpu_unseen.py)
time whole steps. Read for the eleventh round (docs/planner.md, "The eleventh round: one layer, timed"); the 22B
rows of the fifth set are the same model on the same eight GPUs (their iteration times are Table 5's).

The planner's layer is its marginal cost: the step with the model's 48 layers less the step with 47, the optimizer's
share of the layer's parameters taken out; its forward is the layer's forward compute and the forward's TP
collectives (2 all-reduces; under SP 2 all-gathers and 2 reduce-scatters), its backward the rest.
"""
from __future__ import annotations

from .published_gpu_heldout import HELD_OUT, plan_row

SOURCE = "Korthikanti et al. 2022, Table 4 (arXiv 2205.05198): one layer of the 22B model, ms"

# (recipe, recompute, sequence parallel, forward ms, backward ms)
TABLE_4 = [("baseline no recompute", "none", False, 7.7, 11.9),
           ("sequence parallelism", "none", True, 7.2, 11.8),
           ("baseline with recompute", "full", False, 7.7, 19.5),
           ("selective recompute", "selective-attn", False, 7.7, 13.2),
           ("selective + sequence", "selective-attn", True, 7.2, 13.1)]

_ROW = "Korthikanti 22B A100x8 full"  # the fifth set's row of this model and these GPUs


def _layer_plan(row: dict, layers: int):
    return plan_row({**row, "shape": {**row["shape"], "n_layer": layers}})


def layer_times(row: dict) -> tuple[float, float]:
    """(forward, backward) seconds of one layer, as the planner times it in the row's recipe."""
    L = row["shape"]["n_layer"]
    a, b = _layer_plan(row, L), _layer_plan(row, L - 1)
    T, U = a.times, b.times
    whole = (T["step"] - T["optimizer"]) - (U["step"] - U["optimizer"])
    per_call = {cl.c.op: cl.time / cl.c.calls for cl in a.comm if cl.c.group == "tp" and cl.c.overlap == "none"
                and cl.c.calls > 2 * a.m}
    comm = 2 * (per_call["all_gather"] + per_call["reduce_scatter"] if row["layout"]["sp"] else per_call["all_reduce"])
    forward = (T["forward"] - U["forward"]) / a.m + comm
    return forward, whole / a.m - forward


def evaluate_layers(async_backward: bool | None = None) -> list[dict]:
    """Each Table 4 recipe with the planner's layer beside it; `async_backward` overrides the row's
    tp_async_backward (None: as the row states it)."""
    base = next(r for r in HELD_OUT if r["case"] == _ROW)
    out = []
    for name, rec, sp, fwd, bwd in TABLE_4:
        lay = {**base["layout"], "recompute": rec, "sp": sp}
        if async_backward is not None:
            lay["tp_async_backward"] = async_backward
        f, b = layer_times(_with_layout(base, lay))
        out.append({"recipe": name, "forward_ms": fwd, "backward_ms": bwd, "plan_forward_ms": f * 1e3,
                    "plan_backward_ms": b * 1e3, "forward_err": f * 1e3 / fwd - 1, "backward_err": b * 1e3 / bwd - 1})
    return out


def _with_layout(row: dict, layout: dict) -> dict:
    return {**row, "layout": layout, "case": f"{row['case']} ({layout['recompute']}, sp={layout['sp']})"}

