"""Own sharded data parallelism: ZeRO stages 1, 2 and 3 (zero3 = FSDP FULL_SHARD; with
`parallel.reshard_after_forward=false` it behaves like SHARD_GRAD_OP). See docs/zero.md.

What each stage keeps per rank (Adam, fp32, Ψ parameters, N ranks) and what it sends:

    zero1  full params, full grads, 1/N of the optimizer state     8Ψ + 8Ψ/N   reduce-scatter grads (last
                                                                               microbatch), all-gather params
    zero2  full params, 1/N grads and optimizer state              4Ψ + 12Ψ/N  reduce-scatter grads (every
                                                                               microbatch), all-gather params
    zero3  1/N of everything; params all-gathered per unit          16Ψ/N       all-gather before forward and
           before forward and again before backward                            backward, reduce-scatter grads

All three use the flat-shard layout of `shard.py`: the optimizer only ever sees this rank's shards
(`(chunk, *rest)` tensors, keyed by the model's FQNs), so the optimizer state is sharded in every stage.

HSDP (`parallel.dp_replicate` R > 1): the data-parallel ranks form an R x S mesh (dp_replicate, dp_shard).
Every collective above runs in the shard group (S ranks, N = S in the formulas); the reduced gradient
shard is then all-reduced across the replicate group (R ranks holding the same shard), once per step,
on the last microbatch (zero2/zero3 accumulate the shard locally until then).
"""
from __future__ import annotations

import collections
import functools

import torch
import torch.nn as nn
from torch.autograd.graph import register_multi_grad_hook

from shardlab import comm
from shardlab.errors import ConfigError
from shardlab.optim.serving import HANDS, Pieces, Split
from shardlab.parallel.dp.base import Strategy
from shardlab.parallel.dp.shard import MAX_REDUCE_SCATTERS_IN_FLIGHT, FlatParamUnit, build_units
from shardlab.parallel import materialize
from shardlab.parallel.dp import zero_state
from shardlab import precision



class _Zero(Strategy):
    shard_params = False  # zero3: parameters sharded at rest
    optimizer_hands = HANDS["zero"].phrase  # optim/serving.py
    keep_full_grads = False  # zero1: full gradients live (and accumulate) until the step

    def wrap(self, model: nn.Module) -> nn.Module:
        if self.dims.dp_replicate > 1 and self.dims.dp_shard == 1:
            raise ValueError(f"{self.name} with dp_shard=1 has nothing to shard: use ddp, or set "
                             "parallel.dp_replicate to a divisor of the data-parallel size")
        materialize.move_allocated(model, self.device)  # a meta-built part: its shards are allocated below
        if self.dims.mesh is None and comm.world_size() > 1:
            self.dims.build_mesh(self.device.type)  # DTensor state dicts need the dp_shard mesh
        self.world = comm.world_size(self.group)  # N of the formulas: the shard group
        # HSDP: the ranks holding the same shard; None when every data-parallel rank shards
        self.replicate_group = self.dims.group("dp_replicate") if self.dims.dp_replicate > 1 else None
        self.dp_size = self.world * self.dims.dp_replicate  # gradients are averaged over all of them
        self._away_grads: dict = {}  # fqn -> gradient on the device of a shard offloaded elsewhere
        self.param_home = None  # zero3 with parallel.offload=params: where the parameter shards live
        if self.shard_params and getattr(self.pcfg, "offload", "none") == "params":
            from shardlab.parallel.dp.offload import tier
            self.param_home = tier(self.pcfg.offload_to)
        self.units: list[FlatParamUnit] = build_units(model, self.pcfg.wrap, self.group, self.shard_params,
                                                      self.param_home, self.device)
        self.infos = sorted((i for u in self.units for i in u.infos), key=_order(model))
        rows = {i.fqn: i.rows for i in self.infos}  # what the optimizer is handed: rows of these, described
        self.optimizer_hands = Pieces(type(self).optimizer_hands, lambda fqn: None if fqn not in rows else
                                      Split(self.group, 0, rows[fqn]))  # (optim/serving.py)
        self.rs_dtype = precision.wire_dtype(self.pcfg.comm_dtype)  # fp32: the gradient's own dtype
        self._sync = True  # reduce gradients in the next backward
        self._last = True  # that backward is the step's last: HSDP all-reduces the shards after it
        self._pending: collections.deque = collections.deque()  # reduce-scatters in flight
        self._replica_pending: list = []  # HSDP: all-reduces across replicas in flight
        # Gradients arrived per unit since its last reduction. Reset when the unit is reduced (not at
        # a forward), so several microbatches' forwards may be in flight before their backwards.
        self._ready: dict[FlatParamUnit, int] = {u: 0 for u in self.units}
        self._callback_queued = False
        for unit in self.units:
            for info in unit.infos:
                if info.param.requires_grad:
                    info.param.register_post_accumulate_grad_hook(functools.partial(self._grad_ready, unit))
        if self.keep_full_grads:
            self._attach_full_grads()
        self.model = self.module = model
        return model

    shards_within_replica = True

    def replicas_step_alone(self) -> list:
        """HSDP under local SGD / DiLoCo (parallel/sync/periodic.py): each replica group steps on its own gradient,
        so the per-step all-reduce across replicas goes and the reduce-scatter averages over the shard group
        only; the replicas meet in the periodic outer synchronisation instead, on this rank's shards (what its
        optimizer steps)."""
        self.replicate_group = None
        self.dp_size = self.world
        return [(i.fqn, i.shard) for i in self.infos]

    def params_updated(self) -> None:
        if getattr(self, "host_step", None) is not None:  # the masters follow what was written to the shards
            self.host_step.refresh()
        if not self.shard_params:  # zero1/2 keep full parameters: the updated shards gathered again
            self._gather_params()

    def local_grad(self, fqn: str):
        """The gradient of this rank's dim-0 shard of `fqn` (what the optimizer steps)."""
        info = next((i for i in self.infos if i.fqn == fqn), None)
        return None if info is None else self._grad_of(info)

    def _grad_of(self, info):
        """A shard's gradient: its `.grad`, or, for an offloaded shard before the step, its device copy."""
        g = info.shard.grad
        return g if g is not None else self._away_grads.get(info.fqn)

    # Tests: run the accelerator's optimizer offload (host masters, copies both ways: host_step.py) on a CPU,
    # the CPU standing in for the device, so its arithmetic is checked where no accelerator is.
    host_step_on_cpu = False

    def make_optimizer(self, factory):
        """The optimizer updates this rank's shards only: that is what shards the optimizer state.

        parallel.offload=optimizer: with the parameters on an accelerator, the optimizer steps host master
        copies of the shards (ZeRO-Offload: host_step.py), its state in host memory or in files; on a CPU
        the host is the device, so it steps the shards themselves, its state in memory-mapped files
        (offload_to=disk: offload.py) or where it is (host: nothing to move). With offload=params the
        optimizer follows the shards it updates (on the host tier Adam's state is created where they are)."""
        self.serve_optimizer(factory)
        self.offload = self.host_step = None
        offload = getattr(self.pcfg, "offload", "none")
        if offload == "optimizer" and (self.device.type != "cpu" or self.host_step_on_cpu):
            if getattr(self.pcfg, "fault_tolerant", False):
                # a heal broadcasts the optimizer state over the replicas' (NCCL) group from the device
                raise ConfigError("parallel.offload=optimizer with parallel.fault_tolerant=true on an accelerator: "
                                  "a heal sends the optimizer state from the device, and offload keeps it on the "
                                  "host; use one of them")
            from shardlab.parallel.dp.host_step import HostStep
            self.host_step = HostStep(self.units, self.device, self.pcfg.offload_to)
            return factory([(i.fqn, self.host_step.master[i.fqn]) for i in self.infos])
        if self.pcfg.offload_to == "disk" and offload in ("optimizer", "params"):
            from shardlab.parallel.dp.offload import DiskOffload
            self.offload = DiskOffload()
        return factory([(i.fqn, i.shard) for i in self.infos])

    def stepped(self, info):
        """The tensor the optimizer updates for `info`: its host master under ZeRO-Offload on an
        accelerator, else the shard itself (its optimizer state is keyed by it)."""
        return self.host_step.master[info.fqn] if getattr(self, "host_step", None) is not None else info.shard

    # --- backward: reduce-scatter each unit's gradients as soon as they are all there -------------------
    def set_requires_gradient_sync(self, requires: bool) -> None:
        self._sync = requires or not self.keep_full_grads  # zero2/3 reduce every microbatch (docs/zero.md)
        self._last = requires  # sync is switched on for the step's last backward only

    def _grad_ready(self, unit: FlatParamUnit, param: torch.Tensor) -> None:
        if not self._sync:
            return
        if not self._callback_queued:  # once per backward: flush what this backward left partial
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)
            self._callback_queued = True
        self._ready[unit] += 1
        if self._ready[unit] == sum(i.param.requires_grad for i in unit.infos):
            self._reduce(unit)

    def _reduce(self, unit: FlatParamUnit) -> None:
        while len(self._pending) >= MAX_REDUCE_SCATTERS_IN_FLIGHT:
            self._finish_reduce()
        grads = [i.param.grad for i in unit.infos]
        handle, out, buf = unit.start_reduce_scatter(grads, self.rs_dtype or unit.infos[0].param.dtype)
        if not self.keep_full_grads:
            for i in unit.infos:
                i.param.grad = None  # packed into the reduce-scatter buffer: the full gradient can go
        self._ready[unit] = 0
        self._pending.append((unit, handle, out, buf, self._last))
        self._after_reduce(unit)

    def _after_reduce(self, unit: FlatParamUnit) -> None:
        """zero3 reshards here: the unit's backward is over."""

    def _finish_reduce(self) -> None:
        unit, handle, out, _, last = self._pending.popleft()
        handle.wait()
        with torch.no_grad():
            grad = out.to(unit.infos[0].param.dtype).div_(self.dp_size)  # average over the data-parallel ranks
            if self.keep_full_grads:  # zero1: the reduced rows land in this rank's rows of the full gradient
                def land(unit=unit, grad=grad):
                    for info, g in zip(unit.infos, unit.shard_views(grad)):
                        info.shard.grad.copy_(g)
                self._all_reduce_replicas(unit, grad, then=land)  # zero1 reduces on the last microbatch only
                return
            if unit.grad_shard is None:
                unit.grad_shard = grad
                for info, g in zip(unit.infos, unit.shard_views(grad)):
                    if g.device == info.shard.device:
                        info.shard.grad = g
                    else:  # an offloaded shard (host, disk): torch refuses a .grad on another device, so
                        # the gradient waits on the device (clipping reads it there) until `_grads_home`
                        self._away_grads[info.fqn] = g
            else:
                unit.grad_shard.add_(grad)  # gradient accumulation happens in the shard
            if last:
                self._all_reduce_replicas(unit, unit.grad_shard)

    def _all_reduce_replicas(self, unit: FlatParamUnit, shard: torch.Tensor, then=None) -> None:
        """HSDP: sum this (already averaged) gradient shard, in place, over the ranks holding the same
        shard, in the communication dtype like the reduce-scatter before it; `then()` once it is summed.
        Launched asynchronously (backward goes on), completed in `finish_backward`."""
        if self.replicate_group is None:
            if then is not None:
                then()
            return
        buf = shard if self.rs_dtype in (None, shard.dtype) else shard.to(self.rs_dtype)
        handle = comm.all_reduce(buf, group=self.replicate_group, async_op=True, tag=f"ar:{unit.name}")
        self._replica_pending.append((handle, buf, shard, then))

    def _finish_replicas(self) -> None:
        for handle, buf, shard, then in self._replica_pending:
            handle.wait()
            with torch.no_grad():
                if buf is not shard:
                    shard.copy_(buf)
                if then is not None:
                    then()
        self._replica_pending.clear()

    def _on_backward_end(self) -> None:
        self._callback_queued = False
        self._flush_partial_units()

    def _flush_partial_units(self) -> None:
        """Units some of whose parameters got no gradient in this backward (unused in its forward) are
        reduced at its end, with zeros for the missing ones, so every rank issues the same collectives
        in the same order."""
        for unit in self.units:
            if self._ready[unit]:
                self._reduce(unit)

    def finish_backward(self) -> None:
        self._flush_partial_units()
        while self._pending:
            self._finish_reduce()
        self._finish_replicas()

    # --- gradients as the optimizer and the clipping see them: this rank's shards ----------------------
    def grads_are_sharded(self) -> bool:
        return True

    def grad_tensors(self):
        return (g for g in map(self._grad_of, self.infos) if g is not None)

    def named_grads(self) -> dict:
        return {i.fqn: g for i, g in zip(self.infos, map(self._grad_of, self.infos)) if g is not None}

    def optimizer_step(self, optimizer) -> None:
        if getattr(self, "param_home", None) is not None:
            self._grads_home()
        if getattr(self, "host_step", None) is not None:
            self.host_step.step(optimizer, self._grad_of)
        elif getattr(self, "offload", None) is not None:
            self.offload.step(optimizer)
        else:
            optimizer.step()
        if not self.shard_params:
            self._gather_params()
        for unit in self.units:
            unit.release()  # offloaded shards just updated in place: their pages leave the process

    def _grads_home(self) -> None:
        """offload=params: the optimizer steps the shards where they live (the host), so their reduced
        gradients go there first (on a CPU they are there already). The copies are queued without waiting
        (one per unit), then the host waits once for all of them before the optimizer reads them."""
        source = None
        for unit in self.units:
            g = unit.grad_shard
            if g is None or g.device == unit.flat_shard.device:
                continue
            source = g.device
            unit.grad_shard = g = g.to(unit.flat_shard.device, non_blocking=True)
            for info, v in zip(unit.infos, unit.shard_views(g)):
                info.shard.grad = v
        self._away_grads.clear()
        if source is not None and source.type == "cuda":
            torch.cuda.current_stream(source).synchronize()  # the one host sync: the copies have landed

    def _gather_params(self) -> None:
        """zero1/zero2: every rank updated its shard in place; all-gather the full parameters, one
        collective per unit, the next unit's launched before this one's copy-out."""
        for unit in self.units:
            unit.unsharded = False  # the full parameters are stale until the gather below
        prev = None
        for unit in self.units:
            unit.start_all_gather()
            if prev is not None:
                prev.finish_all_gather()
            prev = unit
        if prev is not None:
            prev.finish_all_gather()
        for unit in self.units:
            unit.unsharded = True

    def zero_grad(self, optimizer) -> None:
        if self.keep_full_grads:
            for i in self.infos:
                i.full_grad.zero_()
            self._attach_full_grads()
            return
        optimizer.zero_grad(set_to_none=True)
        if getattr(self, "host_step", None) is not None:  # the optimizer's parameters are the host masters:
            for i in self.infos:  # the device shards' gradients go here
                i.shard.grad = None
        self._away_grads.clear()
        for unit in self.units:
            unit.grad_shard = None

    def _attach_full_grads(self) -> None:
        """zero1: one padded full gradient per parameter; autograd accumulates into its first `rows`
        rows, the shard's gradient is this rank's rows of it (so the reduced shard costs no extra memory)."""
        for i in self.infos:
            if i.full_grad is None:
                i.full_grad = torch.zeros_like(i.full)
            i.param.grad = i.full_grad[: i.rows]
            i.shard.grad = i.full_grad[i.start: i.start + i.chunk]

    # --- state -----------------------------------------------------------------------------------------
    def full_parameters(self) -> dict[str, torch.Tensor]:
        return {i.fqn: i.param.detach() for i in self.infos}

    def model_state_dict(self) -> dict:
        return zero_state.model_state_dict(self)

    def load_model_state_dict(self, sd: dict) -> None:
        zero_state.load_model_state_dict(self, sd)
        if getattr(self, "host_step", None) is not None:
            self.host_step.refresh()
        if not self.shard_params:
            self._gather_params()
        for unit in self.units:
            unit.release()

    def optim_state_dict(self, optimizer) -> dict:
        return zero_state.optim_state_dict(self, optimizer)

    def load_optim_state_dict(self, optimizer, sd: dict) -> None:
        zero_state.load_optim_state_dict(self, optimizer, sd)

    def state_bytes(self, optimizer) -> dict:
        return zero_state.state_bytes(self, optimizer)

    def params_held(self) -> int:
        """zero1/2 keep every parameter whole; zero3 its unpadded rows of each (padding is no parameter),
        plus whatever the units do not manage (EP's hidden experts)."""
        if not self.shard_params:
            return super().params_held()
        managed = {id(t) for i in self.infos for t in (i.param, i.shard)}  # at rest the modules hold the shards
        rest = sum(p.numel() for p in self.module.parameters() if id(p) not in managed)
        return sum(i.local_rows * i.row_numel for i in self.infos) + rest


class Zero1(_Zero):
    name = "zero1"
    keep_full_grads = True


class Zero2(_Zero):
    name = "zero2"


class Zero3(_Zero):
    """Parameters sharded at rest. Per unit: all-gather before forward (forward pre-hook), reshard after
    it, all-gather again before backward (a hook on the unit's outputs' gradients), reduce-scatter when
    all of its gradients are accumulated (post-accumulate-grad hooks), then reshard. The root unit
    (embeddings, final norm, tied head) stays gathered from its forward to its backward, as in FSDP2:
    it would be gathered again at once. Prefetch launches the next unit's all-gather before this one
    computes: in forward the next unit in module order, in backward the reverse of the forward order."""
    name = "zero3"
    shard_params = True

    def replicated_parameters(self) -> list:
        """Nothing: each rank holds its own shard of every parameter (the doctor has no replica to compare)."""
        return []

    def wrap(self, model: nn.Module) -> nn.Module:
        super().wrap(model)
        self.root = self.units[0] if self.units and self.units[0].module is model else None
        self._fwd_next = dict(zip(self.units, self.units[1:]))
        self._bwd_next: dict | None = None
        self._post_order: list[FlatParamUnit] = []
        for unit in self.units:
            unit.module.register_forward_pre_hook(functools.partial(self._pre_forward, unit))
            unit.module.register_forward_hook(functools.partial(self._post_forward, unit))
        return model

    def _pre_forward(self, unit: FlatParamUnit, module, args) -> None:
        if _in_backward():  # activation recompute of a unit inside a recomputed block: its backward is next
            unit.unshard()
            return
        if unit is self.units[0]:  # a new forward: its order decides the backward prefetch order
            self._post_order, self._bwd_next = [], None
        comm.set_phase("forward")
        unit.unshard()
        if self.pcfg.prefetch and unit in self._fwd_next:
            self._fwd_next[unit].start_all_gather()

    def _post_forward(self, unit: FlatParamUnit, module, args, output) -> None:
        if _in_backward():  # recompute: keep the parameters for that backward (it reshards after reducing)
            return
        self._post_order.append(unit)
        if not torch.is_grad_enabled():  # evaluation: no backward will come to reshard
            if unit is self.units[0]:
                for u in self.units:
                    u.reshard()
            elif unit is not self.root:
                unit.reshard()
            return
        tensors = [t for t in _tensors(output) if t.requires_grad]
        if tensors:
            register_multi_grad_hook(tensors, functools.partial(self._pre_backward, unit), mode="any")
        if self.pcfg.reshard_after_forward and unit is not self.root:
            unit.reshard()

    def _pre_backward(self, unit: FlatParamUnit, grad) -> None:
        comm.set_phase("backward")
        unit.unshard()
        if self._bwd_next is None:  # backward visits the units in reverse order of their forward's end
            order = self._post_order[::-1]
            self._bwd_next = dict(zip(order, order[1:]))
        if self.pcfg.prefetch and unit in self._bwd_next:
            self._bwd_next[unit].start_all_gather()

    def _after_reduce(self, unit: FlatParamUnit) -> None:
        unit.reshard()

    def finish_backward(self) -> None:
        super().finish_backward()
        for unit in self.units:
            unit.reshard()

    def full_parameters(self) -> dict[str, torch.Tensor]:
        out = {}
        for unit in self.units:
            was = unit.unsharded
            unit.unshard(exact=True)  # the parameters themselves, never a gather encoding's values
            out.update({i.fqn: i.param.detach().clone() for i in unit.infos})
            if not was:
                unit.reshard()
        return {i.fqn: out[i.fqn] for i in self.infos}


def _in_backward() -> bool:
    """Inside a backward pass a module's forward is activation recompute (checkpointing), not a forward."""
    return torch._C._current_graph_task_id() != -1


def _tensors(output) -> list[torch.Tensor]:
    if torch.is_tensor(output):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for o in output for t in _tensors(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in _tensors(o)]
    return []


def _order(model: nn.Module):
    """Sort key: the model's own parameter order (what `named_parameters` and torch's state dicts use)."""
    pos = {fqn: k for k, (fqn, _) in enumerate(model.named_parameters())}
    return lambda info: pos[info.fqn]
