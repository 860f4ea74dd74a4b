"""State of the ZeRO strategies as the rest of shardlab sees it: DCP-shaped state dicts and byte accounting.

State dicts have the same keys, nesting and global shapes as torch's `get_model_state_dict` /
`get_optimizer_state_dict` return for FSDP2: every parameter and every per-element optimizer state is a
DTensor `Shard(0)` over the `dp_shard` mesh whose local tensor is this rank's unpadded rows (plain tensors
at world size 1); under HSDP `(Replicate(), Shard(0))` over the (dp_replicate, dp_shard) mesh, as FSDP2's
HSDP state dicts are. So a DCP checkpoint written by any strategy loads into any other, at any layout.
"""
from __future__ import annotations

import torch


def _mesh(strategy):
    """(the data-parallel mesh, placements of a shard on it), or (None, None) without a mesh."""
    from torch.distributed.tensor import Replicate, Shard

    mesh = strategy.dims.mesh
    if mesh is None:
        return None, None
    if strategy.dims.cp > 1:  # context parallelism: the layer shards over dp_cp (flattened dp_shard x cp)
        return strategy.dims.submesh("dp_cp"), [Shard(0)]
    names = mesh.mesh_dim_names or ()
    if "dp_replicate" in names and "dp_shard" in names:  # HSDP: replicated across, sharded within
        return mesh["dp_replicate", "dp_shard"], [Replicate(), Shard(0)]
    return (mesh["dp_shard"] if "dp_shard" in names else mesh), [Shard(0)]


def _dtensor(strategy, info, t: torch.Tensor):
    """A shard-shaped tensor as the global tensor it is a piece of."""
    local = info.local(t.detach())
    mesh, placements = _mesh(strategy)
    if mesh is None:
        return local
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(local, mesh, placements, run_check=False, shape=info.shape,
                              stride=torch.empty(info.shape, device="meta").stride())


def _to_shard(info, v) -> torch.Tensor:
    """A loaded value (DTensor Shard(0) over our mesh, or a full plain tensor) as this rank's padded shard."""
    if hasattr(v, "to_local"):
        local = v.to_local()
        out = local.new_zeros((info.chunk, *info.shape[1:]))
        out[: local.shape[0]].copy_(local)
        return out
    return info.shard_of(v)


def model_state_dict(strategy) -> dict:
    sd = {}
    for info in strategy.infos:
        value = _dtensor(strategy, info, info.shard)
        for _, _, fqn in info.registrations:  # the tied head appears under its own name too, like torch's
            sd[fqn] = value
    for fqn, buf in strategy.model.named_buffers():
        sd[fqn] = buf.detach()
    order = list(strategy.model.state_dict(keep_vars=True))  # the model's own key order
    return {k: sd[k] for k in order if k in sd}


def load_model_state_dict(strategy, sd: dict) -> None:
    with torch.no_grad():
        for info in strategy.infos:
            info.shard.copy_(_to_shard(info, sd[info.fqn]))
        for fqn, buf in strategy.model.named_buffers():
            if fqn in sd:
                buf.copy_(sd[fqn])


def _param_index(strategy, optimizer) -> list:
    fqn_of = {id(strategy.stepped(i)): i for i in strategy.infos}
    return [fqn_of[id(p)] for g in optimizer.param_groups for p in g["params"]]


def optim_state_dict(strategy, optimizer) -> dict:
    """{"state": {fqn: {"step": t, "exp_avg": DTensor, ...}}, "param_groups": [{..., "params": [fqn, ...]}]}"""
    infos = _param_index(strategy, optimizer)
    raw = optimizer.state_dict()
    state = {}
    for idx, st in raw["state"].items():
        info = infos[idx]
        state[info.fqn] = {k: _dtensor(strategy, info, v) if _per_element(info, v) else v for k, v in st.items()}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [infos[i].fqn for i in g["params"]]}
              for g in raw["param_groups"]]
    return {"state": state, "param_groups": groups}


def load_optim_state_dict(strategy, optimizer, sd: dict) -> None:
    infos = _param_index(strategy, optimizer)
    index = {info.fqn: k for k, info in enumerate(infos)}
    state = {}
    for fqn, st in sd["state"].items():
        info = infos[index[fqn]]
        state[index[fqn]] = {k: _to_shard(info, v) if torch.is_tensor(v) and v.dim() > 0 else v
                             for k, v in st.items()}
    # Hyperparameters from the checkpoint, membership from this optimizer: a checkpoint written by another
    # layout (a pipeline rank's param_groups list only its stage's parameters) still loads group by group.
    ids = {id(strategy.stepped(info)): k for k, info in enumerate(infos)}
    groups = [{**saved, "params": [ids[id(p)] for p in cur["params"]]}
              for saved, cur in zip(sd["param_groups"], optimizer.param_groups)]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _per_element(info, v) -> bool:
    return torch.is_tensor(v) and v.dim() > 0 and tuple(v.shape) == tuple(info.shard.shape)


def state_bytes(strategy, optimizer) -> dict:
    """Exact bytes this rank holds for each kind of state, padding included and also reported apart.

    params     zero1/zero2: the padded full parameters; zero3: the flat shards
    grads      zero1: the padded full gradients; zero2/zero3: the flat gradient shards
    optimizer  every per-element optimizer state tensor (they live on shards in all three stages)
    transient  an upper bound on the working set beyond that (see `transient_bytes`)
    padding    the part of these bytes that is padding (rows added so every rank's shard is equally long)
    offloaded  what parallel.offload keeps off the device instead (not in the columns above): parameter
               shards, optimizer state, and ZeRO-Offload's host masters and gradient buffers
    """
    n = strategy.world
    el = strategy.infos[0].param.element_size() if strategy.infos else 4
    shard = sum(u.shard_numel for u in strategy.units)  # per rank, padded
    unpadded_shard = sum(i.local_rows * i.row_numel for i in strategy.infos)
    full = sum(i.param.numel() for i in strategy.infos)  # Ψ
    if strategy.shard_params:
        params, params_pad = shard * el, (shard - unpadded_shard) * el
    else:
        params, params_pad = n * shard * el, (n * shard - full) * el
    if strategy.keep_full_grads:
        grads, grads_pad = params, params_pad
    else:
        grads, grads_pad = shard * el, (shard - unpadded_shard) * el
    opt = opt_pad = 0
    fqn_of = {id(strategy.stepped(i)): i for i in strategy.infos}
    for p, st in optimizer.state.items():
        info = fqn_of.get(id(p))
        for v in st.values():
            if info is not None and _per_element(info, v):
                opt += v.numel() * v.element_size()
                opt_pad += info.padding * v.element_size()
    # What lives off the device (parallel.offload, docs/memory.md) is counted apart, as `offloaded`: the
    # device's columns are what the planner predicts for the accelerator. On a CPU the host *is* the device:
    # only files (the disk tier) are off it.
    on_accelerator = strategy.device.type != "cpu"
    home = strategy.param_home
    off = 0
    if home is not None and (home.name == "disk" or on_accelerator):  # zero3's shards between uses
        off, params = off + params, 0
    host_step = getattr(strategy, "host_step", None)
    if host_step is not None:  # ZeRO-Offload on an accelerator: masters, gradient buffers and Adam on the host
        off, opt = off + opt + host_step.nbytes, 0
    elif getattr(strategy, "offload", None) is not None or (home is not None and on_accelerator):
        off, opt = off + opt, 0  # Adam's state in files, or next to the shards on the accelerator's host
    return {"params": params, "grads": grads, "optimizer": opt, "transient": transient_bytes(strategy),
            "padding": params_pad + grads_pad + opt_pad, "offloaded": off}


def transient_bytes(strategy) -> int:
    """An upper bound on the working set beyond the state above, from the layout:
    reduce-scatter buffers in flight (packed full flat buffers, at most MAX of them) and, unless zero1
    keeps them anyway, the full gradients of the unit being reduced; zero3 adds the gathered units
    (the current one and the prefetched one; with reshard_after_forward=false every unit by the end of
    forward) and one all-gather buffer. zero1/zero2's after-step all-gathers need less than the first term."""
    from shardlab.parallel.dp.shard import MAX_REDUCE_SCATTERS_IN_FLIGHT

    sizes = sorted((u.full_bytes() for u in strategy.units), reverse=True) or [0]
    el = strategy.infos[0].param.element_size() if strategy.infos else 4
    unit_grads = max((sum(i.param.numel() for i in u.infos) * el for u in strategy.units), default=0)
    total = sum(sizes[:MAX_REDUCE_SCATTERS_IN_FLIGHT])
    if not strategy.keep_full_grads:
        total += unit_grads
    if strategy.shard_params:
        gathered = sum(sizes) if not strategy.pcfg.reshard_after_forward else \
            sum(sizes[: 2 if strategy.pcfg.prefetch else 1])
        total += gathered + sizes[0]
    return total
