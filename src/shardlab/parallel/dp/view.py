"""The data-parallel layer seen through another layer: the base of the dp views.

A layer applied inside data parallelism may need the dp layer seen differently by the step, the checkpoint
and the doctor (tensor parallelism: the bare model's full values, SP's gradient sum over tp, TP-shaped
checkpoint state; expert parallelism: the experts' gradients, norm and state; local SGD / DiLoCo: a periodic
synchronisation instead of the per-step all-reduce). Its handle's `dp_view` (parallel/layer.py) puts a view
in front of the dp layer. `DPView` forwards the whole interface of `base.Strategy`, member by member, so a
reader sees here what a view can be asked and in each subclass exactly what it changes; nothing else passes
through (no `__getattr__`).
"""
from __future__ import annotations

import torch


class DPView:
    def __init__(self, dp):
        self.dp = dp  # the dp layer, or the view of a layer applied before (nearer the dp layer)

    # --- identity and what the composition set ------------------------------------------------------------
    name = property(lambda self: self.dp.name)
    pcfg = property(lambda self: self.dp.pcfg)
    dims = property(lambda self: self.dp.dims)
    device = property(lambda self: self.dp.device)
    group = property(lambda self: self.dp.group)
    model = property(lambda self: self.dp.model)  # the bare model part (FQNs are its parameters' names)
    module = property(lambda self: self.dp.module)  # what forward is called on
    shards_within_replica = property(lambda self: self.dp.shards_within_replica)

    def host_syncs(self) -> dict[str, int]:
        return self.dp.host_syncs()

    # --- the step ---------------------------------------------------------------------------------------
    def make_optimizer(self, factory) -> torch.optim.Optimizer:
        return self.dp.make_optimizer(factory)

    def set_requires_gradient_sync(self, requires: bool) -> None:
        self.dp.set_requires_gradient_sync(requires)

    def sync_context(self, is_last: bool):
        return self.dp.sync_context(is_last)

    def finish_backward(self) -> None:
        self.dp.finish_backward()

    def grad_tensors(self):
        return self.dp.grad_tensors()

    def named_grads(self) -> dict[str, torch.Tensor]:
        return self.dp.named_grads()

    def grads_are_sharded(self) -> bool:
        return self.dp.grads_are_sharded()

    def unscale_and_check(self, inv_scale: float) -> bool:
        return self.dp.unscale_and_check(inv_scale)

    def local_grad(self, fqn: str):
        return self.dp.local_grad(fqn)

    def clip_grad_norm_(self, max_norm: float, groups: list | None = None, exclude: tuple = (), **kw) -> float:
        return self.dp.clip_grad_norm_(max_norm, groups, exclude=exclude, **kw)

    def optimizer_step(self, optimizer) -> None:
        self.dp.optimizer_step(optimizer)

    def zero_grad(self, optimizer) -> None:
        self.dp.zero_grad(optimizer)

    # --- state ------------------------------------------------------------------------------------------
    def full_parameters(self) -> dict[str, torch.Tensor]:
        return self.dp.full_parameters()

    def model_state_dict(self) -> dict:
        return self.dp.model_state_dict()

    def load_model_state_dict(self, sd: dict) -> None:
        self.dp.load_model_state_dict(sd)

    def materialize_optimizer(self, optimizer) -> None:
        self.dp.materialize_optimizer(optimizer)

    def sync_state_dict(self) -> dict | None:
        return self.dp.sync_state_dict()

    def optim_state_dict(self, optimizer) -> dict:
        return self.dp.optim_state_dict(optimizer)

    def load_optim_state_dict(self, optimizer, sd: dict) -> None:
        self.dp.load_optim_state_dict(optimizer, sd)

    def state_bytes(self, optimizer) -> dict:
        return self.dp.state_bytes(optimizer)

    def params_held(self) -> int:
        return self.dp.params_held()

    # --- a periodic synchronisation (parallel/sync/periodic.py) and the doctor ---------------------------------
    def replicas_step_alone(self) -> list:
        return self.dp.replicas_step_alone()

    def params_updated(self) -> None:
        self.dp.params_updated()

    def replicated_parameters(self) -> list:
        return self.dp.replicated_parameters()

    def replica_sets(self, seen=None) -> list:
        return self.dp.replica_sets(seen or self)

    # --- the run's lifecycle (base.Strategy: no-ops unless a view fills them in) --------------------------
    def data_slice(self) -> tuple[int, int]:
        return self.dp.data_slice()

    def on_start(self, train_state, start_step: int, run_dir=None, resume=None) -> int:
        return self.dp.on_start(train_state, start_step, run_dir, resume)

    def before_step(self, train_state) -> None:
        self.dp.before_step(train_state)

    def after_step(self, train_state) -> None:
        self.dp.after_step(train_state)

    def summary(self) -> dict:
        return self.dp.summary()
