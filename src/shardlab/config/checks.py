"""Per-feature configuration checks, called from `config.validate()` (its entry point and the order of
the checks stay there). Each raises ConfigError with one line: what is wrong, what to do instead."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from shardlab import precision
from shardlab.errors import ConfigError
from shardlab.parallel import layers

if TYPE_CHECKING:  # the types are for annotations only
    from shardlab.config.schema import Config, ModelConfig, ParallelConfig


# Shared helper: one line naming the key, its value and the allowed choices.
def _choice(key: str, value: str, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ConfigError(f"{key}={value!r}: must be one of {', '.join(options)}")


# Model family: model.preset / model.arch and the llama-only keys.
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


# Memory: which offload (optimizer / params, host / disk) each data-parallel strategy builds.
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


# Synchronisation: local SGD / DiLoCo, fault-tolerant replicas, the asynchronous parameter server.
def _validate_sync(p: ParallelConfig) -> None:
    """parallel.sync and its keys: what this version builds (docs/sync.md)."""
    _choice("parallel.sync", p.sync, ("every_step", "local_sgd", "diloco", "async"))
    _choice("parallel.outer_dtype", p.outer_dtype, precision.NAMES)
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
    if cfg.train.dtype in precision.LOSS_SCALED:
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


# Tensor parallelism (own / DTensor, sequence parallelism).
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
    from shardlab.parallel.tp.own import check_divisible

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


# Context parallelism (ring attention, zigzag chunks).
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
        from shardlab.parallel.cp.layer import TORCH_ON_CPU
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


# Gradient compression (PowerSGD).
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
    if cfg.ckpt.resume not in ("", "none"):
        raise ConfigError(f"ckpt.resume with parallel.compress={p.compress}: checkpoints do not hold PowerSGD's "
                          "per-rank state (error feedback, warm-start Q), so the run would not continue as it "
                          "was; resume with parallel.compress=none or start a new run")


# Mixture of experts and expert parallelism.
def _validate_moe(cfg: Config, dims) -> None:
    """The mixture-of-experts keys and expert parallelism (docs/moe.md)."""
    from shardlab.parallel.ep.layer import EP_WITH_DP

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


# Ranges: counts, probabilities and finite numbers, whatever the feature.
def _check_ranges(cfg: Config, world_size: int) -> None:
    """Values outside their meaning (negative counts, probabilities above 1, NaN) are bad input too."""
    import math

    from shardlab.config.schema import _public_name

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
                ("ckpt.signal_grace_s", c.signal_grace_s, 0),
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
