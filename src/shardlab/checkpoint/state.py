"""What a checkpoint holds, and how it maps onto a running job.

Two parts:
- tensors, stored with DCP (every rank writes its own shards): `model.*`, `optim.*` (keyed by the bare
  model's FQNs, DTensors placed on the mesh, so any layout can load any other) and
  `rng.pp0_dp_replicate1_dp_shard0_cp0_tp0` (the RNG streams of the rank at that mesh coordinate, a
  uint8 tensor only that rank writes): keyed by coordinate, not by global rank, so a restart with the
  same degrees restores every stream to the same place in the mesh whatever rank it lands on;
- `train_state.json`, written by rank 0: step, sampler (epoch, cursor), loss scaler, LR scheduler,
  resolved config, model dimensions, world size, layout (the mesh degrees), strategy, versions.
  These are identical on every rank.

torch-zero1 (`ZeroRedundancyOptimizer`) has no DCP state dict: each rank holds the Adam state of the
parameters it owns and nothing else. We expose exactly that as the standard optimizer layout
(`state.<fqn>.<key>` as plain full tensors + `param_groups`): each `state.<fqn>.*` key then exists on
exactly one rank (its owner), so DCP writes it once, from the owner, with no gathering; on load each
owner asks DCP for the keys of the parameters it owns under the new partition.
"""
from __future__ import annotations

import dataclasses
import pickle
import platform
import random

import numpy as np
import torch

import shardlab
from shardlab import config as config_mod

STATE_FILE = "train_state.json"


# --- optimizer ------------------------------------------------------------------------------------

def _is_zero_redundancy(optimizer) -> bool:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return isinstance(optimizer, ZeroRedundancyOptimizer)


def _materialize(optimizer) -> None:
    """Create the optimizer's state if it has none yet (a fresh optimizer we are about to load into):
    one step with zero gradients at lr 0 changes no parameter but allocates exp_avg, exp_avg_sq, step."""
    if optimizer.state:
        return
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    grads = [p.grad for p in params]  # some strategies keep gradient buffers allocated: put them back
    for p in params:
        p.grad = torch.zeros_like(p)
    lrs = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] = 0.0
    optimizer.step()
    for g, lr in zip(optimizer.param_groups, lrs):
        g["lr"] = lr
    for p, grad in zip(params, grads):
        p.grad = grad


def _zero_redundancy_state_dict(model, optimizer) -> dict:
    names = {p: n for n, p in model.named_parameters()}
    _materialize(optimizer.optim)  # the local optimizer over this rank's partition
    return {"state": {names[p]: dict(st) for p, st in optimizer.optim.state.items()},
            "param_groups": [{**{k: v for k, v in g.items() if k != "params"},
                              "params": [names[p] for p in g["params"]]} for g in optimizer.param_groups]}


def _load_zero_redundancy(optimizer, sd: dict) -> None:
    # The state tensors were loaded in place (the template shared them); only the hyperparameters remain.
    # ZeroRedundancyOptimizer copies its global param_groups' hyperparameters to the local optimizer each step.
    for group, saved in zip(optimizer.param_groups, sd["param_groups"]):
        group.update({k: v for k, v in saved.items() if k != "params"})


def optim_state_dict(strategy, optimizer) -> dict:
    if _is_zero_redundancy(optimizer):
        return _zero_redundancy_state_dict(strategy.model, optimizer)
    _materialize(optimizer)  # a fresh optimizer (about to be loaded into) has no state to fill yet
    return strategy.optim_state_dict(optimizer)


def load_optim_state_dict(strategy, optimizer, sd: dict) -> None:
    if _is_zero_redundancy(optimizer):
        _load_zero_redundancy(optimizer, sd)
    else:
        strategy.load_optim_state_dict(optimizer, sd)


# --- RNG ------------------------------------------------------------------------------------------

def rng_tensor() -> torch.Tensor:
    """This rank's python, numpy, torch (and CUDA) RNG states, pickled into a uint8 tensor for DCP."""
    st = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state()
    return torch.frombuffer(bytearray(pickle.dumps(st)), dtype=torch.uint8)


def set_rng(t: torch.Tensor) -> None:
    st = pickle.loads(t.numpy().tobytes())  # our own checkpoint, verified by its checksum before loading
    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state(st["cuda"])


def reseed_rng(seed: int, step: int, rank: int) -> None:
    """At a different world size rank R of the new job has no saved stream to continue. Data order does
    not depend on it (the sampler is global); dropout and other randomness get fresh streams derived from
    (seed, step, rank), so a resumed run is still reproducible for a given checkpoint and world size."""
    s = np.random.SeedSequence([seed, step, rank]).generate_state(2)
    random.seed(int(s[0]))
    np.random.seed(int(s[1]))
    torch.manual_seed(int(s[0]) << 32 | int(s[1]))


# --- the layout -----------------------------------------------------------------------------------

DEGREES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")  # the mesh's order, outermost first


def layout(dims) -> dict:
    """The degree of every mesh dimension (1 for those a run does not use)."""
    return {name: int(getattr(dims, name, 1) or 1) for name in DEGREES}


def coordinate(dims) -> dict:
    """This rank's coordinate on every mesh dimension (0 on those the mesh does not have)."""
    mesh = getattr(dims, "mesh", None)
    coord = dict.fromkeys(DEGREES, 0)
    if mesh is not None:
        coord.update(zip(mesh.mesh_dim_names, mesh.get_coordinate()))
    return coord


def rng_key(dims) -> str:
    """e.g. pp0_dp_replicate1_dp_shard0_cp0_tp0 (DCP joins nested keys with dots: none inside)."""
    return "_".join(f"{name}{c}" for name, c in coordinate(dims).items())


# --- the full state ---------------------------------------------------------------------------------

def tensor_state(state) -> dict:
    """The DCP part: live tensors (DCP loads into them in place; an async save stages copies)."""
    tensors = {"model": state.strategy.model_state_dict(),
               "optim": optim_state_dict(state.strategy, state.optimizer),
               "rng": {rng_key(state.strategy.dims): rng_tensor()}}
    if hasattr(state.strategy, "sync_state_dict"):  # local SGD / DiLoCo (parallel/dp/sync.py): after optim's
        tensors["sync"] = state.strategy.sync_state_dict()  # materialisation, so the inner state is there
    return tensors


def present(sd: dict, keys, prefix: str) -> dict:
    """The part of a nested state dict whose flattened keys (`prefix.a.b`) a checkpoint holds."""
    out = {}
    for k, v in sd.items():
        if isinstance(v, dict):
            sub = present(v, keys, f"{prefix}.{k}")
            if sub:
                out[k] = sub
        elif f"{prefix}.{k}" in keys:
            out[k] = v
    return out


def train_meta(state, world_size: int) -> dict:
    """The JSON part (rank 0's view; every rank has the same values)."""
    cfg = state.cfg
    model_cfg = getattr(state.strategy.model, "cfg", None)
    scaler = getattr(state, "scaler", None)
    scheduler = getattr(state, "scheduler", None)
    return {
        "step": int(state.step),
        "sampler": state.sampler.state_dict() if getattr(state, "sampler", None) is not None else None,
        "shares": state.balance.state_dict() if getattr(state, "balance", None) is not None else None,
        "scaler": _jsonable(scaler.state_dict()) if scaler is not None else None,
        "scheduler": _jsonable(scheduler.state_dict()) if scheduler is not None else None,
        "world_size": world_size,
        "layout": layout(state.strategy.dims),
        "strategy": cfg.parallel.strategy,
        "seed": cfg.train.seed,
        "model": dataclasses.asdict(model_cfg) if dataclasses.is_dataclass(model_cfg) else None,
        "config": config_mod.to_dict(cfg),
        "versions": {"shardlab": getattr(shardlab, "__version__", "0"), "torch": torch.__version__,
                     "python": platform.python_version()},
    }


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if torch.is_tensor(obj):
        return obj.item() if obj.numel() == 1 else obj.tolist()
    return obj


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def stage(obj, into=None, only: set | None = None, key: str = ""):
    """A private CPU copy of a state dict, so an async save can write it while training moves on.
    `into` is the previous staged copy: its buffers are reused when shapes match (warm memory, no page
    faults), which makes the copy several times cheaper. The caller guarantees nobody still reads it.
    `only`: the flattened keys (DCP's: path joined by dots) this rank writes; other tensors are left as
    references to the live state, not copied: DCP assigned them to another rank (a replicated tensor is
    written once), so this rank never reads them (storage.Planner checks that). None: copy everything."""
    if torch.is_tensor(obj):
        if only is not None and key not in only:
            return obj
        if hasattr(obj, "to_local"):  # DTensor: copy the local shard, keep the layout
            from torch.distributed.tensor import DTensor
            local, old = obj.to_local(), into.to_local() if hasattr(into, "to_local") else None
            if hasattr(local, "local_shards"):  # shards at explicit offsets (own TP x zero: parallel/tp/state.py)
                from torch.distributed.tensor._shards_wrapper import LocalShardsWrapper
                olds = old.local_shards() if hasattr(old, "local_shards") else [None] * len(local.local_shards())
                local = LocalShardsWrapper([stage(t, o) for t, o in zip(local.local_shards(), olds)],
                                           list(local.local_offsets()))
            else:
                local = stage(local, old)
            return DTensor.from_local(local, obj.device_mesh, obj.placements, run_check=False,
                                      shape=obj.shape, stride=obj.stride())
        if (torch.is_tensor(into) and not hasattr(into, "to_local") and into.device.type == "cpu"
                and into.shape == obj.shape and into.dtype == obj.dtype
                and not _shares_memory(into, obj)):  # else a live reference a previous save left, not our buffer
            return into.copy_(obj.detach())
        return obj.detach().to("cpu", copy=True)
    join = (lambda k: f"{key}.{k}") if key else str
    if isinstance(obj, dict):
        return {k: stage(v, into.get(k) if isinstance(into, dict) else None, only, join(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        old = into if isinstance(into, (list, tuple)) and len(into) == len(obj) else [None] * len(obj)
        return type(obj)(stage(v, o, only, join(i)) for i, (v, o) in enumerate(zip(obj, old)))
    return obj


def copied_bytes(staged, live) -> int:
    """Bytes stage() actually copied: tensors of `staged` that are not the live ones it was given."""
    if torch.is_tensor(staged):
        if staged is live:
            return 0
        local = staged.to_local() if hasattr(staged, "to_local") else staged
        shards = local.local_shards() if hasattr(local, "local_shards") else [local]
        return sum(t.numel() * t.element_size() for t in shards)
    if isinstance(staged, dict):
        return sum(copied_bytes(v, live.get(k) if isinstance(live, dict) else None) for k, v in staged.items())
    if isinstance(staged, (list, tuple)):
        lives = live if isinstance(live, (list, tuple)) and len(live) == len(staged) else [None] * len(staged)
        return sum(copied_bytes(v, w) for v, w in zip(staged, lives))
    return 0
