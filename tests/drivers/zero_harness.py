"""Rank-side helpers for the ZeRO tests: train a small GPT for a few steps with any strategy through the
trainer's path (`shardlab.parallel.build` and its step), and return what the tests compare (losses, full
parameters, bytes)."""
from __future__ import annotations

import torch

# Every dimension divisible by 2 and 4: no padding, so the memory formulas hold exactly per rank.
TINY = dict(n_layer=2, n_head=4, d_model=64, vocab_size=256, max_seq_len=32)
# Nothing divisible by 2 or 4 (vocab 257, d_model 6, 13 positions), and LayerNorm/bias rows (3) smaller
# than world size 4: some ranks own no rows of them at all.
ODD = dict(n_layer=2, n_head=1, d_model=3, vocab_size=257, max_seq_len=13)


def setup(name: str, model_kw: dict = TINY, dtype: str = "fp32", train_kw: dict | None = None, **parallel):
    """The composition for `name` (a `Parallel`), on the given model sizes; `train_kw` sets `[train]` keys."""
    from shardlab import parallel as parallel_mod
    from shardlab.config import Config
    from shardlab.model.gpt import build_model

    cfg = Config()
    cfg.parallel.strategy, cfg.train.dtype = name, dtype
    for k, v in parallel.items():
        setattr(cfg.parallel, k, v)
    for k, v in (train_kw or {}).items():
        setattr(cfg.train, k, v)
    return parallel_mod.build(cfg, torch.device("cpu"), build_model(model_config(model_kw), seed=0))


def model_config(model_kw: dict):
    """A GPTConfig, or a LlamaConfig when `model_kw` says arch="llama"."""
    from shardlab.model.gpt import GPTConfig
    from shardlab.model.llama import LlamaConfig

    return (LlamaConfig if model_kw.get("arch") == "llama" else GPTConfig)(**model_kw)


def microbatches(batch: torch.Tensor, rank: int, micro: int) -> list:
    """This rank's (x, y) microbatches of a (accum, world * micro, seq + 1) batch of token rows."""
    rows = batch[:, rank * micro:(rank + 1) * micro]
    return [(r[:, :-1], r[:, 1:]) for r in rows]


def train(name: str, steps: int = 10, model_kw: dict = TINY, accum: int = 1, micro: int = 2, dtype: str = "fp32",
          clip: float = 1.0, train_kw: dict | None = None, **parallel) -> dict:
    """The trainer's step on a fixed global batch; returns this rank's losses, the full parameters
    (rank 0), the per-rank collective bytes of the last step and `state_bytes`."""
    from shardlab import comm

    par = setup(name, model_kw, dtype, train_kw, **parallel)
    world, rank = comm.world_size(), comm.rank()
    seq = model_kw["max_seq_len"]
    weight = 1.0 / (accum * micro * seq)  # the mean over this rank's tokens of the step
    gen = torch.Generator().manual_seed(1234)
    losses, norms = [], []
    for step in range(steps):
        comm.RECORDER.reset_step()
        first = comm.RECORDER.order  # records so far, all groups
        batch = torch.randint(0, model_kw["vocab_size"], (accum, world * micro, seq + 1), generator=gen)
        total = par.forward_backward(microbatches(batch, rank, micro), weight).item() * weight
        par.finish()
        norms.append(par.clip_grad_norm_(clip))
        par.optimizer_step()
        state = par.state_bytes()
        held = held_bytes(par.dp, par.optimizer)
        par.zero_grad()
        losses.append(total)
    stats = comm.RECORDER.step_stats()  # the last step's collectives, before full_parameters() gathers
    by_group = group_stats([r for r in comm.RECORDER.ring if r.order > first])
    gathers = [r.tag for r in comm.RECORDER.ring if r.order > first and r.op == "all_gather"]
    params = {k: v.detach().clone() for k, v in par.full_parameters().items()}
    return {"losses": losses, "norms": norms, "params": params if rank == 0 else None,
            "comm": stats, "groups": by_group, "gathers": gathers, "state": state, "held": held,
            "psi": sum(p.numel() for p in params.values())}


def in_flight(name: str, rounds: int = 2, accum: int = 3, micro: int = 2, model_kw: dict = TINY,
              **parallel) -> list[tuple[dict, dict]]:
    """Per round, the gradients this rank holds after `finish()` (shards for sharded layers) two ways,
    from two copies of the same model: the plain loop (`forward_backward`), and what a pipeline
    schedule does: every microbatch's forward first, then their backwards in reverse order, gradient
    sync switched on for the last backward only. No optimizer step between rounds, so round 2 checks
    that the layer's bookkeeping was reset by round 1 alone."""
    from shardlab import comm

    plain, flight = setup(name, model_kw, **parallel), setup(name, model_kw, **parallel)
    world, rank = comm.world_size(), comm.rank()
    seq = model_kw["max_seq_len"]
    weight = 1.0 / (accum * micro * seq)
    gen = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(rounds):
        batch = torch.randint(0, model_kw["vocab_size"], (accum, world * micro, seq + 1), generator=gen)
        mbs = microbatches(batch, rank, micro)
        plain.forward_backward(mbs, weight)
        plain.finish()
        losses = [flight.loss_fn(flight.module(x), y, reduction="sum") for x, y in mbs]
        for i in reversed(range(accum)):
            flight.dp.set_requires_gradient_sync(i == 0)  # the last backward to run syncs
            (losses[i] * weight).backward()
        flight.finish()
        out.append((named_grads(plain), named_grads(flight)))
        plain.zero_grad()
        flight.zero_grad()
    return out


def named_grads(par) -> dict:
    """The gradients this rank holds, by parameter name (zero: this rank's shards)."""
    if hasattr(par.dp, "infos"):
        return {i.fqn: i.shard.grad.clone() for i in par.dp.infos if i.shard.grad is not None}
    return {n: (p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).clone()
            for n, p in par.model.named_parameters() if p.grad is not None}


def group_stats(records) -> dict:
    """{(group name, op): (bytes, wire bytes, calls)} of `records`: comm names a mesh group by its
    dimension ("dp_shard", "dp_replicate"), the default group "world"."""
    out: dict = {}
    for r in records:
        key = (r.group, r.op)
        b, w, c = out.get(key, (0, 0, 0))
        out[key] = (b + r.bytes, w + r.wire_bytes, c + 1)
    return out


def held_bytes(strategy, optimizer) -> dict:
    """What the rank really holds, read off the tensors (to check `state_bytes` against)."""
    def storage_bytes(tensors):
        seen = {}
        for t in tensors:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    local = [v.to_local() if hasattr(v, "to_local") else v for st in optimizer.state.values() for v in st.values()
             if torch.is_tensor(v) and v.dim() > 0]  # a DTensor (FSDP2) holds its local shard only
    opt = sum(v.numel() * v.element_size() for v in local)
    if not hasattr(strategy, "units"):
        return {"optimizer": opt}
    if strategy.shard_params:
        params = sum(u.flat_shard.numel() * u.flat_shard.element_size() for u in strategy.units)
    else:
        params = storage_bytes(i.param for i in strategy.infos)
    if strategy.keep_full_grads:
        grads = storage_bytes(i.shard.grad for i in strategy.infos)
    else:
        grads = sum(u.grad_shard.numel() * u.grad_shard.element_size() for u in strategy.units)
    return {"params": params, "grads": grads, "optimizer": opt}


def state_dicts(name: str, model_kw: dict = TINY, **parallel) -> dict:
    """Structure of the model and optimizer state dicts after one step: key -> (type, global shape,
    placements, local shape)."""
    par = setup(name, model_kw, **parallel)
    _steps(par, model_kw, 1)

    def describe(v):
        if hasattr(v, "to_local"):
            return ("DTensor", tuple(v.shape), str(v.placements), tuple(v.to_local().shape))
        return (type(v).__name__, tuple(v.shape) if torch.is_tensor(v) else v)

    osd = par.optim_state_dict()
    return {"model": {k: describe(v) for k, v in par.model_state_dict().items()},
            "optim_state": {k: {kk: describe(vv) for kk, vv in v.items()} for k, v in osd["state"].items()},
            "param_groups": [{k: v for k, v in g.items() if k != "lr"} for g in osd["param_groups"]]}


def _steps(par, model_kw, n, seed=0):
    from shardlab import comm

    gen = torch.Generator().manual_seed(seed)
    weight = 1.0 / (2 * model_kw["max_seq_len"])
    losses = []
    for _ in range(n):
        x = torch.randint(0, model_kw["vocab_size"], (1, comm.world_size() * 2, model_kw["max_seq_len"] + 1),
                          generator=gen)
        loss = par.forward_backward(microbatches(x, comm.rank(), 2), weight).item() * weight
        par.finish()
        par.optimizer_step()
        par.zero_grad()
        losses.append(loss)
    return losses


def save(name: str, path: str, model_kw: dict = TINY, **parallel) -> dict:
    """Train two steps and save model + optimizer with DCP; returns the full parameters."""
    import torch.distributed.checkpoint as dcp

    par = setup(name, model_kw, **parallel)
    _steps(par, model_kw, 2)
    dcp.save({"model": par.model_state_dict(), "optim": par.optim_state_dict()}, checkpoint_id=path)
    return {k: v.clone() for k, v in par.full_parameters().items()}


def load(name: str, path: str, model_kw: dict = TINY, **parallel) -> dict:
    """A fresh strategy (any world size) loads the checkpoint; returns its full parameters and step count."""
    import torch.distributed.checkpoint as dcp

    par = setup(name, model_kw, **parallel)
    _steps(par, model_kw, 1)  # creates the optimizer state to load into
    sd = {"model": par.model_state_dict(), "optim": par.optim_state_dict()}
    dcp.load(sd, checkpoint_id=path)
    par.load_model_state_dict(sd["model"])
    par.load_optim_state_dict(sd["optim"])
    steps = {float(st["step"]) for st in par.optimizer.state.values()}
    return {"params": {k: v.clone() for k, v in par.full_parameters().items()}, "steps": steps}


def unit_shard_numels(model_kw: dict, wrap: str, world: int) -> dict[str, int]:
    """Per wrap unit, the padded shard length S_u (elements), computed from the shapes alone."""
    from shardlab.model.gpt import GPTConfig, build_model

    out: dict[str, int] = {}
    for fqn, p in build_model(GPTConfig(**model_kw), 0).named_parameters():
        parts = fqn.split(".")
        unit = "root"
        if wrap != "whole" and parts[0] == "blocks":
            unit = ".".join(parts[:3]) if wrap == "layer" and parts[2] in ("attn", "mlp") else ".".join(parts[:2])
        out[unit] = out.get(unit, 0) + -(-p.shape[0] // world) * p[0].numel()
    return out
