"""Configuration: a dataclass tree, TOML files, `key=value` overrides, validation with clear errors.

Every user mistake becomes a `ConfigError` with one sentence saying what is wrong and what to do;
the CLI prints it and exits with code 2 before anything is written.
"""
from __future__ import annotations

import dataclasses
import difflib
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from shardlab.errors import ConfigError  # noqa: F401 - re-exported: `config.ConfigError` is the public name
from shardlab.parallel import layers

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
    source: str = "stdlib"  # stdlib | text:PATH | bin:PATH
    val_fraction: float = 0.05
    uneven: str = "error"  # error | join : what happens when one rank runs out of data first
    # Each data-parallel rank's share of the global batch (docs/balance.md): equal | auto | w0,w1,...
    shares: str = "equal"
    shares_window: int = 4  # auto: steps per measurement
    shares_drift: float = 0.05  # auto: re-set the shares when a measurement moves them by more than this
    shares_resume: str = "keep"  # keep | measure : what a resumed auto run does with the recorded shares


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
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping (the norm is still measured)
    dtype: str = "fp32"  # fp32 | bf16 | fp16
    eval_every: int = 100
    eval_seqs: int = 64  # validation sequences per evaluation, split across ranks (same set at any world size)
    log_every: int = 10
    threads: int = 1  # torch threads per rank (one per rank on CPU keeps ranks from fighting over cores)
    recompute: str = "none"  # none | full | selective : activation recompute per block (docs/memory.md)
    recompute_every: int = 1  # recompute every K-th block (blocks K-1, 2K-1, ...)
    compile: bool = False  # torch.compile (inductor) each block; a compile error falls back to eager (docs/training.md)


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
    # Mesh degrees (docs/parallel.md): -1 = fill the world; the product must equal the world size.
    dp_replicate: int = 0  # 0 = let the dp layer decide: replicating layers fill dp_replicate,
    dp_shard: int = 0  # sharding ones dp_shard
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1  # expert parallelism: experts split over this many of the data-parallel ranks (docs/moe.md)
    # Pipeline parallelism (docs/pipeline.md)
    pp_schedule: str = "1f1b"  # gpipe | 1f1b | interleaved | zb | torch-<gpipe|1f1b|interleaved|zb|looped-bfs|zbv|dualpipev>
    pp_microbatches: int = 0  # 0 = train.grad_accum (the step's microbatches are the pipeline's)
    pp_virtual: int = 1  # stages per pipeline rank (interleaved schedules)
    pp_split: str = ""  # "" = balanced by cost; auto = by measured times; "3,7" = first block of stages 1, 2, ...
    tp_impl: str = "own"  # own (parallel/tp.py, every collective through comm) | dtensor (parallelize_module)
    sp: bool = False  # sequence parallelism inside tensor parallelism (needs train.seq_len % parallel.tp == 0)
    cp_impl: str = "own"  # own (ring attention, parallel/cp.py) | torch (context_parallel, CUDA only)
    offload: str = "none"  # none | optimizer (own zero1/2/3) | params (zero3, torch-fsdp2 on CUDA): docs/memory.md
    offload_to: str = "disk"  # disk (memory-mapped files) | host (pinned CPU memory; a no-op without CUDA)
    # Synchronisation across data-parallel replicas (docs/sync.md, parallel/sync.py)
    sync: str = "every_step"  # every_step | local_sgd | diloco | async (parameter server, parallel/async_ps.py)
    sync_every: int = 8  # H: inner steps between two synchronisations (local_sgd, diloco)
    outer_lr: float = 0.7  # DiLoCo's outer learning rate (Nesterov SGD on the averaged pseudo-gradient)
    outer_momentum: float = 0.9  # DiLoCo's outer Nesterov momentum (0 = plain SGD)
    outer_dtype: str = "fp32"  # fp32 | bf16 | fp16: precision the pseudo-gradient is averaged in
    # Fault-tolerant replicas: each its own `shardlab train`, meeting at a store (parallel/fault_tolerant.py)
    fault_tolerant: bool = False
    replicas: int = 0  # R: the job's replicas (replica_id 0..R-1)
    replica_id: int = -1  # this process's replica
    ft_store: str = ""  # HOST:PORT of the TCPStore all replicas meet at (`shardlab lighthouse`)
    ft_timeout: float = 30.0  # seconds an outer step waits for a replica's pseudo-gradient before dropping it
    ft_join_timeout: float = 120.0  # seconds a starting replica waits for its peers (founding) or a peer's state
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
    resume: str = ""  # "" | latest | PATH


@dataclass
class TraceConfig:
    enabled: bool = False


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
    uneven_rank: str = ""  # R@STEP: rank R has no data from STEP on (tests uneven-input handling)
    slow_rank: int = -1
    slow_ms: float = 0.0
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


def help_keys() -> str:
    """`shardlab train --help-keys` (the text lives in config_help.py, beside nothing else)."""
    from shardlab.config_help import help_text
    return help_text()


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


def load(path: str | Path | None = None, overrides: list[str] = (), base: Config | None = None) -> Config:
    """Build a Config from `base` (default: the defaults), an optional TOML file and `key=value` overrides
    (overrides win)."""
    cfg = base if base is not None else Config()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {str(p)!r} is not valid TOML: {e}") from None
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"config file {str(p)!r}: top-level key {section!r} must be a [section]")
            for name, value in values.items():
                set_key(cfg, f"{section}.{name}", value)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. train.steps=100")
        set_key(cfg, key.strip(), value)
    return cfg


def to_dict(cfg: Config) -> dict:
    return {s.name: {_public_name(k): v for k, v in dataclasses.asdict(getattr(cfg, s.name)).items()}
            for s in fields(cfg)}


def to_toml(cfg: Config) -> str:
    lines = []
    for section, values in to_dict(cfg).items():
        lines.append(f"[{section}]")
        for k, v in values.items():
            if isinstance(v, bool):
                text = "true" if v else "false"
            elif isinstance(v, str):
                text = '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
            else:
                text = repr(v)
            lines.append(f"{k} = {text}")
        lines.append("")
    return "\n".join(lines)


def _choice(key: str, value: str, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ConfigError(f"{key}={value!r}: must be one of {', '.join(options)}")


def _check_offload(p) -> None:
    """What offload exists (docs/memory.md): optimizer to disk for zero1/2/3; params (with the optimizer) to
    host or disk for zero3; torch-fsdp2's CPUOffloadPolicy (params to host), which needs an accelerator."""
    what = f"parallel.offload={p.offload} parallel.offload_to={p.offload_to} with parallel.strategy={p.strategy}"
    if p.offload == "none":
        return
    if p.strategy == "torch-fsdp2":
        if p.offload != "params" or p.offload_to != "host":
            raise ConfigError(f"{what}: FSDP2 offloads parameters (with gradients and optimizer) to the host "
                              "only; use parallel.offload=params parallel.offload_to=host")
        import torch
        if not torch.cuda.is_available() or p.backend == "gloo":
            raise ConfigError(f"{what}: FSDP2's CPUOffloadPolicy needs an accelerator (CUDA) and this run has "
                              "none; on a CPU use parallel.strategy=zero3 parallel.offload=params "
                              "parallel.offload_to=disk")
        return
    if p.offload == "optimizer" and (p.offload_to != "disk" or p.strategy not in ("zero1", "zero2", "zero3")):
        raise ConfigError(f"{what}: the optimizer is offloaded to disk for zero1/zero2/zero3; use "
                          "parallel.offload_to=disk with one of them (or parallel.offload=params "
                          "parallel.offload_to=host with zero3)")
    if p.offload == "params" and p.strategy != "zero3":
        raise ConfigError(f"{what}: parameter offload needs parameters sharded at rest; use "
                          "parallel.strategy=zero3 (or torch-fsdp2 on CUDA)")


def _validate_sync(p: ParallelConfig) -> None:
    """parallel.sync and its keys: what this version builds (docs/sync.md)."""
    _choice("parallel.sync", p.sync, ("every_step", "local_sgd", "diloco", "async"))
    _choice("parallel.outer_dtype", p.outer_dtype, ("fp32", "bf16", "fp16"))
    if p.sync_every < 1:
        raise ConfigError(f"parallel.sync_every={p.sync_every}: must be an integer >= 1 (inner steps per sync)")
    if p.outer_lr <= 0 or not 0 <= p.outer_momentum < 1:
        raise ConfigError(f"parallel.outer_lr={p.outer_lr} parallel.outer_momentum={p.outer_momentum}: the outer "
                          "learning rate must be > 0 and the momentum in [0, 1)")
    if p.fragments < 1 or (p.fragments > 1 and (p.sync == "every_step" or p.fragments > p.sync_every)):
        raise ConfigError(f"parallel.fragments={p.fragments}: must be 1, or 2..parallel.sync_every "
                          f"({p.sync_every}) with parallel.sync=local_sgd or diloco (fragments are synced at "
                          "steps H/F apart, so F <= H)")
    if p.sync not in ("local_sgd", "diloco"):
        return
    hsdp = p.strategy in ("zero1", "zero2", "zero3") and p.dp_replicate > 1
    if p.tp != 1 or p.pp != 1 or p.cp != 1 or p.offload != "none" or not (
            hsdp or (p.strategy in ("single", "ddp") and p.dp_shard in (0, 1))):
        raise ConfigError(f"parallel.sync={p.sync} with parallel.strategy={p.strategy}: this version runs local SGD "
                          "and DiLoCo over whole replicas only (ddp, no dp_shard) or over HSDP replicas "
                          "(zero1/zero2/zero3 with parallel.dp_replicate > 1), with parallel.tp=pp=cp=1 and no "
                          "offload")


def _validate_fault_tolerant(cfg: Config, world_size: int) -> None:
    """parallel.fault_tolerant: replicas that may die and rejoin (docs/sync.md)."""
    p = cfg.parallel
    if not p.fault_tolerant:
        return
    if p.sync not in ("local_sgd", "diloco"):
        raise ConfigError(f"parallel.fault_tolerant=true with parallel.sync={p.sync}: only replicas that synchronise "
                          "periodically can lose one; use parallel.sync=diloco or local_sgd")
    if p.fragments != 1:
        raise ConfigError(f"parallel.fault_tolerant=true with parallel.fragments={p.fragments}: this version's "
                          "store exchange sends the whole model per outer step; use parallel.fragments=1")
    if world_size != 1:
        raise ConfigError(f"parallel.fault_tolerant=true at {world_size} processes: this version runs each replica "
                          "as one process; start every replica with its own `shardlab train --nproc 1`")
    if p.replicas < 1 or not 0 <= p.replica_id < p.replicas:
        raise ConfigError(f"parallel.replicas={p.replicas} parallel.replica_id={p.replica_id}: give the job's "
                          "replica count (>= 1) and this replica's id in 0..replicas-1")
    host, _, port = p.ft_store.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"parallel.ft_store={p.ft_store!r}: expected HOST:PORT of the store every replica meets "
                          "at (start one with `shardlab lighthouse --port P`)")
    if not (p.ft_timeout > 0 and p.ft_join_timeout > 0):
        raise ConfigError(f"parallel.ft_timeout={p.ft_timeout} parallel.ft_join_timeout={p.ft_join_timeout}: "
                          "both must be > 0 seconds")
    if cfg.data.shares != "equal":
        raise ConfigError(f"data.shares={cfg.data.shares} with parallel.fault_tolerant=true: replicas are separate "
                          "jobs and take equal slices of the data; use data.shares=equal")


def _validate_async(cfg: Config, world_size: int) -> None:
    """parallel.sync=async: one server and W >= 1 workers, each holding the whole model (docs/sync.md)."""
    p = cfg.parallel
    if p.max_staleness < 0:
        raise ConfigError(f"parallel.max_staleness={p.max_staleness}: must be an integer >= 0 (0: the workers "
                          "take turns; larger: more overlap, staler gradients)")
    if p.sync != "async":
        return
    if world_size < 2:
        raise ConfigError(f"parallel.sync=async needs a server and at least one worker, but the world size is "
                          f"{world_size}; run with --nproc 2 or more")
    if p.strategy not in ("single", "ddp") or p.tp != 1 or p.pp != 1 or p.cp != 1 or p.dp_shard not in (0, 1):
        raise ConfigError(f"parallel.sync=async with parallel.strategy={p.strategy} tp={p.tp} pp={p.pp} cp={p.cp}: "
                          "the parameter server and each worker hold the whole model; use parallel.strategy=ddp "
                          "with parallel.tp=pp=cp=1 and no dp_shard")
    if p.compress != "none":
        raise ConfigError(f"parallel.sync=async with parallel.compress={p.compress}: workers push whole fp32 "
                          "gradients; set parallel.compress=none")
    if cfg.train.dtype == "fp16":
        raise ConfigError("parallel.sync=async with train.dtype=fp16: the loss scaler is not built for stale "
                          "gradients; use train.dtype=bf16 or fp32")
    if p.backend == "nccl":
        raise ConfigError("parallel.sync=async with parallel.backend=nccl: the server receives from whichever "
                          "worker is ready first, which NCCL cannot do; use parallel.backend=gloo (or auto)")
    if cfg.trace.enabled:
        raise ConfigError("trace.enabled=true with parallel.sync=async: the timeline is not recorded for "
                          "asynchronous runs in this version; set trace.enabled=false")
    if cfg.data.shares != "equal":
        raise ConfigError(f"data.shares={cfg.data.shares} with parallel.sync=async: each worker takes whole "
                          "global batches as it is ready, so there are no shares to set; use data.shares=equal")


def validate(cfg: Config, world_size: int) -> None:
    """Check combinations that only make sense together. Resolves derived values in place."""
    from shardlab.model.gpt import resolve_model_config
    from shardlab.parallel.mesh import resolve as resolve_dims

    t, p, m = cfg.train, cfg.parallel, cfg.model
    _validate_arch(m)
    _choice("parallel.strategy", p.strategy, STRATEGIES)
    _choice("parallel.backend", p.backend, ("auto", "gloo", "nccl"))
    _choice("parallel.comm_dtype", p.comm_dtype, ("fp32", "fp16", "bf16"))
    _choice("parallel.compress", p.compress, ("none", "powersgd"))
    _choice("parallel.wrap", p.wrap, ("block", "layer", "whole"))
    _choice("parallel.pp_schedule", p.pp_schedule, tuple(layers.PIPELINE_PARALLEL))
    _choice("parallel.offload", p.offload, ("none", "optimizer", "params"))
    _choice("parallel.offload_to", p.offload_to, ("host", "disk"))
    _check_offload(p)
    _validate_sync(p)
    _validate_fault_tolerant(cfg, world_size)
    _validate_async(cfg, world_size)
    world = world_size  # the processes (debug.slow_rank names one of them)
    if p.sync == "async":  # every rank holds the whole model and each gradient is one global batch:
        world_size = 1  # the layout and batch checks below are those of one process
    _choice("train.dtype", t.dtype, ("fp32", "bf16", "fp16"))
    _choice("train.recompute", t.recompute, ("none", "full", "selective"))
    _choice("doctor.on_anomaly", cfg.doctor.on_anomaly, ("stop", "skip", "rollback"))
    _choice("data.uneven", cfg.data.uneven, ("error", "join"))
    for key, value in (("train.steps", t.steps), ("train.micro_batch", t.micro_batch),
                       ("train.grad_accum", t.grad_accum), ("train.seq_len", t.seq_len),
                       ("train.log_every", t.log_every), ("train.threads", t.threads),
                       ("train.recompute_every", t.recompute_every)):
        if value < 1:
            raise ConfigError(f"{key}={value}: must be at least 1")
    if not 0.0 < t.lr < 1.0 or t.min_lr < 0 or t.min_lr > t.lr:
        raise ConfigError(f"train.lr={t.lr} / train.min_lr={t.min_lr}: need 0 < min_lr <= lr < 1")
    if not 0.0 < cfg.data.val_fraction < 0.5:
        raise ConfigError(f"data.val_fraction={cfg.data.val_fraction}: must be between 0 and 0.5")
    if p.bucket_mb <= 0 or p.first_bucket_mb <= 0:
        raise ConfigError("parallel.bucket_mb and parallel.first_bucket_mb must be positive")
    if p.last_bucket_mb < 0:
        raise ConfigError("parallel.last_bucket_mb must be >= 0 (0 = no separate last bucket)")
    if p.strategy == "single" and world_size != 1:
        raise ConfigError(f"parallel.strategy=single runs on one process, but the world size is {world_size}; "
                          "use --nproc 1 or a data-parallel strategy")
    dims = resolve_dims(p, world_size)  # raises ConfigError on an impossible layout
    missing = layers.not_built(dims.degrees)
    if missing:
        raise ConfigError(missing)
    if dims.pp > 1 and p.pp_microbatches:
        if t.grad_accum not in (1, p.pp_microbatches):
            raise ConfigError(f"parallel.pp_microbatches={p.pp_microbatches} contradicts train.grad_accum="
                              f"{t.grad_accum}: a step's microbatches are the pipeline's; set only one of them")
        t.grad_accum = p.pp_microbatches
    _validate_tp(cfg, dims)
    _validate_cp(cfg, dims)
    _validate_powersgd(cfg, dims)
    _validate_moe(cfg, dims)
    per_step = t.micro_batch * dims.dp_size  # ranks of one tp/pp/cp group share their batch
    if t.global_batch:
        if t.global_batch % per_step:
            what = "world size" if dims.dp_size == world_size else "data-parallel size"
            raise ConfigError(f"train.global_batch={t.global_batch} is not divisible by {what} x micro batch "
                              f"= {dims.dp_size} x {t.micro_batch} = {per_step}")
        accum = t.global_batch // per_step
        if t.grad_accum not in (1, accum):
            raise ConfigError(f"train.grad_accum={t.grad_accum} contradicts train.global_batch={t.global_batch} "
                              f"(which implies grad_accum={accum}); set only one of them")
        t.grad_accum = accum
    else:
        t.global_batch = per_step * t.grad_accum
    model_cfg = resolve_model_config(m, t.seq_len)  # raises ConfigError on bad dimensions
    if p.fragments > model_cfg.n_layer + 2:  # fragments are whole units: embedding, each block, head
        raise ConfigError(f"parallel.fragments={p.fragments}: the model has {model_cfg.n_layer} blocks, so at most "
                          f"{model_cfg.n_layer + 2} fragments (embedding, blocks, head); use fewer")
    if dims.pp > 1:
        from shardlab.parallel import pipeline
        pipeline.validate(cfg, dims, model_cfg.n_layer)
    from shardlab.train import balance

    balance.validate(cfg, dims)  # data.shares, debug.slow_factor
    if cfg.doctor.on_anomaly == "rollback" and not cfg.ckpt.every:
        raise ConfigError("doctor.on_anomaly=rollback needs checkpoints: set ckpt.every")
    _check_ranges(cfg, world)


def _check_ranges(cfg: Config, world_size: int) -> None:
    """Values outside their meaning (negative counts, probabilities above 1, NaN) are bad input too."""
    import math

    for section in fields(cfg):
        for f in fields(getattr(cfg, section.name)):
            v = getattr(getattr(cfg, section.name), f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{section.name}.{_public_name(f.name)}={v}: must be a finite number")
    t, m, c, d = cfg.train, cfg.model, cfg.ckpt, cfg.doctor
    at_least = [("train.global_batch", t.global_batch, 0), ("train.warmup_steps", t.warmup_steps, 0),
                ("train.eval_every", t.eval_every, 0), ("train.eval_seqs", t.eval_seqs, 1),
                ("train.seed", t.seed, 0), ("train.grad_clip", t.grad_clip, 0), ("train.weight_decay", t.weight_decay, 0),
                ("ckpt.every", c.every, 0), ("ckpt.keep", c.keep, 0), ("ckpt.keep_every", c.keep_every, 0),
                ("doctor.hang_timeout_s", d.hang_timeout_s, 0), ("doctor.checksum_every", d.checksum_every, 0),
                ("doctor.spike_factor", d.spike_factor, 0), ("debug.slow_ms", cfg.debug.slow_ms, 0),
                ("debug.slow_rank", cfg.debug.slow_rank, -1)]  # mesh degrees: parallel.mesh.resolve
    at_least += [(f"model.{k}", getattr(m, k), 0) for k in ("n_layer", "n_head", "d_model", "vocab_size", "max_seq_len")]
    for key, value, low in at_least:
        if value < low:
            raise ConfigError(f"{key}={value}: must be at least {low}")
    if t.seed >= 2 ** 63:
        raise ConfigError(f"train.seed={t.seed}: must be below 2**63 (torch's seed range)")
    for key, value in (("model.dropout", m.dropout), ("train.beta1", t.beta1), ("train.beta2", t.beta2)):
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{key}={value}: must be in [0, 1)")
    if cfg.debug.slow_rank >= world_size:
        raise ConfigError(f"debug.slow_rank={cfg.debug.slow_rank}: no such rank at world size {world_size}")
    from shardlab.doctor.inject import Faults

    Faults.parse(cfg.debug, world_size)  # malformed debug.* fault specs: before launch, not in every rank



def _validate_powersgd(cfg: Config, dims) -> None:
    """PowerSGD replaces the gradient all-reduce of a replicating layer (docs/ddp.md)."""
    p = cfg.parallel
    if p.powersgd_rank < 1:
        raise ConfigError(f"parallel.powersgd_rank={p.powersgd_rank}: must be at least 1 (the rank of the "
                          "gradient approximation; 1-8 is usual)")
    if p.compress == "none":
        return
    if p.strategy not in ("ddp", "torch-ddp"):
        raise ConfigError(f"parallel.compress={p.compress} with parallel.strategy={p.strategy}: PowerSGD "
                          "replaces the all-reduce of ddp or torch-ddp only; use one of them")
    if p.comm_dtype != "fp32":
        raise ConfigError(f"parallel.compress={p.compress} with parallel.comm_dtype={p.comm_dtype}: choose one "
                          "compression; set parallel.comm_dtype=fp32")
    if dims.tp * dims.pp * dims.cp > 1:
        raise ConfigError(f"parallel.compress={p.compress} with tp/pp/cp > 1: this version compresses pure "
                          "data parallelism only; set parallel.tp=parallel.pp=parallel.cp=1")
    if cfg.ckpt.resume:
        raise ConfigError(f"ckpt.resume with parallel.compress={p.compress}: checkpoints do not hold PowerSGD's "
                          "per-rank state (error feedback, warm-start Q), so the run would not continue as it "
                          "was; resume with parallel.compress=none or start a new run")


def _validate_moe(cfg: Config, dims) -> None:
    """The mixture-of-experts keys and expert parallelism (docs/moe.md)."""
    from shardlab.parallel.ep import EP_WITH_DP

    m, p = cfg.model, cfg.parallel
    E = m.moe_experts
    if E < 0:
        raise ConfigError(f"model.moe_experts={E}: must be 0 (dense) or the number of experts")
    if m.moe_every < 1:
        raise ConfigError(f"model.moe_every={m.moe_every}: must be at least 1 (1 = every block's MLP is an MoE)")
    if m.moe_capacity < 0 or m.moe_aux_weight < 0 or m.moe_z_weight < 0:
        raise ConfigError("model.moe_capacity, model.moe_aux_weight and model.moe_z_weight must be >= 0 "
                          "(moe_capacity=0: dropless)")
    if m.moe_bias_update < 0:
        raise ConfigError(f"model.moe_bias_update={m.moe_bias_update}: must be >= 0 (0 = off; DeepSeek-V3 uses "
                          "0.001)")
    if m.moe_router_lr_scale <= 0:
        raise ConfigError(f"model.moe_router_lr_scale={m.moe_router_lr_scale}: must be > 0 (1.0 = the routers "
                          "learn at train.lr)")
    if E and not 1 <= m.moe_top_k <= E:
        raise ConfigError(f"model.moe_top_k={m.moe_top_k}: must be between 1 and model.moe_experts={E}")
    if E and max(dims.pp, dims.cp) > 1:
        raise ConfigError(f"model.moe_experts={E} with parallel.pp={dims.pp} parallel.cp={dims.cp}: this version "
                          "runs MoE models under data, expert and tensor parallelism only; set pp=cp=1")
    if E and dims.tp > 1 and (p.tp_impl != "own" or p.sp):
        raise ConfigError(f"model.moe_experts={E} with parallel.tp={dims.tp}: MoE layers compose with own tensor "
                          "parallelism without SP only (they stay whole per tp rank); use parallel.tp_impl=own "
                          "parallel.sp=false")
    if p.ep < 1:
        raise ConfigError(f"parallel.ep={p.ep}: must be a positive degree (1 = no expert parallelism)")
    if p.ep == 1:
        return
    if not E:
        raise ConfigError(f"parallel.ep={p.ep} without experts: set model.moe_experts (a multiple of {p.ep}) "
                          "or parallel.ep=1")
    if E % p.ep:
        raise ConfigError(f"model.moe_experts={E} is not divisible by parallel.ep={p.ep}: each expert-parallel "
                          "rank holds the same number of experts")
    if dims.dp_size % p.ep:
        raise ConfigError(f"parallel.ep={p.ep} must divide the data-parallel size {dims.dp_size} (expert "
                          "parallelism borrows its ranks from the data-parallel ranks)")
    if p.strategy not in EP_WITH_DP:
        raise ConfigError(f"parallel.ep={p.ep} with parallel.dp={p.strategy}: expert parallelism composes with "
                          f"{', '.join(EP_WITH_DP)} in this version")
    if p.compress != "none" or p.sync != "every_step":
        raise ConfigError(f"parallel.ep={p.ep} with parallel.compress={p.compress} parallel.sync={p.sync}: "
                          "expert parallelism needs plain per-step gradient reduction; use the defaults")


LLAMA_KEYS = ("n_kv_heads", "rope_theta", "ffn_multiple_of", "ffn_dim_multiplier")


def _validate_arch(m: ModelConfig) -> None:
    """The preset names its family; `model.arch` picks one for model.preset=custom. Resolved in place, so
    config.toml says which family ran."""
    from shardlab.model import gpt, llama

    _choice("model.preset", m.preset, tuple(gpt.PRESETS) + tuple(llama.PRESETS) + ("custom",))
    _choice("model.arch", m.arch, ("gpt2", "llama"))
    if m.preset in llama.PRESETS:
        m.arch = "llama"
    elif m.preset != "custom" and m.arch != "gpt2":
        raise ConfigError(f"model.arch={m.arch} with model.preset={m.preset} (a gpt2 preset): use a llama preset "
                          f"({', '.join(llama.PRESETS)}) or model.preset=custom with the sizes")
    if m.arch == "gpt2":
        for key in LLAMA_KEYS:
            if getattr(m, key):
                raise ConfigError(f"model.{key}={getattr(m, key)} applies to the llama family only; set "
                                  "model.arch=llama (or a llama-* preset) or drop the key")
    for key in LLAMA_KEYS:
        if getattr(m, key) < 0:
            raise ConfigError(f"model.{key}={getattr(m, key)}: must be at least 0 (0 = the preset's value)")


def _validate_cp(cfg: Config, dims) -> None:
    """Context parallelism's own conditions, one line each, before launch (docs/context.md)."""
    import torch

    p, t = cfg.parallel, cfg.train
    _choice("parallel.cp_impl", p.cp_impl, tuple(layers.CONTEXT_PARALLEL))
    if dims.cp == 1:
        return
    if t.seq_len % (2 * dims.cp):
        raise ConfigError(f"train.seq_len={t.seq_len} is not divisible by 2 x parallel.cp = {2 * dims.cp} (zigzag "
                          f"context parallelism cuts every sequence into {2 * dims.cp} equal chunks); choose a "
                          f"multiple of {2 * dims.cp}")
    if p.cp_impl == "torch" and (p.backend == "gloo" or not torch.cuda.is_available()):
        from shardlab.parallel.cp import TORCH_ON_CPU
        raise ConfigError(TORCH_ON_CPU)
    dp = layers.dp_name(p)
    if dp not in layers.CP_WITH_DP:
        raise ConfigError(f"parallel.cp={dims.cp} does not compose with parallel.dp={dp} in this version; use one "
                          f"of {', '.join(layers.CP_WITH_DP)}")
    if dims.pp > 1:
        raise ConfigError(f"parallel.cp={dims.cp} with parallel.pp={dims.pp} is not implemented yet; set one of them to 1")
    if dims.dp_replicate > 1 and dp not in layers.REPLICATING:
        raise ConfigError(f"parallel.cp={dims.cp} with HSDP (parallel.dp={dp}, parallel.dp_replicate="
                          f"{dims.dp_replicate}) is not implemented yet; set parallel.dp_replicate=1 or use ddp")
    if dims.tp > 1 and p.tp_impl != "own":  # DTensor parameters: the own dp layers over dp_cp take plain tensors
        raise ConfigError(f"parallel.cp={dims.cp} with parallel.tp_impl={p.tp_impl} is not implemented yet; use "
                          "parallel.tp_impl=own")
    if dims.tp > 1 and dp not in layers.REPLICATING:
        raise ConfigError(f"parallel.cp={dims.cp} with parallel.tp={dims.tp} composes with parallel.dp=ddp only in "
                          f"this version (got {dp})")
    if p.sp and (t.seq_len // dims.cp) % dims.tp:
        raise ConfigError(f"parallel.sp=true with parallel.cp={dims.cp}: each rank's {t.seq_len // dims.cp} tokens are "
                          f"not divisible by parallel.tp={dims.tp}; choose train.seq_len as a multiple of "
                          f"{dims.cp * dims.tp * 2}")
    if cfg.model.dropout > 0:
        raise ConfigError(f"model.dropout={cfg.model.dropout} with parallel.cp={dims.cp}: the ring computes attention "
                          "without dropout; set model.dropout=0")


def _validate_tp(cfg: Config, dims) -> None:
    """Tensor parallelism's own conditions, one line each, before anything starts (docs/tp.md)."""
    from shardlab.model.gpt import resolve_model_config

    p = cfg.parallel
    _choice("parallel.tp_impl", p.tp_impl, tuple(layers.TENSOR_PARALLEL) or ("own",))
    if dims.tp == 1:
        if p.sp:
            raise ConfigError("parallel.sp=true splits the sequence across tensor-parallel ranks: it needs "
                              "parallel.tp > 1")
        return
    from shardlab.parallel.tp import check_divisible

    m = resolve_model_config(cfg.model, cfg.train.seq_len)
    try:
        check_divisible(m.n_head, m.d_model, dims.tp, n_kv_heads=getattr(m, "n_kv_heads", None),
                        ffn_hidden=getattr(m, "ffn_hidden", None))
    except ValueError as e:
        raise ConfigError(f"{e}; choose another degree") from None
    n_kv = getattr(m, "n_kv_heads", m.n_head)
    if p.tp_impl == "dtensor" and n_kv < dims.tp:
        raise ConfigError(f"parallel.tp_impl=dtensor with model.n_kv_heads={n_kv} < parallel.tp={dims.tp}: replicated "
                          "key/value heads are built in the own implementation only; use parallel.tp_impl=own")
    if p.sp and cfg.train.seq_len % dims.tp:
        raise ConfigError(f"parallel.sp=true with parallel.tp={dims.tp}: train.seq_len={cfg.train.seq_len} is not "
                          f"divisible by the degree; choose train.seq_len as a multiple of parallel.tp")
    dp = layers.dp_name(p) if dims.dp_size > 1 else "single"
    ok = layers.TP_WITH_DP.get(p.tp_impl, ())
    if dp not in ok:
        raise ConfigError(f"parallel.tp_impl={p.tp_impl} does not compose with parallel.dp={dp} in this version; "
                          f"use one of {', '.join(ok)} (or parallel.tp_impl="
                          f"{'dtensor' if p.tp_impl == 'own' else 'own'})")
