"""The data-parallel layer seen through tensor parallelism: what the step, checkpoints and the doctor read
from `par.dp` must be the bare model's values, not one TP rank's pieces.

`Parallel.use_tensor_parallel` puts this in front of the dp layer (so the trainer's `strategy`, the
checkpoint state and the doctor all see it); everything not named here is the dp layer's own.
"""
from __future__ import annotations

import torch


class TensorParallelDP:
    def __init__(self, dp, tp, tp_group):
        self.__dict__.update(dp=dp, tp=tp, tp_group=tp_group)

    def __getattr__(self, name):  # only for what this class does not define
        return getattr(self.__dict__["dp"], name)

    def __setattr__(self, name, value):
        setattr(self.dp, name, value)

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

    def _tp_owns_state(self) -> bool:
        """Own TP under a replicating dp layer: TP places the state as DTensors over tp (the dp layer would
        give the plain local pieces). DTensor TP's parameters are DTensors already, and FSDP2 makes them
        2-D: the dp layer's state dicts are right as they are."""
        if self.tp.impl != "own":
            return False
        if self.dp.grads_are_sharded() and self.dp.dims.dp_size > 1:
            raise NotImplementedError(f"checkpoints of own tensor parallelism under {self.dp.name} are not "
                                      "implemented yet; use parallel.dp=ddp, or parallel.tp_impl=dtensor with "
                                      "parallel.dp=torch-fsdp2")
        return True

    def model_state_dict(self) -> dict:
        return self.tp.state_dict() if self._tp_owns_state() else self.dp.model_state_dict()

    def load_model_state_dict(self, sd: dict) -> None:
        if self._tp_owns_state():
            self.tp.load_state_dict(sd)
        else:
            self.dp.load_model_state_dict(sd)

    def optim_state_dict(self, optimizer) -> dict:
        if self._tp_owns_state():
            return self.tp.optim_state_dict(optimizer)
        return self.dp.optim_state_dict(optimizer)

    def load_optim_state_dict(self, optimizer, sd: dict) -> None:
        if self._tp_owns_state():
            self.tp.load_optim_state_dict(optimizer, sd)
        else:
            self.dp.load_optim_state_dict(optimizer, sd)
