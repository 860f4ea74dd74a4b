"""The torch-native strategies: DistributedDataParallel, FSDP2 `fully_shard`, ZeroRedundancyOptimizer.

They are the reference the own strategies are tested against and benchmarked with. Their collectives
run inside torch, so comm.py sees only what a DDP comm hook exposes (see docs/trace.md).
"""
from __future__ import annotations

import inspect

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from shardlab.model import anatomy
from shardlab.optim import dtensor_pieces
from shardlab.optim.serving import HANDS
from shardlab.parallel import materialize
from shardlab.parallel.dp.base import Strategy, _local


class TorchDDP(Strategy):

    # torch DDP (torch-ddp, torch-zero1) rebuilds its buckets once, in the first steps, copying rank 0's
    # order through the host (torch's own code: the torch-native layers are judged by torch's modules)
    HOST_SYNCS = {**Strategy.HOST_SYNCS, "torch.nn.parallel.distributed": 1}
    name = "torch-ddp"

    def wrap(self, model: nn.Module) -> nn.Module:
        self.model = model
        self.module = DistributedDataParallel(
            model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
            process_group=self.group, bucket_cap_mb=self.pcfg.bucket_mb,
            find_unused_parameters=self.pcfg.find_unused)
        from shardlab.observe import ddp_hook, timeline
        if self.pcfg.compress == "powersgd":
            register_powersgd(self.module, self.group, self.pcfg.powersgd_rank)
        elif timeline.enabled():  # trace: route the bucket all-reduces through comm.py (same arithmetic)
            ddp_hook.register(self.module, self.group, self.pcfg.comm_dtype)
        elif self.pcfg.comm_dtype != "fp32":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
            self.module.register_comm_hook(self.group, hook[self.pcfg.comm_dtype])
        return self.module

    def set_requires_gradient_sync(self, requires: bool) -> None:
        # What `no_sync()` toggles. torch DDP reads it in forward (it prepares the reducer there), so it
        # must be set before the forward of the microbatch whose backward it concerns.
        self.module.require_backward_grad_sync = requires


def register_powersgd(ddp_module, group, rank: int):
    """torch's powerSGD_hook, set as the own PowerSGD runs (parallel/dp/powersgd.py): error feedback and
    warm start on, every matrix compressed (min_compression_rate=0; torch's default 2 would send small
    matrices uncompressed). torch requires start_powerSGD_iter >= 2 with error feedback, so its first two
    steps are plain all-reduces. Its collectives run inside the hook, not through comm.py."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=rank, start_powerSGD_iter=2,
                                   min_compression_rate=0, use_error_feedback=True, warm_start=True)
    ddp_module.register_comm_hook(state, powersgd.powerSGD_hook)
    return state


class TorchZero1(TorchDDP):
    """DDP for the gradients + ZeroRedundancyOptimizer: each rank keeps 1/N of the Adam state and
    broadcasts its updated parameters after the step."""
    name = "torch-zero1"

    def make_optimizer(self, factory):
        """Each rank steps whole parameters (ZeroRedundancyOptimizer partitions the list, not the tensors):
        an optimizer that needs whole matrices is served as it is."""
        from torch.distributed.optim import ZeroRedundancyOptimizer

        self.serve_optimizer(factory)
        template = factory(list(self.model.named_parameters()))  # to learn the class, groups, defaults
        groups = [{k: v for k, v in g.items()} for g in template.param_groups]
        first, rest = groups[0], groups[1:]
        params = first.pop("params")
        accepted = inspect.signature(type(template).__init__).parameters  # defaults hold extra keys
        opt = ZeroRedundancyOptimizer(params, optimizer_class=type(template), process_group=self.group,
                                      **{k: v for k, v in first.items() if k in accepted})
        for g in rest:
            opt.add_param_group(g)
        return opt

    # ZeroRedundancyOptimizer has no DCP state dict: each rank holds the Adam state of the parameters it owns
    # and nothing else. We expose exactly that as the standard optimizer layout (`state.<fqn>.<key>` as plain
    # full tensors + `param_groups`): each `state.<fqn>.*` key then exists on exactly one rank (its owner), so
    # DCP writes it once, from the owner, with no gathering; on load each owner asks DCP for the keys of the
    # parameters it owns under the new partition.
    def materialize_optimizer(self, optimizer) -> None:
        super().materialize_optimizer(optimizer.optim)  # the local optimizer over this rank's partition

    def optim_state_dict(self, optimizer) -> dict:
        names = {p: n for n, p in self.model.named_parameters()}
        return {"state": {names[p]: dict(st) for p, st in optimizer.optim.state.items()},
                "param_groups": [{**{k: v for k, v in g.items() if k != "params"},
                                  "params": [names[p] for p in g["params"]]} for g in optimizer.param_groups]}

    def load_optim_state_dict(self, optimizer, sd: dict) -> None:
        # The state tensors were loaded in place (the template shared them); only the hyperparameters remain.
        # ZeroRedundancyOptimizer copies its global param_groups' hyperparameters to the local optimizer each step.
        for group, saved in zip(optimizer.param_groups, sd["param_groups"]):
            group.update({k: v for k, v in saved.items() if k != "params"})

    def state_bytes(self, optimizer) -> dict:
        sb = super().state_bytes(optimizer.optim)
        return sb


class TorchFSDP2(Strategy):
    """FSDP2: one unit per transformer block plus the root (embeddings, final norm, tied head).
    With parallel.dp_replicate > 1, HSDP on the (dp_replicate, dp_shard) mesh."""
    name = "torch-fsdp2"
    optimizer_hands = HANDS["torch-fsdp2"].phrase  # optim/serving.py

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        mesh = None
        if self.dims.mesh is not None and self.dims.cp > 1:
            # context parallelism: the cp ranks hold replicas whose gradients must be averaged too, so FSDP2
            # shards over the flattened dp x cp mesh (as torchtitan does); HSDP with cp is refused (rules.py)
            mesh = self.dims.submesh("dp_cp")
        elif self.dims.mesh is not None:
            # HSDP on the 2-D (dp_replicate, dp_shard) mesh: FSDP2 reduce-scatters in the shard group and
            # all-reduces the shards across replicas; a 1-D mesh is plain FSDP
            hsdp = self.dims.dp_replicate > 1
            mesh = self.dims.mesh["dp_replicate", "dp_shard"] if hsdp else self.dims.mesh["dp_shard"]
        kw = {"mesh": mesh, "reshard_after_forward": self.pcfg.reshard_after_forward}
        if getattr(self.pcfg, "offload", "none") == "params":  # CUDA only (config refuses it without)
            from torch.distributed.fsdp import CPUOffloadPolicy
            kw["offload_policy"] = CPUOffloadPolicy(pin_memory=True)  # shards, grads, optimizer on the host
        for _, block in anatomy.of(model).named_blocks(model):
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        # its DTensor shards, described from their placements (optim/dtensor_pieces.py): Muon gathers them
        self.optimizer_hands = dtensor_pieces.pieces(type(self).optimizer_hands, model,
                                                     mesh.mesh_dim_names if mesh is not None else None)
        if any(materialize.is_unallocated(p) for p in model.parameters()):  # meta-built: allocate the shards
            materialize.to_empty_keeping_buffers(model, torch.device("cpu") if "offload_policy" in kw else self.device)
        self.model = self.module = model
        return model

    def set_requires_gradient_sync(self, requires: bool) -> None:
        # Off: no reduce-scatter in that backward, unsharded gradients accumulate locally.
        self.module.set_requires_gradient_sync(requires)

    def grads_are_sharded(self) -> bool:
        return True

    def grad_tensors(self):
        return (_local(p.grad) for p in self.model.parameters() if p.grad is not None)

    def full_parameters(self):
        return {n: p.detach().full_tensor() for n, p in self.model.named_parameters()}
