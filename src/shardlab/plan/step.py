"""One training step, end to end: evaluate(model, train, layout, cluster) -> Plan.

  t_mb     = forward + backward of one micro batch on the slowest stage
             + its tensor-parallel collectives and pipeline sends (exposed, but where critical.py hides them)
             + the device's waits on the host issuing its kernels (plan/host.py)
  pipeline = m * t_mb + bubble,  bubble = the schedule's idle micro-batch times x t_mb (bubble_units)
  exposed  = data-parallel comm not hidden behind compute: bucketed gradient collectives overlap
             the backward pass except the last bucket; ZeRO-3 prefetch overlaps forward and
             backward except the first unit; post-step all-gathers overlap nothing
  step     = pipeline + exposed + optimizer step
  MFU      = model FLOPs (6*Psi*T-style, no recomputation) / (step * GPUs * peak)  (PaLM)
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from shardlab.parallel.pp import registry

from . import attention, fp8 as fp8_mod, fsdp2_kernels, host, moe, offload, overlap
from .comm import Collective, dp_collectives, experts_apart, tp_pp_collectives
from .comm_time import call_time, collective_time, group_placement
from .geometry import local_params, padded_units, units
from .compute import micro_batch_time, optimizer_time
from .critical import BESIDE, BESIDE_WORDS, CRITICAL, critical_comm, sync_waits
from .hardware import Cluster
from .layout import Layout, grad_accum
from .train_spec import TrainSpec
from .memory import Line, memory_lines, stored_per_layer
from .model import ModelSpec


@dataclass
class CommLine:
    c: Collective
    time: float  # seconds per step, all calls
    intra: float  # wire bytes per rank over NVLink / intra-node
    inter: float  # wire bytes per rank over the network
    exposed: float = 0.0
    pipelined: bool = False  # its exposed time from the per-unit simulation (plan/overlap.py)


@dataclass
class Plan:
    model: ModelSpec
    train: TrainSpec
    layout: Layout
    cluster: Cluster
    m: int
    memory: list[Line]
    comm: list[CommLine]
    times: dict[str, float] = field(default_factory=dict)  # name -> seconds per step
    explain: dict[str, str] = field(default_factory=dict)  # name -> formula
    capacity: float = 0.0
    # (forward, backward) seconds per step the device waits on the host (plan/host.py); times["host_wait"] their sum
    host_waits: tuple = (0.0, 0.0)

    @property
    def mem_total(self) -> float:
        return sum(ln.bytes for ln in self.memory)

    @property
    def fits(self) -> bool:
        return self.mem_total <= self.capacity

    @property
    def step_time(self) -> float:
        return self.times["step"]

    @property
    def tokens_per_step(self) -> int:
        return self.train.global_batch * (self.train.seq or self.model.seq)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time

    @property
    def mfu(self) -> float:
        peak = self.cluster.peak_flops if self.train.mixed else self.cluster.peak_flops_fp32
        flops = self.model.model_flops(self.tokens_per_step, self.train.seq)
        return flops / (self.step_time * self.layout.world * peak)

    def bytes_per_step(self) -> dict[str, float]:
        """op -> payload bytes per rank (all groups): summary.json comm.bytes_per_step."""
        out: dict[str, float] = {}
        for cl in self.comm:
            out[cl.c.op] = out.get(cl.c.op, 0) + cl.c.payload
        return out

    def bound(self) -> str:
        """What limits this layout most, in words."""
        t = self.times
        if not self.fits:
            return "memory (does not fit)"
        parts = {"compute": t["compute"], "communication": t["exposed_comm"] + t["tp_pp_comm"] + t["comm_sm_cost"],
                 "pipeline bubble": t["bubble"], "optimizer step": t["optimizer"] + t["zero_copies"],
                 "the host issuing kernels": t["host_wait"]}
        name = max(parts, key=parts.get)
        return f"{name} ({parts[name] / t['step']:.0%} of the step)"




def evaluate(model: ModelSpec, train: TrainSpec, lay: Layout, cluster: Cluster) -> Plan:
    model = model.expert_view(lay.ep, train.moe_load)  # the busiest rank's E / ep experts (params: the model's)
    m = _micro_batches(model, train, lay, cluster)
    plan = Plan(model, train, lay, cluster, m, memory_lines(model, train, lay, m), [], capacity=capacity(cluster))
    mt = micro_batch_time(model, train, lay, cluster)
    t_copy = grad_copy_time(model, train, lay, cluster) + grad_accumulate_time(model, train, lay, cluster, m)
    if t_copy:
        mt = replace(mt, bwd=mt.bwd + t_copy)
    # offload_activations: the passes wait where a block's copy to or from host memory outlasts what hides it
    offload_why = ""
    if lay.offload_activations:
        wf, wb, offload_why = offload.seconds(*stored_per_layer(model, train, lay), mt.fwd, mt.bwd, lay, cluster)
        mt = replace(mt, fwd=mt.fwd + wf, bwd=mt.bwd + wb)
    # communication, each collective timed alone, then overlapped where the strategy allows
    for c in tp_pp_collectives(model, train, lay, m) + dp_collectives(model, train, lay, m):
        plan.comm.append(CommLine(c, *collective_time(c, lay, cluster)))
    tp_pp, tp_hidden, ub_cost = critical_comm(plan.comm, mt, lay, cluster, m)
    tp_pp += sync_waits(plan.comm, mt, m, cluster)
    # the device idles where the host issues a block's kernels slower than the device runs them (plan/host.py)
    waits, host_why = host.waits(model, train, lay, mt.host, mt.block, mt.blocks,
                                 tp_pp / m / mt.blocks if mt.blocks else 0.0, cluster.host_kernel_s)
    wait = sum(waits)
    plan.host_waits = (m * waits[0], m * waits[1])
    t_mb = mt.fwd + mt.bwd + tp_pp / m + wait
    exposed = _overlap_dp_comm(plan.comm, mt, m, lay, cluster, model, t_mb)
    # NCCL's kernels run on SMs the overlapped GEMMs then lack: the hidden time costs compute its share
    sm_cost = cluster.sm_share_comm * (tp_hidden + sum(cl.time - cl.exposed for cl in plan.comm
                                                       if cl.c.group not in CRITICAL)) + ub_cost
    # torch's fully_shard runs its own copies around its collectives in place of the flat-buffer ones
    fsdp2 = fsdp2_kernels.kernels(model, train, lay, cluster, plan.comm, m)
    copies = fsdp2.seconds if fsdp2 else _zero_copies(plan.comm, lay, cluster)
    bubble = bubble_units(lay, m) * t_mb
    t_opt, opt_why = _optimizer_step(model, train, lay, cluster)

    T = plan.times
    T["forward"], T["backward"] = m * mt.fwd, m * mt.bwd
    T["compute"] = m * (mt.fwd + mt.bwd)
    T["tp_pp_comm"] = tp_pp
    T["host_wait"] = sum(plan.host_waits)
    T["bubble"] = bubble
    T["comm_total"] = sum(cl.time for cl in plan.comm)
    T["exposed_comm"] = exposed
    T["optimizer"] = t_opt
    T["zero_copies"] = copies
    T["comm_sm_cost"] = sm_cost
    T["trainer"] = _trainer_time(plan.comm, lay, cluster)
    T["step"] = m * t_mb + bubble + exposed + sm_cost + t_opt + copies + T["trainer"]
    _explain(plan, mt, t_mb, opt_why)
    plan.explain["host_wait"] = host_why or "none: " + (
        "the whole iteration in CUDA graphs" if train.cuda_graphs == "full" else
        "compiled blocks (not counted)" if train.compile else
        "the host keeps ahead of the device" if cluster.host_kernel_s else
        "no GPU preset (a profile measures the framework's time in situ)")
    if offload_why:
        plan.explain["forward"] += f"; {offload_why}"
    if fsdp2:
        plan.explain["zero_copies"] = fsdp2.why
    return plan


def capacity(cluster: Cluster) -> float:
    """Bytes a GPU's allocator can hand out: what a plan's memory must fit in."""
    return cluster.hbm_bytes * cluster.mem_usable_fraction


def memory_fits(model: ModelSpec, train: TrainSpec, lay: Layout, cluster: Cluster) -> bool:
    """Whether `evaluate` would find the layout fits, without timing it: the memory lines need no times (a search
    that keeps only fitting layouts times only those)."""
    model = model.expert_view(lay.ep, train.moe_load)
    m = _micro_batches(model, train, lay, cluster)
    return sum(ln.bytes for ln in memory_lines(model, train, lay, m)) <= capacity(cluster)


def grad_accumulate_time(model: ModelSpec, train: TrainSpec, lay: Layout, cluster: Cluster, m: int) -> float:
    """Seconds per micro batch, averaged over the step's m, of `TrainSpec.grad_accum_add`: autograd's AccumulateGrad
    adds every micro batch's gradient after the first into param.grad (torch/csrc/autograd/functions/accumulate_grad.h:
    the first is stolen, later ones `variable_grad += new_grad`), reading both and writing one: 3e B per parameter
    at the achieved HBM bandwidth of that parameter's bytes, (m - 1) times a step."""
    if not train.grad_accum_add or m < 2:
        return 0.0
    return _per_parameter_pass(3 * train.param_bytes, model, lay, cluster) * (m - 1) / m


def grad_copy_time(model: ModelSpec, train: TrainSpec, lay: Layout, cluster: Cluster) -> float:
    """Seconds per micro batch of `TrainSpec.grad_copy`: each parameter's 16-bit gradient added into its fp32
    accumulation buffer by a kernel of its own (apex DistributedFusedAdam `_grad_copy`: `grad_out.add_(grad_in)`,
    once per parameter per backward), reading the gradient and the buffer and writing the buffer:
    (e + 4 + 4) B per parameter at the achieved HBM bandwidth of that parameter's bytes."""
    if not train.grad_copy or not train.mixed:
        return 0.0
    return _per_parameter_pass(train.param_bytes + 8, model, lay, cluster)


def _per_parameter_pass(per: float, model: ModelSpec, lay: Layout, cluster: Cluster) -> float:
    """Seconds of one kernel per parameter of this rank moving `per` bytes an element, each at the achieved HBM
    bandwidth of its own bytes (the backward's gradient passes above)."""
    return sum(per * x / cluster.hbm_at(per * x) for u in units(model, lay.tp, lay.pp, lay.v) for x in u)


def _micro_batches(model: ModelSpec, train: TrainSpec, lay: Layout, cluster: Cluster) -> int:
    """m, the micro batches per step, once the layout is known to be runnable on this cluster."""
    train.check()
    lay.check(model)
    if lay.world > cluster.num_gpus:
        raise ValueError(f"layout needs {lay.world} GPUs (dp*tp*pp*cp), cluster has {cluster.num_gpus}")
    m = grad_accum(train, lay)
    if lay.pp > 1 and m < lay.pp:
        raise ValueError(f"pipeline needs at least p={lay.pp} micro batches per step, got m={m}")
    return m


def bubble_units(lay: Layout, m: int) -> float:
    """The pipeline's idle time per step in units of t_mb (one micro batch's forward + backward on a rank):
    the schedule row's closed form (parallel/pp/registry.analytic_bubble: idle ÷ step) turned into idle ÷
    busy x m. 1F1B and GPipe: p-1; interleaved (p-1)/v; ZB-H1 (p-1)/3 (Qi et al. 2023, F = I = W); ZB-V and
    DualPipeV max(p-1, 2(2p-1-m))/6 (the V's warm-up that few micro batches leave unfilled). A schedule
    without a closed form (a table read from a file) is planned as 1F1B."""
    if lay.pp <= 1:
        return 0.0
    f = registry.analytic_bubble(lay.schedule, lay.pp, m, lay.v) if lay.schedule in registry.SPECS else None
    return float(lay.pp - 1) if f is None else f / (1 - f) * m


def _overlap_dp_comm(comm: list[CommLine], mt, m: int, lay: Layout, cluster: Cluster, model: ModelSpec = None,
                     t_mb: float = 0.0) -> float:
    """Sets each data-parallel collective's exposed time; returns their sum."""
    # ZeRO's unit-wise collectives on GPU presets: unit by unit (plan/overlap.py); what they hide uses up the
    # budget the rest (HSDP's replica all-reduce, DDP's buckets) shares
    used_all, used_bwd = _unit_pipeline(comm, mt, m, lay, cluster, model, t_mb)
    # one compute budget shared by every overlappable collective: all of forward+backward, of which
    # gradient collectives may only use the backward part (and once-per-step ones the last one)
    for cl in comm:
        if cl.c.group in CRITICAL or getattr(cl, "pipelined", False):
            continue
        if cl.c.overlap == "none" or cl.time == 0:
            cl.exposed = cl.time
            continue
        reps = m if cl.c.per_micro else 1
        avail = m * (mt.fwd + mt.bwd) - used_all
        if cl.c.overlap == "backward":
            avail = min(avail, reps * mt.bwd, m * mt.bwd - used_bwd)
        # the last bucket (first unit, for gathers) waits for, or holds up, the compute
        last = call_time(cl.c.op, cl.c.last_payload, cl.c.n, group_placement(cl.c.group, lay, cluster),
                         cluster)[0] if cl.c.last_payload else cl.time / max(1, cl.c.calls // reps) / reps
        hideable = max(0.0, cl.time - last * reps)
        hidden = cluster.overlap_efficiency * max(0.0, min(hideable, avail))
        used_all += hidden
        used_bwd += hidden if cl.c.overlap == "backward" else 0.0
        cl.exposed = cl.time - hidden
    return sum(cl.exposed for cl in comm if cl.c.group not in CRITICAL)


def _unit_pipeline(comm: list[CommLine], mt, m: int, lay: Layout, cluster: Cluster, model, t_mb: float):
    """ZeRO's per-unit gathers and reductions (the shard group's), simulated unit by unit (plan/overlap.py)
    on clusters with `unit_pipeline` (GPU presets): sets their exposed time, marks them pipelined and
    returns the (all, backward) compute they hide behind. (0, 0) where it does not apply: calibrated
    profiles, DDP, pipeline stages, offload, a model with no blocks."""
    if not cluster.unit_pipeline or model is None or lay.strategy == "ddp" or lay.pp > 1 \
            or lay.offload != "none" or lay.dp_cp == 1 or not mt.block[0]:
        return 0.0, 0.0
    sg = "dp_shard" if lay.replicate > 1 else "dp"
    mine = [cl for cl in comm if cl.c.group == sg and cl.c.overlap != "none" and cl.time > 0
            and cl.c.op in ("all_gather", "reduce_scatter", "all_reduce")]
    ag = next((cl for cl in mine if cl.c.op == "all_gather"), None)
    rs = next((cl for cl in mine if cl.c.op != "all_gather"), None)
    if ag is None and rs is None:
        return 0.0, 0.0
    k = t_mb / (mt.fwd + mt.bwd) if mt.fwd + mt.bwd > 0 else 1.0  # TP's collectives widen the windows
    st = overlap.stages(model, lay, cluster, mt, m, ag, rs, k)
    step, wait, tail = overlap.simulate(st, m, rs_every=lay.strategy != "zero1")
    # the compute's waits are the gathers' (a gather queued behind a reduce-scatter included), the stream's
    # run past the last compute the reductions'; what one cannot hold goes to the other
    ag_exp = min(ag.time, wait) if ag is not None else 0.0
    rs_exp = min(rs.time, tail + wait - ag_exp) if rs is not None else 0.0
    e = cluster.overlap_efficiency
    for cl, exposed in ((ag, ag_exp), (rs, rs_exp)):
        if cl is not None:
            cl.exposed = cl.time - e * (cl.time - exposed)
            cl.pipelined = True
    hidden_rs = rs.time - rs.exposed if rs is not None else 0.0
    hidden_ag = ag.time - ag.exposed if ag is not None else 0.0
    return hidden_rs + hidden_ag, hidden_rs


def _zero_copies(comm: list[CommLine], lay: Layout, cluster: Cluster) -> float:
    """Seconds per step of ZeRO's flat-buffer copies (0 for ddp)."""
    # ZeRO's flat-buffer layout, on the compute stream. Per unit call (payload P, shard S = P/N):
    # reduce-scatter packs the gradients into a fresh N x S buffer and receives into a fresh S one;
    # all-gather receives into a fresh N x S buffer and copies out into the parameters' full storage
    # (zero3: freshly re-allocated; zero1/2: live), zero1/2 packing the shard with a fresh cat first.
    # Filling fresh memory (page faults on first touch) is the calibrated `flat` family; a copy
    # into live memory the `copy` one; the collective's own transfer into a live buffer is already
    # in its alpha-beta fit, so a fresh output adds only the first-touch difference
    if lay.strategy == "ddp":
        return 0.0
    copies = 0.0
    fa = cluster.gemm_table.get("ewa:flat", 0.0)
    for cl in comm:
        if cl.c.group not in ("dp", "dp_shard", "edp") or cl.c.op not in ("reduce_scatter", "all_gather") \
                or cl.c.payload <= 64 * lay.dp_cp:
            continue
        # calibrated copy rates, else the achieved HBM bandwidth at one call's buffer (GPU presets)
        cb = cluster.gemm_table.get("ew:copy") or cluster.hbm_at(cl.c.payload / max(1, cl.c.calls))
        fb = cluster.gemm_table.get("ew:flat", cb)
        first_touch = max(0.0, 1 / fb - 1 / cb)
        P, S = cl.c.payload, cl.c.payload / cl.c.n
        if cl.c.op == "reduce_scatter":
            copies += cl.c.calls * fa + 2 * P / fb + 2 * S * first_touch
        elif lay.strategy == "zero3":
            copies += cl.c.calls * fa + 2 * P * first_touch + 2 * P / fb
        else:
            copies += cl.c.calls * fa + 2 * P * first_touch + 2 * P / cb + 2 * S / fb
    return copies / cluster.compute_speed(lay.world)


def _optimizer_step(model: ModelSpec, train: TrainSpec, lay: Layout, cluster: Cluster) -> tuple[float, str]:
    """(seconds, formula) of the optimizer on this rank's shard of the states."""
    numels = [x for u in units(model, lay.tp, lay.pp, lay.v) for x in u]
    psi_opt = padded_units(model, lay.tp, lay.pp, lay.v, lay.shard, lay.padding)[0] / lay.shard \
        if lay.strategy != "ddp" \
        else local_params(model, lay.tp, lay.pp, lay.v)
    if lay.strategy != "ddp" and experts_apart(model, lay):  # the experts' states shard over their edp group
        psi_opt = (padded_units(model, lay.tp, lay.pp, lay.v, lay.shard, lay.padding, "dense")[0] / lay.shard
                   + padded_units(model, lay.tp, lay.pp, lay.v, lay.edp, lay.padding, "experts")[0] / lay.edp)
    t_opt, opt_why = optimizer_time(psi_opt, train, lay, cluster, tensors=len(numels))
    cost = train.optimizer_row.plan_cost(model, train, lay)  # the row's hook: Muon's NS and exchange
    if cost is not None and cost["ns_flops"]:
        bw = cluster.intra_bw if lay.world <= cluster.gpus_per_node else cluster.inter_bw
        ns = cost["ns_flops"] / (cluster.peak_flops * cluster.gemm_efficiency)
        wire = (cost["muon.gather"] + cost["muon.scatter"]) * (1 - 1 / max(1, lay.shard * lay.tp)) / bw
        t_opt += ns + wire
        opt_why += (f" + Newton-Schulz {cost['ns_flops']:.3g} FLOPs at {cluster.gemm_efficiency:g} x peak + "
                    f"Muon's gather+scatter {cost['muon.gather'] + cost['muon.scatter']:,} B")
    return t_opt / cluster.compute_speed(lay.world), opt_why


def _trainer_time(comm: list[CommLine], lay: Layout, cluster: Cluster) -> float:
    # calibrated on shardlab's trainer: data, doctor, bookkeeping per step, and each collective's
    # Python path and sync skew per call (0 on presets)
    dp_calls = sum(cl.c.calls for cl in comm if cl.c.group not in CRITICAL) if lay.world > 1 else 0
    per_call = cluster.call_overhead.get(lay.strategy, cluster.call_overhead.get("ddp", 0.0))
    return trainer_step_overhead(cluster, lay.world) + dp_calls * per_call


def _explain(plan: Plan, mt, t_mb: float, opt_why: str) -> None:
    """plan.explain: each time's formula, with this plan's numbers."""
    X, m, cluster = plan.explain, plan.m, plan.cluster
    units = bubble_units(plan.layout, m)
    X["forward"] = f"{m} micro batches x {mt.fwd * 1e3:.3f} ms " + {
        "in situ": "(GEMMs, attention, LayerNorm, GELU at their in-situ rates + the remainder of the pass "
                   "measured in situ at this model and micro batch)",
        "interpolated": "(this model's passes measured in situ at other micro batches: least-squares line in b)",
        "scaled": "(per-op roofline x the measured / estimated ratio of the models calibrated in situ)",
    }.get(mt.how, "(per-op roofline: GEMM FLOPs / achieved FLOP/s, elementwise bytes / bandwidth, + dispatch)") \
        + _gpu_terms(cluster, plan.train.mixed, mt.kernels, getattr(plan.train, "fp8", "none"),
                     host.launch_gap(plan.train, cluster.kernel_gap_s),
                     (plan.train.seq or plan.model.seq) // plan.layout.cp) + fp8_mod.cast_note(plan.train) + mt.compiled + mt.mixed \
        + moe.explain_note(plan.model, plan.train, plan.layout) \
        + attention.shape_note(plan.model, plan.train, cluster, (plan.train.seq or plan.model.seq) // plan.layout.cp)
    X["backward"] = f"{m} x {mt.bwd * 1e3:.3f} ms (2 GEMMs per forward GEMM" \
                    + ("; in-situ remainder, + the doctor's gradient hooks with the health check"
                       if mt.how != "roofline" else "") \
                    + (f"; recompute {mt.recompute * 1e3:.3f} ms" if mt.recompute else "") \
                    + (f"; gradient copy into the fp32 buffer {grad_copy_time(plan.model, plan.train, plan.layout, cluster) * 1e3:.3f} ms"
                       f" ({plan.train.param_bytes} + 4 + 4 B per parameter, TrainSpec.grad_copy)"
                       if plan.train.grad_copy else "") \
                    + (f"; autograd's gradient accumulation "
                       f"{grad_accumulate_time(plan.model, plan.train, plan.layout, cluster, m) * 1e3:.3f} ms (3 x "
                       f"{plan.train.param_bytes} B per parameter, m - 1 of m micro batches, TrainSpec.grad_accum_add)"
                       if plan.train.grad_accum_add and m > 1 else "") + ")"
    X["compute"] = "forward + backward"
    X["tp_pp_comm"] = "tensor-parallel collectives + pipeline sends" \
        + (" + expert parallelism's all-to-alls" if plan.layout.ep > 1 else "") + ", on the critical path"
    a2a = [cl for cl in plan.comm if cl.c.overlap == "ep_1f1b"]
    if a2a:
        X["tp_pp_comm"] += "; the all-to-alls beside another micro batch's pass (ep_overlap): " + ", ".join(
            f"{cl.exposed * 1e3:.3f} of {cl.time * 1e3:.3f} ms exposed" for cl in a2a)
    chunked = [cl for cl in plan.comm if cl.c.overlap == "chunk"]
    if chunked:
        X["tp_pp_comm"] += "; the pipeline's transfers beside the next chunk's compute (overlap_p2p_comm): " + ", ".join(
            f"{cl.c.op} {cl.exposed * 1e3:.3f} of {cl.time * 1e3:.3f} ms exposed" for cl in chunked)
    beside = [cl for cl in plan.comm if cl.c.overlap in BESIDE]
    if beside:
        X["tp_pp_comm"] += ("; Transformer Engine's userbuffers (tp_comm_overlap): " if plan.layout.tp_comm_overlap
                            else "; Megatron's async TP backward (tp_async_backward): ") + ", ".join(
            f"{cl.c.op} {cl.exposed * 1e3:.3f} of {cl.time * 1e3:.3f} ms exposed {BESIDE_WORDS[cl.c.overlap]}"
            for cl in beside)
    X["bubble"] = f"the schedule's idle t_mb per step x t_mb = {units:.3g} x {t_mb * 1e3:.3f} ms (p-1 for 1f1b, " \
                  f"(p-1)/v interleaved, (p-1)/3 zb, max(p-1, 2(2p-1-m))/6 zbv/dualpipev); fraction of the busy " \
                  f"time {units / m:.3f}"
    X["comm_total"] = "sum of alpha-beta times of every collective" + (
        f" (per call {cluster.call_latency * 1e6:.1f} us + ring steps x alpha + wire / achieved bus bandwidth: "
        f"NVLink {cluster.intra_bw * cluster.busbw_eff_intra / 1e9:.0f} GB/s rings, "
        f"{cluster.intra_bw * cluster.busbw_eff_allreduce_intra / 1e9:.0f} GB/s all-reduce"
        + (f", {cluster.intra_bw * cluster.busbw_eff_alltoall_intra / 1e9:.0f} GB/s NCCL all-to-all"
           if cluster.busbw_eff_alltoall_intra else "") + "; network "
        f"{cluster.inter_bw * cluster.busbw_eff_inter / 1e9:.0f} GB/s"
        + (f", {cluster.inter_bw * cluster.busbw_eff_alltoall_inter / 1e9:.0f} GB/s NCCL all-to-all"
           if cluster.busbw_eff_alltoall_inter else "") + ")" if cluster.call_latency else "") + (
        "; across nodes one ring through every rank: each step's latency added, the transfer at the slower of "
        "the NVLink and network phases" if cluster.pipelined_phases else "")
    X["exposed_comm"] = f"data-parallel comm not hidden (overlap efficiency {cluster.overlap_efficiency:g})"
    piped = [cl for cl in plan.comm if cl.pipelined]
    if piped:
        X["exposed_comm"] += "; ZeRO's per-unit collectives unit by unit (one unit prefetched ahead, one NCCL " \
            "stream): " + ", ".join(f"{cl.c.op} {cl.exposed * 1e3:.3f} of {cl.time * 1e3:.3f} ms exposed"
                                    for cl in piped)
    ub = plan.layout.tp_comm_overlap
    hidden = sum(cl.time - cl.exposed for cl in plan.comm
                 if cl.c.group not in CRITICAL or (cl.c.overlap in BESIDE and not ub) or cl.c.overlap == "chunk"
                 or (cl.c.overlap == "ep_1f1b" and not plan.layout.ep_sms))
    X["comm_sm_cost"] = (f"hidden comm {hidden * 1e3:.3f} ms x {cluster.sm_share_comm:.3f} of the SMs "
                         f"({cluster.nccl_ctas} NCCL CTAs / {cluster.sms} SMs) taken from the overlapped compute"
                         + ("; userbuffers' hidden TP collectives x the SMs their kernels hold (ring exchange 1, "
                            "bulk 2-24: UB_SMS) / the SMs" if ub else "")
                         + (f"; the hidden all-to-alls x the {plan.layout.ep_sms} SMs their dispatcher's kernels hold "
                            f"(ep_sms) / the SMs" if plan.layout.ep_sms and plan.layout.ep_overlap else ""))
    X["optimizer"] = opt_why
    X["zero_copies"] = "ZeRO flat buffers: packing and unpacking copies, fresh buffers at the first-touch (flat) bandwidth"
    X["trainer"] = "the trainer's own per-step work + per collective call (calibrated on miniature runs; 0 on presets)"
    X["step"] = "m*t_mb (host waits in t_mb) + bubble + exposed comm + comm SM cost + optimizer + ZeRO copies + trainer"


def _gpu_terms(c: Cluster, mixed: bool, kernels: tuple[int, int] = (0, 0), fp8: str = "none", gap: float = 0.0,
               seq: int = 0) -> str:
    """The GPU terms behind the per-op roofline, in words (empty where none applies: calibrated profiles); `gap`
    the launch gap the plan ran with (host.launch_gap)."""
    if c.gemm_table or c.gemm_fit:
        return ""
    out = []
    if c.clock_factor < 1:
        out.append(f"sustained clock ({c.power_w:g} W / {c.tdp_w:g} W)^(1/3) = {c.clock_factor:.3f}")
    out.append(f"GEMMs at {c.gemm_efficiency:g} of peak" + (" (sustained, MSMF)" if c.gemm_efficiency != 0.75 else ""))
    if fp8 == "mxfp8" and c.peak_flops_fp8 and not fp8_mod.mxfp8_native(c):
        out.append("MXFP8 emulated (quantize-dequantize, 16-bit GEMMs): no block-scaled tensor cores before Blackwell")
    elif fp8 != "none" and c.peak_flops_fp8:
        eff8 = c.gemm_efficiency_fp8 or c.gemm_efficiency
        out.append(f"FP8 GEMMs ({fp8}) at {eff8:g} of the {c.peak_flops_fp8 / 1e12:,.0f} TF FP8 peak"
                   + (" (sustained, FP8 MSMF)" if c.gemm_efficiency_fp8 else "")
                   + (f" x {fp8_mod.MXFP8_KERNEL:g} (MXFP8's block-scaled kernels against tensorwise's, Transformer "
                      "Engine's GEMM profile)" if fp8 == "mxfp8" else ""))
    if fp8 == "rowwise" and c.fp8_rowwise_by_shape:
        from .fp8_rowwise import SOURCE
        out.append(f"compiled rowwise linears: 16-bit time / {SOURCE}")
    if c.gemm_roofline:
        out.append(f"x wave quantization on {c.sms} SMs, never faster than their HBM traffic")
    if c.attention and mixed:
        from .attention import MEASURED_BY_SEQ, MEASURED_SEQ, NAMES, by_seq, efficiency, generation
        at = seq if c.attention_by_seq and by_seq(c.attention, generation(c.peak_flops), c.attention_device) else 0
        f, b = efficiency(c.attention, c.peak_flops, at, c.attention_device)
        named = NAMES["flash2" if c.attention == "triton" else c.attention]
        measured = (c.attention, c.attention_device) in MEASURED_BY_SEQ
        out.append(f"attention {c.attention}: causal half of 4Tsh/t at {f:.1%} of peak forward, 2.5x at {b:.1%} backward"
                   + (f" ({named} measured on a {c.attention_device} at seq {at or MEASURED_SEQ:,}: cuDNN's own "
                      "benchmark)" if measured else "")
                   + (f" ({named} on Hopper at seq {seq:,}: the FlashAttention-3 paper's figures"
                      + ("; Triton's at half" if c.attention == "triton" else "") + ")" if at and not measured else "")
                   + (f" x {c.attention_sustained:.3f} (the papers' short benchmarks at the sustained clock: MSMF / "
                      "MAMF)" if c.attention_sustained < 1 else ""))
    if c.hbm_efficiency:
        out.append("memory-bound kernels at the achieved HBM bandwidth by their bytes (Calculon's "
                   + ", ".join(f"{f:.0%} from {b / 1e6:g} MB" if b else f"{f:.0%} below" for b, f in c.hbm_efficiency)
                   + ")")
    if gap:
        out.append(f"launch gaps {gap * 1e6:g} us per kernel ({kernels[0]} forward, {kernels[1]} backward "
                   "kernels per block)")
    return "; " + ", ".join(out)


def trainer_step_overhead(cluster: Cluster, world: int) -> float:
    """The trainer's calibrated per-step seconds at this world size; at a world size never calibrated,
    that of the largest calibrated one below it (else the smallest above): the same Python per step
    on every rank. 0 on presets."""
    cal = {int(k): v for k, v in cluster.step_overhead.items()}
    if not cal:
        return 0.0
    if world in cal:
        return cal[world]
    return cal[max((w for w in cal if w < world), default=min(cal))]
