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

Each data-parallel layer shapes its own optimizer state (torch-zero1's ZeroRedundancyOptimizer, which has
no DCP state dict, in parallel/dp/native.py); this module only asks it.
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

def optim_state_dict(strategy, optimizer) -> dict:
    """The dp layer's optimizer state dict (each layer shapes its own: parallel/dp/, parallel/tp/state.py),
    after materialising a fresh optimizer's state so a load has tensors to fill."""
    strategy.materialize_optimizer(optimizer)
    return strategy.optim_state_dict(optimizer)


def load_optim_state_dict(strategy, optimizer, sd: dict) -> None:
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

def tensor_state(state, rng: bool = True) -> dict:
    """The DCP part: live tensors (DCP loads into them in place; an async save stages copies). Without
    `rng` (a load: it reads the stream into a tensor of its own) the RNG states are not pickled."""
    tensors = {"model": state.strategy.model_state_dict(),
               "optim": optim_state_dict(state.strategy, state.optimizer)}
    if rng:
        tensors["rng"] = {rng_key(state.strategy.dims): rng_tensor()}
    sync = state.strategy.sync_state_dict()  # local SGD / DiLoCo (parallel/sync/periodic.py); None for the others.
    if sync is not None:  # after optim's materialisation, so the inner state is there
        tensors["sync"] = sync
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
