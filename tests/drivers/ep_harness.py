"""Rank-side helpers for the expert-parallel tests: a tiny MoE GPT built by the composition the trainer
uses (`shardlab.parallel.build`), trained a few steps on a fixed global batch split over the data ranks;
what each rank saw (losses, routing stats, MoE outputs, comm records) comes back to the test."""
from __future__ import annotations

import torch

TINY = dict(n_layer=2, n_head=4, d_model=32, vocab_size=256, max_seq_len=16)
GLOBAL_BATCH = 8  # sequences per step, split over the data-parallel ranks


def build(ep: int, capacity: float, dp: str = "ddp", experts: int = 4, top_k: int = 2, tp: int = 1,
          bias_update: float = 0.0, train_kw: dict | None = None, model_kw: dict | None = None,
          meta: bool = False):
    """`meta`: the composition builds the model from `cfg.model` itself (on the meta device, each rank
    allocating and drawing what it holds: the trainer's path) instead of taking a whole one."""
    from shardlab.config import Config
    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.parallel import build as build_parallel

    cfg = Config()
    cfg.train.seq_len, cfg.train.grad_clip, cfg.ckpt.final = TINY["max_seq_len"], 1.0, False
    cfg.parallel.strategy, cfg.parallel.ep, cfg.parallel.tp = dp, ep, tp
    for k, v in (train_kw or {}).items():  # e.g. dtype, recompute, compile
        setattr(cfg.train, k, v)
    moe = dict(moe_experts=experts, moe_top_k=top_k, moe_capacity=capacity, moe_bias_update=bias_update)
    if meta:
        cfg.model.preset, cfg.train.seed = "custom", 0
        for k, v in {**TINY, **moe, **(model_kw or {})}.items():
            setattr(cfg.model, k, v)
        return build_parallel(cfg, torch.device("cpu"))
    model = build_model(GPTConfig(**TINY, **moe, **(model_kw or {})), seed=0)
    return build_parallel(cfg, torch.device("cpu"), model)


def global_batch(step: int):
    gen = torch.Generator().manual_seed(100 + step)
    x = torch.randint(0, TINY["vocab_size"], (GLOBAL_BATCH, TINY["max_seq_len"] + 1), generator=gen)
    return x[:, :-1], x[:, 1:]


def train(ep: int = 1, capacity: float = 0.0, dp: str = "ddp", steps: int = 5, accum: int = 1, tp: int = 1,
          bias_update: float = 0.0, train_kw: dict | None = None, model_kw: dict | None = None,
          meta: bool = False) -> dict:
    """`steps` optimizer steps; per step the global loss, dropped slots, this rank's tokens per expert per
    layer and all-to-all bytes; the MoE outputs of step 0 for this rank's sequences; the final parameters.
    `accum`: this rank's sequences in that many microbatches (gradients accumulated, synchronised once).
    `bias_update`: auxiliary-loss-free balancing on (each layer's final `expert_bias` comes back too).
    `train_kw`: `[train]` keys set on the config (dtype, recompute, compile); `model_kw`: GPTConfig fields;
    `meta`: built on the meta device from the config (`build`). Each rank's dense parameters come back too
    (`dense`: what the data-parallel layer holds as replicas), to compare across ranks."""
    from shardlab import comm
    from shardlab.model.moe import moe_layers

    par = build(ep, capacity, dp, tp=tp, bias_update=bias_update, train_kw=train_kw, model_kw=model_kw,
                meta=meta)
    dims = par.dims
    per = GLOBAL_BATCH // dims.dp_size
    rows = slice(dims.dp_rank * per, (dims.dp_rank + 1) * per)
    outputs: list = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: outputs.append(out.detach().clone()))
             for m in moe_layers(par.model)]
    out = {"loss": [], "dropped": [], "tokens": [], "bytes": [], "wire": [], "dp_rank": dims.dp_rank,
           "ep_rank": dims.coord("ep") if ep > 1 else 0}
    n_tokens = GLOBAL_BATCH * TINY["max_seq_len"]
    for step in range(steps):
        x, y = global_batch(step)
        comm.RECORDER.reset_step()
        micro = list(zip(x[rows].tensor_split(accum), y[rows].tensor_split(accum)))
        loss = par.step(micro, max_norm=1.0, global_tokens=n_tokens).loss_sum
        stats = comm.RECORDER.step_stats()
        out["bytes"].append(stats["bytes"].get("all_to_all", 0))
        out["wire"].append(stats["wire_bytes"].get("all_to_all", 0))
        out["tokens"].append([m.stats["tokens_per_expert"].tolist() for m in moe_layers(par.model)])
        moe = torch.tensor([float(par.moe_step["dropped"]), float(loss)])
        par.sum_over_data(moe, tag="test")
        out["dropped"].append(int(moe[0]))
        out["loss"].append(float(moe[1]) / n_tokens)
        if step == 0:
            out["outputs"] = [o for o in outputs]
            for h in hooks:
                h.remove()
    full = par.full_parameters()
    out["params"] = {n: p.clone() for n, p in full.items()} if comm.rank() == 0 else None
    out["state_keys"] = sorted(par.model_state_dict())
    out["dense"] = {n: p.detach().clone() for n, p in par.dp.replicated_parameters()}
    held, experts = {id(p) for p in par.model.parameters()}, [h.impl for h in par.layers if h.name == "ep"]
    out["expert_params_held"] = (all(id(p) in held for p in experts[0].expert_params) and
                                 len(experts[0].expert_params) > 0) if experts else None
    out["expert_bias"] = [None if m.expert_bias is None else m.expert_bias.clone() for m in moe_layers(par.model)]
    return out


def reshard(single_ckpt: str, out_ckpt: str) -> dict:
    """Load a checkpoint written by `single` into ep=2 (DCP reshard: each rank reads its own experts), then
    train one step and write model + optimizer state for `single` to read back."""
    import torch.distributed.checkpoint as dcp

    from shardlab import comm

    par = build(2, 0.0)
    sd = {"model": par.model_state_dict()}
    dcp.load(sd, checkpoint_id=single_ckpt)
    par.load_model_state_dict(sd["model"])
    loaded = {n: p.clone() for n, p in par.full_parameters().items()}  # (views of live parameters)
    per = GLOBAL_BATCH // par.dims.dp_size
    x, y = global_batch(0)
    rows = slice(par.dims.dp_rank * per, (par.dims.dp_rank + 1) * per)
    par.forward_backward([(x[rows], y[rows])], par.dims.dp_size / y.numel())
    par.finish()
    par.optimizer_step()
    dcp.save({"model": par.model_state_dict(), "optim": par.optim_state_dict()}, checkpoint_id=out_ckpt)
    after = par.full_parameters()
    return {"loaded": loaded, "after": after} if comm.rank() == 0 else {}


def trainer_run(run_dir: str, overrides: list[str]) -> dict:
    """The real trainer (what `shardlab train` runs on each rank) with `overrides`; returns its summary."""
    from pathlib import Path

    from shardlab import comm, config
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, overrides)
    cfg = config.validate(cfg, comm.world_size())
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    return Trainer(cfg, Path(run_dir)).run()



def expert_checksum(run_dir: str, ep: int, corrupt_rank: int | None) -> dict:
    """One training step, then the doctor's after-step with a checksum due; with `corrupt_rank`, that rank
    perturbs an expert first (debug.corrupt_rank=R@0 with debug.corrupt_expert). Returns the checksum result
    this rank holds, the expert the injection picks (the middle one) and this rank's edp group."""
    from shardlab import comm
    from shardlab.config import Config
    from shardlab.doctor import Doctor

    par = build(ep, 0.0)
    x, y = global_batch(0)
    per = GLOBAL_BATCH // par.dims.dp_size
    rows = slice(par.dims.dp_rank * per, (par.dims.dp_rank + 1) * per)
    par.forward_backward([(x[rows], y[rows])], par.dims.dp_size / y.numel())
    par.finish()
    par.optimizer_step()
    par.zero_grad()
    cfg = Config()
    cfg.doctor.hang_timeout_s, cfg.doctor.checksum_every, cfg.doctor.on_anomaly = 0.0, 1, "stop"
    if corrupt_rank is not None:
        cfg.debug.corrupt_rank, cfg.debug.corrupt_expert = f"{corrupt_rank}@0", True
    doctor = Doctor(cfg, run_dir, par.dp, comm.rank(), comm.world_size(), torch.device("cpu"), par.replica_sets())
    verdict = doctor.after_step(0)
    experts = par.dp.expert_parameters()
    return {"verdict": verdict, "result": doctor.last_checksum, "expert": experts[len(experts) // 2][0],
            "edp": par.dims.ranks("edp")}
