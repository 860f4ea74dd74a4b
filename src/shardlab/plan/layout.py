"""What is being planned: the parallel layout (the named mesh dp_replicate x dp_shard x tp x pp, innermost tp, as
in Megatron-LM's rank order); the training recipe it runs is plan/train_spec.py's TrainSpec."""
from __future__ import annotations

import functools

from dataclasses import dataclass

from shardlab import precision
from shardlab.degrees import Degrees
from shardlab.parallel.pp import registry
from shardlab.parallel.pp.registry import PLANNED as SCHEDULES  # the schedules the planner models

from .model import ModelSpec
from .train_spec import TrainSpec, one_of

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
# `shardlab train`'s names (parallel.strategy) and common ones, as the planner models them: the
# torch-native layers move the same bytes as the own ones (tests/plan/test_plan_vs_strategies.py checks
# the own ones); FSDP (full sharding) is ZeRO-3; `single` is one rank (dp=1)
STRATEGY_ALIASES = {"single": "ddp", "torch-ddp": "ddp", "torch-zero1": "zero1", "torch-fsdp2": "zero3",
                    "fsdp": "zero3", "fsdp2": "zero3"}
# ... and where torch's layer runs its own way, the Layout fields that say so: ZeroRedundancyOptimizer's whole
# parameters; FSDP2's per-parameter shards and the copies around its collectives (plan/fsdp2_kernels.py; `fsdp2`
# names torch's fully_shard too, `fsdp` the flat-parameter FSDP planned as the own flat-buffer zero3)
STRATEGY_IMPL = {"torch-zero1": {"zero_partition": "params"}, "torch-fsdp2": {"zero3_impl": "fsdp2"},
                 "fsdp2": {"zero3_impl": "fsdp2"}}
TP_IMPLS = ("own", "dtensor")  # training's parallel.tp_impl, each with its plan (plan/torch_tp.py)
CP_IMPLS = ("own", "torch", "ulysses", "hybrid")  # training's parallel.cp_impl
ZERO3_IMPLS = ("own", "fsdp2")
PP_SPLITS = ("blocks", "ends-as-blocks")  # where the pipeline cuts (Layout.pp_split)


def strategy_name(name: str) -> str:
    """The planner's strategy for a training or common name (ddp, zero1-3 pass through)."""
    return STRATEGY_ALIASES.get(name, name)


def strategy_fields(name: str) -> dict:
    """The Layout fields a training or common strategy name sets: the planner's strategy and, for a torch
    layer that runs its own way, its implementation (`STRATEGY_IMPL`)."""
    return {"strategy": strategy_name(name), **STRATEGY_IMPL.get(name, {})}


def training_strategy(lay: "Layout") -> str:
    """The strategy name that selects `lay`'s data-parallel layer and its implementation (the inverse of
    `strategy_fields` over the training names)."""
    if lay.strategy == "zero3" and lay.zero3_impl == "fsdp2":
        return "torch-fsdp2"
    if lay.strategy == "zero1" and lay.zero_partition == "params":
        return "torch-zero1"
    return lay.strategy
# selective: shardlab's; selective-attn: Megatron's; selective-op: torchtitan's op-level policy (every matmul and
# the attention kernel kept but every second matmul of a block, the rest recomputed)
RECOMPUTE = ("none", "selective", "selective-attn", "full", "selective-op")
# Megatron-Core's selective recompute by module (recompute_modules; Transformer Engine's blocks, plan/activations.py
# `te_llama_activation_bytes_per_layer`, plan/recompute.py `module_ops`): the ones the planner counts
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "moe_act", "mlp")
OFFLOAD = ("none", "optimizer", "params")
PADDING = ("per_param", "flat", "none")


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    strategy: str = "ddp"
    dp_shard: int | None = None  # HSDP: shard group size (replicate = dp // dp_shard); None = dp
    tp: int = 1
    sp: bool = False  # sequence parallelism (needs tp > 1 to matter)
    pp: int = 1
    cp: int = 1  # context parallelism: every sequence split over cp ranks (zigzag chunks, ring attention)
    cp_impl: str = "own"  # own | torch (the ring) | ulysses (all-to-all over heads) | hybrid (both, parallel/cp/)
    cp_ulysses: int = 0  # hybrid: the Ulysses degree inside the ring
    # own (shardlab's, Megatron's count) | dtensor (torch's parallelize_module as torchtitan applies it: its
    # recompute policy and float8 all-gathers, plan/torch_tp.py); the plan key tp_impl, training's parallel.tp_impl
    tp_impl: str = "own"
    schedule: str = registry.DEFAULT
    v: int = 1  # interleaved virtual stages per rank
    # where the pipeline cuts, for the step time: "blocks" (the blocks as evenly as their count goes, the embedding
    # and the head added to the end stages: Megatron-LM's uniform split) | "ends-as-blocks" (the embedding and the
    # head weigh one block each in the count: Megatron-DeepSpeed's --pp-partition-method 'type:transformer|embedding',
    # BLOOM's); a published row's input
    pp_split: str = "blocks"
    # Megatron-Core's pipeline_model_parallel_layout: which blocks, ends and MTP depths each virtual stage holds
    # (pp_layout_stages); "" = the planner's own split (pp_split)
    pp_layout: str = ""
    recompute: str = "none"
    # Megatron-Core's recompute_granularity "selective" with these recompute_modules, comma-separated (RECOMPUTE_MODULES:
    # e.g. "mla_up_proj,moe_act"); with recompute=none: the modules' checkpoints free what they recompute
    recompute_modules: str = ""
    offload: str = "none"
    # how shardlab's own strategies do it (tunable so a run can be matched exactly)
    zero1_impl: str = "reduce_scatter"  # zero1 gradient collective: reduce_scatter | all_reduce
    # what a zero1 rank's optimizer steps: "rows" (own zero1: dim-0 row shards of every parameter) or "params"
    # (torch-zero1, ZeroRedundancyOptimizer: whole parameters, partitioned greedily by size); Muon's cost reads it
    zero_partition: str = "rows"
    reshard_after_forward: bool = True  # zero3: free gathered params after forward
    # own (shardlab's flat-buffer zero3) | fsdp2 (torch's fully_shard, as torchtitan runs it: per-parameter
    # shards and the copies around its collectives, plan/fsdp2_kernels.py); set by strategy=torch-fsdp2 (fsdp2)
    zero3_impl: str = "own"
    root_reshards: bool = False  # zero3: the root unit (embeddings, final LN) reshards too
    padding: str = "per_param"  # shard padding: per parameter (torch.chunk), flat buffer, none
    bucket_mb: float = 25.0  # DDP gradient bucket size (MiB)
    first_bucket_mb: float = 1.0  # DDP's first (earliest ready) bucket is smaller, as in torch DDP
    last_bucket_mb: float = 1.0  # shardlab's ddp: the last bucket, those before it doubling up to bucket_mb; 0 = none
    comm_dtype: str | None = None  # gradient collective dtype; None = gradient dtype
    # ZeRO-1/2's collectives in flat buckets of this many MiB of the reduce dtype (apex's DistributedFusedAdam:
    # bucket_cap_mb, 100 by default), one call per bucket; 0 = one call per wrap unit (shardlab's, FSDP's)
    zero_bucket_mb: float = 0.0
    # the gradient reduction hides behind the last backward (False: issued after it, as apex's optimizer does
    # with overlap_grad_sync off, NeMo's setting under pipeline or sequence parallelism)
    overlap_grad_reduce: bool = True
    # Megatron's async TP backward (LinearWithGradAccumulationAndAsyncCommunication; Megatron-LM from 2021-09, apex's
    # tensor_parallel): each column-parallel linear's input-gradient all-reduce (SP: reduce-scatter) runs while its
    # weight-gradient GEMM computes, and under SP the input's re-gather for that GEMM while the input-gradient GEMM
    # does; False: every TP collective on the critical path (shardlab's own TP, DTensor's); a published row's input
    tp_async_backward: bool = False
    # Transformer Engine's userbuffers TP overlap (Megatron-Core's --tp-comm-overlap; sequence parallel only): every
    # TP collective of a block runs beside a GEMM, the forward's all-gathers split against the column-parallel GEMMs
    # they feed and its reduce-scatters against the row-parallel GEMMs they follow (ring exchange), the backward's
    # gradient all-gathers against the row-parallel input-gradient GEMMs, the inputs' re-gather and the input
    # gradients' reduce-scatter in bulk beside the column-parallel input- and weight-gradient GEMMs; each shows only
    # what outlasts its GEMM (plan/critical.py), and its hidden time costs the SMs its kernels hold (UB_SMS)
    tp_comm_overlap: bool = False
    # Megatron-Core's overlap_p2p_comm (interleaved schedule only): a chunk's send and the next chunk's receive are
    # posted without waiting and waited just before they are needed, so each pipeline transfer runs beside a chunk's
    # compute and shows only what outlasts it (plan/critical.py); False: every transfer on the critical path
    overlap_p2p_comm: bool = False
    # blocks whose saved activations go to host memory during the forward and come back for the backward
    # (Megatron-Core's cpu_offloading_num_layers: Transformer Engine's CPU offloading; plan/offload.py): the first N
    # blocks, at most n_layer - N blocks' activations on the GPU; 0 = none
    offload_activations: int = 0
    # Megatron's scatter/gather between pipeline stages (Narayanan et al. 2021, Sec. 4.1; on by default, off under
    # SP; DeepSpeed's PipelineEngine partitions the same way under TP): under TP without SP each TP rank sends 1/t of
    # the activation to the next stage and the receiver all-gathers the pieces over the node's links; False: the
    # whole activation on every rank's send
    pp_scatter_gather: bool = False
    health_check: bool = False  # shardlab's trainer: one all-gather of 8 fp64 signals per rank per step
    # expert parallelism (the trainer's parallel.ep): an MoE model's experts spread whole over ep ranks of the
    # tp x cp x dp ranks of a stage (Megatron-Core's expert mesh, expert_tensor_parallel_size 1: the expert-data-
    # parallel group is the other tp x cp x dp / ep)
    ep: int = 1
    # Megatron-Core's overlap_moe_expert_parallel_comm (with delay_wgrad_compute): the steady state runs one micro
    # batch's forward with another's backward, block by block, so each all-to-all runs beside the other's compute
    ep_overlap: bool = False
    # SMs the all-to-all's kernels hold while they run beside compute (Megatron-Core's flex dispatcher with HybridEP:
    # moe_hybridep_num_sms); 0: NCCL's share of the SMs, as every other hidden collective costs (Cluster.sm_share_comm)
    ep_sms: int = 0
    # the dispatcher sends a token once per remote node it is routed to and forwards it over NVLink there (DeepEP's
    # internode kernels, HybridEP's hierarchical dispatch), where NCCL's all-to-all sends every routed copy
    # (plan/moe.py remote_nodes)
    ep_dedup: bool = False
    # the token dispatcher's kind, for the kernels the host issues (plan/host.py): "alltoall" (Megatron-Core's
    # MoEAlltoAllTokenDispatcher, shardlab's own: counts, permutation and NCCL all-to-alls as separate kernels) or
    # "flex" (DeepEP, HybridEP: fused dispatch and combine kernels)
    ep_dispatcher: str = "alltoall"

    @property
    def world(self) -> int:
        return self.degrees.world

    @property
    def degrees(self) -> Degrees:
        """This candidate as the one layout type (shardlab/degrees.py): a ZeRO/FSDP layer shards over
        `shard` ranks of dp and replicates over the rest; ddp replicates over all of them."""
        return Degrees(dp_replicate=self.replicate, dp_shard=self.dp // self.replicate, tp=self.tp, pp=self.pp,
                       cp=self.cp)

    @classmethod
    def from_degrees(cls, degrees: Degrees, strategy: str = "ddp", **how) -> "Layout":
        """The planner's candidate for a layout (a training run's mesh, `parallel.mesh.resolve`) and how its
        layers work (`how`: schedule, recompute, buckets, ...)."""
        sharded = strategy != "ddp"
        return cls(dp=degrees.dp, strategy=strategy, dp_shard=degrees.dp_shard if sharded else None,
                   tp=degrees.tp, pp=degrees.pp, cp=degrees.cp, **how)

    @property
    def dp_cp(self) -> int:
        """Ranks holding replicas of the same parameters: dp x cp. Under context parallelism the cp ranks of
        a sequence hold replicas too, so the runtime's data-parallel layer communicates over the flattened
        dp_cp group (parallel/dp/apply.py: data_parallel_group)."""
        return self.dp * self.cp

    @property
    def edp(self) -> int:
        """The expert-data-parallel group: ranks holding the same experts (tp x cp x dp / ep)."""
        return max(1, self.tp * self.cp * self.dp // self.ep)

    @property
    def shard(self) -> int:
        """Ranks a ZeRO state is split over (1 for ddp): the dp shard group, and with context parallelism
        its cp ranks too, as the runtime's sharding layer shards over dp_cp (parallel/dp/zero_state.py)."""
        if self.strategy == "ddp":
            return 1
        return (self.dp_shard or self.dp) * self.cp

    @property
    def recomputed_modules(self) -> frozenset:
        """recompute_modules as a set of Megatron-Core's module names."""
        return frozenset(x.strip() for x in self.recompute_modules.split(",") if x.strip())

    @property
    def replicate(self) -> int:
        return self.dp // (self.dp_shard or self.dp) if self.strategy != "ddp" else self.dp

    def check(self, model: ModelSpec) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)} (or a training name: "
                             f"{', '.join(STRATEGY_ALIASES)}), got {self.strategy!r}")
        one_of("schedule", self.schedule, SCHEDULES)
        one_of("recompute", self.recompute, RECOMPUTE)
        for name in self.recomputed_modules:
            one_of("recompute_modules", name, RECOMPUTE_MODULES)
        if self.recomputed_modules and self.recompute != "none":
            raise ValueError(f"recompute_modules={self.recompute_modules} is Megatron-Core's selective recompute by "
                             f"module: it needs recompute=none (got {self.recompute})")
        if "mla_up_proj" in self.recomputed_modules and not model.mla:
            raise ValueError("recompute_modules mla_up_proj needs latent attention (mla_kv_rank): Megatron-Core "
                             "refuses it without multi_latent_attention")
        one_of("offload", self.offload, OFFLOAD)
        one_of("padding", self.padding, PADDING)
        one_of("zero1_impl", self.zero1_impl, ("all_reduce", "reduce_scatter"))
        if self.overlap_p2p_comm and not (self.pp > 1 and self.v > 1):
            raise ValueError("overlap_p2p_comm needs pp > 1 and v > 1: Megatron-Core overlaps the pipeline's sends in "
                             "its interleaved schedule only")
        if self.tp_comm_overlap and not (self.tp > 1 and self.sp):
            raise ValueError("tp_comm_overlap (Transformer Engine's userbuffers) needs tp > 1 and sp=true: it "
                             "overlaps sequence parallelism's all-gathers and reduce-scatters")
        one_of("zero_partition", self.zero_partition, ("rows", "params"))
        one_of("zero3_impl", self.zero3_impl, ZERO3_IMPLS)
        one_of("tp_impl", self.tp_impl, TP_IMPLS)
        one_of("cp_impl", self.cp_impl, CP_IMPLS)
        one_of("pp_split", self.pp_split, PP_SPLITS)
        if self.comm_dtype is not None:
            one_of("comm_dtype", self.comm_dtype, precision.WIRE_NAMES)
        if self.ep > 1 and not model.moe_experts:
            raise ValueError(f"ep={self.ep} needs moe_experts (expert parallelism splits the experts)")
        if self.ep > 1 and (model.moe_experts % self.ep or (self.tp * self.cp * self.dp) % self.ep):
            raise ValueError(f"ep {self.ep} must divide moe_experts {model.moe_experts} and tp x cp x dp = "
                             f"{self.tp * self.cp * self.dp}")
        if self.ep_sms < 0:
            raise ValueError(f"ep_sms must be 0 (NCCL's share) or the SMs the dispatcher holds, got {self.ep_sms}")
        if self.ep_overlap and self.ep <= 1:
            raise ValueError("ep_overlap needs ep > 1: it hides expert parallelism's all-to-alls")
        if self.ep_dedup and self.ep <= 1:
            raise ValueError("ep_dedup needs ep > 1: it deduplicates expert parallelism's all-to-alls across nodes")
        one_of("ep_dispatcher", self.ep_dispatcher, ("alltoall", "flex"))
        for k in ("dp", "tp", "pp", "v", "cp", "ep"):
            if getattr(self, k) <= 0:
                raise ValueError(f"{k} must be positive, got {getattr(self, k)}")
        if self.dp_shard is not None and (self.dp_shard <= 0 or self.dp % self.dp_shard):
            raise ValueError(f"dp_shard {self.dp_shard} must divide dp {self.dp}")
        if not model.tp_ok(self.tp):
            kv = f" (and n_kv_heads {model.n_kv_heads} must divide it or be divisible by it, and it must divide " \
                 f"the SwiGLU width {model.ffn})" if model.llama else ""
            raise ValueError(f"tp {self.tp} must divide n_head {model.n_head}{kv}")
        if self.tp > 1 and self.tp_impl == "dtensor" and max(self.cp, self.pp) > 1:  # as parallel/rules.py refuses
            other = f"cp={self.cp}" if self.cp > 1 else f"pp={self.pp}"
            raise ValueError(f"tp_impl=dtensor with {other}: training runs DTensor TP without context or pipeline "
                             "parallelism in this version; use tp_impl=own")
        if self.cp > 1 and self.cp_impl in ("ulysses", "hybrid"):  # the line training refuses the heads with
            from shardlab.parallel.cp.checks import heads_refusal, ulysses_degree

            u = ulysses_degree(self.cp_impl, self.cp, self.cp_ulysses)
            line = heads_refusal(model.n_head, model.n_kv_heads or model.n_head, self.tp, u, self.cp_impl) \
                if u >= 1 and self.cp % u == 0 else f"cp_ulysses {self.cp_ulysses} must divide cp {self.cp}"
            if line:
                raise ValueError(line)
        if self.v > 1 and not registry.many_stages(self.schedule):
            raise ValueError(f"v > 1 needs schedule={' or '.join(s for s in SCHEDULES if registry.many_stages(s))}")
        lo, hi = registry.spec(self.schedule).virtual
        if self.v < lo or (hi is not None and self.v > hi):
            raise ValueError(f"schedule {self.schedule} runs {lo}{'' if hi == lo else f' to {hi}'} stages per rank "
                             f"(v={lo} for its V placement), got v={self.v}")
        # ends-as-blocks: the embedding and the head weigh a block each, so a stage may hold one of them alone
        # (Megatron-Core's account_for_embedding/loss_in_pipeline_split: 126 blocks + 2 over 128 stages)
        layers = model.n_layer + (2 if self.pp_split == "ends-as-blocks" else 0)
        if self.pp * self.v > layers:
            raise ValueError(f"pp*v = {self.pp * self.v} pipeline stages but n_layer is {model.n_layer}"
                             f"{' (+ 2: pp_split=ends-as-blocks)' if layers > model.n_layer else ''}: "
                             "every stage needs a layer")
        if self.pp_layout:
            stages = pp_layout_stages(self.pp_layout)
            t, emb, mtp, loss = map(sum, zip(*stages))
            if len(stages) != self.pp * self.v or t != model.n_layer or emb != 1 or loss != 1 \
                    or mtp != model.mtp_layers or stages[0][1] != 1 or stages[-1][3] != 1:
                raise ValueError(f"pp_layout {self.pp_layout!r}: {len(stages)} stages of {t} blocks, {mtp} MTP depths, "
                                 f"{emb} E, {loss} L; needs pp*v = {self.pp * self.v} stages, n_layer {model.n_layer} "
                                 f"blocks, mtp_layers {model.mtp_layers}, E first and L last")
        if self.offload_activations:
            n = self.offload_activations
            if not 0 < n < model.n_layer:
                raise ValueError(f"offload_activations={n}: between 1 and n_layer - 1 = {model.n_layer - 1} blocks "
                                 "(at least one block's activations stay on the GPU)")
            if self.pp > 1 or self.recompute != "none":
                raise ValueError("offload_activations needs pp=1 and recompute=none: Megatron-Core refuses CPU "
                                 "offloading with pipeline parallelism and with recomputation")
        if self.offload != "none" and self.strategy == "ddp":
            raise ValueError("offload needs a ZeRO strategy (zero1/zero2/zero3)")
        if self.offload == "params" and self.strategy != "zero3":
            raise ValueError("parameter offload needs zero3")

    def describe(self) -> str:
        parts = [f"dp={self.dp}", self.strategy]
        if self.strategy == "zero3" and self.zero3_impl != "own":  # torch's layer, planned with its own terms
            parts.append(self.zero3_impl)
        if self.strategy != "ddp" and self.replicate > 1:
            parts.append(f"hsdp {self.replicate}x{self.shard}")
        if self.tp > 1:
            parts.append(f"tp={self.tp}" + ("+sp" if self.sp else "")
                         + ("" if self.tp_impl == "own" else f" {self.tp_impl}"))
        if self.cp > 1:
            parts.append(f"cp={self.cp}" + ("" if self.cp_impl == "own" else f" {self.cp_impl}")
                         + (f" U={self.cp_ulysses}" if self.cp_impl == "hybrid" else ""))
        if self.pp > 1:
            parts.append(f"pp={self.pp} {self.schedule}" + (f" v={self.v}" if self.v > 1 else "")
                         + (f" layout {self.pp_layout}" if self.pp_layout else ""))
        if self.ep > 1:
            parts.append(f"ep={self.ep}" + (" overlapped" if self.ep_overlap else "") + (" dedup" if self.ep_dedup else ""))
        if self.recompute != "none":
            parts.append(f"recompute={self.recompute}")
        if self.recompute_modules:
            parts.append(f"recompute_modules={self.recompute_modules}")
        if self.offload != "none":
            parts.append(f"offload={self.offload}")
        if self.offload_activations:
            parts.append(f"offload_activations={self.offload_activations}")
        return " ".join(parts)


def pp_layout_stages(text: str) -> list[tuple[int, int, int, int]]:
    """Megatron-Core's pipeline_model_parallel_layout ("Et*4|(t*4|)*14tmL": `|` between virtual stages, E the
    embedding, t a block, m a multi-token-prediction depth, L the loss; `x*n` and `(...)*n` repeat) as (blocks,
    embedding, mtp depths, loss) per virtual stage, in order; virtual stage i runs on rank i % pp."""
    import re
    s = text.replace(" ", "")
    while "(" in s:
        new = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
        if new == s:
            raise ValueError(f"pp_layout {text!r}: a group needs a repeat count, (...)*n")
        s = new
    s = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    if set(s) - set("EtmL|"):
        raise ValueError(f"pp_layout {text!r}: only E, t, m, L, |, *n and (...)*n (Megatron-Core's layout)")
    return [(st.count("t"), st.count("E"), st.count("m"), st.count("L")) for st in s.split("|")]


def pp_layout_ranks(text: str, pp: int) -> list[tuple[int, int, int, int]]:
    """(blocks, embedding, mtp depths, loss) each pipeline rank holds under a layout: its virtual stages r, r + pp, ..."""
    stages = pp_layout_stages(text)
    return [tuple(map(sum, zip(*stages[r::pp]))) for r in range(pp)]


def pp_layout_moe_blocks(text: str, pp: int, is_moe) -> list[int]:
    """The MoE blocks each pipeline rank holds under a layout: the blocks in order over the virtual stages, block i
    MoE where `is_moe(i)` (ModelSpec.is_moe: DeepSeek-V3's first three are dense)."""
    out, i = [0] * pp, 0
    for s, (blocks, *_ends) in enumerate(pp_layout_stages(text)):
        out[s % pp] += sum(1 for j in range(i, i + blocks) if is_moe(j))
        i += blocks
    return out


def ends_as_blocks(n_layer: int, pp: int, v: int = 1) -> list[tuple[int, int, int]]:
    """(blocks, embedding, head) on each pipeline rank when the embedding and the head count as one block each
    (Megatron-DeepSpeed's `type:transformer|embedding`: DeepSpeed's PipelineModule weighs the layers whose class
    matches 1 and the rest 0, and cuts the n_layer + 2 weighted layers into pp*v contiguous stages as evenly as the
    count goes); rank r holds stages r, r + pp, ..."""
    n = pp * v
    q, extra = divmod(n_layer + 2, n)
    sizes = [q + (1 if s < extra else 0) for s in range(n)]
    stages = [(size - (s == 0) - (s == n - 1), int(s == 0), int(s == n - 1)) for s, size in enumerate(sizes)]
    return [tuple(map(sum, zip(*stages[r::pp]))) for r in range(pp)]


def stage_layers(n_layer: int, pp: int, v: int = 1) -> int:
    """Layers on the busiest pipeline rank. The layers are cut into pp*v contiguous stages as evenly as
    they go (n_layer need not divide: BLOOM's 70 layers on 12 stages are 10 stages of 6 and 2 of 5),
    rank r holding stages r, r + pp, ...; the rank with the most layers decides the step time and the
    memory, so the planner plans for it."""
    n = pp * v
    q, extra = divmod(n_layer, n)
    sizes = [q + (1 if s < extra else 0) for s in range(n)]
    return max(sum(sizes[r::pp]) for r in range(pp))


@functools.lru_cache(maxsize=1024)  # (a search asks it for every layout of one model)
def first_rank_layers(n_layer: int, pp: int, v: int, d_model: int, vocab: int, seq: int) -> int:
    """Blocks on the first pipeline rank (stages 0, pp, 2pp, ...) as the composition cuts them: stages
    balanced by cost with the embedding and the head counted (parallel/pp/split.py), so uneven splits
    (Llama 3 405B's 126 layers over 16 stages) put as many blocks there as the built model has."""
    if pp * v == 1:
        return n_layer
    from shardlab.parallel.pp.split import layer_costs, stage_ranges

    try:
        ranges = stage_ranges(n_layer, pp * v, costs=layer_costs(n_layer, d_model, vocab, seq))
    except ValueError:  # more stages than layers: the layout check refuses it; plan as the even split
        return stage_layers(n_layer, pp, v)
    return sum(len(r) for r in ranges[0::pp])


def grad_accum(train: TrainSpec, layout: Layout) -> int:
    """Micro batches per rank per step (= pipeline micro batch count m)."""
    per = train.micro_batch * layout.dp
    if train.global_batch % per:
        raise ValueError(f"global_batch {train.global_batch} is not divisible by "
                         f"micro_batch*dp = {train.micro_batch}*{layout.dp}")
    return train.global_batch // per

