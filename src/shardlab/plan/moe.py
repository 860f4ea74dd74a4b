"""Mixture of experts and expert parallelism in the planner: parameters, FLOPs, expert memory, all-to-all.

The model is shardlab's (model/moe.py, docs/moe.md): every `every`-th block's MLP is replaced by E copies of
it (the experts) and a bias-free router (E x h); each token goes to k experts. With n_moe = L // every MoE
blocks and P_e = the parameters of one MLP (GPT: 2rh^2 + rh + h; Llama: 3fh):

  total params   = Psi_dense + n_moe ((E - 1) P_e + E h)       every expert counted
  active params  = Psi_dense + n_moe ((k - 1) P_e + E h)       what one token meets (router + k experts)
  FLOPs / token  = forward of the dense model + n_moe (2 E h + (k - 1) x the MLP's GEMM FLOPs), x3 fwd+bwd

Expert parallelism over `ep` ranks (parallel/ep/layer.py) borrows them from data parallelism: each rank holds
E / ep experts of every MoE layer (each expert replicated on dp / ep ranks, its edp group), the dense
parameters stay replicated, so the expert states per rank are n_moe (E / ep) P_e x (param + grad +
optimizer bytes).

All-to-all per MoE layer and microbatch, on a rank whose microbatch has T = b s tokens: the counts
exchange (E int64), dispatch and combine forward, and the same two reversed in backward. A rank sending
S rows and receiving R rows (h wide, 4-byte fp32) records, as comm does (payload = the input handed over,
its own chunk included; wire = what leaves the rank):

  payload = 8E + 2 (S + R) 4h          wire = 8E (ep-1)/ep + 2 (S - own + R - own) 4h

`from_counts` evaluates this for routing counts as they happened (tests check it against the recorder);
`expected` for uniform routing without drops: S = R = T k, own = T k / ep, so the wire carries
4 x (ep-1)/ep x T k x 4h per layer (each of the four all-to-alls sends the token-slots routed off-rank).
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import ModelSpec
from .ops import Op

ACT_BYTES = 4  # EP runs fp32 (docs/moe.md: the tests are fp32); rows are d_model activations
COUNT_BYTES = 8  # the counts exchange sends E int64


@dataclass(frozen=True)
class MoESpec:
    experts: int  # E
    top_k: int = 2  # k
    every: int = 1  # every N-th block is an MoE block (blocks N-1, 2N-1, ...)
    capacity: float = 1.25  # capacity factor per sequence; 0 = dropless
    ep: int = 1  # expert-parallel degree

    def check(self, dp: int = 1) -> None:
        """The trainer's rules (config.validate), one line each."""
        if self.experts < 1:
            raise ValueError(f"moe_experts must be positive for an MoE plan, got {self.experts}")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"moe_top_k {self.top_k} must be between 1 and moe_experts {self.experts}")
        if self.every < 1:
            raise ValueError(f"moe_every must be at least 1, got {self.every}")
        if self.ep < 1 or self.experts % self.ep:
            raise ValueError(f"moe_experts {self.experts} is not divisible by ep {self.ep}")
        if dp % self.ep:
            raise ValueError(f"ep {self.ep} must divide the data-parallel size dp {dp}")


def moe_blocks(m: ModelSpec, moe: MoESpec) -> int:
    return m.n_layer // moe.every


def expert_params(m: ModelSpec) -> int:
    """P_e: one MLP's parameters (an expert is a copy of the model's MLP)."""
    return m.mlp_params


def expert_flops_fwd(m: ModelSpec) -> int:
    """Forward GEMM FLOPs of one expert for one token (2 per multiply-add)."""
    return m.mlp_flops_fwd


def params(m: ModelSpec, moe: MoESpec) -> dict[str, int]:
    n, pe, router = moe_blocks(m, moe), expert_params(m), moe.experts * m.d_model
    return {"total": m.params + n * ((moe.experts - 1) * pe + router),
            "active": m.params + n * ((moe.top_k - 1) * pe + router),
            "per_expert": pe, "moe_blocks": n}


def flops_per_token(m: ModelSpec, moe: MoESpec, seq: int | None = None) -> float:
    """Forward + backward FLOPs of one token with the active parameters (router + k experts)."""
    extra = moe_blocks(m, moe) * (2 * moe.experts * m.d_model + (moe.top_k - 1) * expert_flops_fwd(m))
    return 3 * (m.flops_fwd(1, seq) + extra)


def expert_state_bytes(m: ModelSpec, moe: MoESpec, per_param: float) -> dict[str, float]:
    """Expert parameters and their states (`per_param` bytes: param + grad + optimizer) per rank under ep."""
    held = moe_blocks(m, moe) * (moe.experts // moe.ep) * expert_params(m)
    return {"experts_per_rank": moe.experts // moe.ep, "expert_params_per_rank": held,
            "expert_state_bytes_per_rank": held * per_param}


def remote_nodes(k: int, experts: int, nodes: int, groups: int = 0, group_topk: int = 0) -> float:
    """Expected remote nodes a token's k routed copies reach when an expert-parallel group spans `nodes` nodes
    holding E / nodes experts each (balanced routing: every choice equally likely), i.e. the copies a
    deduplicating dispatcher sends over the network (DeepEP: "removes redundant tokens during cross-node
    communication", Megatron-Core's MoE guide; DeepSeek-V3's report, 3.2.2: a token goes over IB once to each
    node it is routed to, then over NVLink to its experts there). With group-limited routing (DeepSeek's top
    `group_topk` of `groups` expert groups, the groups whole on nodes) the groups are the draws:
      remote = (nodes - 1) x (1 - C(G - G/nodes, g) / C(G, g))      else with k of E experts:
      remote = (nodes - 1) x (1 - C(E - E/nodes, k) / C(E, k))."""
    from math import comb
    if nodes <= 1:
        return 0.0
    if groups and group_topk and groups % nodes == 0:
        return (nodes - 1) * (1 - comb(groups - groups // nodes, group_topk) / comb(groups, group_topk))
    return (nodes - 1) * (1 - comb(experts - experts // nodes, k) / comb(experts, k))


def payload_bytes(sent: int, recv: int, experts: int, d_model: int) -> int:
    """All-to-all payload of one MoE layer and microbatch (forward + backward) on a rank that dispatches
    `sent` rows and receives `recv`: the counts (E int64) + dispatch and combine, each way."""
    return COUNT_BYTES * experts + 2 * (sent + recv) * d_model * ACT_BYTES


def from_counts(counts, ep: int, d_model: int) -> tuple[list[int], list[int]]:
    """All-to-all (payload, wire) bytes per rank of one ep group for one MoE layer and one microbatch,
    forward and backward, from the routing: counts[src][e] = rows rank src sends to expert e (the kept
    token-slots; dropless: every routed slot). Expert e lives on rank e // (E/ep) of the group."""
    E = len(counts[0])
    per = E // ep
    to = [[sum(counts[s][d * per:(d + 1) * per]) for d in range(ep)] for s in range(ep)]  # [src][dst] rows
    row = d_model * ACT_BYTES
    payload, wire = [], []
    for r in range(ep):
        sent, recv, own = sum(to[r]), sum(to[s][r] for s in range(ep)), to[r][r]
        payload.append(payload_bytes(sent, recv, E, d_model))
        wire.append(COUNT_BYTES * E * (ep - 1) // ep + 2 * (sent - own + recv - own) * row)
    return payload, wire


def expected(m: ModelSpec, moe: MoESpec, tokens_per_microbatch: int, microbatches: int = 1) -> dict[str, float]:
    """All-to-all bytes per step per rank under uniform routing without drops (every rank alike)."""
    if moe.ep <= 1:
        return {"payload": 0.0, "wire": 0.0, "calls": 0}
    slots, ep = tokens_per_microbatch * moe.top_k, moe.ep
    uniform = [[slots / moe.experts] * moe.experts for _ in range(ep)]
    payload, wire = from_counts(uniform, ep, m.d_model)
    n = moe_blocks(m, moe) * microbatches
    return {"payload": payload[0] * n, "wire": wire[0] * n, "calls": 5 * n}  # counts + 2 fwd + 2 bwd


def plan(m: ModelSpec, moe: MoESpec, dp: int, micro_batch: int, seq: int, microbatches: int,
         per_param: float) -> dict:
    """Every EP term of one plan, as a dict (`shardlab plan` prints it, --json includes it)."""
    moe.check(dp)
    p = params(m, moe)
    mem = expert_state_bytes(m, moe, per_param)
    mem["replicas_per_expert"] = dp // moe.ep
    # the experts' gradients are all-reduced over their edp group (tag ep.expert_grads), apart from the
    # dense all-reduce (which never sees them): payload = the experts this rank holds, in fp32
    edp = dp // moe.ep
    mem["expert_grad_all_reduce"] = {"n": edp, "payload": mem["expert_params_per_rank"] * ACT_BYTES if edp > 1 else 0,
                                     "wire": 2 * (edp - 1) / edp * mem["expert_params_per_rank"] * ACT_BYTES}
    mem["extra_state_bytes_per_rank"] = (moe.experts // moe.ep - 1) * p["moe_blocks"] * p["per_expert"] * per_param
    return {"experts": moe.experts, "top_k": moe.top_k, "every": moe.every, "capacity": moe.capacity,
            "ep": moe.ep, "params_total": p["total"], "params_active": p["active"],
            "params_per_expert": p["per_expert"], "moe_blocks": p["moe_blocks"],
            "flops_per_token": flops_per_token(m, moe, seq), **mem,
            "all_to_all_bytes_per_step": expected(m, moe, micro_batch * seq, microbatches)}


def rank_tokens(model: ModelSpec, train, lay) -> int:
    """Tokens of a micro batch one rank routes: its context-parallel share, and under sequence parallelism its
    TP rank's share (experts are whole on every rank, which routes its own tokens)."""
    return train.micro_batch * (train.seq or model.seq) // lay.cp // (lay.tp if lay.sp else 1)


def received_slots(model: ModelSpec, train, lay) -> int:
    """Token-slots of a micro batch the busiest expert-parallel rank's experts receive (ModelSpec.received_slots)."""
    return model.received_slots(rank_tokens(model, train, lay))


def sorts_chunks(model: ModelSpec, train, lay) -> bool:
    """Whether the MoE blocks run Megatron-Core's all-to-all dispatcher's sort by local expert (sort_ops)."""
    return bool(model.moe_experts) and getattr(train, "llama_impl", "own") == "te" \
        and lay.ep_dispatcher == "alltoall" and model.experts_held > 1


def sort_ops(model: ModelSpec, train, lay, e: int) -> list:
    """The copies Megatron-Core's all-to-all dispatcher adds with more than one expert a rank (Transformer Engine's
    layers, `llama_impl` te): after the all-to-all it sorts the rows it received by local expert, with their
    probabilities, and before the combine's all-to-all it unsorts the experts' output (token_dispatcher.py,
    MoEAlltoAllTokenDispatcher.dispatch_postprocess and combine_preprocess: sort_chunks_by_idxs). Each reads and
    writes the rank's tokens x k rows; its backward is the inverse copy. HybridEP permutes inside its dispatch
    kernel and DeepEP once after it: the block's one `permute` op (ops.moe_ops) is theirs."""
    if not sorts_chunks(model, train, lay):
        return []
    slots = received_slots(model, train, lay)
    rows = 2 * slots * model.d_model * e  # each row read and written
    return [Op("sort_chunks", "elem", bytes=rows + 2 * slots * 4, ew="copy", bwd_bytes=rows + 2 * slots * 4),
            Op("unsort_chunks", "elem", bytes=rows, ew="copy", bwd_bytes=rows)]


# Megatron-Core adds the experts' fc2 bias outside Transformer Engine's grouped GEMM, in eager PyTorch
# (TEGroupedMLP._apply_bias, since a329dd6 2025-09-22; the same at the published GPT-OSS rows' 92c8482, 0022550,
# 24bad8e): per local expert t + b * p (p the router's fp32 probability), the experts' rows concatenated, cast back
# to 16 bits. Its bytes per element of the rank's tokens x k rows of h, counted through torch's dispatcher on these
# ops (tests/plan/test_moe_step.py), by the probabilities' bytes: fp32 (the flex dispatchers upcast them: DeepEP and
# HybridEP take fp32 only) forward 28 (b * p and the sum in fp32, the cat, the cast), backward 40 (the cast, the
# products and sums for b's and p's gradients, t's gradient cast and gathered); 16-bit (the all-to-all dispatcher
# keeps the router's dtype, the activations' where moe_router_dtype is unset, as in every published recipe read)
# forward 12, backward 16: no casts
EXPERT_BIAS_BYTES = {4: (28, 40), 2: (12, 16)}


def uses_eager_bias(model: ModelSpec, train) -> bool:
    """Whether the MoE blocks run Megatron-Core's eager expert bias (bias_ops): experts with biases in TE's layers,
    not fully graphed. A whole-iteration CUDA graph cannot hold that path (it reads the token counts to the host,
    .tolist()); such runs use TE's op fuser, whose grouped linear scales the bias itself (scale_bias)."""
    return bool(model.moe_experts) and model.expert_bias and getattr(train, "llama_impl", "own") == "te" \
        and getattr(train, "cuda_graphs", "none") != "full"


def bias_ops(model: ModelSpec, train, lay) -> list:
    """The eager expert-bias passes of one MoE block on one rank (EXPERT_BIAS_BYTES), 16-bit rows."""
    if not uses_eager_bias(model, train):
        return []
    n = received_slots(model, train, lay) * model.d_model
    fwd, bwd = EXPERT_BIAS_BYTES[probs_bytes(lay)]
    return [Op("expert_bias", "elem", bytes=fwd * n, ew="add", bwd_bytes=bwd * n)]


# GPT-OSS clamps its experts' GLU inputs (Megatron-Core's activation_func_clamp_value, 7 in Megatron-Bridge's
# GPT-OSS bridge). With the bias-activation fusion, weighted_bias_quick_geglu_impl (megatron/core/fusions/
# fused_bias_geglu.py, the same at the GPT-OSS rows' 92c8482, 0022550, 24bad8e) clamps the two halves and
# concatenates them in eager PyTorch before its compiled activation: per element of the rank's tokens x k rows of
# the expert width f, counted through torch's dispatcher (tests/plan/test_moe_step.py), 16 B forward (two clamps,
# the cat) and 30 B backward (each clamp's masks and where, the halves' gradients concatenated); their kernels
# (3, 9) join the host's count
CLAMP_BYTES = (16, 30)
CLAMP_KERNELS = (3, 9)


def uses_eager_clamp(model: ModelSpec, train) -> bool:
    """Whether the MoE blocks run Megatron-Core's eager GLU clamp (clamp_ops): clamped experts in TE's layers, not
    graphed whole (a whole-iteration graph runs TE's op fuser, whose ScaledClampedQGeGLU clamps inside its kernel)."""
    return bool(model.moe_experts) and model.glu_clamp > 0 and getattr(train, "llama_impl", "own") == "te" \
        and getattr(train, "cuda_graphs", "none") != "full"


def clamp_ops(model: ModelSpec, train, lay) -> list:
    """The eager GLU-clamp passes of one MoE block on one rank (CLAMP_BYTES), 16-bit rows; recomputed with moe_act."""
    if not uses_eager_clamp(model, train):
        return []
    n = received_slots(model, train, lay) * model.expert_ffn
    return [Op("glu_clamp", "elem", bytes=CLAMP_BYTES[0] * n, ew="copy", bwd_bytes=CLAMP_BYTES[1] * n)]


def clamp_saved_bytes(model: ModelSpec, train, lay) -> float:
    """Bytes a block keeps for the backward beyond Transformer Engine's count (activations.py) under the eager clamp:
    the clamped copy of fc1's output, 2f 16-bit values per routed copy, which the compiled activation saves beside
    fc1's output (the clamps' backward reads that); none where moe_act recomputes the activation, and none in blocks
    without experts (a mixed model's share)."""
    if not uses_eager_clamp(model, train) or lay.recompute != "none" or "moe_act" in lay.recomputed_modules:
        return 0.0
    return received_slots(model, train, lay) * 2 * model.expert_ffn * 2 * model.moe_blocks / model.n_layer


def probs_bytes(lay) -> int:
    """The router probabilities' bytes at the experts: fp32 under the flex dispatchers, else 16-bit."""
    return 4 if lay.ep_dispatcher == "flex" else 2


def explain_note(model: ModelSpec, train, lay) -> str:
    """--explain's words for the MoE blocks' MLP (plan/ops.py moe_ops)."""
    if not model.moe_experts:
        return ""
    tokens = rank_tokens(model, train, lay)
    rows = received_slots(model, train, lay) // model.experts_held
    load = (f"the busiest rank's routing load {model.moe_load:g} x the mean, moe_load" if model.moe_load != 1
            else "balanced routing")
    return (f"; MoE blocks: the router (E={model.moe_experts}), the permutation of {tokens:,} tokens x "
            f"k={model.moe_top_k}, and {model.experts_held} experts a rank (E / ep={lay.ep}) as grouped GEMMs of "
            f"{rows:,} rows each ({load})"
            + ("; the all-to-all dispatcher's sort of the received rows by local expert and its unsort before the "
               "combine, a copy of tokens x k rows each way (Megatron-Core's sort_chunks_by_idxs)"
               if sorts_chunks(model, train, lay) else "")
            + ("; the experts' fc2 bias added per expert in eager PyTorch (Megatron-Core's TEGroupedMLP._apply_bias: "
               f"{EXPERT_BIAS_BYTES[probs_bytes(lay)][0]} B forward, {EXPERT_BIAS_BYTES[probs_bytes(lay)][1]} B "
               f"backward an element of the rows, {probs_bytes(lay)}-byte probabilities)"
               if uses_eager_bias(model, train) else "")
            + (f"; the GLU's inputs clamped at {model.glu_clamp:g} in eager PyTorch before the compiled activation "
               f"(Megatron-Core's weighted_bias_quick_geglu_impl: {CLAMP_BYTES[0]} B forward, {CLAMP_BYTES[1]} B "
               f"backward an element of the rows x f)" if uses_eager_clamp(model, train) else ""))


def render(d: dict) -> str:
    def b(x):
        return f"{x / 2**20:,.2f} MiB" if x >= 2**20 else f"{x:,.0f} B"
    a2a = d["all_to_all_bytes_per_step"]
    return "\n".join([
        f"MoE: E={d['experts']} k={d['top_k']} every={d['every']} ({d['moe_blocks']} MoE blocks), ep={d['ep']}",
        f"  params total {d['params_total'] / 1e6:,.2f}M, active per token {d['params_active'] / 1e6:,.2f}M "
        f"(one expert {d['params_per_expert'] / 1e6:,.3f}M); FLOPs/token (fwd+bwd) {d['flops_per_token'] / 1e6:,.2f}M",
        f"  experts per rank {d['experts_per_rank']} per MoE block, each on {d['replicas_per_expert']} rank(s) "
        f"(edp); expert states per rank {b(d['expert_state_bytes_per_rank'])} (in the memory lines above)",
        f"  all-to-all per step per rank (uniform routing, dropless): payload {b(a2a['payload'])}, "
        f"wire {b(a2a['wire'])}, {a2a['calls']} calls",
        f"  expert gradients: all_reduce over edp({d['expert_grad_all_reduce']['n']}) payload "
        f"{b(d['expert_grad_all_reduce']['payload'])} (the all_reduce above carries them over dp: the plan's "
        "step sends every gradient a rank holds over its data-parallel group)"])
