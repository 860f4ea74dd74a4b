"""The configuration's fields: the dataclass tree (one section per TOML table, defaults and a comment beside
each field; the help text of each key is in help.py), key names and their aliases, and setting a key from a
TOML value or a CLI string. No validation here (checks.py, called from `config.validate`)."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any

from shardlab.errors import ConfigError  # noqa: F401 - re-exported: `config.ConfigError` is the public name
from shardlab.parallel import layers
from shardlab.parallel.pp import registry as pp_registry

STRATEGIES = tuple(layers.DATA_PARALLEL)  # the data-parallel layer names (parallel/layers.py is the list)


@dataclass
class ModelConfig:
    preset: str = "small"  # tiny | small | gpt2 | llama-tiny | llama-small | llama3-8b | llama3-70b | llama3-405b | custom
    arch: str = "gpt2"  # gpt2 | llama (a llama-* preset sets llama)
    n_layer: int = 0  # 0 = take it from the preset
    n_head: int = 0
    d_model: int = 0
    vocab_size: int = 0
    max_seq_len: int = 0  # 0 = train.seq_len
    dropout: float = 0.0
    # llama only (0 = the preset's value): docs/models.md
    n_kv_heads: int = 0
    rope_theta: float = 0.0
    ffn_multiple_of: int = 0
    ffn_dim_multiplier: float = 0.0
    intermediate_size: int = 0  # llama: the SwiGLU width as it is; 0 = Llama 3's rule (ffn_multiple_of, ...)
    rope_scaling: str = "none"  # llama: none | llama3 (Llama 3.1's long-context frequencies)
    rope_factor: float = 0.0  # llama3 scaling's parameters; 0 = Llama 3.1's (8, 1, 4, 8192)
    rope_low_freq_factor: float = 0.0
    rope_high_freq_factor: float = 0.0
    rope_original_max_seq: int = 0
    # both families: what an imported model sets (docs/models.md, "Import and export")
    norm_eps: float = 0.0  # LayerNorm / RMSNorm epsilon; 0 = 1e-5
    tie_embeddings: str = "auto"  # auto (gpt2 tied, llama untied) | true | false : the head's weight is wte's
    # Mixture of experts (docs/moe.md): every moe_every-th block's MLP becomes moe_experts routed copies
    moe_experts: int = 0  # 0 = dense
    moe_top_k: int = 2  # experts per token
    moe_every: int = 1  # which blocks: moe_every-1, 2*moe_every-1, ...
    moe_capacity: float = 1.25  # capacity factor per expert per sequence; 0 = dropless
    moe_aux_weight: float = 0.01  # load-balancing loss weight (Switch)
    moe_z_weight: float = 0.001  # router z-loss weight (ST-MoE)
    moe_bias_update: float = 0.0  # aux-loss-free balancing (DeepSeek-V3): the bias's step; 0 = off
    moe_router_lr_scale: float = 1.0  # the routers' learning rate = train.lr x this (own group, no decay)


@dataclass
class DataConfig:
    source: str = "stdlib"  # stdlib | text:PATH | bin:PATH | tokens:DIR (`shardlab data prepare`)
    tokenizer: str = "bytes"  # bytes | bpe:N | PATH (tokenizer.json, HF dir) | tiktoken:FILE (data/tokenizer.py)
    val_fraction: float = 0.05
    uneven: str = "error"  # error | join : what happens when one rank runs out of data first
    # Each data-parallel rank's share of the global batch (docs/balance.md): equal | auto | w0,w1,...
    shares: str = "equal"
    shares_window: int = 4  # auto: steps per measurement
    shares_drift: float = 0.05  # auto: re-set the shares when a measurement moves them by more than this
    shares_resume: str = "keep"  # keep | measure : what a resumed auto run does with the recorded shares
    # Packed documents (docs/data.md): attention block-causal within the documents of a sample (separated by
    # the tokenizer's EOS), positions restarting per document. Off: the stream is one long text.
    doc_mask: bool = False


@dataclass
class TrainConfig:
    steps: int = 300
    micro_batch: int = 8
    grad_accum: int = 1
    global_batch: int = 0  # sequences per optimizer step; 0 = micro_batch * grad_accum * world
    seq_len: int = 128
    seed: int = 1337
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 30
    lr_schedule: str = "cosine"  # cosine | wsd : warm-up, then cosine, or stable then a linear decay (optim/schedule.py)
    decay_fraction: float = 0.2  # wsd: the last share of train.steps, decaying linearly to min_lr
    optimizer: str = "adamw"  # one of optim/registry.py's rows: adamw | sgd | muon (docs/optim.md)
    muon_lr: float = 0.0  # muon: the matrices' peak learning rate; 0 = train.lr
    optim_dtype: str = "fp32"  # fp32 | bf16: the optimizer's state (bf16: stochastically rounded, optim/bf16_state.py)
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping (the norm is still measured)
    dtype: str = "fp32"  # fp32 | bf16 | fp16
    fp8: str = "none"  # none | tensorwise | rowwise | mxfp8 : float8 block linears (shardlab/fp8, docs/precision.md)
    fp8_impl: str = "own"  # own | torchao
    eval_every: int = 100
    eval_seqs: int = 64  # validation sequences per evaluation, split across ranks (same set at any world size)
    log_every: int = 10
    threads: int = 1  # torch threads per rank (one per rank on CPU keeps ranks from fighting over cores)
    retain_host_memory: bool = True  # CPU: glibc keeps freed memory (no page faults per step; train/host_alloc.py)
    recompute: str = "none"  # none | full | selective : activation recompute per block (docs/memory.md)
    recompute_every: int = 1  # recompute every K-th block (blocks K-1, 2K-1, ...)
    compile: bool = False  # torch.compile (inductor) each block; a compile error falls back to eager (docs/training.md)
    tracker: str = "none"  # none | tensorboard | mlflow | wandb, several comma-separated: rank 0, offline (train/trackers.py)


@dataclass
class ParallelConfig:
    strategy: str = "ddp"  # the data-parallel layer; `parallel.dp` is the same key (see the `dp` property)
    backend: str = "auto"  # auto | gloo | nccl
    bucket_mb: float = 25.0
    first_bucket_mb: float = 1.0
    last_bucket_mb: float = 1.0  # own ddp: the last bucket (MiB), those before it doubling up to bucket_mb; 0 = none
    comm_dtype: str = "fp32"  # fp32 | fp16 | bf16 : gradient communication precision
    compress: str = "none"  # none | powersgd : low-rank gradient compression (ddp, torch-ddp; docs/ddp.md)
    powersgd_rank: int = 4  # PowerSGD's rank r: r*(rows+cols) numbers per gradient matrix on the wire
    find_unused: bool = False
    rebuild_buckets: bool = True
    reshard_after_forward: bool = True
    wrap: str = "block"  # block | layer | whole
    prefetch: bool = True
    # manual: the keys below as given; auto: the planner picks the fastest layout that fits mem_budget_gb and
    # `shardlab train` writes it into these keys before the run starts (plan/auto.py, docs/explain.md)
    layout: str = "manual"
    mem_budget_gb: float = 0.0  # layout=auto: memory per rank; 0 = the GPU's, on CPU available memory / ranks
    # Mesh degrees (docs/parallel.md): -1 = fill the world; the product must equal the world size.
    dp_replicate: int = 0  # 0 = let the dp layer decide: replicating layers fill dp_replicate,
    dp_shard: int = 0  # sharding ones dp_shard
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1  # expert parallelism: experts split over this many of the data-parallel ranks (docs/moe.md)
    # Pipeline parallelism (docs/pipeline.md)
    pp_schedule: str = pp_registry.DEFAULT  # one of parallel/pp/registry.py NAMES
    pp_microbatches: int = 0  # 0 = train.grad_accum (the step's microbatches are the pipeline's)
    pp_virtual: int = 1  # stages per pipeline rank (interleaved schedules)
    pp_split: str = ""  # "" = balanced by cost; auto = by measured times; "3,7" = first block of stages 1, 2, ...
    tp_impl: str = "own"  # own (parallel/tp/own.py, every collective through comm) | dtensor (parallelize_module)
    sp: bool = False  # sequence parallelism inside tensor parallelism (needs train.seq_len % parallel.tp == 0)
    cp_impl: str = "own"  # own (ring attention, parallel/cp/layer.py) | torch (context_parallel, CUDA only)
    cp_ulysses: int = 0  # cp_impl=hybrid: the Ulysses degree inside the ring (parallel/cp/spec.py)
    offload: str = "none"  # none | optimizer (own zero1/2/3) | params (zero3, torch-fsdp2 on CUDA): docs/memory.md
    offload_to: str = "disk"  # disk (memory-mapped files) | host (pinned CPU memory; a no-op without CUDA)
    # Synchronisation across data-parallel replicas (docs/sync.md, parallel/sync/periodic.py)
    sync: str = "every_step"  # every_step | local_sgd | diloco | async (parameter server, parallel/sync/async_ps.py)
    sync_every: int = 8  # H: inner steps between two synchronisations (local_sgd, diloco)
    outer_lr: float = 0.7  # DiLoCo's outer learning rate (Nesterov SGD on the averaged pseudo-gradient)
    outer_momentum: float = 0.9  # DiLoCo's outer Nesterov momentum (0 = plain SGD)
    outer_dtype: str = "fp32"  # fp32 | bf16 | fp16: precision the pseudo-gradient is averaged in
    # Fault-tolerant replicas: each its own `shardlab train`, meeting at a store (parallel/ft/periodic.py)
    fault_tolerant: bool = False
    replicas: int = 0  # R: the job's replicas (replica_id 0..R-1)
    replica_id: int = -1  # this process's replica
    ft_store: str = ""  # HOST:PORT of the TCPStore all replicas meet at (`shardlab lighthouse`)
    ft_timeout: float = 30.0  # seconds an outer step waits for a replica's pseudo-gradient before dropping it
    ft_join_timeout: float = 120.0  # seconds a starting replica waits for its peers (founding) or a peer's state
    ft_job: str = "job"  # the job's name: its keys in the lighthouse's store are namespaced by it
    ft_job_dir: str = ""  # every_step FT: a directory all replicas reach (quorum log, job resume); "" = none
    fragments: int = 1  # F: streaming DiLoCo, F groups of blocks synced at steps staggered H/F apart
    max_staleness: int = 4  # async: τ, the most versions a gradient's parameters may lag when applied

    @property
    def dp(self) -> str:
        """`parallel.dp`, the data-parallel layer: the same setting as `parallel.strategy` (its first name)."""
        return self.strategy

    @dp.setter
    def dp(self, name: str) -> None:
        self.strategy = name


@dataclass
class CkptConfig:
    every: int = 0  # 0 = only at the end if `final` is true
    final: bool = True  # the default run keeps a model
    keep: int = 3
    keep_every: int = 0
    async_: bool = False  # key name is `ckpt.async`
    resume: str = ""  # "" | none | latest | PATH  (none: from step 0 on purpose, e.g. `shardlab resume RUN ckpt.resume=none`)
    init_from: str = ""  # PATH: start from this checkpoint's weights (model from it, fresh optimizer, step 0)
    format: str = "dcp"  # dcp (resumable: everything) | hf (the model as Hugging Face safetensors, checkpoint/hf_dcp.py)
    on_signal: bool = True  # SIGINT/SIGTERM: stop at a step boundary and save (docs/training.md)
    signal_grace_s: float = 25.0  # from the signal to the exit at most (under Slurm's and Kubernetes' 30 s)


@dataclass
class TraceConfig:
    enabled: bool = False
    profile: str = ""  # A-B: torch.profiler over steps A..B -> RUN/profile/ (observe/profile.py)


@dataclass
class DoctorConfig:
    spike_factor: float = 0.0  # 0 = spike detection off; e.g. 3.0 = loss > 3 x running median
    on_anomaly: str = "stop"  # stop | skip | rollback
    checksum_every: int = 0  # 0 = only at the end
    hang_timeout_s: float = 300.0
    verify_collectives: bool = False  # debug: check op/size of every own collective across ranks first


@dataclass
class DebugConfig:
    inject_nan: str = ""  # STEP:RANK:MODULE
    hang_rank: str = ""  # R@STEP
    mismatch_rank: str = ""  # R@STEP
    corrupt_rank: str = ""  # R@STEP
    corrupt_expert: bool = False  # under parallel.ep: corrupt_rank perturbs an expert (compared within edp)
    uneven_rank: str = ""  # R@STEP: rank R has no data from STEP on (tests uneven-input handling)
    slow_rank: int = -1
    slow_ms: float = 0.0
    ft_absent: str = ""  # R@A-B: fault-tolerant replica R sits out the quorums of steps A..B (a drill's reference)
    slow_factor: float = 1.0  # the slow rank's compute this many times slower (sleeps in proportion)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    ckpt: CkptConfig = field(default_factory=CkptConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    doctor: DoctorConfig = field(default_factory=DoctorConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)


# TOML/CLI names that are Python keywords get a trailing underscore in the dataclass.
_ALIASES = {"async": "async_"}


# Keys that are another name of a field (key -> field); listed by --help-keys, not written to config.toml.
_KEY_ALIASES = {"parallel.dp": "parallel.strategy"}


def _field_name(key: str) -> str:
    return _ALIASES.get(key, key)


def _public_name(name: str) -> str:
    return {v: k for k, v in _ALIASES.items()}.get(name, name)


def all_keys() -> list[str]:
    cfg = Config()
    keys = [f"{s.name}.{_public_name(f.name)}" for s in fields(cfg) for f in fields(getattr(cfg, s.name))]
    return keys + list(_KEY_ALIASES)


def _coerce(value: Any, target: Any, key: str) -> Any:
    """Turn a TOML value or a CLI string into the type of the default."""
    kind = type(target)
    if isinstance(value, str) and kind is not str:
        text = value.strip()
        if kind is bool:
            low = text.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ConfigError(f"{key}={value!r}: expected true or false")
        try:
            return kind(text) if kind is not int else int(text, 0)
        except ValueError:
            raise ConfigError(f"{key}={value!r}: expected {kind.__name__}") from None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not kind:
        raise ConfigError(f"{key}={value!r}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def set_key(cfg: Config, key: str, value: Any) -> None:
    key = _KEY_ALIASES.get(key, key)
    section, _, name = key.partition(".")
    if not name or not hasattr(cfg, section) or not hasattr(getattr(cfg, section), _field_name(name)):
        hint = difflib.get_close_matches(key, all_keys(), n=1)
        did_you_mean = f" (did you mean {hint[0]}?)" if hint else ""
        raise ConfigError(f"unknown config key {key!r}{did_you_mean}; see `shardlab train --help-keys`")
    sub = getattr(cfg, section)
    attr = _field_name(name)
    setattr(sub, attr, _coerce(value, getattr(sub, attr), key))


def get_key(cfg: Config, key: str) -> Any:
    section, _, name = _KEY_ALIASES.get(key, key).partition(".")
    return getattr(getattr(cfg, section), _field_name(name))


