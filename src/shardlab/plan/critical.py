"""The critical path's collectives (tensor-parallel, pipeline and context-parallel ones, every micro batch): what hides
each one beside compute (Megatron's async TP backward, Transformer Engine's userbuffers, Megatron-Core's
overlap_p2p_comm) and what shows, the SMs the hiding costs, and the waits at them on shared cores.
"""
from __future__ import annotations

from .hardware import Cluster
from .layout import Layout

# Groups on the critical path of every micro batch: their collectives are exposed unless a layout hides one beside
# compute (critical_comm: the async TP backward, userbuffers, overlap_p2p_comm).
CRITICAL = ("tp", "pp", "cp", "ep")  # ep: the MoE blocks' token all-to-alls (plan/comm.py ep_all_to_all)
# TP collectives beside a GEMM (compute.tp_hiding): the async TP backward's, and Transformer Engine's userbuffers'
BESIDE = ("wgrad", "dgrad", "col_fprop", "row_fprop", "row_dgrad")
BESIDE_WORDS = {"wgrad": "beside the weight-gradient GEMMs", "dgrad": "beside the input-gradient GEMMs",
                "col_fprop": "into the column-parallel GEMMs", "row_fprop": "out of the row-parallel GEMMs",
                "row_dgrad": "into the row-parallel input-gradient GEMMs"}
# SMs a userbuffers overlap holds while it runs, (attention region, MLP region): Megatron-Bridge's
# userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 (src/megatron/bridge/training/comm_overlap.py @97ad8cc6f): ring
# exchange 1 SM (qkv/fc1 fprop, proj/fc2 fprop and dgrad), bulk qkv_dgrad 4 / fc1_dgrad 2, qkv_wgrad 24 / fc1_wgrad 4
UB_SMS = {"col_fprop": (1, 1), "row_fprop": (1, 1), "row_dgrad": (1, 1), "dgrad": (4, 2), "wgrad": (24, 4)}
RING = ("col_fprop", "row_fprop", "row_dgrad")  # userbuffers' ring exchange (the rest: bulk, the whole call beside)


def critical_comm(comm: list, mt, lay: Layout, cluster: Cluster, m: int = 1) -> tuple[float, float, float]:
    """`comm`: step.py's CommLines, their `exposed` set here. (exposed, hidden, SM seconds of kernels that hold their
    own SMs: userbuffers', HybridEP's) per step of the tensor-parallel, context-parallel, expert-parallel and pipeline
    collectives: all exposed, but those beside a GEMM (mt.tp_hide: Megatron's async TP backward, Transformer
    Engine's userbuffers) or a pipeline chunk's compute (Megatron-Core's overlap_p2p_comm), which show only what
    outlasts it. Hidden time costs NCCL's SM share (the caller), userbuffers' the SMs its kernels hold (UB_SMS)."""
    exposed = hidden = ub = 0.0
    for cl in comm:
        if cl.c.group not in CRITICAL:
            continue
        cl.exposed = cl.time
        beside = mt.tp_hide.get(cl.c.overlap) if cl.c.calls else None
        if cl.c.overlap == "chunk" and cl.c.calls:
            # Megatron-Core's overlap_p2p_comm: half the transfers (activations) beside a forward chunk, half
            # (gradients) beside a backward chunk, each chunk 1/v of the stage's pass
            call = cl.time / cl.c.calls
            cl.exposed = cl.c.calls / 2 * (max(0.0, call - mt.fwd / lay.v) + max(0.0, call - mt.bwd / lay.v))
        elif cl.c.overlap == "ep_1f1b" and cl.c.calls:
            # Megatron-Core's EP overlap (Layout.ep_overlap): a forward's dispatch and combine run beside another
            # micro batch's backward and the backward's beside a forward, each call beside its share of that pass;
            # only in the steady state: the warm-up's forwards and the cool-down's backwards run alone (`unpaired`)
            call, half = cl.time / cl.c.calls, cl.c.calls / m / 2  # calls per micro batch in each pass
            paired = cl.c.calls / 2 * (max(0.0, call - mt.bwd / half) + max(0.0, call - mt.fwd / half))
            u = unpaired(lay, m)
            cl.exposed = (1 - u) * paired + u * cl.time
            if lay.ep_sms and cluster.sms:  # a dispatcher whose kernels hold their own SMs (HybridEP's)
                ub += (cl.time - cl.exposed) * min(1.0, lay.ep_sms / cluster.sms)
                exposed += cl.exposed
                continue
        elif beside:
            call = cl.time / cl.c.calls
            # the calls alternate between the block's regions (attention, MLP), each beside its own GEMMs
            shown = [max(0.0, call - g) for g in beside]
            if lay.tp_comm_overlap and cl.c.overlap in RING:
                # split in t chunks, one a rank: the last chunk's GEMM (all-gather) or send (reduce-scatter) runs
                # alone, so max(c, g) + min(c, g) / t of the two together, where they took c + g in turn
                shown = [max(0.0, call - g) + min(call, g) / lay.tp for g in beside]
            per = cl.c.calls / len(beside)
            cl.exposed = per * sum(shown)
            if lay.tp_comm_overlap:
                if cluster.sms:  # a GPU preset (a profile file has no SM count)
                    ub += per * sum((call - x) * k for x, k in zip(shown, UB_SMS[cl.c.overlap])) / cluster.sms
                exposed += cl.exposed
                continue
        exposed += cl.exposed
        hidden += cl.time - cl.exposed
    return exposed, hidden, ub


def unpaired(lay: Layout, m: int) -> float:
    """The share of a rank's forward (and backward) passes Megatron-Core's EP overlap cannot pair with another micro
    batch's opposite pass: the first pipeline rank's warm-up forwards, and as many cool-down backwards.
    (pipeline_parallel/schedules.py `get_pp_rank_microbatches`: interleaved, 2(p - 1) + (v - 1) p chunk forwards,
    plus one "to ensure the forward and backward computations are independent in all 1f1b steps" under
    overlap_moe_expert_parallel_comm; without a pipeline, combined_1f1b_schedule_for_no_pipelining runs the first
    forward and the last backward alone. One stage: p - 1 warm-up forwards and the extra one.)"""
    passes = m * lay.v
    if lay.pp == 1:
        alone = 1
    elif lay.v > 1:
        alone = 2 * (lay.pp - 1) + (lay.v - 1) * lay.pp + 1
    else:
        alone = lay.pp
    return min(1.0, alone / passes) if passes else 1.0


def sync_waits(comm: list, mt, m: int, cluster: Cluster) -> float:
    """Seconds per step the ranks of tensor- and context-parallel groups wait for each other at their
    collectives: every call ends a compute segment (the micro batch's passes split among the calls), and
    on shared cores the members finish the same segment apart (cluster.sync_wait_at; 0 on presets).
    Added to those collectives' exposed time: that is where the trace counts the wait."""
    lines = [cl for cl in comm if cl.c.group in ("tp", "cp") and cl.c.calls and cl.time]
    # a collective's waits: one per call, unless it declares fewer (cp: calls back to back share one)
    calls = sum(cl.c.syncs or cl.c.calls for cl in lines)
    if not calls or not cluster.sync_wait:
        return 0.0
    wait = cluster.sync_wait_at(m * (mt.fwd + mt.bwd) / calls)
    for cl in lines:
        cl.exposed += wait * (cl.c.syncs or cl.c.calls)
    return wait * calls
