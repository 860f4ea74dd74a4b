"""The data-parallel layer seen through tensor parallelism: what the step, checkpoints and the doctor read
from `par.dp` must be the bare model's values, not one TP rank's pieces.

The tp layer's handle (`Layer.dp_view`, parallel/tp/own.py `tp_layer`) puts this in front of the dp layer (so
the trainer's `strategy`, the checkpoint state and the doctor all see it); what it does not change it
forwards as every dp view does (parallel/dp/view.py).
"""
from __future__ import annotations

import torch

from shardlab.doctor.replicas import ReplicaSet
from shardlab.parallel.dp.view import DPView
from shardlab.parallel.tp import state as tp_state


class TensorParallelDP(DPView):
    def __init__(self, dp, tp, tp_group, tp_ranks: list[int]):
        super().__init__(dp)
        self.tp, self.tp_group, self.tp_ranks = tp, tp_group, tp_ranks

    # --- what the doctor compares ---
    def tp_replicated_parameters(self) -> list[tuple[str, torch.Tensor]]:
        """What tensor parallelism leaves whole on every rank of a TP group (LayerNorms, the row-parallel
        layers' biases, the position table): the same on every TP rank when everything works, since their
        gradients are computed from replicated activations, or summed over tp under sequence parallelism."""
        return [(n, p) for n, p in self.dp.replicated_parameters() if not self.tp.is_sharded(n)]

    def replica_sets(self, seen=None) -> list[ReplicaSet]:
        """The dp layer's sets, and within each TP group what TP keeps whole."""
        return self.dp.replica_sets(seen or self) + [
            ReplicaSet("tp", self.tp_ranks, self.tp_group,
                       parameters=lambda fragments=None: self.tp_replicated_parameters())]

    # --- the step ---
    def finish_backward(self) -> None:
        """The dp layer's reduction first, then SP's sum over tp of the replicated parameters' partial
        gradients, on the gradients as the dp layer holds them (zero: its shards). Both are sums over
        orthogonal groups, so the order does not change the result; clipping comes after both."""
        self.dp.finish_backward()
        self.tp.finish_backward(self.dp.named_grads())

    def clip_grad_norm_(self, max_norm: float, groups: list | None = None, exclude: tuple = ()) -> float:
        """The single-device norm under TP x DP. Across tp, weights are split but LayerNorms, row biases
        and positions are copies: the dp layer sums squares over every group (its own dp_shard, tp, ...)
        in two sums, split and copied, and divides the copied one by the tp size (Strategy._clip_mixed).
        One all-reduce per group, as without TP; the dp layer's sharding needs no special case. `exclude`:
        as the dp layer's (a pipeline's tied embedding held again by its last stage)."""
        return self.dp.clip_grad_norm_(max_norm, groups, exclude=exclude,
                                       replicated=(self.tp_group, self.tp.is_sharded))

    # --- state: the bare model's names and values ---
    def full_parameters(self) -> dict[str, torch.Tensor]:
        return self.tp.full_values(self.dp.full_parameters())  # the dp layer's full values are tp pieces

    def _state_layer(self) -> str:
        """Who shapes the checkpoint state. "dp": DTensor TP's parameters are DTensors already (FSDP2 makes
        them 2-D), the dp layer's state dicts are right as they are. "tp": own TP under a replicating dp
        layer places its pieces as DTensors over tp. "tp x zero": own TP under zero, each rank's zero shard
        of its TP piece as a block of the bare model's tensor (parallel/tp/state.py)."""
        if self.tp.impl != "own":
            return "dp"
        return "tp x zero" if self.dp.grads_are_sharded() else "tp"

    def model_state_dict(self) -> dict:
        layer = self._state_layer()
        if layer == "tp x zero":
            return tp_state.model_state_dict(self.dp, self.tp)
        return self.tp.state_dict() if layer == "tp" else self.dp.model_state_dict()

    def load_model_state_dict(self, sd: dict) -> None:
        layer = self._state_layer()
        if layer == "tp x zero":
            tp_state.load_model_state_dict(self.dp, self.tp, sd)
        elif layer == "tp":
            self.tp.load_state_dict(sd)
        else:
            self.dp.load_model_state_dict(sd)

    def optim_state_dict(self, optimizer) -> dict:
        layer = self._state_layer()
        if layer == "tp x zero":
            return tp_state.optim_state_dict(self.dp, self.tp, optimizer)
        return self.tp.optim_state_dict(optimizer) if layer == "tp" else self.dp.optim_state_dict(optimizer)

    def load_optim_state_dict(self, optimizer, sd: dict) -> None:
        layer = self._state_layer()
        if layer == "tp x zero":
            tp_state.load_optim_state_dict(self.dp, self.tp, optimizer, sd)
        elif layer == "tp":
            self.tp.load_optim_state_dict(optimizer, sd)
        else:
            self.dp.load_optim_state_dict(optimizer, sd)
