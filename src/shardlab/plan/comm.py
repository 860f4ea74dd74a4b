"""Communication: what each strategy sends, per rank per step, stated the way shardlab's comm module records it:
  payload = size of the full tensor handed to the collective (all_reduce: the buffer;
            reduce_scatter: the unsharded input; all_gather: the gathered output)
  wire    = what a ring sends per rank (comm_time.wire_factor).
The units and buckets they go in are plan/geometry.py's; how long they take, plan/comm_time.py's.
"""
from __future__ import annotations

from dataclasses import dataclass

from shardlab import precision
from shardlab.parallel.tp import cost as tp_cost  # TP's byte formulas, owned by its package
from . import fp8, moe, torch_tp
# call_time, padded, units, ddp_buckets and local_params are also named as `plan.comm`'s (the registry's cost
# hooks, parallel/tp/spec.py; the benches; the tests)
from .comm_time import call_time, wire_factor  # noqa: F401
from .geometry import ddp_buckets, local_params, padded, padded_units, tp_replicated_params, units  # noqa: F401
from .layout import Layout, stage_layers
from .train_spec import TrainSpec
from .model import ModelSpec

DTYPE_BYTES = precision.BYTES
MiB = 2**20


@dataclass(frozen=True)
class Collective:
    op: str  # all_reduce | reduce_scatter | all_gather | p2p
    group: str  # dp | dp_shard | dp_replicate | tp | pp
    n: int  # group size
    payload: float  # bytes per rank per step, summed over calls
    calls: int  # calls per step
    overlap: str  # compute it can hide behind: backward | forward+backward | none; TP's beside a GEMM (critical.py):
    #              wgrad | dgrad (async TP backward, userbuffers' bulk) | col_fprop | row_fprop | row_dgrad (userbuffers)
    why: str  # the formula, for --explain
    per_micro: bool = False  # issued every micro batch (else once per step)
    last_payload: float = 0.0  # the call that cannot overlap (last bucket, first unit); 0 = none
    syncs: int = 0  # waits on the group after compute per step (the sync wait's count); 0 = one per call
    # an all-to-all a dispatcher deduplicates across nodes (Layout.ep_dedup): (k, E, groups, group top-k) of the routing
    # it carries, from which its share of the payload on the network follows (comm_time.collective_time)
    dedup: tuple = ()
    # whose kernels move it: "nccl" (NCCL's collectives, torch's all_to_all_single included), or "flex" (a fused MoE
    # dispatcher's own dispatch and combine kernels: DeepEP, HybridEP), for the all-to-all's achieved rate
    # (comm_time.achieved_bw, Cluster.busbw_eff_alltoall_intra)
    kernels: str = "nccl"

    @property
    def wire(self) -> float:
        return wire_factor(self.op, self.n) * self.payload


def dp_collectives(model: ModelSpec, train: TrainSpec, lay: Layout, m: int) -> list[Collective]:
    """Data-parallel collectives of shardlab's strategies (and ZeRO's paper), per rank per step.
    m = micro batches per step: DDP and zero1 sync once (on the last micro batch); ZeRO-2/3
    reduce-scatter every micro batch because a rank keeps only its gradient shard. ZeRO uses one
    collective per wrap unit (root + one per block): a unit's flat buffer. An MoE model's experts are
    reduced apart, over the ranks that hold them (`experts_apart`)."""
    health = [Collective("all_gather", "dp", lay.dp, 64 * lay.dp, 1, "none",
                         "8 fp64 signals x N ranks: the doctor's per-step check")] if lay.health_check else []
    apart = experts_apart(model, lay)
    if lay.dp_cp == 1:
        out = health
    else:
        out = _strategy_collectives(model, train, lay, m, "dense" if apart else "all",
                                    "dp_shard" if lay.strategy != "ddp" and lay.replicate > 1 else "dp",
                                    lay.dp_cp if lay.strategy == "ddp" else lay.shard, lay.replicate, health)
    if apart and lay.edp > 1:
        out = out + _strategy_collectives(model, train, lay, m, "experts", "edp", lay.edp, 1, [])
    return out


def experts_apart(model: ModelSpec, lay: Layout) -> bool:
    """Whether the experts' gradients go over another group than the rest: each expert is held by edp = tp x cp
    x dp / ep ranks (its expert-data-parallel group), which Megatron-Core's distributed optimizer reduces and
    shards its expert buffers over, and shardlab's expert parallelism all-reduces (tag ep.expert_grads); the
    dense parameters go over dp x cp. One group when they are the same ranks' count (ep = tp)."""
    return bool(model.moe_experts) and lay.edp != lay.dp_cp


def _grad_bytes(train: TrainSpec, lay: Layout) -> int:
    return DTYPE_BYTES[lay.comm_dtype] if lay.comm_dtype else train.grad_bytes


def _strategy_collectives(model: ModelSpec, train: TrainSpec, lay: Layout, m: int, part: str, sg: str, s: int,
                          r: int, health: list[Collective]) -> list[Collective]:
    """The strategy's gradient (and ZeRO's parameter) collectives of `part` of the parameters (geometry.units)
    over group `sg` of `s` ranks (ddp: the all-reduce's; ZeRO: the shard group's, `r` replicas of it), with the
    doctor's per-step check (`health`) where shardlab's trainer issues it."""
    us = units(model, lay.tp, lay.pp, lay.v, part)
    numels = [x for u in us for x in u]
    psi = sum(numels)
    if not psi:
        return health
    gb = _grad_bytes(train, lay)
    pb = train.param_bytes
    full, unit_full = padded_units(model, lay.tp, lay.pp, lay.v, s, lay.padding, part)
    k = len(us)
    what = "Psi" if part == "all" else f"Psi_{part}"
    if lay.strategy == "ddp":
        sizes = ddp_buckets([gb * x for x in reversed(numels)], int(lay.first_bucket_mb * MiB),
                            int(lay.bucket_mb * MiB), int(lay.last_bucket_mb * MiB))
        return [Collective("all_reduce", sg, s, gb * psi, len(sizes), "backward",
                           f"{gb}*{what} = {gb}*{psi:,} once per step (last micro batch), {len(sizes)} buckets",
                           last_payload=sizes[-1])] + health
    out: list[Collective] = []
    grad_op = "all_reduce" if (lay.strategy == "zero1" and lay.zero1_impl == "all_reduce") else "reduce_scatter"
    per_micro = lay.strategy != "zero1"
    reps = m if per_micro else 1
    g_bytes = gb * (psi if grad_op == "all_reduce" else full)
    # the root unit (embeddings) finishes its backward last: its reduction cannot overlap
    k_g, per, last = k, "one call per unit", gb * unit_full[0]
    if lay.zero_bucket_mb > 0 and lay.strategy in ("zero1", "zero2"):
        # flat buckets of the reduce dtype, one call each (apex's DistributedFusedAdam); the last bucket waits
        # for every gradient (its ignore_last_bucket), the parameters come back in the same buckets
        bucket = lay.zero_bucket_mb * MiB
        k_g, per, last = max(1, -(-int(g_bytes) // int(bucket))), f"{lay.zero_bucket_mb:g} MiB buckets", bucket
    out.append(Collective(grad_op, sg, s, g_bytes * reps, k_g * reps,
                          "backward" if lay.overlap_grad_reduce else "none",
                          f"{gb}*{what}{'_padded' if grad_op != 'all_reduce' else ''} x {reps} "
                          f"{'micro batches' if per_micro else 'step (last micro batch)'}, {per}"
                          + ("" if lay.overlap_grad_reduce else ", after the backward (not overlapped)"),
                          per_micro=per_micro, last_payload=last))
    if lay.strategy in ("zero1", "zero2"):
        out.append(Collective("all_gather", sg, s, pb * full, k_g, "none",
                              f"{pb}*{what}_padded updated parameters after the step, {per}"))
    else:  # zero3: one all-gather per unit before forward, again before backward if resharded
        f8 = fp8.all_gather_saving(model, train, lay, pb)  # the converted weights gathered in float8
        fwd = pb * full - f8
        # the root unit stays gathered from its forward to its backward (as FSDP2's root does)
        bwd_units = unit_full[1:] + (unit_full[:1] if lay.root_reshards else ())
        bwd = pb * sum(bwd_units) - f8 if lay.reshard_after_forward else 0
        n_bwd = len(bwd_units) if lay.reshard_after_forward else 0
        out.append(Collective("all_gather", sg, s, (fwd + bwd) * m, (k + n_bwd) * m, "forward+backward",
                              f"({pb}*Psi_padded before forward + {bwd:,.0f} B re-gathered before backward)"
                              f" x {m} micro batches, one call per unit",
                              per_micro=True, last_payload=pb * unit_full[0]))
    if grad_op == "reduce_scatter" and part != "experts":
        # sharded gradients: the global grad norm needs one fp32 scalar summed across shards (under TP
        # two: split and copied parameters' squares, summed apart)
        nb = 4 if lay.tp == 1 else 8
        out.append(Collective("all_reduce", sg, s, nb, 1, "none", f"{nb} B: grad-norm partial sums"))
    out += health  # the doctor's per-step check (shardlab's trainer)
    if r > 1:  # HSDP: shards are all-reduced across replicas once per step
        b = gb * full / s
        out.append(Collective("all_reduce", "dp_replicate", r, b, k, "backward",
                              f"{gb}*Psi_padded/{s} across {r} replicas", last_payload=gb * unit_full[0] / s))
    return out


def dp_bytes_per_step(model: ModelSpec, train: TrainSpec, lay: Layout, m: int = 1) -> dict:
    """op -> payload bytes per rank per step: comparable with summary.json comm.bytes_per_step."""
    out: dict[str, float] = {}
    for c in dp_collectives(model, train, lay, m):
        out[c.op] = out.get(c.op, 0) + c.payload
    return out


# Seed 000 names "~110M" parameters at seq 512, fp32, and 838.8 KiB/token at microbatch 1, which
# pins the count to [109,936,640, 109,943,193). We take 109.94M. Figures computed from it are therefore
# the seed's own figure reproduced from the count it implies (a consistency check of the formula below),
# not a measurement of anything (bench/microbatch.py's SEED000_NOTE says so wherever they are written).
SEED000 = {"params": 109_940_000, "seq": 512, "bytes_per_value": 4}


def payload_kib_per_token(params: int, mb: int, seq: int, bytes_per_value: int = 4) -> float:
    """Analytic DDP gradient payload per token: every parameter's gradient once per microbatch."""
    return params * bytes_per_value / (mb * seq) / 1024


def _userbuffers(t: int, layers: int, m: int, act: float, e: int, rerun: bool) -> list[Collective]:
    """Sequence parallelism's collectives under Transformer Engine's userbuffers (Layout.tp_comm_overlap), per
    region collective of a block and micro batch, each tagged with the GEMM it runs beside (compute.tp_hiding):
    the forward's all-gather into the column-parallel GEMMs and reduce-scatter out of the row-parallel one (again
    under recompute), the backward's gradient all-gather into the row-parallel input gradient, the input's re-gather
    beside the column-parallel input gradient and that gradient's reduce-scatter beside the weight gradient. The
    embedding's and the head's (2 a micro batch each way) are not overlapped."""
    n = round(2 * layers * m)  # one per region
    fwd = 2 * n if rerun else n
    where = f"sbh*{e} x 2 per layer x {layers} layers x {m} micro batches"
    again = " (and again in the recompute)" if rerun else ""
    return [Collective("all_gather", "tp", t, act * fwd, fwd, "col_fprop",
                       f"{where}{again} (userbuffers: into the column-parallel GEMMs, ring exchange)", per_micro=True),
            Collective("reduce_scatter", "tp", t, act * fwd, fwd, "row_fprop",
                       f"{where}{again} (userbuffers: out of the row-parallel GEMM, ring exchange)", per_micro=True),
            Collective("all_gather", "tp", t, act * n, n, "row_dgrad",
                       f"{where} (userbuffers: the output gradient into the row-parallel input gradient)",
                       per_micro=True),
            Collective("all_gather", "tp", t, act * n, n, "dgrad",
                       f"{where} (userbuffers, bulk: the input again for the weight gradient, beside the "
                       "column-parallel input gradient)", per_micro=True),
            Collective("reduce_scatter", "tp", t, act * n, n, "wgrad",
                       f"{where} (userbuffers, bulk: the input gradient, beside the weight gradient)", per_micro=True),
            Collective("all_gather", "tp", t, act * 2 * m, 2 * m, "none",
                       f"sbh*{e} x 2 x {m} micro batches (the embedding's and the head's, not overlapped)",
                       per_micro=True),
            Collective("reduce_scatter", "tp", t, act * 2 * m, 2 * m, "none",
                       f"sbh*{e} x 2 x {m} micro batches (the embedding's and the head's, not overlapped)",
                       per_micro=True)]


def tp_pp_collectives(model: ModelSpec, train: TrainSpec, lay: Layout, m: int) -> list[Collective]:
    """Megatron tensor parallelism, as shardlab's own TP sends it (docs/tp.md), per rank per step:
    per layer 2 all-reduces forward (g) and 2 backward (f) of the b*s*h activation, plus the
    vocab-parallel embedding's g forward and the head's f backward. With sequence parallelism every
    one becomes an all-gather and a reduce-scatter (twice the calls and payload, the same wire bytes).
    Full (and shardlab's selective) recomputation repeats the forward ones. The vocab-parallel loss sends 3 fp32 numbers per token
    (max; target logit and sum of exp), O(tokens) and not O(tokens x vocab); SP sums the replicated
    parameters' gradients once per step; the clipped norm adds 2 fp32 sums per step.
    Pipeline: one p2p send of the activation per micro batch per boundary forward, one gradient
    backward (x v interleaved)."""
    out: list[Collective] = []
    s = (train.seq or model.seq) // lay.cp  # under context parallelism a rank holds s/cp tokens
    e = 2 if train.mixed else 4
    tokens = train.micro_batch * s
    act = tokens * model.d_model * e
    layers = stage_layers(model.n_layer, lay.pp, lay.v)
    if lay.tp > 1:
        # shardlab's selective recompute reruns the block's TP collectives too (own TP's go through
        # comm, outside the policy's cache: measured, docs/memory.md); Megatron's selective does not
        rerun = lay.recompute in ("full", "selective")
        # an MoE block has one TP region, its attention: its experts are whole on each rank, which routes its own
        # sequence-parallel tokens (the MLP region's collectives give way to ep_all_to_all); as half a block each.
        # A shared expert is split by TP as the MLP is: its region stays
        full_layers = layers
        if model.moe_blocks and not model.moe_shared_ffn:
            layers = layers - 0.5 * layers * model.moe_blocks / model.n_layer
        n = round(tp_cost.region_calls(layers, m, recompute=rerun))  # + vocab-parallel embedding fwd / head bwd
        # torch's checkpoint with early stop (TrainSpec.recompute_early_stop, recompute.early_stop_recomputed) ends
        # before the block's last GEMM: the region collective after it (SP's reduce-scatter) is not rerun
        skip = round(layers * m) if (lay.recompute == "full" and train.recompute_early_stop) else 0
        stop = f" - {skip} not rerun (the recompute's early stop: the block's last one)" if skip else ""
        # Megatron's async TP backward (Layout.tp_async_backward): the column-parallel linears' input-gradient
        # collectives, 2 per layer, run beside their weight-gradient GEMMs (critical.py hides them there)
        beside = round(2 * layers * m) if lay.tp_async_backward else 0
        if lay.tp_comm_overlap:  # Transformer Engine's userbuffers: every block collective beside a GEMM
            out += _userbuffers(lay.tp, layers, m, act, e, rerun)
        elif lay.sp:  # torch's DTensor TP under torchtitan's recipes: plan/torch_tp.py
            ag, n_ag, why = torch_tp.sp_all_gather(train, lay, layers, m, act, n)
            out.append(Collective("all_gather", "tp", lay.tp, ag, n_ag, "none",
                                  f"sbh*{e} x {n} (sequence parallel: entering each region, both passes){why}",
                                  per_micro=True))
            out.append(Collective("reduce_scatter", "tp", lay.tp, act * (n - skip - beside), n - skip - beside,
                                  "none", f"sbh*{e} x {n - beside} (sequence parallel: leaving each region, both "
                                  f"passes{', but the backward beside the weight gradient' if beside else ''}){stop}",
                                  per_micro=True))
        else:
            out.append(Collective("all_reduce", "tp", lay.tp, act * (n - skip - beside), n - skip - beside, "none",
                                  f"sbh*{e} x (4 per layer{' +2 recompute' if rerun else ''}"
                                  f"{' -2 beside the weight gradient' if beside else ''}"
                                  f" x {layers} layers + 2) x {m} micro batches{stop}", per_micro=True))
        if beside and not lay.tp_comm_overlap:
            op = "reduce_scatter" if lay.sp else "all_reduce"
            out.append(Collective(op, "tp", lay.tp, act * beside, beside, "wgrad",
                                  f"sbh*{e} x 2 per layer x {layers} layers x {m} micro batches (async TP backward: "
                                  "each column-parallel linear's input gradient, beside its weight-gradient GEMM)",
                                  per_micro=True))
            if lay.sp:  # the weight gradient wants the whole input: gathered again, beside the input-gradient GEMM
                out.append(Collective("all_gather", "tp", lay.tp, act * beside, beside, "dgrad",
                                      f"sbh*{e} x 2 per layer x {layers} layers x {m} micro batches (async TP "
                                      "backward: the input gathered again for the weight gradient, beside the "
                                      "input-gradient GEMM)", per_micro=True))
        out.append(Collective("all_reduce", "tp", lay.tp, tp_cost.LOSS_BYTES_PER_TOKEN * tokens * m, 2 * m, "none",
                              f"vocab-parallel loss: 3 fp32 per token (max; target logit, sum of exp) x "
                              f"{tokens} tokens x {m} micro batches", per_micro=True))
        if lay.sp:  # on the gradients as the dp layer holds them: ZeRO's are its (padded) shards
            rep, sh = tp_replicated_params(model, lay.pp), lay.shard
            r = padded(rep, sh, lay.padding) / sh if lay.strategy != "ddp" else sum(rep)
            gb = train.grad_bytes
            out.append(Collective("all_reduce", "tp", lay.tp, gb * r, 1, "none",
                                  f"sequence parallel: {gb} B x {r:,.0f} replicated parameters' gradients"
                                  + (f" (this rank's 1/{sh} shard)" if lay.strategy != "ddp" and sh > 1 else "")))
        k = torch_tp.amax_calls(train, lay, layers, m)
        if k:
            out.append(Collective("all_reduce", "tp", lay.tp, 4 * k, k, "none",
                                  f"float8 tensorwise: 4 B amax agreed over TP x {k} casts of sharded tensors",
                                  per_micro=True))
        out.append(Collective("all_reduce", "tp", lay.tp, tp_cost.GRAD_NORM_BYTES, 1, "none",
                              f"{tp_cost.GRAD_NORM_BYTES} B: grad-norm partial sums (split, copied)"))
    if lay.tp > 1 and model.llama and model.n_kv_heads < lay.tp:
        g = train.grad_bytes * 2 * full_layers * model.kv_width * model.d_model
        out.append(Collective("all_reduce", "tp", lay.tp, g, 1, "none",
                              f"2 x {full_layers} layers x g*h x {train.grad_bytes} B (replicated k, v gradients: "
                              f"n_kv_heads {model.n_kv_heads} < t)"))
    if lay.ep > 1:
        out.append(ep_all_to_all(model, train, lay, m))
    if lay.cp > 1:
        out += [cp_ring(model, train, lay, m)] if lay.cp_impl in ("own", "torch") else cp_a2a(model, train, lay, m)
    if lay.pp > 1:
        sends = 2 * m * lay.v
        gather = lay.pp_scatter_gather and lay.tp > 1 and not lay.sp  # Megatron's scatter/gather (Layout)
        b = act / (lay.tp if lay.sp or gather else 1)
        out.append(Collective("p2p", "pp", 2, b * sends, sends, "chunk" if lay.overlap_p2p_comm else "none",
                              f"sbh*{e}{'/t' if lay.sp or gather else ''} x 2 x {m} micro batches x v={lay.v}"
                              + (" (scatter/gather: 1/t of the activation on each TP rank's send)" if gather else ""),
                              per_micro=True))
        if gather:
            out.append(Collective("all_gather", "tp", lay.tp, act * sends, sends, "none",
                                  f"sbh*{e} x 2 x {m} micro batches x v={lay.v} (scatter/gather: the receiving stage "
                                  "gathers the t pieces of each activation and gradient)", per_micro=True))
    return out


def ep_all_to_all(model: ModelSpec, train: TrainSpec, lay: Layout, m: int) -> Collective:
    """Expert parallelism's token exchange (plan/moe.py; Megatron-Core's all-to-all token dispatcher): per MoE
    block and micro batch the forward's dispatch (each token-slot to its expert's rank) and combine (the results
    back), and the same two in the backward, each handing over this rank's tokens x k rows of h in the
    activations' dtype (balanced routing: (ep - 1) / ep of them leave the rank). On the critical path: each
    waits for the router, the experts for it. Full recomputation dispatches and combines again."""
    e = 2 if train.mixed else 4
    tokens = moe.rank_tokens(model, train, lay)
    layers = stage_layers(model.n_layer, lay.pp, lay.v) * model.moe_blocks / model.n_layer
    per = 6 if lay.recompute == "full" else 4
    calls = round(per * layers * m)
    # the busiest rank receives moe_load x the mean (ModelSpec.expert_view): its links pace the exchange
    size = moe.received_slots(model, train, lay) * model.d_model * e
    routing = (model.moe_top_k, model.moe_experts, model.moe_groups, model.moe_group_topk) if lay.ep_dedup else ()
    dedup = ("; deduplicated across nodes (ep_dedup): each token once per remote node it is routed to "
             + (f"(its top-{model.moe_group_topk} of {model.moe_groups} expert groups), " if model.moe_groups else "")
             + "then over NVLink to its experts there") if routing else ""
    return Collective("all_to_all", "ep", lay.ep, size * calls, calls, "ep_1f1b" if lay.ep_overlap else "none",
                      f"tokens x k x h x {e} B = {tokens} x {model.moe_top_k} x {model.d_model} x {e} x {per} per MoE "
                      f"block (dispatch, combine; forward and backward) x {layers:g} blocks x {m} micro batches"
                      + (f" x the busiest rank's load {model.moe_load:g} (moe_load)" if model.moe_load != 1 else "")
                      + (" (ep_overlap: beside another micro batch's compute)" if lay.ep_overlap else "") + dedup,
                      per_micro=True, dedup=routing, kernels="flex" if lay.ep_dispatcher == "flex" else "nccl")


def cp_ring(model: ModelSpec, train: TrainSpec, lay: Layout, m: int) -> Collective:
    """Ring attention's sends per rank (parallel/cp/ring.py), from context parallelism's cost hook
    (parallel/cp/cost.py): a block is one rank's K and V, 2 * b * (s/cp) * g*d elements (g = n_kv_heads/t
    grouped K/V heads of d = h/a: llama's GQA sends its K/V heads as they are). Per layer and micro batch:
    forward cp-1 blocks; backward cp-1 blocks and cp dK/dV accumulators (fp32 or wider, the last one home
    to its owner); full recompute repeats the forward ring. torchtitan's llama (llama_impl=torchtitan)
    repeats k and v to every query head before SDPA (`repeat_kv`), so torch's ring (cp_impl=torch) gathers
    and returns g = n_head/t heads: 4x the bytes of Llama 3's 8 K/V heads."""
    from shardlab.parallel import layers as registry_

    e = 2 if train.mixed else 4
    layers, full = model.n_layer // lay.pp, lay.recompute == "full"
    d = model.d_model // model.n_head
    own_kv = max((model.n_kv_heads or model.n_head) // lay.tp, 1)
    # torchtitan's repeated heads are what SDPA, and so torch's ring, receives
    repeated = train.llama_impl == "torchtitan" and lay.cp_impl == "torch"
    kv = model.n_head // lay.tp if repeated else own_kv
    tags = registry_.load(registry_.BY_NAME["cp"].cost["bytes"])(
        "own", train.micro_batch, train.seq or model.seq, model.n_head // lay.tp, kv, d, lay.cp, 1, e, layers, full)
    fwd = (lay.cp - 1) * (2 if full else 1)
    sends = (fwd + 2 * lay.cp - 1) * layers * m
    rep = ", repeated by torchtitan's repeat_kv" if kv != own_kv else ""
    syncs = _cp_syncs("own", lay, layers, full)["ring"] * m
    return Collective("p2p", "cp", lay.cp, sum(tags.values()) * m, sends, "none",
                      f"K/V block 2*b*(s/cp)*g*d*{e} (g={kv} K/V heads of d={d}{rep}) x ({fwd} fwd + {lay.cp - 1} bwd) + "
                      f"dK/dV x {lay.cp}, x {layers} layers x {m} micro batches", per_micro=True, syncs=syncs)


def _cp_syncs(impl: str, lay: Layout, layers: int, full: bool) -> dict[str, int]:
    """Context parallelism's waits on its peers per micro batch, by family (parallel/cp/cost.py)."""
    from shardlab.parallel.cp.cost import sync_points

    return sync_points(impl, lay.cp, lay.cp if impl == "ulysses" else lay.cp_ulysses, layers, full)


def cp_a2a(model: ModelSpec, train: TrainSpec, lay: Layout, m: int) -> list[Collective]:
    """Ulysses' all-to-alls (and the hybrid's ring) per rank, from context parallelism's cost hook
    (parallel/cp/cost.py via its spec): per layer and micro batch q, k, v and the output forward, their
    gradients backward, each (b, heads/t, s/cp, d); full recompute repeats the forward's."""
    from shardlab.parallel import layers as registry_

    spec = registry_.BY_NAME["cp"]
    e = 2 if train.mixed else 4
    u = lay.cp if lay.cp_impl == "ulysses" else lay.cp_ulysses
    heads, kv = model.n_head // lay.tp, max((model.n_kv_heads or model.n_head) // lay.tp, 1)
    layers, full = model.n_layer // lay.pp, lay.recompute == "full"
    tags = registry_.load(spec.cost["bytes"])(lay.cp_impl, train.micro_batch, train.seq or model.seq, heads, kv,
                                              model.d_model // model.n_head, lay.cp, u, e, layers, full)
    a2a = (tags["cp.a2a"] + tags["cp.a2a_bwd"]) * m
    calls = 4 * layers * (3 if full else 2) * m
    syncs = _cp_syncs(lay.cp_impl, lay, layers, full)
    out = [Collective("all_to_all", "cp", u, a2a, calls, "none",
                      f"q, k, v, out: b*(s/cp)*d*(2h+2g)/t*{e} x ({'2' if full else '1'} fwd + 1 bwd) x {layers} layers "
                      f"x {m} micro batches (Ulysses over {u})", per_micro=True, syncs=syncs["a2a"] * m)]
    if "cp.kv" in tags:
        ring = (tags["cp.kv"] + tags["cp.kv_bwd"] + tags["cp.dkv"]) * m
        r = lay.cp // u
        out.append(Collective("p2p", "cp", r, ring, ((2 if full else 1) * (r - 1) + 2 * r - 1) * layers * m, "none",
                              f"the ring over {r} Ulysses groups on h/U heads", per_micro=True,
                              syncs=syncs["ring"] * m))
    return out


def tp_bytes_per_step(model: ModelSpec, train: TrainSpec, lay: Layout, m: int = 1) -> dict:
    """op -> payload bytes per rank per step of the tensor-parallel collectives: comparable with the
    comm recorder's bytes on the tp group."""
    out: dict[str, float] = {}
    for c in tp_pp_collectives(model, train, lay, m):
        if c.group == "tp":
            out[c.op] = out.get(c.op, 0) + c.payload
    return out
