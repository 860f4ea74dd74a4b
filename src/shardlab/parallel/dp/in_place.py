"""Applying a state dict that was loaded in place: what is left to do.

A checkpoint load (DCP) writes into the tensors of the state dicts it was given; for the replicating
layers (single, DDP) those are the live parameters and the live optimizer state themselves. Applying them
afterwards with torch's `set_model_state_dict` / `set_optimizer_state_dict` then copies every tensor onto
itself, after resolving every parameter's name again (~0.1 s of a gpt2 load, as much as reading a
quarter of its bytes). These checks say when that is so, from the tensors' memory alone (no names):

- model: every value is the memory of a live parameter or buffer (same address, dtype, shape, strides),
  every parameter is covered, and no module changes what loading means (a `_load_from_state_dict` of its
  own, or load hooks): then `load_state_dict` would copy each tensor onto itself, and nothing is done;
- optimizer: the state's tensors are exactly the live state's (one for one): then only the hyperparameters
  are new, and torch's own `Optimizer.load_state_dict` is given the optimizer's own state dict with the
  checkpoint's hyperparameters (no name resolution; its hooks and `__setstate__` run as before).

Anything else (DTensors, a copy, a missing tensor, a custom load) returns False / None: the caller takes
torch's path unchanged.
"""
from __future__ import annotations

import torch
import torch.nn as nn


def where(t: torch.Tensor) -> tuple:
    return t.data_ptr(), t.dtype, tuple(t.shape), t.stride()


def _plain_load(module: nn.Module) -> bool:
    """No module of `module` loads differently from nn.Module (own `_load_from_state_dict`, hooks)."""
    for m in module.modules():
        if (type(m)._load_from_state_dict is not nn.Module._load_from_state_dict
                or m._load_state_dict_pre_hooks or m._load_state_dict_post_hooks):
            return False
    return True


def model_loaded_in_place(module: nn.Module, sd: dict) -> bool:
    """Whether `sd` (flat: fqn -> tensor) is the live memory of `module`'s parameters and buffers, covering
    every parameter, with nothing loaded another way: applying it would copy each tensor onto itself."""
    if not sd or any(type(v) is not torch.Tensor for v in sd.values()):
        return False
    params = {where(p.detach()) for p in module.parameters()}
    live = params | {where(b) for b in module.buffers()}
    given = {where(v) for v in sd.values()}
    return given <= live and params <= given and _plain_load(module)


def _tensors(state: dict) -> list | None:
    """The tensors of an optimizer state ({key: {name: value}}), or None when a value is not a plain tensor."""
    out = []
    for per_param in state.values():
        if not isinstance(per_param, dict):
            return None
        for v in per_param.values():
            if type(v) is not torch.Tensor:
                return None
            out.append(v)
    return out


def native_optim_state(optimizer: torch.optim.Optimizer, sd: dict) -> dict | None:
    """The optimizer's own state dict (torch's format, by parameter index) carrying `sd`'s hyperparameters,
    when `sd["state"]`'s tensors are exactly the live state's, one for one (loaded in place); else None.
    The caller checks the param groups' count first."""
    given, live = _tensors(sd.get("state", {})), _tensors(optimizer.state)
    if given is None or live is None or len(given) != len(live):
        return None
    places = {where(v) for v in live}
    if len(places) != len(live) or {where(v) for v in given} != places:
        return None
    native = optimizer.state_dict()
    native["param_groups"] = [{**saved, "params": cur["params"]}
                              for saved, cur in zip(sd["param_groups"], native["param_groups"])]
    return native
