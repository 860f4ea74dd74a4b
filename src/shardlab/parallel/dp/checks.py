"""What the data-parallel layers (and their synchronisation: local SGD, DiLoCo, fault-tolerant replicas, the
asynchronous parameter server, PowerSGD, offload) accept, checked before launch by `config.validate`. Each
raises ConfigError with one line: what is wrong, what to do instead."""
from __future__ import annotations

from shardlab import precision
from shardlab.errors import ConfigError, choice as _choice
from shardlab.parallel import rules


# Memory: which offload (optimizer / params, host / disk) each data-parallel strategy builds.
def check_offload(p) -> None:
    """What offload exists (docs/memory.md): the optimizer (its state and step) to host or disk for zero1/2/3;
    params (with the optimizer) to host or disk for zero3; torch-fsdp2's CPUOffloadPolicy (params to host),
    which needs an accelerator."""
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
    if p.offload == "optimizer" and p.strategy not in ("zero1", "zero2", "zero3"):
        raise ConfigError(f"{what}: the optimizer is offloaded for the sharded layers only (its state is "
                          "this rank's shards'); use parallel.strategy=zero1, zero2 or zero3")
    if p.offload == "optimizer" and p.fault_tolerant and p.backend != "gloo":
        import torch
        if torch.cuda.is_available():  # the layer refuses it too (zero.py), wherever the parameters are
            raise ConfigError(f"{what} and parallel.fault_tolerant=true on an accelerator: a heal sends the "
                              "optimizer state from the device, and offload keeps it on the host; use one of them")
    if p.offload == "params" and p.strategy != "zero3":
        raise ConfigError(f"{what}: parameter offload needs parameters sharded at rest; use "
                          "parallel.strategy=zero3 (or torch-fsdp2 on CUDA)")


# Synchronisation: local SGD / DiLoCo, fault-tolerant replicas, the asynchronous parameter server.
def validate_sync(p) -> None:
    """parallel.sync and its keys: what this version builds (docs/sync.md)."""
    _choice("parallel.sync", p.sync, ("every_step", "local_sgd", "diloco", "async"))
    _choice("parallel.outer_dtype", p.outer_dtype, precision.OUTER_NAMES)
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


def validate_fault_tolerant(cfg, world_size: int) -> None:
    """parallel.fault_tolerant: replicas that may die and rejoin (docs/sync.md)."""
    p = cfg.parallel
    if not p.fault_tolerant:
        return
    if p.sync not in ("every_step", "local_sgd", "diloco"):
        raise ConfigError(f"parallel.fault_tolerant=true with parallel.sync={p.sync}: use parallel.sync=every_step, "
                          "diloco or local_sgd")
    every = p.sync == "every_step"
    if every and (p.pp != 1 or p.dp_replicate > 1 or p.strategy in ("torch-ddp", "torch-zero1")
                  or p.compress != "none"):
        raise ConfigError(f"parallel.fault_tolerant=true with parallel.sync=every_step: the replicas are the "
                          f"outer dp_replicate; inside one use single, ddp, zero1/2/3 or torch-fsdp2 with "
                          f"parallel.pp=1, dp_replicate<=1 and no compression (got strategy={p.strategy}, "
                          f"pp={p.pp}, dp_replicate={p.dp_replicate})")
    if p.fragments != 1:
        raise ConfigError(f"parallel.fault_tolerant=true with parallel.fragments={p.fragments}: this version's "
                          "store exchange sends the whole model per outer step; use parallel.fragments=1")
    if world_size != 1 and not every:
        raise ConfigError(f"parallel.fault_tolerant=true at {world_size} processes: this version runs each replica "
                          "as one process; start every replica with its own `shardlab train --nproc 1`")
    if not p.ft_job or "/" in p.ft_job:
        raise ConfigError(f"parallel.ft_job={p.ft_job!r}: a non-empty name without '/' (the job's key prefix)")
    if cfg.debug.ft_absent:
        rid, at, span = cfg.debug.ft_absent.partition("@")
        a, _, b = span.partition("-")
        if not (at and rid.isdigit() and a.isdigit() and (not b or b.isdigit()) and every):
            raise ConfigError(f"debug.ft_absent={cfg.debug.ft_absent!r}: expected R@A-B (replica R sits out steps "
                              "A..B) with parallel.sync=every_step")
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


def validate_async(cfg, world_size: int) -> None:
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


# Gradient compression (PowerSGD).
def validate_powersgd(cfg, dims) -> None:
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
    rules.check(cfg, dims, "powersgd")  # pure data parallelism only
    if cfg.ckpt.resume not in ("", "none"):
        raise ConfigError(f"ckpt.resume with parallel.compress={p.compress}: checkpoints do not hold PowerSGD's "
                          "per-rank state (error feedback, warm-start Q), so the run would not continue as it "
                          "was; resume with parallel.compress=none or start a new run")
