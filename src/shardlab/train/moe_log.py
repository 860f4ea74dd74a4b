"""Mixture-of-experts observability: per-step routing in `metrics.jsonl`, load imbalance in `summary.json`.

The step (`Parallel.moe_step`) holds this rank's stats summed over its microbatches (model/moe.py: tokens
routed to each expert before dropping, dropped token-slots, aux and z losses). Data-parallel ranks saw
different tokens, so counts are summed over them (dp x cp, the same reduction as the loss); the aux and
z losses are averaged over ranks and microbatches (each is already a per-sequence / per-token mean).

Load imbalance = max ÷ mean tokens per expert (1.0 = balanced), two ways (docs/moe.md says why both):
- per step (`load_imbalance_step`, the figure a user feels: the slowest expert sets the step's time and
  memory): each step's global batch (all microbatches and data ranks), the worst MoE layer, median over
  the steps after the warm-up the step times skip too (max(3, steps // 10));
- over the run (`load_imbalance`): run totals per expert, layers summed. Loads that swing from expert to
  expert between steps average out here, so it flatters the router.
Under expert parallelism also per rank (`load_imbalance_ep`): each step's busiest expert-parallel rank's tokens
over the mean, each layer's, averaged over the layers, median after the warm-up: what the plan's `moe_load` takes
(`shardlab explain` reads it).
"""
from __future__ import annotations

import statistics

import torch


class MoELog:

    # a logged step's routing metrics reach the host in one read (every step in the CUDA discipline check)
    HOST_SYNCS = {"shardlab.train.moe_log": 1}
    def __init__(self, par, grad_accum: int):
        self.par, self.grad_accum = par, grad_accum
        self.enabled = bool(getattr(par, "moe_layers", None))
        self.total: torch.Tensor | None = None  # this rank's tokens per expert over the run
        self.last: dict | None = None  # the step just finished (None: it ran no forward, e.g. skipped)
        self.steps: list[torch.Tensor] = []  # this rank's (layers, E) tokens per expert, one per step

    def after_step(self) -> None:
        """Every step on every rank: add the step's routing to the run's (no communication)."""
        s = self.last = self.par.moe_step if self.enabled else None
        if self.enabled:
            self.par.moe_step = None  # a step that runs no forward (a skipped batch) leaves None
        if s is not None:
            tpe = s["tokens_per_expert"].double()
            self.total = tpe if self.total is None else self.total + tpe
            self.steps.append(s["tokens_per_layer_expert"].double())

    def row(self) -> dict:
        """The metrics fields of the step just finished; a collective over the data ranks (every rank
        calls it when the step is logged)."""
        s = self.last
        if s is None:
            return {}
        E = s["tokens_per_expert"].numel()
        per_layer = s["tokens_per_layer_expert"].double()  # (layers, E)
        dev = s["tokens_per_expert"].device  # the stats live where the step ran (a GPU): so does the sum
        scalars = torch.stack([torch.as_tensor(s[k], device=dev).double() for k in ("dropped", "aux", "z")])
        t = torch.cat([s["tokens_per_expert"].double(), scalars, per_layer.flatten()])
        self.par.sum_over_data(t, tag="moe metrics")
        t = t.cpu()  # one read on the host for the whole row (a logged step's only sync here)
        n = self.par.dims.size("dp_cp") * self.grad_accum
        row = {"moe_tokens_per_expert": [int(v) for v in t[:E].tolist()], "moe_dropped": int(t[E]),
               "moe_aux": float(t[E + 1]) / n, "moe_z": float(t[E + 2]) / n,
               "moe_tokens_per_layer_expert": [[int(v) for v in layer]
                                               for layer in t[E + 3:].view(per_layer.shape).tolist()],
               "moe_load_imbalance": float(worst_layer_imbalance(t[E + 3:].view(per_layer.shape)))}
        ep = self.par.dims.ep
        if ep > 1:  # what each expert-parallel rank was sent (its experts' share; per rank of one ep group)
            per_group = t[:E].view(ep, E // ep).sum(1) / self.par.dims.size("edp")
            row["moe_tokens_per_ep_rank"] = [float(v) for v in per_group.tolist()]
        return row

    def summary(self) -> dict:
        """`moe` of summary.json: tokens per expert over the run and the load imbalance, max / mean tokens
        per expert over the run (1.0 = perfectly balanced), and per step (the worst layer, median after
        warm-up). Two collectives over the data ranks."""
        if not self.enabled:
            return {}
        E = self.par.moe_layers[0].n_experts
        t = self.total.clone() if self.total is not None else torch.zeros(E, dtype=torch.float64,
                                                                          device=self.par.device)
        self.par.sum_over_data(t, tag="moe summary")
        mean = float(t.mean())
        L = len(self.par.moe_layers)
        steps = torch.stack(self.steps) if self.steps else torch.zeros(0, L, E, dtype=torch.float64)
        self.par.sum_over_data(steps, tag="moe summary steps")  # each step's global batch
        per_step = [float(v) for v in worst_layer_imbalance(steps).tolist()]
        after = per_step[max(3, len(per_step) // 10):]
        ep = self.par.dims.ep
        per_rank = [float(v) for v in ep_rank_load(steps, ep).tolist()][max(3, len(per_step) // 10):] if ep > 1 else []
        return {"moe": {"experts": E, "layers": L,
                        "tokens_per_expert": [int(v) for v in t.tolist()],
                        "load_imbalance": float(t.max()) / mean if mean else None,
                        "load_imbalance_step": statistics.median(after) if after else None,
                        "load_imbalance_ep": statistics.median(per_rank) if per_rank else None}}


def ep_rank_load(counts: torch.Tensor, ep: int) -> torch.Tensor:
    """(steps, layers, E) tokens per expert -> (steps,) the busiest expert-parallel rank's tokens over the mean,
    each layer's (rank r holds experts r E/ep .. (r+1) E/ep - 1), averaged over the layers: every MoE layer waits
    for its own busiest rank, so the step pays the mean of those (the plan's moe_load)."""
    per_rank = counts.unflatten(-1, (ep, counts.shape[-1] // ep)).sum(-1)
    return (per_rank.amax(-1) / per_rank.mean(-1)).mean(-1)


def worst_layer_imbalance(counts: torch.Tensor) -> torch.Tensor:
    """(..., layers, E) tokens per expert -> (...) max ÷ mean over experts of the worst layer (nan where a
    layer saw no tokens)."""
    return (counts.amax(-1) / counts.mean(-1)).amax(-1)
