"""Rank-side helpers for the memory tests: the same training run once per recompute mode, or with and
without optimizer offload, in one pool call (one process start for all)."""
from __future__ import annotations

import torch

from zero_harness import TINY, train

MODES = ("none", "full", "selective")


def modes(name: str, modes: tuple = MODES, steps: int = 5, model_kw: dict = TINY, every: int = 1,
          **parallel) -> dict:
    """mode -> `zero_harness.train`'s result for `name` with `train.recompute=mode`. Every run starts from
    the same global RNG state, so dropout draws the same masks if recompute replays them."""
    out = {}
    for mode in modes:
        torch.manual_seed(0)
        out[mode] = train(name, steps=steps, model_kw=model_kw,
                          train_kw={"recompute": mode, "recompute_every": every}, **parallel)
    return out


def offload(name: str, steps: int = 5, what: str = "optimizer", to: tuple = ("disk",), **parallel) -> dict:
    """{"none": ..., "disk": ..., "host": ...}: `zero_harness.train` without and with `what` (optimizer or
    params) offloaded to each tier of `to`."""
    out = {"none": train(name, steps=steps, **parallel)}
    for tier in to:
        out[tier] = train(name, steps=steps, offload=what, offload_to=tier, **parallel)
    return out


def params_at_rest(name: str = "zero3", **parallel) -> dict:
    """After a step of zero3 with offload=params: where each unit's flat shard lives (file-backed or not)
    and how much of it is resident in this process (`mincore`)."""
    from zero_harness import _steps, setup, TINY as kw

    par = setup(name, kw, **parallel)
    _steps(par, kw, 1)
    units = par.dp.units
    return {"mapped": [bool(u.flat_shard.untyped_storage().filename) for u in units],
            "resident": [resident_bytes(u.flat_shard) for u in units],
            "bytes": [u.flat_shard.numel() * u.flat_shard.element_size() for u in units]}


def resident_bytes(t: torch.Tensor) -> int:
    """Bytes of the mapping that holds `t` resident in this process (`Rss` in /proc/self/smaps; mincore
    would report the page cache, which keeps a file's pages after the process has dropped them)."""
    addr, rss, inside = t.data_ptr(), 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "Rss:":
                rss += int(line.split()[1]) * 1024
    return rss


COMPOSED = ["model.preset=tiny", "train.seq_len=16", "train.lr=0.001", "train.grad_clip=1.0", "ckpt.final=false"]


def composed_modes(overrides: list[str], steps: int = 5, modes: tuple = MODES) -> dict:
    """mode -> this rank's losses and the full parameters it holds after `steps` steps of
    `parallel.build(cfg)` (TP, PP or both layers) with `train.recompute=mode`, the trainer's way: forward
    and backward of the step's microbatches, finish, clip, optimizer step. Every rank returns its own
    (a pipeline stage holds its blocks only). Each mode starts from the same global RNG state."""
    from shardlab import comm
    import step_driver as driver

    out = {}
    for mode in modes:
        torch.manual_seed(0)
        cfg, par = driver.build(overrides + [f"train.recompute={mode}"], COMPOSED)
        marks = []  # the recorder's position before each step: the last step's collectives are listed
        losses = driver.train(par, cfg, steps, accum=cfg.train.grad_accum,
                              before_step=lambda s: marks.append(comm.RECORDER.order))["losses"]
        first = marks[-1]
        ops = [(r.op, r.phase) for r in comm.RECORDER.ring if r.order > first]  # the last step's collectives
        out[mode] = {"losses": losses, "ops": ops, "recomputed": [k for k, b in par.module.blocks.items()
                                                      if getattr(b, "recompute", None) == mode],
                     "params": {k: v.detach().clone() for k, v in par.full_parameters().items()}}
    return out


def on_cpu_as_accelerator(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` with the zero layers' accelerator path of optimizer offload (host masters, the
    gradients copied to the host and the updated shards back: parallel/dp/host_step.py) run on the CPU,
    the CPU standing in for the device."""
    from shardlab.parallel.dp.zero import _Zero

    _Zero.host_step_on_cpu = True
    try:
        return fn(*args, **kwargs)
    finally:
        _Zero.host_step_on_cpu = False


def host_offload(name: str, steps: int = 5, to: tuple = ("host", "disk"), **parallel) -> dict:
    """`offload(name, what="optimizer")` with the accelerator's path (`on_cpu_as_accelerator`)."""
    return on_cpu_as_accelerator(offload, name, steps=steps, to=to, **parallel)


def resumed(name: str, path: str, offload_to: str = "host") -> dict:
    """Two runs from one checkpoint, two steps on: one without offload, one with the accelerator's optimizer
    offload (its masters must take the loaded parameters, its host optimizer the loaded state). Each loads
    the checkpoint `save` wrote after two steps without offload; returns both runs' losses and parameters."""
    import torch.distributed.checkpoint as dcp
    from zero_harness import _steps, setup, TINY as kw

    out = {}
    for tier in ("none", offload_to):
        extra = {} if tier == "none" else {"offload": "optimizer", "offload_to": tier}
        par = on_cpu_as_accelerator(setup, name, kw, **extra)
        _steps(par, kw, 1, seed=7)  # the optimizer state to load into, and parameters the load must replace
        sd = {"model": par.model_state_dict(), "optim": par.optim_state_dict()}
        dcp.load(sd, checkpoint_id=path)
        par.load_model_state_dict(sd["model"])
        par.load_optim_state_dict(sd["optim"])
        losses = _steps(par, kw, 2, seed=1)
        out[tier] = {"losses": losses, "params": {k: v.clone() for k, v in par.full_parameters().items()},
                     "host_step": par.dp.host_step is not None}
    return out
