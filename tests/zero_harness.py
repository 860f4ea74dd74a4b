"""Rank-side helpers for the ZeRO tests: train a small GPT for a few steps with any strategy, the way the
trainer drives a strategy, and return what the tests compare (losses, full parameters, bytes)."""
from __future__ import annotations

import torch

# Every dimension divisible by 2 and 4: no padding, so the memory formulas hold exactly per rank.
TINY = dict(n_layer=2, n_head=4, d_model=64, vocab_size=256, max_seq_len=32)
# Nothing divisible by 2 or 4 (vocab 257, d_model 6, 13 positions), and LayerNorm/bias rows (3) smaller
# than world size 4: some ranks own no rows of them at all.
ODD = dict(n_layer=2, n_head=1, d_model=3, vocab_size=257, max_seq_len=13)


def setup(name: str, model_kw: dict = TINY, **parallel):
    from shardlab import comm
    from shardlab.config import Config
    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.parallel_dims import dims_for
    from shardlab.strategies import build_strategy
    from shardlab.train.optim import adamw_factory, no_decay_names

    cfg = Config()
    cfg.parallel.strategy = name
    for k, v in parallel.items():
        setattr(cfg.parallel, k, v)
    dims = dims_for(name, comm.world_size(), parallel.get("dp_replicate", 0))  # > 1: HSDP
    dims.build_mesh("cpu")
    strategy = build_strategy(name, cfg.parallel, dims, torch.device("cpu"))
    model = build_model(GPTConfig(**model_kw), seed=0)
    no_decay = no_decay_names(model)
    module = strategy.wrap(model)
    optimizer = strategy.make_optimizer(adamw_factory(cfg, no_decay))
    return strategy, module, optimizer


def train(name: str, steps: int = 10, model_kw: dict = TINY, accum: int = 1, micro: int = 2, dtype: str = "fp32",
          clip: float = 1.0, **parallel) -> dict:
    """The trainer's step protocol on a fixed global batch; returns this rank's losses, the full parameters
    (rank 0), the per-rank collective bytes of the last step and `state_bytes`."""
    from shardlab import comm

    strategy, module, optimizer = setup(name, model_kw, **parallel)
    world, rank = comm.world_size(), comm.rank()
    seq = model_kw["max_seq_len"]
    gen = torch.Generator().manual_seed(1234)
    losses, norms = [], []
    for step in range(steps):
        comm.RECORDER.reset_step()
        first_seq = comm.RECORDER.seq
        batch = torch.randint(0, model_kw["vocab_size"], (accum, world * micro, seq + 1), generator=gen)
        total = 0.0
        for i in range(accum):
            x = batch[i, rank * micro:(rank + 1) * micro]
            with strategy.sync_context(is_last=i == accum - 1):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                    loss = module(x[:, :-1], x[:, 1:]) / accum
                loss.backward()
            total += loss.item()
        strategy.finish_backward()
        norms.append(strategy.clip_grad_norm_(clip))
        strategy.optimizer_step(optimizer)
        state = strategy.state_bytes(optimizer)
        held = held_bytes(strategy, optimizer)
        strategy.zero_grad(optimizer)
        losses.append(total)
    stats = comm.RECORDER.step_stats()  # the last step's collectives, before full_parameters() gathers
    by_group = group_stats(strategy, [r for r in comm.RECORDER.ring if r.seq > first_seq])
    gathers = [r.tag for r in comm.RECORDER.ring if r.seq > first_seq and r.op == "all_gather"]
    params = {k: v.detach().clone() for k, v in strategy.full_parameters().items()}
    return {"losses": losses, "norms": norms, "params": params if rank == 0 else None,
            "comm": stats, "groups": by_group, "gathers": gathers, "state": state, "held": held,
            "psi": sum(p.numel() for p in params.values())}


def group_stats(strategy, records) -> dict:
    """{(mesh dimension, op): (bytes, wire bytes, calls)} of `records`; "world" for the default group."""
    mesh = strategy.dims.mesh
    names = {}
    if mesh is not None and mesh.ndim > 1:
        from shardlab.comm import _group_name
        names = {_group_name(mesh.get_group(d)): d for d in mesh.mesh_dim_names}
    out: dict = {}
    for r in records:
        key = (names.get(r.group, r.group), r.op)
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
    strategy, module, optimizer = setup(name, model_kw, **parallel)
    _steps(strategy, module, optimizer, model_kw, 1)

    def describe(v):
        if hasattr(v, "to_local"):
            return ("DTensor", tuple(v.shape), str(v.placements), tuple(v.to_local().shape))
        return (type(v).__name__, tuple(v.shape) if torch.is_tensor(v) else v)

    osd = strategy.optim_state_dict(optimizer)
    return {"model": {k: describe(v) for k, v in strategy.model_state_dict().items()},
            "optim_state": {k: {kk: describe(vv) for kk, vv in v.items()} for k, v in osd["state"].items()},
            "param_groups": [{k: v for k, v in g.items() if k != "lr"} for g in osd["param_groups"]]}


def _steps(strategy, module, optimizer, model_kw, n, seed=0):
    from shardlab import comm

    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(n):
        x = torch.randint(0, model_kw["vocab_size"], (comm.world_size() * 2, model_kw["max_seq_len"] + 1), generator=gen)
        x = x[comm.rank() * 2:(comm.rank() + 1) * 2]
        loss = module(x[:, :-1], x[:, 1:])
        loss.backward()
        strategy.finish_backward()
        strategy.optimizer_step(optimizer)
        strategy.zero_grad(optimizer)
        losses.append(loss.item())
    return losses


def save(name: str, path: str, model_kw: dict = TINY, **parallel) -> dict:
    """Train two steps and save model + optimizer with DCP; returns the full parameters."""
    import torch.distributed.checkpoint as dcp

    strategy, module, opt = setup(name, model_kw, **parallel)
    _steps(strategy, module, opt, model_kw, 2)
    dcp.save({"model": strategy.model_state_dict(), "optim": strategy.optim_state_dict(opt)}, checkpoint_id=path)
    return {k: v.clone() for k, v in strategy.full_parameters().items()}


def load(name: str, path: str, model_kw: dict = TINY, **parallel) -> dict:
    """A fresh strategy (any world size) loads the checkpoint; returns its full parameters and step count."""
    import torch.distributed.checkpoint as dcp

    strategy, module, opt = setup(name, model_kw, **parallel)
    _steps(strategy, module, opt, model_kw, 1)  # creates the optimizer state to load into
    sd = {"model": strategy.model_state_dict(), "optim": strategy.optim_state_dict(opt)}
    dcp.load(sd, checkpoint_id=path)
    strategy.load_model_state_dict(sd["model"])
    strategy.load_optim_state_dict(opt, sd["optim"])
    steps = {float(st["step"]) for st in opt.state.values()}
    return {"params": {k: v.clone() for k, v in strategy.full_parameters().items()}, "steps": steps}


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
