"""Pipeline parallelism as a layer of the composition: split the model, and own the step.

`split` (step 3 of compose.build) cuts the single-device model into this rank's part: the blocks of its
stage(s) under their original names, the embedding on the first stage, the head on the last. The rest
of the composition (tensor parallel, data parallel) is applied to that part as to a whole model.

`PipelineParallel` replaces `Parallel.forward_backward` with the schedule (parallel/pp/engine.py or
torch.distributed.pipelining), so the trainer still just hands it the step's microbatches. Data-parallel
gradient sync is switched on before each stage's last backward only, so the DP layer reduces once per
step. The loss of the step lives on the last stage; it is summed over the pipeline group so every rank
reports the same figure.

With V > 1 virtual stages per rank (interleaved schedules) the rank's part holds several chunks that
run as separate stages sharing the part's modules; the data-parallel layer is then bypassed during
forward, so V > 1 needs a data-parallel degree of 1 (refused in one line otherwise).
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.errors import ConfigError
from shardlab.parallel.mesh import ParallelDims
from shardlab.parallel.pp.schedule import ScheduleError, build as build_schedule, check
from shardlab.parallel.pp.stage import layer_costs, stage_ranges
from shardlab.parallel.step import Parallel

NATIVE_SCHEDULES = ("torch-gpipe", "torch-1f1b", "torch-interleaved", "torch-zb")


def schedule_of(pcfg, microbatches: int):
    """The own schedule (also the stage layout of a torch one) for this config, or a ConfigError."""
    name = pcfg.pp_schedule
    own = {"torch-gpipe": "gpipe", "torch-1f1b": "1f1b", "torch-interleaved": "interleaved",
           "torch-zb": "interleaved"}.get(name, name)
    try:
        return build_schedule(own, pcfg.pp, microbatches, pcfg.pp_virtual)
    except ScheduleError as e:
        raise ConfigError(str(e)) from None


def validate(cfg, dims: ParallelDims, n_layer: int) -> None:
    """Before launch: the schedule exists for this many microbatches, stages fit the layers."""
    from shardlab.parallel import layers

    p = cfg.parallel
    if p.pp_schedule not in layers.PIPELINE_PARALLEL:
        raise ConfigError(f"parallel.pp_schedule={p.pp_schedule!r}: must be one of {', '.join(layers.PIPELINE_PARALLEL)}")
    if dims.dp_size > 1 and layers.dp_name(p) in ("torch-ddp", "torch-zero1"):
        raise ConfigError(f"parallel.dp={layers.dp_name(p)} with parallel.pp={p.pp}: torch DDP cannot have several "
                          "microbatches' forwards in flight; use ddp, zero1, zero2, zero3 or torch-fsdp2")
    if dims.tp > 1:
        raise ConfigError(f"parallel.pp={p.pp} with parallel.tp={dims.tp}: pipeline and tensor parallelism are not "
                          "composed yet in this version; use one of them (each composes with data parallelism)")
    if p.pp_schedule == "torch-zb" and p.pp_virtual < 2:
        raise ConfigError("parallel.pp_schedule=torch-zb (interleaved zero bubble) needs parallel.pp_virtual >= 2")
    own = {"torch-gpipe": "gpipe", "torch-1f1b": "1f1b", "torch-interleaved": "interleaved",
           "torch-zb": "interleaved"}.get(p.pp_schedule, p.pp_schedule)
    try:
        check(own, p.pp, cfg.train.grad_accum, p.pp_virtual, n_layer)
        if p.pp_split and p.pp_split != "auto":  # auto: measured at start-up (pp/measure.py)
            stage_ranges(n_layer, p.pp * p.pp_virtual, split=_split_points(p.pp_split))
    except ScheduleError as e:
        raise ConfigError(str(e)) from None
    if p.pp_virtual > 1 and dims.dp_size > 1:
        raise ConfigError(f"parallel.pp_virtual={p.pp_virtual} with data parallelism (dp={dims.dp_size}) is not "
                          "supported yet: use parallel.pp_virtual=1, or a layout without data parallelism")


def _split_points(text: str) -> list[int]:
    try:
        return [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"parallel.pp_split={text!r}: expected block indices like 2,5") from None


def split(model: nn.Module, cfg, dims: ParallelDims):
    """This rank's part of the model and the schedule. Returns (part, stage_ids, schedule)."""
    p, t = cfg.parallel, cfg.train
    sched = schedule_of(p, t.grad_accum)
    mc = model.cfg
    n = sched.n_stages
    if p.pp_split == "auto":  # measured per-layer times, rank 0's on every rank
        from shardlab.parallel.pp.measure import measured_costs
        costs, points = measured_costs(model, cfg), None
    else:
        costs, points = layer_costs(mc.n_layer, mc.d_model, mc.vocab_size, t.seq_len), _split_points(p.pp_split)
    ranges = stage_ranges(mc.n_layer, n, split=points or None, costs=costs)
    pp_rank = dims.coord("pp")
    mine = sched.stages_of(pp_rank)
    part = copy.deepcopy(model)
    keep = [str(i) for s in mine for i in ranges[s]]
    part.blocks = nn.ModuleDict({k: part.blocks[k] for k in keep})
    first, last = 0 in mine, n - 1 in mine
    if not first:
        part.wpe = None
    if not first and not last:
        part.wte = None  # the last stage keeps it: the weight of its tied head
    if not last:
        part.ln_f = part.lm_head = None
    part.pipeline = {"stages": mine, "ranges": {s: ranges[s] for s in mine}, "n_stages": n}
    return part, mine, sched


def _chunk_view(part: nn.Module, stage: int, n_stages: int, blocks: range) -> nn.Module:
    """A module that runs one chunk of `part` (interleaved: a rank's part holds several), sharing its
    submodules: the parameters are the part's, no copy."""
    view = copy.copy(part)
    view._modules = dict(part._modules)
    view._modules["blocks"] = nn.ModuleDict({str(i): part.blocks[str(i)] for i in blocks})
    if stage != 0:
        view._modules["wpe"] = None
    if stage != n_stages - 1:
        view._modules["ln_f"] = view._modules["lm_head"] = None
    return view


def _embed_group(dims: ParallelDims, sched) -> object | None:
    """The ranks holding the first and the last stage of each pipeline (per coordinate of every other
    dimension): their copies of the tied embedding are summed. Every rank creates every group."""
    if sched.rank_of(0) == sched.rank_of(sched.n_stages - 1):
        return None
    mine = None
    for r in range(dims.world_size):
        c = dims.coords(r)
        if c["pp"] != 0:
            continue
        first = dims.rank_of({**c, "pp": sched.rank_of(0)})
        last = dims.rank_of({**c, "pp": sched.rank_of(sched.n_stages - 1)})
        g = comm.new_group([first, last], name="pp_embed")
        if dims.rank in (first, last):
            mine = g
    return mine


class PipelineParallel(Parallel):
    def __init__(self, dims, model, dp, optimizer, device, dtype, cfg, part, stages, sched):
        super().__init__(dims, model, dp, optimizer, device, dtype=dtype)
        from shardlab.model.loss import cross_entropy
        from shardlab.parallel.pp.engine import PipelineEngine

        self.sched, self.stage_ids = sched, stages
        self.group = dims.group("pp")
        n = sched.n_stages
        ranges = part.pipeline["ranges"]
        if len(stages) == 1:
            modules = {stages[0]: dp.module}  # through the DP layer's wrapper (its forward hooks)
        else:
            modules = {s: _chunk_view(part, s, n, ranges[s]) for s in stages}
        self.is_first, self.is_last = 0 in stages, n - 1 in stages
        self.embed_group = _embed_group(dims, sched)
        d_model = model.cfg.d_model

        def loss_fn(logits, y):
            return self.loss_fn(logits, y, reduction="sum")

        if cfg.parallel.pp_schedule in NATIVE_SCHEDULES:
            from shardlab.parallel.pp.native import TorchPipeline
            self.engine = TorchPipeline(cfg.parallel.pp_schedule, modules, n, sched.microbatches, loss_fn,
                                        device, group=self.group)
        else:
            self.engine = PipelineEngine(sched, modules, stage_rank=sched.rank_of, pp_rank=dims.coord("pp"),
                                         loss_fn=loss_fn, act_shape=lambda x: (*x.shape[:2], d_model),
                                         device=device, group=self.group,
                                         on_last_backward=lambda s: dp.set_requires_gradient_sync(True))
        self.modules = modules

    def forward_backward(self, microbatches, loss_weight, after_backward=None):
        self.dp.set_requires_gradient_sync(False)  # on again before each stage's last backward
        with self.autocast():
            loss = self.engine.step(list(microbatches), loss_weight)
        return self._share(loss.to(self.device))

    def finish(self) -> None:
        """The data-parallel reduction first, then the tied embedding: the first and the last stage hold
        the same parameter, so their (already data-parallel-reduced) gradients are summed and both copies
        take the same step (Megatron's embedding group). Every DP layer shards a parameter by dim-0 rows
        at the same data-parallel coordinate, so the two local parts line up."""
        self.dp.finish_backward()
        if self.embed_group is not None and (self.is_first or self.is_last):
            g = self.dp.local_grad("wte.weight")
            if g is not None:
                comm.all_reduce(g, group=self.embed_group, tag="tied embedding grad")

    def clip_grad_norm_(self, max_norm: float) -> float:
        dup = ("wte.weight",) if self.embed_group is not None and self.is_last and not self.is_first else ()
        return self.dp.clip_grad_norm_(max_norm, self.grad_norm_groups, exclude=dup)

    @torch.no_grad()
    def eval_loss_sum(self, x, y):
        """Forward only, stage by stage: each rank runs its stages in order, receiving the previous
        stage's activation and sending its own on; the last stage's loss is shared with the pipeline."""
        n = self.sched.n_stages
        act = None
        loss = torch.zeros((), device=self.device)
        for s in range(n):
            if self.sched.rank_of(s) != self.dims.coord("pp"):
                continue
            if s > 0:
                act = torch.empty((*x.shape[:2], self.model.cfg.d_model), device=self.device)
                comm.recv(act, self.sched.rank_of(s - 1), group=self.group, tag=f"eval act {s - 1}->{s}")
            out = self.modules[s](x if s == 0 else act)
            if s < n - 1:
                comm.send(out.contiguous(), self.sched.rank_of(s + 1), group=self.group, tag=f"eval act {s}->{s + 1}")
            else:
                loss = self.loss_fn(out, y, reduction="sum")
        return self._share(loss)

    def _share(self, loss: torch.Tensor) -> torch.Tensor:
        loss = loss.detach().float().reshape(())
        if self.group is not None:
            comm.all_reduce(loss, group=self.group, tag="pipeline loss")  # zero on every stage but the last
        return loss
