"""The bridge from a training config to the planner's inputs, written once: `from_config(cfg, world)`.

`shardlab train` describes a run by its config (model preset and overrides, train.*, parallel.*); the
planner by a `ModelSpec`, a `TrainSpec` and a `Layout`. This turns the first into the second for the same
run, so a prediction (`shardlab plan`) and a simulation (`shardlab train --dry-run`) or a measurement
(summary.json) of one layout can be set side by side.

Precision: train.dtype=bf16|fp16 is torch.autocast (fp32 weights, gradients and Adam state, 16-bit matrix
products): the planner's `bf16-autocast`/`fp16-autocast`, not Megatron's `*-mixed`.
"""
from __future__ import annotations

from shardlab import precision
from shardlab.optim import registry as optimizers
from .layout import Layout, strategy_fields
from .train_spec import TrainSpec
from .model import ModelSpec

_RECOMPUTE = {"none": "none", "full": "full", "selective": "selective"}


def trainer_defaults() -> dict:
    """What `shardlab train` does where the planner has a choice, as the planner's keys: the defaults of
    `shardlab plan` and of every plan of a run. The precision is train.dtype's default (fp32; train.dtype=bf16
    is precision=bf16-autocast: the trainer has no Megatron-style 16-bit weights); attention is always fused
    (the models call F.scaled_dot_product_attention, which never stores the s x s scores); the doctor's
    per-step check always runs (one all-gather of 8 fp64 signals); activation checkpointing is torch's
    non-reentrant checkpoint (parallel/recompute.py: use_reentrant=False), whose early stop ends a full
    recompute before the block's last GEMM (plan/recompute.py)."""
    # "fp32" is TrainConfig.dtype's default, written here because plan/ sits below config/ (the import floors);
    # tests/plan/test_planner_defaults.py holds the two equal
    return {"precision": precision.PLANNED_AS["fp32"], "flash_attention": True, "health_check": True,
            "recompute_early_stop": True}


def model_spec(cfg) -> ModelSpec:
    """The planner's model for `cfg.model` at `cfg.train.seq_len` (dimensions as the trainer resolves them)."""
    from shardlab.model.configs import resolve_model_config

    m = resolve_model_config(cfg.model, cfg.train.seq_len)
    # the MoE blocks (model.moe_*: every moe_every-th block's MLP as moe_experts routed copies)
    moe = {k: getattr(m, k) for k in ("moe_experts", "moe_top_k", "moe_every")} if getattr(m, "moe_experts", 0) else {}
    if getattr(m, "arch", "gpt2") == "llama":
        return ModelSpec(cfg.model.preset, n_layer=m.n_layer, d_model=m.d_model, n_head=m.n_head,
                         vocab=m.vocab_size, seq=cfg.train.seq_len, arch="llama", n_kv_heads=m.n_kv_heads,
                         ffn=m.intermediate_size or m.ffn_hidden, tied=m.tie_embeddings, **moe)
    return ModelSpec(cfg.model.preset, n_layer=m.n_layer, d_model=m.d_model, n_head=m.n_head,
                     vocab=m.vocab_size, seq=m.max_seq_len, tied=m.tie_embeddings, **moe)


def from_config(cfg, world: int) -> tuple[ModelSpec, TrainSpec, Layout]:
    """(model, train, layout) of the run `cfg` describes at `world` ranks. Raises ConfigError (from the
    mesh) on a layout the trainer would refuse; ValueError where the planner has no model of a feature."""
    from shardlab.parallel.mesh import resolve_run
    from shardlab.parallel.pp import registry

    run = resolve_run(cfg, world)  # the layout and batch as config validation and the trainer resolve them
    dims, p, t = run.dims, cfg.parallel, cfg.train
    row = optimizers.get(optimizers.training_name(cfg))  # the registry's row, by the planner's name
    train = TrainSpec(global_batch=run.global_batch, micro_batch=t.micro_batch,
                      seq=t.seq_len, precision=precision.PLANNED_AS[t.dtype],
                      optimizer=row.planned_as, optim_dtype=getattr(t, "optim_dtype", "fp32"),
                      flash_attention=trainer_defaults()["flash_attention"], fp8=t.fp8, compile=bool(t.compile),
                      recompute_early_stop=trainer_defaults()["recompute_early_stop"],
                      dropout=float(cfg.model.dropout) > 0)  # p = 0 keeps no masks (as the model runs)
    # the strategy with its implementation (torch-fsdp2: FSDP2's kernels; torch-zero1: whole parameters), as
    # `shardlab plan strategy=...` reads it; parallel.tp_impl as the plan key tp_impl
    how = strategy_fields(p.strategy)
    schedule = registry.spec(p.pp_schedule).planned_as
    # a schedule planned as another keeps its stages per rank only where the plan interleaves them too
    layout = Layout.from_degrees(dims, how.pop("strategy"), **how, tp_impl=p.tp_impl, sp=bool(p.sp), schedule=schedule,
                                 v=int(p.pp_virtual) if registry.many_stages(schedule) else 1, recompute=_RECOMPUTE.get(t.recompute, "none"),
                                 cp_impl=p.cp_impl, cp_ulysses=p.cp_ulysses, offload=p.offload, bucket_mb=p.bucket_mb, first_bucket_mb=p.first_bucket_mb,
                                 last_bucket_mb=p.last_bucket_mb,
                                 comm_dtype=None if p.comm_dtype == "fp32" else p.comm_dtype,
                                 reshard_after_forward=bool(p.reshard_after_forward),
                                 health_check=trainer_defaults()["health_check"], ep=int(getattr(p, "ep", 1) or 1))
    return model_spec(cfg), train, layout
