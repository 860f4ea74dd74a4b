"""`Parallel`: what `shardlab.parallel.build` returns, the one object that owns a training step.

The trainer, every bench suite and the test harnesses take a step through one call:

    out = par.step([(x, y), ...], max_norm=clip, global_tokens=N)   # -> StepResult(loss_sum, grad_norm, skipped)

(`global_tokens`: the tokens of the whole global batch; the step weights each microbatch's summed loss so the
gradient is their mean, `loss_weight`. A caller with its own weight passes it instead, as the second argument.)

(a microbatch is (x, y), or (x, y, doc_pos) with packed documents: `unpack`)

which is, in this order: `forward_backward` (the schedule; here the plain microbatch loop), `finish` (the
in-flight gradient collectives), the loss scaler's unscale and inf check, `clip_grad_norm_` (over every
group sharding gradients), the caller's verdict (the doctor's), `optimizer_step` unless the step is
skipped, `zero_grad`. The pieces stay public for the code that studies one of them alone.

Layers replace pieces of it rather than the trainer: a pipeline schedule is the step's executor (the
layer handle's `executor`: it runs `forward_backward`, `finish`, the norm and `eval_loss_sum`), a vocab-parallel loss replaces `loss_fn`, tensor parallelism adds its group to
`grad_norm_groups`. Everything else delegates to the data-parallel layer (`self.dp`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.model import moe
from shardlab.model.loss import cross_entropy
from shardlab.observe import timeline
from shardlab.parallel.layer import Layer, the_one
from shardlab.parallel.mesh import ParallelDims
from shardlab import precision

# the rows that compute through torch.autocast (precision.py); fp32 and converted rows run as they are
_AUTOCAST = {name: dt for name in precision.NAMES if (dt := precision.autocast_dtype(name)) is not None}


@dataclass
class StepResult:
    loss_sum: torch.Tensor  # the summed token loss of this rank's microbatches (detached)
    grad_norm: float  # the full gradient's L2 norm before clipping; nan when the scaler found an inf
    skipped: bool  # no optimizer update: an inf/nan gradient, or the verdict said so


class Parallel:
    def __init__(self, dims: ParallelDims, model: nn.Module, dp, optimizer, device: torch.device,
                 dtype: str = "fp32", layers: list[Layer] = (), params_total: int | None = None):
        self.dims, self.model, self.dp, self.optimizer, self.device = dims, model, dp, optimizer, device
        # the whole model's parameter count, counted before any layer split it (None: a caller's own build)
        self.params_total = params_total
        self.dtype = dtype
        self.layers = list(layers)  # the handles of the layers inside the dp layer, in the order applied
        # (logits, targets, reduction) -> loss: cross-entropy unless a layer replaces it (TP: vocab-parallel)
        self.loss_fn: Callable = the_one(self.layers, "loss_fn") or cross_entropy
        # Entered around each microbatch's forward loss *and* its backward (DTensor's loss_parallel must
        # cover both); a layer that needs one declares it, the plain step has none.
        self.loss_context: Callable = the_one(self.layers, "loss_context") or contextlib.nullcontext
        # (x, y[, doc_pos]) -> this rank's slice of each before forward (CP: the chunks of the sequence); None: whole.
        self.shard_batch: Callable | None = the_one(self.layers, "shard_batch")
        # Process groups across which ranks hold different parts of the gradient (the norm sums over them):
        # the dp layer's shard group when it shards gradients, then each layer's.
        self.grad_norm_groups: list = []
        shard = "dp_cp" if dims.cp > 1 else "dp_shard"  # under cp a sharding layer shards over dp_cp
        if dp.grads_are_sharded() and dims.size(shard) > 1:
            self.grad_norm_groups.append(dims.group(shard))
        self.grad_norm_groups += [dims.group(name) for layer in self.layers for name in layer.norm_groups]
        # Mixture of experts: the routers' auxiliary losses join each microbatch's backward (never the
        # reported loss), and their stats add up over the step's microbatches (model/moe.py).
        self.moe_layers = moe.moe_layers(model)
        self.moe_step: dict | None = None
        # The step's executor, when a layer runs the microbatches itself (the pipeline's schedule: parallel/pp/
        # pipeline.py), built last: it reads the above. Its placement says where each module runs (the doctor
        # names a stage and a rank by it); None: one stage, here.
        make = the_one(self.layers, "executor")
        self.executor = make(self) if make is not None else None
        self.placement = self.executor.placement if self.executor is not None else None

    def host_syncs(self) -> dict[str, int]:
        """Host syncs a step may make, by module prefix: the dp layer's (through its views) and every layer's
        own (parallel/layer.py), for the CUDA discipline check (shardlab.simulate)."""
        table = self.dp.host_syncs()
        for layer in self.layers:
            table.update(layer.host_syncs)
        return table

    def num_params(self) -> int:
        """The whole model's parameter count: the model as this rank holds it, plus what the layers moved
        to other ranks (EP's other experts)."""
        return self.model.num_params() + sum(layer.params_elsewhere for layer in self.layers)

    def layout(self) -> dict:
        """The layout this step runs (summary.json `layout`): the dp layer, every degree of the mesh."""
        return {"dp": self.dp.name, **self.dims.degrees, "ep": self.dims.ep}  # ep borrows dp ranks: no mesh dim

    def replica_sets(self) -> list:
        """What the doctor compares, across which ranks (doctor/replicas.py): the dp layer's set first,
        then each layer's, as the layers declared them through their dp views."""
        return self.dp.replica_sets()

    def layer(self, name: str) -> Layer | None:
        """The handle of layer `name` ("tp", "cp", "ep", "pp", ...), None when this layout has none."""
        return next((layer for layer in self.layers if layer.name == name), None)

    @property
    def module(self) -> nn.Module:
        """What forward is called on (the bare model wrapped by the data-parallel layer)."""
        return self.dp.module

    def autocast(self):
        if self.dtype not in _AUTOCAST:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_AUTOCAST[self.dtype])

    # --- the step ------------------------------------------------------------------------------------
    def forward_backward(self, microbatches: list, loss_weight: float,
                         after_backward: Callable | None = None) -> torch.Tensor:
        """Forward and backward of every microbatch; gradients are synchronised in the last backward.
        Each microbatch's loss is its summed token loss; backward runs on `loss * loss_weight`.
        `after_backward(i, (x, y), loss)` is called after each backward (loss detached, a plain tensor;
        under a pipeline, None on the ranks that do not hold the last stage). Returns the summed loss. A
        layer's executor (the pipeline's schedule) runs them instead, when there is one."""
        if self.shard_batch is not None:  # before any executor: pipeline stages hand on this rank's chunks
            microbatches = [self.shard_batch(*mb) for mb in microbatches]
        if self.executor is not None:
            return self.executor.forward_backward(microbatches, loss_weight, after_backward)
        total = torch.zeros((), device=self.device)
        self.moe_step = None
        last = len(microbatches) - 1
        for i, mb in enumerate(microbatches):
            # Set before the forward: own layers read it in backward, torch DDP already in forward.
            self.dp.set_requires_gradient_sync(i == last)
            x, y, side = unpack(mb)
            with self.loss_context():
                comm.set_phase("forward")
                with timeline.span("forward", cat="compute", micro=i), self.autocast():
                    loss = self.loss_fn(self.module(x, **side), y, reduction="sum")
                    train_loss = loss if not self.moe_layers else loss + self._moe_forward()
                comm.set_phase("backward")
                with timeline.span("backward", cat="compute", micro=i):
                    (train_loss * loss_weight).backward()
            loss = _plain(loss.detach())
            if after_backward is not None:
                after_backward(i, (x, y), loss)
            total += loss
        return total

    def loss_weight(self, global_tokens: int, factor: float = 1.0) -> float:
        """The weight of a microbatch's summed token loss that makes the step's gradient the mean over the
        `global_tokens` tokens of the global batch: the ranks that saw different tokens (dp x cp) each hold a
        share, which the dp layer averages, hence their count over the tokens. `factor`: a caller's correction
        (the doctor's for uneven data: W / active ranks, 0 for a shadow step)."""
        return self.dims.size("dp_cp") / global_tokens * factor

    def step(self, microbatches: list, loss_weight: float | None = None, max_norm: float = 0.0, *,
             global_tokens: int | None = None, weight_factor: float = 1.0,
             after_backward: Callable | None = None, after_forward_backward: Callable | None = None,
             scaler=None, verdict: Callable | None = None) -> StepResult:
        """One optimizer step over `microbatches` (see the module's docstring for the order).
        `global_tokens`: the tokens of the global batch; the loss weight is then `loss_weight(global_tokens,
        weight_factor)`, times the loss scale with a `scaler`. Or `loss_weight` as given (scale included).
        `after_backward(i, (x, y), loss)`: after each microbatch's backward. `after_forward_backward()`: once
        every backward ran, before the gradient collectives finish (the doctor launches its check there, so
        its all-gather travels while the last buckets are reduced). `scaler`: a dynamic loss scaler (fp16):
        gradients are unscaled and checked, an inf skips the update and moves the scale. `verdict(loss_sum,
        grad_norm, found_inf) -> bool`: True skips the update (the same answer on every rank)."""
        if loss_weight is None:
            if global_tokens is None:
                raise TypeError("Parallel.step needs global_tokens (or a loss_weight)")
            loss_weight = self.loss_weight(global_tokens, weight_factor)
            if scaler is not None:
                loss_weight *= scaler.scale
        loss_sum = self.forward_backward(microbatches, loss_weight, after_backward)
        if after_forward_backward is not None:
            after_forward_backward()
        comm.set_phase("optimizer")
        with timeline.span("optimizer", cat="optim"):
            self.finish()
            found_inf = scaler is not None and self.unscale_and_check(1.0 / scaler.scale)
            grad_norm = float("nan") if found_inf else self.clip_grad_norm_(max_norm)
            skipped = bool(found_inf)
            if verdict is not None:
                skipped = bool(verdict(loss_sum, grad_norm, found_inf)) or skipped
            if not skipped:
                self.optimizer_step()
            if scaler is not None:
                scaler.update(skipped)
            self.zero_grad()
        return StepResult(loss_sum, grad_norm, skipped)

    def _moe_forward(self) -> torch.Tensor:
        """This microbatch's auxiliary loss term; its stats added to the step's."""
        stats = moe.collect(self.moe_layers)
        # per layer too (rows of the expert-load heat-map, train/moe_heatmap.py)
        stats["tokens_per_layer_expert"] = torch.stack([m.stats["tokens_per_expert"] for m in self.moe_layers])
        if self.moe_step is None:
            self.moe_step = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in stats.items()}
        else:
            for k, v in stats.items():
                self.moe_step[k] = self.moe_step[k] + v
        return moe.loss_term(self.moe_layers)

    @torch.no_grad()
    def eval_loss_sum(self, x: torch.Tensor, y: torch.Tensor, doc_pos: torch.Tensor | None = None) -> torch.Tensor:
        """Summed token loss of one batch (this rank's chunks under cp), no gradients (evaluation, in the
        parameters' precision). `doc_pos`: packed documents' positions, as in a microbatch."""
        mb = (x, y) if doc_pos is None else (x, y, doc_pos)
        if self.shard_batch is not None:
            mb = self.shard_batch(*mb)
        x, y, side = unpack(mb)
        if self.executor is not None:
            return self.executor.eval_loss_sum(x, y, side.get("doc_pos"))
        with self.loss_context():
            return _plain(self.loss_fn(self.module(x, **side), y, reduction="sum"))

    def finish(self) -> None:
        if self.executor is not None:
            return self.executor.finish()
        self.dp.finish_backward()

    def unscale_and_check(self, inv_scale: float) -> bool:
        return self.dp.unscale_and_check(inv_scale)

    def clip_grad_norm_(self, max_norm: float) -> float:
        if self.executor is not None:
            return self.executor.clip_grad_norm_(max_norm)
        return self.dp.clip_grad_norm_(max_norm, self.grad_norm_groups)

    def optimizer_step(self) -> None:
        self.dp.optimizer_step(self.optimizer)
        self._update_expert_bias()

    def _update_expert_bias(self) -> None:
        """Auxiliary-loss-free balancing (model/moe.py): each MoE layer's bias moves against the step's load,
        counted over the global batch (one all-reduce of layers x E counts over the data ranks), so every
        rank moves its copy alike and an ep/dp run equals one device."""
        layers = [m for m in self.moe_layers if m.bias_update > 0]
        if not layers or self.moe_step is None:
            return
        counts = self.moe_step["tokens_per_layer_expert"].double().clone()
        self.sum_over_data(counts, tag="moe.expert_bias")
        for m, load in zip(self.moe_layers, counts):
            if m.bias_update > 0:
                m.update_bias(load)

    def zero_grad(self) -> None:
        self.dp.zero_grad(self.optimizer)

    # --- reductions over the right groups ------------------------------------------------------------
    def sum_over_data(self, t: torch.Tensor, tag: str) -> torch.Tensor:
        """Sum a per-rank partial (a loss sum, a token count) over the ranks that saw different data:
        dp x cp. Ranks of one tensor-parallel group hold the same value and are not added twice."""
        if self.dims.size("dp_cp") > 1:
            comm.all_reduce(t, group=self.dims.group("dp_cp"), tag=tag)
        return t

    # --- state (delegated to the data-parallel layer) ------------------------------------------------
    def full_parameters(self) -> dict[str, torch.Tensor]:
        return self.dp.full_parameters()

    def model_state_dict(self) -> dict:
        return self.dp.model_state_dict()

    def load_model_state_dict(self, sd: dict) -> None:
        self.dp.load_model_state_dict(sd)

    def optim_state_dict(self) -> dict:
        return self.dp.optim_state_dict(self.optimizer)

    def load_optim_state_dict(self, sd: dict) -> None:
        self.dp.load_optim_state_dict(self.optimizer, sd)

    def state_bytes(self) -> dict:
        return self.dp.state_bytes(self.optimizer)


def unpack(mb: tuple) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """A microbatch -> (x, y, the model's side inputs as keywords). A microbatch is (x, y), or (x, y, doc_pos)
    with packed documents (data.doc_mask): each token's position inside its document, (b, seq) like x, which
    every stage's forward takes as `doc_pos=` (model/documents.py)."""
    x, y, *rest = mb
    doc_pos = rest[0] if rest else None
    return x, y, ({} if doc_pos is None else {"doc_pos": doc_pos})


def _plain(t: torch.Tensor) -> torch.Tensor:
    """A loss as a plain tensor: DTensor TP's loss is a replicated DTensor (the same on every tp rank)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
