"""The torch-native twin: the same stages run by `torch.distributed.pipelining`'s schedules.

shardlab builds the stages (stage.py) and hands them to `PipelineStage`; torch's schedule then owns
the forwards, backwards and point-to-point transfers (its own, not recorded by comm). The step's
microbatches go to the schedule's microbatch loop as they are (`_run`), not concatenated for its `step`
to split again. What torch does
not do is the tied embedding: the first and last stages' copies are summed here after the step, as the
own engine's REDUCE does. torch scales gradients by 1/microbatches by default; shardlab's loss is
already weighted by the global token count, so that scaling is switched off.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.parallel.pp import registry

# Derived from the one table of schedules (registry.py): the torch class of each torch schedule.
NATIVE = {n: registry.SPECS[n].torch_class for n in registry.TORCH}


class TorchPipeline:
    def __init__(self, name: str, stages: dict[int, nn.Module], n_stages: int, microbatches: int,
                 loss_fn: Callable, device: torch.device, group=None, embed_group=None):
        from torch.distributed import pipelining

        self.stages, self.n_stages, self.embed_group = stages, n_stages, embed_group
        self.weight = 1.0
        self.losses: list[torch.Tensor] = []
        self.torch_stages = [pipelining.PipelineStage(m, s, n_stages, device, group=group)
                             for s, m in sorted(stages.items())]
        cls = getattr(pipelining, NATIVE[name])

        def weighted(logits, y):
            loss = loss_fn(logits, y)
            self.losses.append(loss.detach())  # unweighted, per microbatch, in order (the last stage)
            return loss * self.weight

        single = len(self.torch_stages) == 1 and not registry.many_stages(name)  # torch takes one or a list
        self.schedule = cls(self.torch_stages[0] if single else self.torch_stages, microbatches,
                            loss_fn=weighted, scale_grads=False)

    def step(self, microbatches: list[tuple[torch.Tensor, torch.Tensor]], loss_weight: float,
             after_microbatch: Callable | None = None) -> torch.Tensor:
        """torch's schedule over the step; `after_microbatch(m, loss)` (see PipelineEngine.step) runs for
        every microbatch once it is over: torch owns the loop and calls nothing in between."""
        self.weight = loss_weight
        self.losses = []
        holds = set(self.stages)
        # the step's microbatches as they are, handed over once (no concatenation for torch to split again)
        args = [(x,) for x, _ in microbatches] if 0 in holds else None
        targets = [y for _, y in microbatches] if self.n_stages - 1 in holds else None
        losses: list[torch.Tensor] = []  # the last stage's weighted loss per microbatch, filled by torch
        self._run(args, targets, losses if targets is not None else None)
        if self.embed_group is not None:
            self._reduce_tied()
        if after_microbatch is not None:
            # (torch's first step also scores a microbatch to infer shapes: the step's own are the last ones)
            mine = self.losses[-len(microbatches):] if targets is not None else [None] * len(microbatches)
            for m, loss in enumerate(mine):
                after_microbatch(m, loss)
        return sum((loss.detach() / loss_weight for loss in losses), torch.zeros(()))

    def _run(self, arg_mbs, target_mbs, losses) -> None:
        """torch's `schedule.step` from its split onwards: what step does before its microbatch loop (each
        stage told it runs backward, its per-step state cleared), then the loop over microbatches as given."""
        for stage in self.torch_stages:
            stage.has_backward = self.schedule._has_backward
            stage.clear_runtime_states()
        self.schedule._step_microbatches(arg_mbs, None, target_mbs, losses, return_outputs=False)

    def _reduce_tied(self) -> None:
        if self.embed_group is None:
            return
        for s in (0, self.n_stages - 1):
            if s in self.stages and self.stages[s].wte is not None:
                w = self.stages[s].wte.weight
                if w.grad is None:
                    w.grad = torch.zeros_like(w)
                comm.all_reduce(w.grad, group=self.embed_group, tag="tied embedding grad")
