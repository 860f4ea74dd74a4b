"""The data-parallel layer interface: how a data-parallel scheme plugs into the composition.

A data-parallel layer (historically "strategy") is the last layer `shardlab.parallel` applies to a
model part. The composition's step (`shardlab.parallel.step.Parallel`) drives it; the trainer never asks
which one it has. See docs/strategies.md and docs/parallel.md. A step:

    for i, (x, y) in enumerate(microbatches):          # forwards may run ahead of their backwards
        loss = loss_fn(layer.module(x), y)
        layer.set_requires_gradient_sync(i == last)     # read at this microbatch's backward
        (loss * weight).backward()
    layer.finish_backward()                            # wait for in-flight gradient collectives
    found_inf = layer.unscale_and_check(inv_scale)     # fp16 only
    norm = layer.clip_grad_norm_(max_norm, groups)     # global norm over the true (full) gradient
    layer.optimizer_step(optimizer)                    # zero1: + all-gather of updated shards
    layer.zero_grad(optimizer)
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
import torch.nn as nn

from torch.distributed.tensor import DTensor

from shardlab import comm
from shardlab.doctor.replicas import ReplicaSet
from shardlab.optim.serving import serve
from shardlab.parallel.dp import in_place, sd_names
from shardlab.parallel.mesh import ParallelDims

# factory(named_params: list[tuple[str, Tensor]]) -> Optimizer; names are the bare model's FQNs.
OptimizerFactory = Callable[[list], torch.optim.Optimizer]


class Strategy:

    # Host syncs a step of this layer may make (module prefix -> syncs per step), checked by the CUDA
    # discipline check (shardlab.simulate; code not declared has a budget of 0). A sync stalls the host until
    # the device catches up, so each says why it is worth that: the gradient norm comes back as a float (the
    # doctor's anomaly check and the log read it every step), and the clip factor is read once to skip the
    # pass over every gradient when it is exactly 1.
    HOST_SYNCS: dict[str, int] = {"shardlab.parallel.dp": 2}

    def host_syncs(self) -> dict[str, int]:
        """This layer's budget, and that of the layers it wraps (parallel/layer.py `host_syncs`)."""
        return dict(self.HOST_SYNCS)
    name = "base"

    def __init__(self, pcfg, dims: ParallelDims, device: torch.device):
        # pcfg: the config's [parallel] section (shardlab.config.ParallelConfig; not imported: the config sits
        # above the layers)
        self.pcfg, self.dims, self.device = pcfg, dims, device
        self.group = None  # the process group this layer communicates in (set by the composition)
        self.model: nn.Module | None = None  # the bare model (FQNs of its parameters are the names)
        self.module: nn.Module | None = None  # what the trainer calls forward on

    # --- set-up -------------------------------------------------------------------------------------
    def wrap(self, model: nn.Module) -> nn.Module:
        self.model = self.module = model
        return self.module

    # What the optimizer steps of each matrix (optim/serving.py): None, whole matrices (the replicating
    # layers); a sharding layer says which part. `inner_hands`: (name, hands) of the layers applied inside
    # this one (parallel/layer.py `optimizer_hands`), set by the composition (apply.py).
    optimizer_hands: str | None = None
    inner_hands: tuple = ()

    def serve_optimizer(self, factory: OptimizerFactory) -> None:
        """Ask the one rule whether this layer, and each layer inside it, can serve the optimizer `factory`
        builds; refused in one line (ConfigError) before any state is allocated."""
        for layer, hands in ((self.name, self.optimizer_hands), *self.inner_hands):
            serve(factory, layer, hands)

    def make_optimizer(self, factory: OptimizerFactory) -> torch.optim.Optimizer:
        self.serve_optimizer(factory)
        return factory(list(self.model.named_parameters()))

    # --- one step -----------------------------------------------------------------------------------
    def set_requires_gradient_sync(self, requires: bool) -> None:
        """Whether the next backward synchronises gradients (FSDP2's name). Own layers read it when the
        backward runs, so several microbatches' forwards may be in flight; torch DDP reads it in forward."""

    def sync_context(self, is_last: bool) -> contextlib.AbstractContextManager:
        """Shorthand kept for scripts: `set_requires_gradient_sync(is_last)`, before forward+backward."""
        self.set_requires_gradient_sync(is_last)
        return contextlib.nullcontext()

    def finish_backward(self) -> None:
        """Block until every gradient collective of this step has completed."""

    def grad_tensors(self) -> Iterator[torch.Tensor]:
        """The gradients this rank holds after `finish_backward` (full or sharded)."""
        return (p.grad for p in self.model.parameters() if p.grad is not None)

    def named_grads(self) -> dict[str, torch.Tensor]:
        """{bare model FQN: the gradient this rank holds for it} after `finish_backward` (full or this
        rank's shard; DTensors as they are). Views: scaling them in place scales the gradients."""
        return {n: p.grad for n, p in self.model.named_parameters() if p.grad is not None}

    def grads_are_sharded(self) -> bool:
        """True when each rank holds a different part of the gradient (norms need a cross-rank sum)."""
        return False

    def unscale_and_check(self, inv_scale: float) -> bool:
        """fp16 loss scaling: unscale the gradients and decide, identically on every rank, whether any
        rank saw inf/nan (so an overflow step is skipped everywhere or nowhere)."""
        found = torch.zeros(1, device=self.device)
        for g in self.grad_tensors():
            g.mul_(inv_scale)
            found += (~torch.isfinite(g)).any().float()
        comm.all_reduce(found, op=comm.ReduceOp.MAX, tag="found_inf")
        return bool(found.item())

    def local_grad(self, fqn: str) -> torch.Tensor | None:
        """This rank's part of parameter `fqn`'s gradient (all of it when gradients are replicated, its
        dim-0 shard when they are sharded), as a tensor the caller may reduce in place; None if absent."""
        p = dict(self.model.named_parameters()).get(fqn)
        return None if p is None or p.grad is None else _local(p.grad)

    def clip_grad_norm_(self, max_norm: float, groups: list | None = None, exclude: tuple = (),
                        replicated=None) -> float:
        """Global L2 norm of the full gradient; scales the gradients down to max_norm when max_norm > 0.
        `groups`: every process group across which ranks hold different parts of the gradient (the
        composition passes them: this layer's shard group, pipeline stages, ...); by default this
        layer's own group when its gradients are sharded. `exclude`: parameters another rank of those
        groups also holds (a pipeline's tied embedding on its last stage): clipped, counted once.
        `replicated`: (group, is_split) when some tensors are split across one of those groups and others
        identical on all its ranks (tensor parallelism: weights split, LayerNorms replicated); see
        `_clip_mixed`."""
        if replicated is not None:
            return self._clip_mixed(max_norm, groups or [], *replicated, exclude=exclude)
        grads = [g.detach() for g in self.grad_tensors()]
        sq = sum_of_squares(grads, self.device)
        for fqn in exclude:
            g = self.local_grad(fqn)
            if g is not None:
                sq -= g.detach().to(sq.dtype).pow(2).sum()
        if groups is None:
            groups = [self.group] if self.grads_are_sharded() else []
        for group in groups:  # orthogonal mesh dimensions: summing along each in turn sums over all
            comm.all_reduce(sq, group=group, tag="grad_norm")
        norm = sq.sqrt()
        total = float(norm.item())
        if max_norm > 0:
            coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
            # a factor of exactly 1 changes no bit: skip the pass over every gradient (most steps after
            # warm-up); the host read costs nothing more than the norm's just above. (A NaN factor still
            # scales, as before: every gradient turns NaN.)
            if not bool(coef == 1.0):
                scale_(grads, coef)
        return total

    def _clip_mixed(self, max_norm: float, groups: list, group, is_split, exclude: tuple = ()) -> float:
        """The norm when, across `group`, gradients named `is_split(fqn)` are pieces of one tensor and the
        others are copies. Squares are kept in two sums, [split, copied], and each is all-reduced over
        every group like the plain norm: the split sum then covers every piece once, the copied sum covers
        each copy size(group) times, so it is divided back by that size (exact for equal copies at sizes
        1, 2, 4). One all-reduce per group, the same count as without tensor parallelism; the dp layer's
        own sharding (this layer's `named_grads` are its shards) stays one of the `groups`."""
        named = self.named_grads()
        sq = torch.zeros(2, device=self.device, dtype=norm_dtype(named.values()))
        for fqn, g in named.items():
            if fqn not in exclude:  # counted on the rank that holds it first (clipped here all the same)
                sq[0 if is_split(fqn) else 1] += _local(g).detach().to(sq.dtype).pow(2).sum()
        for grp in groups:
            comm.all_reduce(sq, group=grp, tag="grad_norm")
        norm = (sq[0] + sq[1] / comm.world_size(group)).sqrt()
        if max_norm > 0:
            coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
            for g in named.values():
                _local(g).mul_(coef.to(g.dtype))
        return float(norm.item())

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)

    # --- state ---------------------------------------------------------------------------------------
    def full_parameters(self) -> dict[str, torch.Tensor]:
        """Every parameter's full value (on every rank), keyed by the bare model's FQN."""
        return {n: p.detach() for n, p in self.model.named_parameters()}

    def model_state_dict(self) -> dict:
        """DCP-shaped model state (plain tensors or DTensors), keyed by the bare model's FQNs."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict
        return self._state_names().model(self.module, lambda: get_model_state_dict(self.module))

    def load_model_state_dict(self, sd: dict) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict
        if in_place.model_loaded_in_place(self.module, sd):  # a checkpoint read into the live tensors: done
            return
        set_model_state_dict(self.module, sd)

    def materialize_optimizer(self, optimizer) -> None:
        """Create the optimizer's state if it has none yet (a fresh optimizer a checkpoint is about to be
        loaded into): one step with zero gradients at lr 0 changes no parameter but allocates exp_avg,
        exp_avg_sq, step."""
        if optimizer.state:
            return
        params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        grads = [p.grad for p in params]  # some strategies keep gradient buffers allocated: put them back
        for p in params:
            p.grad = torch.zeros_like(p)
        lrs = [g["lr"] for g in optimizer.param_groups]
        for g in optimizer.param_groups:
            g["lr"] = 0.0
        optimizer.step()
        for g, lr in zip(optimizer.param_groups, lrs):
            g["lr"] = lr
        for p, grad in zip(params, grads):
            p.grad = grad

    # --- under a periodic synchronisation (local SGD / DiLoCo: parallel/sync/periodic.py) ----------------------
    shards_within_replica = False  # own ZeRO: a replica is a shard group (HSDP), synchronised shard by shard

    def replicas_step_alone(self) -> list[tuple[str, torch.Tensor]]:
        """The replicas stop meeting every step (they meet in the periodic synchronisation instead): what
        this rank synchronises, (name, tensor) in one fixed order on every replica. A whole replica: its
        trainable parameters, a tied weight once."""
        seen, named = set(), []
        for fqn, p in self.model.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                named.append((fqn, p))
        return named

    def params_updated(self) -> None:
        """The synchronisation wrote what `replicas_step_alone` returned: make the rest of this rank's
        parameters follow (zero1/2 gather the full parameters again). A whole replica: nothing to do."""

    # --- what the doctor compares (doctor/replicas.py) -------------------------------------------------
    def replicated_parameters(self) -> list[tuple[str, torch.Tensor]]:
        """What this layer holds equal on every data-parallel rank: plain tensors and fully replicated
        DTensors (FSDP2's sharded DTensors differ per rank by design; an emptied tensor is a freed,
        sharded-away parameter). A layer that keeps parameters as shards (own ZeRO-3) says so."""
        out = []
        for name, p in self.model.named_parameters():
            if isinstance(p, DTensor):  # only a fully replicated one is the same on every rank
                if all(pl.is_replicate() for pl in p.placements):
                    out.append((name, p.to_local()))
            elif p.numel():
                out.append((name, p))
        return out

    def replica_sets(self, seen=None) -> list[ReplicaSet]:
        """The data-parallel replicas: the ranks of the data-parallel group (dp x cp: context parallelism's
        ranks hold replicas too), which hold `replicated_parameters()` bitwise equal — as `seen`, the
        outermost dp view, declares them (EP's: the dense parameters only). The layers' dp views add their
        own sets after this one (TP's copies, EP's experts) or replace it (local SGD)."""
        source = seen or self
        world = self.dims.world_size
        if self.dims.size("dp_cp") == 1:
            return [ReplicaSet("dp", [comm.rank()], note="no data-parallel replicas")]
        whole = self.dims.size("dp_cp") == world
        return [ReplicaSet("dp", list(range(world)) if whole else self.dims.ranks("dp_cp"),
                           None if whole else self.dims.group("dp_cp"),
                           parameters=lambda fragments=None: source.replicated_parameters())]

    def sync_state_dict(self) -> dict | None:
        """State a periodic synchronisation keeps beside the model and optimizer (local SGD / DiLoCo:
        parallel/sync/periodic.py); None: this layer keeps none."""
        return None

    def optim_state_dict(self, optimizer) -> dict:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
        return self._state_names().optim(self.module, optimizer,
                                         lambda: get_optimizer_state_dict(self.module, optimizer))

    def _state_names(self) -> sd_names.StateNames:
        """torch's state-dict names, resolved once while the tensors stay the same (sd_names.py)."""
        if "_sd_names" not in self.__dict__:
            self._sd_names = sd_names.StateNames()
        return self._sd_names

    def load_optim_state_dict(self, optimizer, sd: dict) -> None:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
        # Hyperparameters from the checkpoint, membership from this optimizer (as zero_state and tp do): DCP
        # keeps one rank's copy of a non-tensor value, so under pp the saved `param_groups` list another
        # stage's parameters, and taking them as they are dropped this stage's lr and betas (KeyError 'betas'
        # at the first step after a pp=2 -> pp=2 resume).
        if len(optimizer.param_groups) == len(sd["param_groups"]):
            if in_place.load_optim_in_place(optimizer, sd):  # the state read into the live tensors: what is
                return                                        # left is the hyperparameters
        local = get_optimizer_state_dict(self.module, optimizer)["param_groups"]
        if len(local) != len(sd["param_groups"]):
            raise ValueError(f"the checkpoint's optimizer has {len(sd['param_groups'])} param groups, this model's "
                             f"{len(local)}: it was written for another model")
        groups = [{**saved, "params": cur["params"]} for saved, cur in zip(sd["param_groups"], local)]
        set_optimizer_state_dict(self.module, optimizer, {**sd, "param_groups": groups})

    def params_held(self) -> int:
        """Parameter elements this rank holds at rest (a DTensor's local shard): summary.json's
        params_per_rank. Replicating layers hold every parameter of their part; sharding ones override."""
        return sum(_local(p).numel() for p in self.module.parameters())

    def state_bytes(self, optimizer) -> dict:
        """Bytes this rank holds for parameters, gradients and optimizer state (what the formulas predict)."""
        def nbytes(ts):
            return sum(_local(t).numel() * _local(t).element_size() for t in ts)
        opt = [v for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v) and v.dim() > 0]
        return {"params": nbytes(self.module.parameters()),
                "grads": nbytes(p for p in self.module.parameters() if p.requires_grad),
                "optimizer": nbytes(opt)}

    # --- the run's lifecycle: what the trainer calls on every layer, whatever it is ------------------------
    # No-ops here; a view that keeps state across steps or across replica jobs fills them in (fault-tolerant
    # replicas: parallel/ft/). The trainer calls them unconditionally, so it never asks which layer it has.
    def data_slice(self) -> tuple[int, int]:
        """(n, i): this job trains slice i of n of an n-times larger global batch (one fault-tolerant replica
        of n); (1, 0) for a job that is the whole run."""
        return 1, 0

    def on_start(self, train_state, start_step: int, run_dir=None, resume=None) -> int:
        """Before the first step, after the checkpoint resume: returns the step to start from. `resume`:
        (load_step(step) -> step, committed_steps(run_dir) -> [step, ...]), the trainer's checkpoint hooks."""
        return start_step

    def before_step(self, train_state) -> None:
        """Before step `train_state.step` draws its batch."""

    def after_step(self, train_state) -> None:
        """After the step (its optimizer step taken, `train_state.step` advanced), before any save."""

    def summary(self) -> dict:
        """Keys this layer adds to summary.json."""
        return {}


def norm_dtype(tensors) -> torch.dtype:
    """The dtype gradient norms are summed in: fp32 for fp32 and narrower gradients (bf16/fp16 squares
    overflow and lose digits), float64 for float64 ones (a float64 run keeps its precision end to end:
    the parity tests rely on it, testing/compare.py)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def sum_of_squares(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """sum ||t||² over `tensors`, fp32 (float64 for float64 tensors: `norm_dtype`), shape (1,): one fused
    pass (torch._foreach_norm, as torch.nn.utils.clip_grad_norm_ does) rather than three ops per tensor
    (pow, sum, add), which on a one-thread CPU step cost more in dispatch than the arithmetic itself."""
    dtype = norm_dtype(tensors)
    if not tensors:
        return torch.zeros(1, device=device, dtype=dtype)
    norms = torch._foreach_norm(tensors, 2, dtype=dtype)
    return torch.stack(norms).square().sum().reshape(1)


def scale_(tensors: list[torch.Tensor], coef: torch.Tensor) -> None:
    """Multiply every tensor in place by the one-element `coef`, rounded to each tensor's dtype first (as
    the per-tensor `t.mul_(coef.to(t.dtype))` it replaces): one fused call (torch._foreach_mul_) per dtype."""
    by_dtype: dict = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    for dtype, group in by_dtype.items():
        torch._foreach_mul_(group, coef.reshape(()).to(dtype))


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t
