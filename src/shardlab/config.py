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

from shardlab.config_checks import (  # noqa: F401 - the per-feature checks; LLAMA_KEYS stays `config.LLAMA_KEYS`
    LLAMA_KEYS, _check_offload, _check_ranges, _choice, _validate_arch, _validate_async, _validate_cp,
    _validate_fault_tolerant, _validate_moe, _validate_powersgd, _validate_sync, _validate_tp)
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
    retain_host_memory: bool = True  # CPU: glibc keeps freed memory (no page faults per step; train/host_alloc.py)
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
    resume: str = ""  # "" | none | latest | PATH  (none: from step 0 on purpose, e.g. `shardlab resume RUN ckpt.resume=none`)
    on_signal: bool = True  # SIGINT/SIGTERM: stop at a step boundary and save (docs/training.md)
    signal_grace_s: float = 25.0  # from the signal to the exit at most (under Slurm's and Kubernetes' 30 s)


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
    corrupt_expert: bool = False  # under parallel.ep: corrupt_rank perturbs an expert (compared within edp)
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
    if cfg.debug.corrupt_expert and (p.ep <= 1 or not cfg.debug.corrupt_rank):
        raise ConfigError("debug.corrupt_expert=true perturbs an expert through debug.corrupt_rank under expert "
                          "parallelism: set parallel.ep > 1 and debug.corrupt_rank=R@STEP, or drop it")
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
                              f"= {dims.dp_size} x {t.micro_batch} = {per_step}: this layout cannot train that batch; "
                              f"pick a --nproc or train.micro_batch that divides it, or another train.global_batch")
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
