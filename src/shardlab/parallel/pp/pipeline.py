"""Pipeline parallelism as a layer of the composition: split the model, and own the step.

`split` (step 3 of compose.build) cuts the single-device model into this rank's part: the blocks of its
stage(s) under their original names, the embedding on the first stage, the head on the last. The rest
of the composition (tensor parallel, data parallel) is applied to that part as to a whole model.

Its handle's `executor` (`PipelineExecutor`) runs the step's microbatches through the schedule
(parallel/pp/engine.py or torch.distributed.pipelining) for `Parallel`, so the trainer still just hands
`Parallel.step` the step's microbatches and the composition has no pipeline branch. Data-parallel
gradient sync is switched on before each stage's last backward only, so the DP layer reduces once per
step. The loss of the step lives on the last stage; it is summed over the pipeline group so every rank
reports the same figure.

With V > 1 virtual stages per rank (interleaved schedules) the rank's part holds several chunks that
run as separate stages sharing the part's modules. The data-parallel layers reduce a rank's gradients in
one synchronised backward, so with data parallelism the chunks hand theirs over together: sync is switched
on for the rank's last backward only, and that backward also carries a zero-weight term for every
parameter of the rank's other chunks whose gradient the layer still holds unreduced (ddp, zero1; zero2
and zero3 reduce each backward's gradients as they come). zb's last backward is a W, which computes the
Linear weights' gradients only: it carries the stage's other parameters (computed in the I halves) the
same way. torch's schedules run their own backwards: after them, the same zero-weight backward hands the
accumulated gradients to the layer.

Tensor parallelism (own) is applied to each rank's part after the split: the first stage's embedding
and the last stage's head and loss are vocabulary-parallel, and activations travel between the same tp
rank of neighbouring stages (the `pp` group of the rank's tp/dp coordinate), split by sequence under SP.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.errors import ConfigError
from shardlab.model import anatomy
from shardlab.model.dtypes import at_least_fp32
from shardlab.parallel.mesh import ParallelDims
from shardlab.parallel.pp.engine import zero_terms
from shardlab.parallel.pp import registry
from shardlab.parallel.pp.placement import StagePlacement
from shardlab.parallel.pp.schedule import ScheduleError, build as build_schedule, check
from shardlab.parallel.pp.stage import layer_costs, stage_ranges
from shardlab.parallel.layer import Layer


def schedule_of(pcfg, microbatches: int):
    """The own schedule (also the stage layout of a torch one) for this config, or a ConfigError; for
    file:PATH the table's, checked against the config's pipeline ranks, stages and microbatches."""
    row = registry.spec(pcfg.pp_schedule)
    try:
        if row.runner == "file":
            return _table_schedule(pcfg, microbatches)
        return build_schedule(row.order, pcfg.pp, microbatches, pcfg.pp_virtual, layout=row.layout)
    except ScheduleError as e:
        raise ConfigError(str(e)) from None


def _table_schedule(pcfg, microbatches: int):
    from shardlab.parallel.pp import table

    path = str(pcfg.pp_schedule)[len(registry.FILE):]
    if not path:
        raise ConfigError("parallel.pp_schedule=file: needs a path (file:PATH, a table of actions per rank)")
    try:
        sched = table.load(path)
    except table.TableError as e:
        raise ConfigError(str(e)) from None
    got, want = (sched.pp, sched.virtual, sched.microbatches), (pcfg.pp, pcfg.pp_virtual, microbatches)
    if got != want:
        raise ConfigError(f"{sched.name}: {sched.pp} ranks x {sched.virtual} stages per rank, {sched.microbatches} "
                          f"microbatches, but parallel.pp={pcfg.pp}, parallel.pp_virtual={pcfg.pp_virtual}, "
                          f"{microbatches} microbatches (train.grad_accum): make them agree")
    return sched


def validate(cfg, dims: ParallelDims, n_layer: int) -> None:
    """Before launch: the schedule exists for this many microbatches, stages fit the layers."""
    from shardlab.parallel import layers, rules

    p = cfg.parallel
    reduced = dims.size("dp_cp") > 1  # the data-parallel layer reduces over dp x cp: cp ranks hold replicas too
    if registry.row_name(p.pp_schedule) not in layers.PIPELINE_PARALLEL:
        raise ConfigError(f"parallel.pp_schedule={p.pp_schedule!r}: must be one of {', '.join(layers.PIPELINE_PARALLEL)}")
    rules.check(cfg, dims, "pp")  # the pairs with the layers around the stages (parallel/rules.py)
    row = registry.spec(p.pp_schedule)
    least, most = row.virtual
    if most is None and p.pp_virtual < least:
        raise ConfigError(f"parallel.pp_schedule={p.pp_schedule} runs several stages per rank: it needs "
                          f"parallel.pp_virtual >= {least}")
    if least == most and least > 1 and p.pp_virtual != least:
        raise ConfigError(f"parallel.pp_schedule={p.pp_schedule} places exactly two stages per rank (the V "
                          f"layout): set parallel.pp_virtual={least} (got {p.pp_virtual})")
    need = registry.least_microbatches(p.pp_schedule, p.pp)
    if need > registry.least_microbatches(row.order, p.pp) and cfg.train.grad_accum < need:
        raise ConfigError(f"parallel.pp_schedule={p.pp_schedule} at pp={p.pp} needs at least {need} microbatches "
                          f"(one per stage; got {cfg.train.grad_accum}); raise train.grad_accum")
    if row.runner == "torch" and cfg.data.doc_mask:
        raise ConfigError(f"data.doc_mask=true with parallel.pp_schedule={p.pp_schedule}: torch's schedules hand "
                          "side inputs to the first stage only, and every stage needs the document positions; use "
                          f"an own schedule ({', '.join(registry.OWN)})")
    if row.runner == "torch" and row.zero_bubble and getattr(cfg.train, "recompute", "none") == "selective":
        raise ConfigError(f"train.recompute=selective with parallel.pp_schedule={p.pp_schedule}: torch's split "
                          "backward runs a second backward through the stage's graph, which selective recompute "
                          "refuses; use train.recompute=full, or the own schedule "
                          f"{registry.spec(p.pp_schedule).order}")
    own = row.order
    try:
        if row.runner == "file":  # the table is checked as it is read (table.py)
            stages = schedule_of(p, cfg.train.grad_accum).n_stages
            if stages > n_layer:
                raise ScheduleError(f"{p.pp_schedule}: {stages} pipeline stages but the model has {n_layer} "
                                    "layers: use fewer stages or more layers")
        else:
            check(own, p.pp, cfg.train.grad_accum, p.pp_virtual, n_layer)
        if p.pp_split and p.pp_split != "auto":  # auto: measured at start-up (pp/measure.py)
            stage_ranges(n_layer, p.pp * p.pp_virtual, split=_split_points(p.pp_split))
    except ScheduleError as e:
        raise ConfigError(str(e)) from None
    dp = layers.dp_name(p) if reduced else "single"
    for layer, why in row.refuses_dp:
        if dp == layer:
            raise ConfigError(f"parallel.pp_schedule={p.pp_schedule} with parallel.dp={layer}: "
                              + why.format(name=p.pp_schedule))


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
    keep = [i for s in mine for i in ranges[s]]
    part = anatomy.of(model).cut(copy.deepcopy(model), keep, 0 in mine, n - 1 in mine)  # stage.build_stage's cut
    part.pipeline = {"stages": mine, "ranges": {s: ranges[s] for s in mine}, "n_stages": n, "all_ranges": ranges}
    return Layer("pp", part, norm_groups=("pp",), impl=(mine, sched),
                 executor=lambda par: PipelineExecutor(par, cfg, mine, sched))


def _chunk_view(part: nn.Module, stage: int, n_stages: int, blocks: range) -> nn.Module:
    """A module that runs one chunk of `part` (interleaved: a rank's part holds several), sharing its
    submodules: the parameters are the part's, no copy."""
    view = copy.copy(part)
    view._modules = dict(part._modules)
    anat = anatomy.of(part)
    view._modules[anat.blocks] = nn.ModuleDict({str(i): getattr(part, anat.blocks)[str(i)] for i in blocks})
    tied = anat.tied(part)
    for name in anat.stage_drops(stage == 0, stage == n_stages - 1, tied):
        if name in view._modules and not (name == anat.embedding and tied):  # a tied embedding rides along, unused
            view._modules[name] = None
    return view


def _stage_params(part: nn.Module, stage: int, n_stages: int, blocks: range) -> list[nn.Parameter]:
    """The parameters stage `stage` uses: its blocks, the embeddings if first, the final norm and the
    head if last (its weight is the embedding's when tied)."""
    mods = [part.blocks[str(i)] for i in blocks]
    if stage == 0:
        mods += [m for m in (part.wte, getattr(part, "wpe", None)) if m is not None]  # llama: no wpe
    if stage == n_stages - 1:
        mods += [part.ln_f, part.lm_head]  # GPT-2's head's weight is wte's (tied); llama's its own
    seen, out = set(), []
    for m in mods:
        for p in m.parameters():
            if id(p) not in seen and p.requires_grad:
                seen.add(id(p))
                out.append(p)
    return out


def _embed_group(dims: ParallelDims, sched, tied: bool = True) -> object | None:
    """The ranks holding the first and the last stage of each pipeline (per coordinate of every other
    dimension): their copies of the tied embedding are summed. Every rank creates every group. None when
    one rank holds both, or the head is not tied (llama)."""
    if sched.rank_of(0) == sched.rank_of(sched.n_stages - 1) or not tied:
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


class PipelineExecutor:
    """The pipeline's step executor: `Parallel` hands it the step's microbatches (forward_backward), and
    asks it to finish the gradients, clip their norm and evaluate; it reads the rest (the data-parallel
    layer, the loss, autocast) from the `Parallel` it serves. Built by `Parallel` through the pp layer's
    handle (`split`'s `executor`), so the composition has no pipeline branch."""

    def __init__(self, par, cfg, stages, sched):
        from shardlab.parallel.pp.engine import PipelineEngine

        dims, model, dp, device = par.dims, par.model, par.dp, par.device
        part = par.layers[-1].part  # this rank's part as the last layer inside the dp layer left it
        self.par, self.dims, self.dp, self.device = par, dims, dp, device
        self.sched, self.stage_ids = sched, stages
        self.group = dims.group("pp")
        n = sched.n_stages
        ranges = part.pipeline["ranges"]
        if len(stages) == 1:
            modules = {stages[0]: dp.module}  # through the DP layer's wrapper (its forward hooks)
        else:
            modules = {s: _chunk_view(part, s, n, ranges[s]) for s in stages}
        self.is_first, self.is_last = 0 in stages, n - 1 in stages
        self.embed_group = _embed_group(dims, sched, getattr(model, "tied_head", True))
        # Activations between stages: (batch, sequence, d_model); under sequence parallelism each tp rank
        # sends and receives its 1/tp of the sequence (the blocks' residual stream is split that way).
        seq_div = dims.tp if dims.tp > 1 and getattr(cfg.parallel, "sp", False) else 1
        d_model = model.cfg.d_model
        self.act_shape = lambda x: (x.shape[0], x.shape[1] // seq_div, d_model)
        # The parameters each of this rank's stages computes gradients for (a chunk view also carries
        # the part's wte unused unless it is the first or the last stage).
        self.stage_params = {s: _stage_params(part, s, n, ranges[s]) for s in stages}
        self.split = any(i.op == "W" for i in sched.ranks[dims.coord("pp")])  # zb: backward as I then W
        # Whether gradients are handed to the dp layer in one backward (module docstring); torch's stages
        # reduce FSDP2's gradients themselves, at their last backward.
        self.cfg_native = registry.spec(cfg.parallel.pp_schedule).runner == "torch"
        self.handover = (dims.size("dp_cp") > 1 and dp.name != "torch-fsdp2"
                         and (len(stages) > 1 or self.split or self.cfg_native))

        def loss_fn(logits, y):
            return par.loss_fn(logits, y, reduction="sum")

        if self.cfg_native:
            from shardlab.parallel.pp.native import TorchPipeline
            self.engine = TorchPipeline(cfg.parallel.pp_schedule, modules, n, sched.microbatches, loss_fn,
                                        device, group=self.group)
        else:
            self.engine = PipelineEngine(sched, modules, stage_rank=sched.rank_of, pp_rank=dims.coord("pp"),
                                         loss_fn=loss_fn, act_shape=self.act_shape, device=device,
                                         group=self.group, on_last_backward=self._on_last_backward)
            self.final_stage = next(i.stage for i in reversed(sched.ranks[dims.coord("pp")])
                                    if i.op in ("B", "W"))
        self.modules = modules
        # where each module of the whole model runs (the doctor names a culprit's stage and rank by it)
        self.placement = StagePlacement(sched, part.pipeline["all_ranges"], dims,
                                        [name for name, _ in model.named_modules() if name], anatomy.of(model))

    def _on_last_backward(self, stage: int):
        """Before `stage`'s last backward of the step. One stage per rank: switch gradient sync on. Several
        (interleaved) with data parallelism: only the rank's final backward synchronises, and it carries
        the other chunks' unreduced gradients along; when it is a W (zb), the stage's own too, those its
        I halves computed (see the module docstring). Returns those parameters for the engine."""
        if not self.handover:
            self.dp.set_requires_gradient_sync(True)
            return None
        if stage != self.final_stage:
            return None
        self.dp.set_requires_gradient_sync(True)
        others = [p for s in self.stage_ids if s != stage for p in self.stage_params[s]]
        return others + (self.stage_params[stage] if self.split else [])  # the engine skips what W computes

    def forward_backward(self, microbatches, loss_weight, after_backward=None):
        """The schedule over `microbatches`. `after_backward(i, (x, y), loss)` (the doctor's per-microbatch
        hook) runs once microbatch i's backward on this rank is done, in microbatch order; `loss` is its
        summed loss on the rank holding the last stage, None on the others (they compute none). Under
        torch's schedules, which own the loop, the hooks run after it."""
        microbatches = list(microbatches)
        self.dp.set_requires_gradient_sync(False)  # on again before each stage's last backward
        done = _InOrder(microbatches, after_backward)
        with self.par.autocast():
            loss = self.engine.step(microbatches, loss_weight, done if after_backward is not None else None)
        if self.handover and self.cfg_native:
            # torch's schedule ran every backward with sync off: hand the accumulated gradients over now
            self.dp.set_requires_gradient_sync(True)
            terms = zero_terms(p for s in self.stage_ids for p in self.stage_params[s])
            if terms:
                torch.autograd.backward(terms)
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
        return self.dp.clip_grad_norm_(max_norm, self.par.grad_norm_groups, exclude=dup)

    @torch.no_grad()
    def eval_loss_sum(self, x, y, doc_pos=None):
        """Forward only, stage by stage: each rank runs its stages in order, receiving the previous
        stage's activation and sending its own on; the last stage's loss is shared with the pipeline.
        `doc_pos` (packed documents) goes to every stage, as in the schedule's forwards."""
        side = {} if doc_pos is None else {"doc_pos": doc_pos}
        n = self.sched.n_stages
        act = None
        loss = torch.zeros((), device=self.device)
        me, rank_of = self.dims.coord("pp"), self.sched.rank_of
        for s in range(n):
            if rank_of(s) != me:
                continue
            if s > 0 and rank_of(s - 1) != me:  # (the V layout keeps stage p-1 -> p on one rank)
                act = torch.empty(self.act_shape(x), device=self.device)
                comm.recv(act, rank_of(s - 1), group=self.group, tag=f"eval act {s - 1}->{s}")
            out = act = self.modules[s](x if s == 0 else act, **side)
            if s < n - 1:
                if rank_of(s + 1) != me:
                    comm.send(out.contiguous(), rank_of(s + 1), group=self.group, tag=f"eval act {s}->{s + 1}")
            else:
                loss = self.par.loss_fn(out, y, reduction="sum")
        return self._share(loss)

    def _share(self, loss: torch.Tensor) -> torch.Tensor:
        loss = at_least_fp32(loss.detach()).reshape(())
        if self.group is not None:
            comm.all_reduce(loss, group=self.group, tag="pipeline loss")  # zero on every stage but the last
        return loss


class _InOrder:
    """`after_backward` per microbatch, in microbatch order whatever order the schedule finishes them in."""

    def __init__(self, microbatches: list, after_backward):
        self.microbatches, self.after_backward = microbatches, after_backward
        self.ready: dict[int, object] = {}
        self.next = 0

    def __call__(self, mb: int, loss) -> None:
        self.ready[mb] = loss
        while self.next in self.ready:
            i = self.next
            x, y = self.microbatches[i][:2]
            self.after_backward(i, (x, y), self.ready.pop(i))
            self.next += 1
